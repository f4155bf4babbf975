// Transport: point-to-point messages of bytes between the ranks of a run, and who is alive.
//
// One Transport object is one rank's endpoint. Send copies the payload and returns without waiting
// for delivery; messages between one pair of ranks with one tag arrive in order. Recv blocks the
// calling worker until a matching message arrives or `timeout` passes (in the endpoint's clock:
// virtual under the emulator, wall over a network) and returns PeerUnavailable when the source has
// left or crashed. Transports move bytes, not tensors. Implementations: the in-process loopback
// (core/loopback_transport.h), the emulated transport (emu/), ZeroMQ (deploy/). Every one passes
// the contract suite in tests/core/transport_contract_test.cc. An endpoint is used by one thread.
//
// For servers (asynchronous outer updates), RecvMessage also takes messages of any size and from
// any source (kAnySource: the earliest arrival first), and a rank may send to itself: a message
// between two endpoints of one rank (an operation started with Start and its caller) is delivered
// at once, off the network, and not counted in the stats.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"

namespace narrows::core {

constexpr double kForever = std::numeric_limits<double>::infinity();
constexpr int kAnySource = -1;  // RecvMessage from whichever rank's message arrives first

struct TransportStats {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t messages_sent = 0;
  int64_t messages_received = 0;
};

// A handle to an operation running beside the worker that started it (c10d's Work).
// Wait blocks the starting worker until the operation finished (its clock then reads the later of
// its own time and the operation's end) or `timeout_s` passed (Timeout; the operation goes on).
// Destroying a handle whose operation has not finished waits for it.
class Work {
 public:
  virtual ~Work() = default;
  virtual Status Wait(double timeout_s = kForever) = 0;
  // True once the operation has finished, as seen at the starting worker's current time.
  virtual bool Done() = 0;
};

// Messages whose bytes a transport still reads from their sender's buffer (SendBorrowed): the
// sender may change or free that buffer only after Transport::AwaitLent(lease) returned. Counts
// the messages lent to each destination; the transport returns each one as it is done with it
// (from any thread).
class SendLease {
 public:
  void Lend(int dst) {
    std::lock_guard<std::mutex> lock(mu_);
    ++out_[dst];
  }
  void Return(int dst) {
    std::lock_guard<std::mutex> lock(mu_);  // notified under the lock: the waiter may destroy *this next
    if (--out_[dst] == 0) out_.erase(dst);
    cv_.notify_all();
  }
  // Waits up to `timeout_s` for every message to be returned; the destinations still holding some.
  std::vector<int> Outstanding(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return out_.empty(); });
    std::vector<int> dsts;
    for (const auto& [dst, count] : out_) dsts.push_back(dst);
    return dsts;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, int64_t> out_;
};

class Transport;
// An operation to run on a second endpoint of the same rank.
using AsyncOp = std::function<Status(Transport&)>;

// One step of a size-only exchange (Transport::RunSizeOnly): a size-only message of `bytes` sent to
// `peer`, or the receive of one from it.
struct SizeOnlyStep {
  bool send = false;
  int peer = 0, tag = 0;
  int64_t bytes = 0;  // a send's, on the network
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Copies `bytes` bytes from `data`. dst == rank(): delivered at once to this rank's endpoint that
  // waits for it (see above), not counted in the stats.
  virtual Status Send(int dst, int tag, const void* data, size_t bytes) = 0;
  // As Send, but the transport may go on reading `data` after returning, without a copy, until it
  // gives the message back to `lease`: the caller must not change or free the bytes before
  // AwaitLent(lease) returned. For a collective's large pieces. The default copies (Send).
  virtual Status SendBorrowed(int dst, int tag, const void* data, size_t bytes, SendLease& /*lease*/) {
    return Send(dst, tag, data, bytes);
  }
  // A message that occupies `bytes` on the network but carries none: it arrives as an empty message
  // (receive it with Recv(src, tag, nullptr, 0)). The emulator's sizes-only runs time collectives
  // this way without moving their payloads; transports that move real bytes refuse it.
  virtual Status SendSizeOnly(int /*dst*/, int /*tag*/, int64_t /*bytes*/) {
    return Status::InvalidArgument("size-only messages exist in the emulator only");
  }
  // Runs `steps` in order, each as SendSizeOnly(peer, tag, bytes) or Recv(peer, tag, nullptr, 0,
  // timeout_s) would, stopping at the first error: a collective's whole part among size-only
  // workers at once. The emulator runs it in its scheduler without waking the calling thread for
  // each message (the messages, their times and their order the same); the default calls the two.
  virtual Status RunSizeOnly(const std::vector<SizeOnlyStep>& steps, double timeout_s) {
    for (const SizeOnlyStep& s : steps) {
      NARROWS_RETURN_IF_ERROR(s.send ? SendSizeOnly(s.peer, s.tag, s.bytes) : Recv(s.peer, s.tag, nullptr, 0, timeout_s));
    }
    return Status::Ok();
  }
  // Returns once every message lent to `lease` is given back: delivered, or dropped because its
  // destination left or died. A transport that lends must give back what a destination that is
  // gone still holds, so that this never hangs on it; the default (nothing is ever lent) waits.
  virtual void AwaitLent(SendLease& lease) {
    while (!lease.Outstanding(1.0).empty()) {
    }
  }
  // Receives the next message from `src` with `tag` into `data`; its size must equal `bytes`
  // (InvalidArgument otherwise: a frame of the wrong size is never written into the buffer).
  virtual Status Recv(int src, int tag, void* data, size_t bytes, double timeout_s = kForever) = 0;
  // Receives the next message from `src` with `tag` (`bytes` long, as Recv) and hands its bytes to
  // `consume` where they lie: a collective that reduces a piece reads it from the transport's own
  // buffer (ZeroMQ's message) instead of copying it out first. The default receives into a buffer.
  virtual Status RecvInPlace(int src, int tag, size_t bytes, const std::function<void(const void*)>& consume,
                             double timeout_s = kForever) {
    std::vector<uint8_t> buffer(bytes);
    NARROWS_RETURN_IF_ERROR(Recv(src, tag, buffer.data(), bytes, timeout_s));
    consume(buffer.data());
    return Status::Ok();
  }
  // Receives the next message with `tag` from `src`, or from any rank (kAnySource: messages in the
  // order they arrived), whatever its size, into `*out`; returns its source. With kAnySource there is
  // no one source to be declared gone: it waits for `timeout_s` (the emulator answers
  // PeerUnavailable when no rank can ever send).
  virtual Result<int> RecvMessage(int src, int tag, std::vector<uint8_t>* out, double timeout_s = kForever) = 0;
  // Ranks currently alive, ascending.
  virtual std::vector<int> Members() = 0;
  // How many times `rank`'s process has been replaced by a new one (a restart that rejoined). A
  // collective is only valid while no member's generation changes. Transports whose ranks cannot
  // restart (loopback, the emulator) keep 0.
  virtual int64_t Generation(int /*rank*/) { return 0; }
  // Drops the messages queued for this rank for which `stale(src, tag)` holds — pieces of an
  // attempt that was abandoned, which a later receive under the same tag must not read — and
  // returns how many. Transports whose runs never abandon an attempt (the emulator's faults are
  // scripted) may keep the default, which drops nothing.
  virtual int64_t DiscardQueued(const std::function<bool(int src, int tag)>& /*stale*/) { return 0; }
  // Declares `rank`'s current process broken or hostile (it sent what no correct member sends):
  // it leaves Members() here and, as far as the transport can tell them, at every other member;
  // what it sent and sends from now on is dropped, and it is told it was declared dead. A restarted
  // process for the rank may join again. Transports whose members cannot misbehave (loopback, the
  // emulator) keep the default, which evicts nothing and says so.
  virtual Status Evict(int rank, const std::string& /*why*/) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " cannot be evicted: this transport's members are trusted");
  }
  // Why `rank`'s current process was evicted, here or by another member; empty if it was not.
  virtual std::string Evicted(int /*rank*/) { return ""; }
  virtual Clock& clock() = 0;
  // Bytes and messages of this rank, all of its endpoints together.
  virtual TransportStats stats() const = 0;
  // Runs `op` on a new endpoint of this rank, concurrently with the caller (under the emulator: an
  // actor of its own whose clock starts at the caller's). Messages for this rank go to whichever of
  // its endpoints waits for that (source, tag): concurrent operations need distinct tags.
  virtual std::unique_ptr<Work> Start(AsyncOp op) = 0;
};

}  // namespace narrows::core
