#include "core/group_guard.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace narrows::core {

GroupGuard::GroupGuard(Transport& inner, std::vector<int> group, double timeout_s, std::vector<int64_t> generations,
                       double poll_s, std::function<bool()> idle)
    : inner_(inner), group_(std::move(group)), timeout_s_(timeout_s), generations_(std::move(generations)),
      poll_s_(poll_s), idle_(std::move(idle)) {}

namespace {

// Whether rank r's process in `t` is the one `generations` names (a rank it does not list: 0).
bool SameProcess(Transport& t, const std::vector<int64_t>& generations, int r) {
  const size_t i = static_cast<size_t>(r);
  return t.Generation(r) == (r >= 0 && i < generations.size() ? generations[i] : 0);
}

}  // namespace

std::vector<int> GroupGuard::Lost(Transport& t, const std::vector<int>& group, const std::vector<int64_t>& generations) {
  const std::vector<int> members = t.Members();
  std::vector<int> out;
  for (int r : group) {
    const bool gone = !std::binary_search(members.begin(), members.end(), r);
    if (gone || !SameProcess(t, generations, r)) out.push_back(r);
  }
  return out;
}

Result<int> GroupGuard::Guarded(int src, double timeout_s, const std::function<Result<int>(double)>& receive) {
  const double limit = std::min(timeout_s, timeout_s_);
  const auto start = std::chrono::steady_clock::now();
  const std::string who = src == kAnySource ? "any rank" : "rank " + std::to_string(src);
  while (true) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited >= limit) return Status::Timeout("no message from " + who + " within " + std::to_string(limit) + " s");
    auto got = receive(std::min(poll_s_, limit - waited));
    if (got.ok() || got.status().code() != StatusCode::kTimeout) return got;
    const auto lost = Lost(inner_, group_, generations_);
    if (!lost.empty()) return Status::PeerUnavailable("rank " + std::to_string(lost.front()) + " left the group");
    if (idle_ && idle_()) return Status::PeerUnavailable("a member of the group failed this collective");
  }
}

Status GroupGuard::Current(int dst) {
  if (SameProcess(inner_, generations_, dst)) return Status::Ok();
  return Status::PeerUnavailable("rank " + std::to_string(dst) + " was replaced by a new process");
}

Status GroupGuard::Refuse(int src, const Status& s) {
  // Only the size check answers InvalidArgument for a source of the group (the transport has
  // checked the rank); the message never reached the caller's buffer.
  if (s.code() != StatusCode::kInvalidArgument || std::find(group_.begin(), group_.end(), src) == group_.end()) return s;
  if (!inner_.Evict(src, s.message()).ok()) return s;
  return Status::PeerUnavailable("rank " + std::to_string(src) + " was evicted: " + s.message());
}

Status GroupGuard::Recv(int src, int tag, void* data, size_t bytes, double timeout_s) {
  auto got = Guarded(src, timeout_s, [&](double wait_s) -> Result<int> {
    NARROWS_RETURN_IF_ERROR(inner_.Recv(src, tag, data, bytes, wait_s));
    return src;
  });
  return got.ok() ? Status::Ok() : Refuse(src, got.status());
}

Status GroupGuard::RecvInPlace(int src, int tag, size_t bytes, const std::function<void(const void*)>& consume,
                               double timeout_s) {
  auto got = Guarded(src, timeout_s, [&](double wait_s) -> Result<int> {
    NARROWS_RETURN_IF_ERROR(inner_.RecvInPlace(src, tag, bytes, consume, wait_s));
    return src;
  });
  return got.ok() ? Status::Ok() : Refuse(src, got.status());
}

Result<int> GroupGuard::RecvMessage(int src, int tag, std::vector<uint8_t>* out, double timeout_s) {
  return Guarded(src, timeout_s, [&](double wait_s) { return inner_.RecvMessage(src, tag, out, wait_s); });
}

std::unique_ptr<Work> GroupGuard::Start(AsyncOp op) {
  return inner_.Start([group = group_, timeout = timeout_s_, gens = generations_, poll = poll_s_,
                       op = std::move(op)](Transport& child) {
    GroupGuard guarded(child, group, timeout, gens, poll);
    return op(guarded);
  });
}

}  // namespace narrows::core
