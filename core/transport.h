// Transport: point-to-point messages of bytes between the ranks of a run, and who is alive.
//
// One Transport object is one rank's endpoint. Send copies the payload and returns without waiting
// for delivery; messages between one pair of ranks with one tag arrive in order. Recv blocks the
// calling worker until a matching message arrives or `timeout` passes (in the endpoint's clock:
// virtual under the emulator, wall over a network) and returns PeerUnavailable when the source has
// left or crashed. Transports move bytes, not tensors. Implementations: the in-process loopback
// (core/loopback_transport.h), the emulated transport (emu/), ZeroMQ (deploy/). Every one passes
// the contract suite in tests/core/transport_contract_test.cc. An endpoint is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/clock.h"
#include "core/status.h"

namespace narrows::core {

constexpr double kForever = std::numeric_limits<double>::infinity();

struct TransportStats {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t messages_sent = 0;
  int64_t messages_received = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // REQUIRES: dst != rank(). Copies `bytes` bytes from `data`.
  virtual Status Send(int dst, int tag, const void* data, size_t bytes) = 0;
  // Receives the next message from `src` with `tag` into `data`; its size must equal `bytes`
  // (InvalidArgument otherwise: a frame of the wrong size is never written into the buffer).
  virtual Status Recv(int src, int tag, void* data, size_t bytes, double timeout_s = kForever) = 0;
  // Ranks currently alive, ascending.
  virtual std::vector<int> Members() = 0;
  virtual Clock& clock() = 0;
  virtual TransportStats stats() const = 0;
};

}  // namespace narrows::core
