// LoopbackHub: an in-process transport for tests. Ranks are threads of one process; messages are
// copied into the receiver's mailbox at once; time is the wall clock. Thread-safe: each rank's
// endpoint is used by its own thread, the hub serialises access to mailboxes.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "core/transport.h"

namespace narrows::core {

class WallClock : public Clock {
 public:
  WallClock();
  // Time 0 is now.
  void Reset();
  double Now() const override;
  void ChargeCompute(double) override {}
  bool is_virtual() const override { return false; }

 private:
  double start_;
};

class LoopbackHub {
 public:
  explicit LoopbackHub(int world_size);
  ~LoopbackHub();
  Transport& endpoint(int rank);
  // Marks a rank gone: receivers waiting on it get PeerUnavailable; it leaves Members().
  void Leave(int rank);

 private:
  class Endpoint;
  struct Message {
    int src, tag;
    std::vector<uint8_t> payload;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<Message>> mailboxes_;
  std::vector<bool> alive_;
  std::vector<TransportStats> stats_;  // per rank, all endpoints
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

}  // namespace narrows::core
