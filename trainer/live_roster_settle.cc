// LiveRoster's settling (live_roster.h): after an attempt at a collective failed here, asking every
// live member whether it completed the attempt, and answering the members that ask this worker.
#include "trainer/live_roster.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "core/group_guard.h"
#include "trainer/worker.h"

namespace narrows::trainer {

template <typename Fn>
void LiveRoster::TakeNotices(int64_t step, Fn&& on_notice) {
  std::vector<uint8_t> msg;
  while (true) {
    auto from = w_.t.RecvMessage(core::kAnySource, NoticeTag(step), &msg, 0.0);
    if (!from.ok()) return;
    Notice n{};
    if (msg.size() != sizeof n) continue;  // not a notice of this protocol: dropped
    std::memcpy(&n, msg.data(), sizeof n);
    on_notice(*from, n);
  }
}

void LiveRoster::Completed(const std::vector<int>& group, int64_t step, const float* data, int64_t count) {
  kept_.assign(data, data + count);
  kept_step_ = step;
  kept_code_ = AttemptCode(group, step);
  if (attempt_.active) End(true, data, count);
}

core::Result<bool> LiveRoster::Settle(const std::vector<int>& group, int64_t step, float* data, int64_t count) {
  if (attempt_.active) End(false, nullptr, 0);  // members that asked about it hear that it failed
  const uint64_t code = AttemptCode(group, step);
  Abandon(step, code);
  const std::vector<int> lost = core::GroupGuard::Lost(w_.t, group, generations_);
  std::vector<int> waiting;  // live members not heard from yet about this attempt
  for (int r : group) {
    if (r != w_.rank && !std::binary_search(lost.begin(), lost.end(), r)) waiting.push_back(r);
  }
  const Notice notice{step, code};
  for (int r : waiting) {
    const core::Status sent = w_.t.Send(r, NoticeTag(step), &notice, sizeof notice);
    if (!sent.ok() && sent.code() != core::StatusCode::kPeerUnavailable) return sent;
  }
  bool taken = false;
  const double timeout_s = w_.entry.sc.deploy.collective_timeout_s;
  const double start = w_.t.clock().Now();
  double noticed_at = start;
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  std::vector<uint8_t> msg;
  while (!waiting.empty()) {
    Answer(step);  // the others settling this step (each hears that this worker failed it), or others
    if (w_.t.clock().Now() - noticed_at > w_.entry.sc.deploy.timeout_s) {
      // Members not heard from within deploy.timeout_s are told again: a notice or its answer
      // can be late or lost in a transport (one once lay unread behind its connection's last
      // bytes until more came), and the notice's second answer brings it in, or what lay before
      // it. A member answers each notice it takes; the second answers are dropped (below, or read
      // and passed over by the next settling under the same tag).
      for (int r : waiting) (void)w_.t.Send(r, NoticeTag(step), &notice, sizeof notice);  // gone: no matter
      w_.records.Event({{"type", "renoticed"}, {"step", step}, {"time", w_.Now()}, {"worker", w_.rank},
                        {"waiting", waiting}});
      noticed_at = w_.t.clock().Now();
    }
    for (auto it = waiting.begin(); it != waiting.end();) {
      const int r = *it;
      bool heard = false;
      while (w_.t.RecvMessage(r, AnswerTag(step), &msg, 0.0).ok()) {
        AnswerHeader h{};
        if (msg.size() < sizeof h) continue;  // not an answer of this protocol: dropped
        std::memcpy(&h, msg.data(), sizeof h);
        if (h.step != step || h.code != code) continue;  // about another attempt of this step
        if (h.completed != 0 && msg.size() == sizeof h + bytes) {
          std::memcpy(data, msg.data() + sizeof h, bytes);
          taken = true;
        }
        heard = true;
        break;
      }
      if (heard || !core::GroupGuard::Lost(w_.t, {r}, generations_).empty()) {
        it = waiting.erase(it);
      } else {
        ++it;
      }
    }
    if (waiting.empty()) break;
    if (w_.t.clock().Now() - start > timeout_s) {
      return core::Status::Timeout("settling the collective of step " + std::to_string(step) + ": worker " +
                                   std::to_string(waiting.front()) +
                                   " neither completed it nor said that it failed within deploy.collective_timeout_s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (noticed_at != start) {  // second answers to notices sent again: void
    const int answer_tag = AnswerTag(step);
    w_.t.DiscardQueued([answer_tag](int, int tag) { return tag == answer_tag; });
  }
  if (taken) {  // (each worker that takes a result says so)
    w_.records.Event({{"type", "settled"}, {"step", step}, {"time", w_.Now()}, {"worker", w_.rank},
                      {"lost", lost}});
  }
  return taken;
}

void LiveRoster::Send(int dst, const AnswerHeader& h, const float* data, int64_t count) {
  std::vector<uint8_t> out(sizeof h + (h.completed != 0 ? static_cast<size_t>(count) * sizeof(float) : 0));
  std::memcpy(out.data(), &h, sizeof h);
  if (h.completed != 0) std::memcpy(out.data() + sizeof h, data, static_cast<size_t>(count) * sizeof(float));
  (void)w_.t.Send(dst, AnswerTag(h.step), out.data(), out.size());  // a member gone needs no answer
}

void LiveRoster::Begin(int64_t step, const std::vector<int>& group) {
  Purge(step);
  const uint64_t code = AttemptCode(group, step);
  // A member's notice that it failed this attempt came before this worker began it (answered
  // then as not completed): waiting for that member's pieces would wait for
  // deploy.collective_timeout_s while the member waits for a view, so the attempt is settled now.
  const bool failed = std::find(refused_.begin(), refused_.end(), std::make_pair(step, code)) != refused_.end();
  attempt_ = {true, step, code, {}, failed};
}

void LiveRoster::Abandon(int64_t step, uint64_t code) {
  if (std::find(abandoned_.begin(), abandoned_.end(), std::make_pair(step, code)) == abandoned_.end()) {
    abandoned_.emplace_back(step, code);
  }
  Purge(step);
}

void LiveRoster::Purge(int64_t step) {
  constexpr int64_t kSteps = core::tags::kLiveSteps;
  const auto old = [step](const auto& a) { return step - a.first >= kSteps / 2; };
  abandoned_.erase(std::remove_if(abandoned_.begin(), abandoned_.end(), old), abandoned_.end());
  refused_.erase(std::remove_if(refused_.begin(), refused_.end(), old), refused_.end());
  const bool fresh = joined_step_ >= 0 && step - joined_step_ < kSteps / 4;
  if (abandoned_.empty() && !fresh) return;
  const int64_t dropped = w_.t.DiscardQueued([this, fresh](int, int tag) {
    if (tag < core::tags::kLiveBase || tag >= core::tags::kLiveEnd) return false;
    const int64_t key = (tag - core::tags::kLiveBase) / core::tags::kAlgorithmEnd;
    if (fresh) {
      const int64_t before = ((joined_step_ - key / core::tags::kLiveGroupCodes) % kSteps + kSteps) % kSteps;
      if (before >= 1 && before <= kSteps / 2) return true;
    }
    return std::any_of(abandoned_.begin(), abandoned_.end(), [key](const auto& a) { return LiveKey(a.first, a.second) == key; });
  });
  if (dropped > 0) {
    w_.records.Event({{"type", "stale_dropped"}, {"step", step}, {"time", w_.Now()}, {"worker", w_.rank},
                      {"messages", dropped}});
  }
}

void LiveRoster::End(bool completed, const float* data, int64_t count) {
  for (int r : attempt_.deferred) Send(r, {attempt_.step, attempt_.code, completed ? 1 : 0}, data, count);
  attempt_ = {};
}

void LiveRoster::Answer(int64_t settling) {
  std::vector<int64_t> steps;
  for (int64_t s : {kept_step_, attempt_.active ? attempt_.step : int64_t{-1}, settling}) {
    if (s >= 0 && std::find(steps.begin(), steps.end(), s) == steps.end()) steps.push_back(s);
  }
  for (int64_t step : steps) {
    TakeNotices(step, [this](int from, const Notice& n) {
      if (n.step == kept_step_ && n.code == kept_code_) {
        Send(from, {n.step, n.code, 1}, kept_.data(), static_cast<int64_t>(kept_.size()));
      } else if (attempt_.active && n.step == attempt_.step && n.code == attempt_.code) {
        attempt_.deferred.push_back(from);
        attempt_.abandoned = true;
      } else {
        // Not made here yet, or given up: if this worker makes it later, it cannot complete (the
        // sender failed it), so Begin abandons it at once.
        Send(from, {n.step, n.code, 0}, nullptr, 0);
        if (std::find(refused_.begin(), refused_.end(), std::make_pair(n.step, n.code)) == refused_.end()) {
          refused_.emplace_back(n.step, n.code);
        }
      }
    });
  }
}

void LiveRoster::AnswerUnwelcomed() {
  for (int64_t key = 0; key < core::tags::kLiveSteps; ++key) {
    TakeNotices(key, [this](int from, const Notice& n) { Send(from, {n.step, n.code, 0}, nullptr, 0); });
  }
}

}  // namespace narrows::trainer
