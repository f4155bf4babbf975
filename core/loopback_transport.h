// LoopbackHub: an in-process transport for tests. Ranks are threads of one process; messages are
// copied into the receiver's mailbox at once; time is the wall clock. Every rank stays a member.
// Thread-safe: each rank's endpoint is used by its own thread, the hub serialises access to the
// mailboxes.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "core/mailbox.h"
#include "core/transport.h"

namespace narrows::core {

class LoopbackHub {
 public:
  explicit LoopbackHub(int world_size);
  ~LoopbackHub();
  Transport& endpoint(int rank);

 private:
  class Endpoint;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Mailbox<std::vector<uint8_t>>> mailboxes_;  // per rank
  std::vector<TransportStats> sent_;                       // per rank, all endpoints
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

}  // namespace narrows::core
