// GroupGuard: a view of a Transport for collectives over a group whose members may die.
//
// On a ring, only the neighbour of a dead rank hears of it from its own Recv; the others wait on
// live neighbours that are themselves stuck, forever. Through a GroupGuard a Recv gives up with
// PeerUnavailable as soon as any member of the group has left the transport's Members() or was
// replaced by a restarted process (its Generation differs from `generations`), and with Timeout
// when no message came for `timeout_s`. A member whose message has the wrong size for the
// collective (broken or hostile) is evicted (Transport::Evict), and the receive fails as for a
// dead member (PeerUnavailable); where the transport cannot evict, the InvalidArgument stands.
// Sends, clock and stats pass through; operations started with Start are guarded the same way.
// Used by workers over a real network.
#pragma once

#include <functional>
#include <vector>

#include "core/transport.h"

namespace narrows::core {

class GroupGuard : public Transport {
 public:
  // `generations[r]`: the generation member r had when it joined the group (empty: all 0).
  // `idle`, if given, is called between polls while a receive waits (on the receiving thread; not
  // by the guards that Start makes); when it returns true the receive gives up (PeerUnavailable).
  GroupGuard(Transport& inner, std::vector<int> group, double timeout_s, std::vector<int64_t> generations = {},
             double poll_s = 0.1, std::function<bool()> idle = nullptr);

  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  // A member whose process was replaced since the group formed (a restart) is sent nothing: the
  // new process never makes this attempt, and what came for it would wait under the attempt's tag.
  Status Send(int dst, int tag, const void* data, size_t bytes) override {
    NARROWS_RETURN_IF_ERROR(Current(dst));
    return inner_.Send(dst, tag, data, bytes);
  }
  Status SendBorrowed(int dst, int tag, const void* data, size_t bytes, SendLease& lease) override {
    NARROWS_RETURN_IF_ERROR(Current(dst));
    return inner_.SendBorrowed(dst, tag, data, bytes, lease);
  }
  void AwaitLent(SendLease& lease) override { inner_.AwaitLent(lease); }
  Status Recv(int src, int tag, void* data, size_t bytes, double timeout_s = kForever) override;
  Result<int> RecvMessage(int src, int tag, std::vector<uint8_t>* out, double timeout_s = kForever) override;
  Status RecvInPlace(int src, int tag, size_t bytes, const std::function<void(const void*)>& consume,
                     double timeout_s = kForever) override;
  std::vector<int> Members() override { return inner_.Members(); }
  int64_t Generation(int rank) override { return inner_.Generation(rank); }
  int64_t DiscardQueued(const std::function<bool(int, int)>& stale) override { return inner_.DiscardQueued(stale); }
  Status Evict(int rank, const std::string& why) override { return inner_.Evict(rank, why); }
  std::string Evicted(int rank) override { return inner_.Evicted(rank); }
  Clock& clock() override { return inner_.clock(); }
  TransportStats stats() const override { return inner_.stats(); }
  std::unique_ptr<Work> Start(AsyncOp op) override;

  // The members of `group` (ascending) that left `t` or were replaced since `generations`.
  static std::vector<int> Lost(Transport& t, const std::vector<int>& group, const std::vector<int64_t>& generations);

 private:
  // Calls `receive(wait_s)` in slices of poll_s until it answers other than Timeout, a member is
  // lost, or min(timeout_s, the guard's timeout) passed.
  Result<int> Guarded(int src, double timeout_s, const std::function<Result<int>(double wait_s)>& receive);
  // PeerUnavailable if `dst`'s process is not the one it had when the group formed.
  Status Current(int dst);
  // A sized receive from `src` that ended in `s`: a message of the wrong size evicts its sender.
  Status Refuse(int src, const Status& s);

  Transport& inner_;
  std::vector<int> group_;
  double timeout_s_;
  std::vector<int64_t> generations_;
  double poll_s_;
  std::function<bool()> idle_;
};

}  // namespace narrows::core
