// LiveRoster's rounds (live_roster.h): who is a member, the votes and welcomes that bring restarted
// processes back in, and the repeat of a failed collective without the dead.
#include "trainer/live_roster.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>

#include "core/group_guard.h"
#include "trainer/worker.h"

namespace narrows::trainer {

LiveRoster::LiveRoster(WorkerContext& w)
    : w_(w), scheduled_(ScheduledFaults(w.entry.sc.faults), w.entry.num_workers), group_(w.t.Members()) {
  generations_.resize(static_cast<size_t>(w.entry.num_workers));
  was_member_.assign(static_cast<size_t>(w.entry.num_workers), false);
  for (int r = 0; r < w.entry.num_workers; ++r) generations_[static_cast<size_t>(r)] = w.t.Generation(r);
  // A worker whose first scheduled fault is a join starts outside the group (its process runs, and
  // waits to be welcomed at its step).
  group_.erase(std::remove_if(group_.begin(), group_.end(), [this](int r) { return !scheduled_.Alive(r, 0); }),
               group_.end());
  for (int r : group_) was_member_[static_cast<size_t>(r)] = true;
}

std::vector<core::FaultSpec> LiveRoster::ScheduledFaults(const std::vector<core::FaultSpec>& faults) {
  std::vector<core::FaultSpec> out;
  for (const auto& f : faults) {
    if (f.kind == core::FaultKind::kLeave || f.kind == core::FaultKind::kJoin) out.push_back(f);
  }
  return out;
}

core::Status LiveRoster::BeginRound(int64_t start, int64_t end, Round* round) {
  round->start = start;
  round->end = end;
  round->joiners.clear();
  round->root = -1;
  // A vote counted late (an all-reduce that ran beside the next round) may name a worker welcomed
  // since; and a worker the scenario's schedule brings in now is welcomed by every member alike,
  // without a vote.
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [this](int r) { return std::binary_search(group_.begin(), group_.end(), r); }),
                 pending_.end());
  const std::vector<int> live = w_.t.Members();
  for (int r = 0; r < w_.entry.num_workers; ++r) {
    if (Scheduled(r) && scheduled_.Alive(r, start) && !std::binary_search(group_.begin(), group_.end(), r) &&
        std::binary_search(live.begin(), live.end(), r) &&
        std::find(pending_.begin(), pending_.end(), r) == pending_.end()) {
      pending_.push_back(r);
    }
  }
  std::sort(pending_.begin(), pending_.end());
  if (!pending_.empty()) {
    // The leader welcomes the joiners the last round's votes named; the driver sends them the state.
    std::vector<int> joined = group_;
    joined.insert(joined.end(), pending_.begin(), pending_.end());
    std::sort(joined.begin(), joined.end());
    round->root = group_.front();
    AwaitJoiners(start);  // (the leader before it welcomes them: it welcomes the process it heard)
    if (w_.rank == round->root) {
      const int n = w_.entry.num_workers;
      std::vector<int64_t> msg(static_cast<size_t>(2 + n), 0);
      msg[0] = start;
      msg[1] = epoch_step_ == start ? epoch_ : 0;  // the views at `start`: its tags depend on them
      for (int r : group_) msg[static_cast<size_t>(2 + r)] = 1;
      for (int r : pending_) msg[static_cast<size_t>(2 + r)] = 2;
      for (int r : pending_) {
        // A joiner that died again since its vote is dropped at the next collective.
        const core::Status s = w_.t.Send(r, kTagWelcome, msg.data(), msg.size() * 8);
        if (!s.ok() && s.code() != core::StatusCode::kPeerUnavailable) return s;
      }
    }
    for (int r : pending_) {
      TakeProcessOf(r);
      left_by_schedule_.erase(r);
    }
    round->joiners = pending_;
    group_ = joined;
    pending_.clear();
  }
  // A scheduled leave inside the round takes its worker out of the round's synchronisation, as the
  // emulator does; its process stays up if it is to join again.
  round->members.clear();
  for (int r : group_) {
    if (scheduled_.Alive(r, start) && scheduled_.Alive(r, end - 1)) {
      round->members.push_back(r);
    } else {
      left_by_schedule_.insert(r);
    }
  }
  return core::Status::Ok();
}

bool LiveRoster::Present(int64_t start) { return scheduled_.Alive(w_.rank, start); }

bool LiveRoster::Trains(int64_t step) {
  if (w_.entry.opt.before_step) w_.entry.opt.before_step(w_.rank, step);  // the deployment's fault layer
  Answer();
  return scheduled_.Alive(w_.rank, step);
}

std::vector<std::pair<int64_t, bool>> LiveRoster::Departures(int64_t start, int64_t end) {
  std::vector<std::pair<int64_t, bool>> out;
  for (int64_t step = std::max<int64_t>(start, 1); step < end; ++step) {
    if (scheduled_.Alive(w_.rank, step - 1) && !scheduled_.Alive(w_.rank, step)) out.emplace_back(step, false);
  }
  return out;
}

bool LiveRoster::Scheduled(int r) const {
  for (const auto& f : w_.entry.sc.faults) {
    if ((f.kind == core::FaultKind::kLeave || f.kind == core::FaultKind::kJoin) && f.worker == r) return true;
  }
  return false;
}

bool LiveRoster::ScheduledBack(int r, int64_t step) const {
  if (!scheduled_.Alive(r, step)) return false;
  for (int64_t s = 0; s < step; ++s) {
    if (!scheduled_.Alive(r, s)) return true;
  }
  return false;
}

void LiveRoster::AwaitJoiners(int64_t start_step) {
  const double start = w_.t.clock().Now();
  while (w_.t.clock().Now() - start < w_.entry.sc.deploy.timeout_s) {
    const std::vector<int> members = w_.t.Members();
    const bool heard = std::all_of(pending_.begin(), pending_.end(), [&](int r) {
      const size_t i = static_cast<size_t>(r);
      return std::binary_search(members.begin(), members.end(), r) &&
             (!was_member_[i] || w_.t.Generation(r) != generations_[i] || ScheduledBack(r, start_step));
    });
    if (heard) return;
    Answer();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void LiveRoster::TakeProcessOf(int r) {
  generations_[static_cast<size_t>(r)] = w_.t.Generation(r);
  was_member_[static_cast<size_t>(r)] = true;
}

void LiveRoster::Vote(const std::vector<int>& group, float* slots) {
  for (int r : w_.t.Members()) {
    // A worker the scenario's leave and join faults move comes in by them (BeginRound), not by votes.
    if (!std::binary_search(group.begin(), group.end(), r) && !Scheduled(r)) slots[r] = 1.0f;
  }
}

void LiveRoster::CountVotes(const std::vector<int>& group, const float* slots) {
  for (int r = 0; r < w_.entry.num_workers; ++r) {
    if (slots[r] > 0 && !std::binary_search(group.begin(), group.end(), r)) pending_.push_back(r);
  }
}

core::Result<Welcome> LiveRoster::AwaitWelcome() {
  const int n = w_.entry.num_workers;
  std::vector<int64_t> msg(static_cast<size_t>(2 + n));
  const double start = w_.t.clock().Now();
  // Out by the scenario's schedule, this worker waits for its round however long that takes,
  // while another process of the run is up.
  const bool scheduled = left_by_schedule_.count(w_.rank) > 0 || !scheduled_.Alive(w_.rank, 0);
  while (scheduled || w_.t.clock().Now() - start < w_.entry.sc.deploy.collective_timeout_s) {
    if (scheduled && w_.t.Members().size() <= 1) {
      return core::Status::PeerUnavailable("every other worker left before this one's scheduled join");
    }
    AnswerUnwelcomed();
    for (int r : w_.t.Members()) {
      if (r == w_.rank || !w_.t.Recv(r, kTagWelcome, msg.data(), msg.size() * 8, 0.05).ok()) continue;
      Welcome wel;
      wel.root = r;
      wel.step = msg[0];
      epoch_step_ = msg[0];
      epoch_ = msg[1];
      for (int q = 0; q < n; ++q) {
        if (msg[static_cast<size_t>(2 + q)] >= 1) wel.group.push_back(q);
        if (msg[static_cast<size_t>(2 + q)] == 2) wel.joiners.push_back(q);
      }
      // The processes of the group are the ones this worker has heard by now: it took their
      // generations when it started, from a rendezvous table that may have listed a member's
      // previous process (a member that restarted meanwhile would look replaced here alone, in
      // every collective).
      for (int q : wel.group) TakeProcessOf(q);
      joined_step_ = wel.step;
      left_by_schedule_.erase(w_.rank);
      Purge(wel.step);
      return wel;
    }
  }
  return core::Status::Timeout("no live worker welcomed this one within deploy.collective_timeout_s");
}

int LiveRoster::Tag(int base, int64_t step, const std::vector<int>& group) const {
  return core::tags::kLiveBase + static_cast<int>(LiveKey(step, AttemptCode(group, step)) * core::tags::kAlgorithmEnd) +
         base % core::tags::kAlgorithmEnd;
}

uint64_t LiveRoster::AttemptCode(const std::vector<int>& group, int64_t step) const {
  const uint64_t epoch = step == epoch_step_ ? static_cast<uint64_t>(epoch_) : 0;
  return (GroupCode(group) ^ (epoch * 0x9e3779b97f4a7c15ull)) * 1099511628211ull;
}

uint64_t LiveRoster::GroupCode(const std::vector<int>& group) {
  uint64_t code = 14695981039346656037ull;  // FNV-1a over the members
  for (int r : group) code = (code ^ static_cast<uint64_t>(r + 1)) * 1099511628211ull;
  return code;
}

core::Status LiveRoster::Run(std::vector<int>* group, int64_t step, core::OnFailure on_failure,
                             const std::function<void()>& fill,
                             const std::function<core::Status(core::Transport&)>& collective, float* data,
                             int64_t count) {
  while (true) {
    Answer();
    fill();
    // While it waits, this worker answers members settling other attempts (Answer).
    Begin(step, *group);
    core::GroupGuard guard(w_.t, *group, w_.entry.sc.deploy.collective_timeout_s, generations_, 0.1, [this] {
      Answer();
      return attempt_.abandoned;  // a member failed it: it cannot complete here, so settle now
    });
    const core::Status s = collective(guard);
    if (s.ok()) {
      Completed(*group, step, data, count);
      return s;
    }
    if (s.code() != core::StatusCode::kPeerUnavailable) return s;
    auto settled = Settle(*group, step, data, count);
    if (!settled.ok()) return settled.status();
    if (*settled) {
      Completed(*group, step, data, count);
      return core::Status::Ok();
    }
    NARROWS_RETURN_IF_ERROR(DropDead(group, step, on_failure, s));
  }
}

std::unique_ptr<core::Transport> LiveRoster::Guard(const std::vector<int>& group) {
  return std::make_unique<core::GroupGuard>(w_.t, group, w_.entry.sc.deploy.collective_timeout_s, generations_);
}

core::Status LiveRoster::DropDead(std::vector<int>* group, int64_t step, core::OnFailure on_failure, const core::Status& why) {
  ++failures_;
  const uint64_t attempt = AttemptCode(*group, step);
  Abandon(step, attempt);
  const std::vector<int> lost = core::GroupGuard::Lost(w_.t, *group, generations_);
  if (std::find(lost.begin(), lost.end(), w_.rank) != lost.end()) return why;
  if (on_failure == core::OnFailure::kStop) {
    if (lost.empty()) return why;
    std::string names;
    for (int d : lost) names += (names.empty() ? "" : ", ") + std::to_string(d);
    return core::Status::Aborted("worker " + names + " died at step " + std::to_string(step) +
                                 "; stopping (deploy.on_failure: stop)");
  }
  // The repeat's group is the coordinator's view — the lowest member this worker sees alive —
  // so that survivors whose failure detectors disagree for a while (one saw a death the other
  // has not, or suspects a live member) repeat over the same group; each repeat at a step has a
  // view count of its own in its tags, so none reads a piece of the attempt before.
  std::vector<int> candidates;
  std::set_difference(group->begin(), group->end(), lost.begin(), lost.end(), std::back_inserter(candidates));
  std::vector<int> view;
  int64_t epoch = 0;
  while (true) {
    const int coordinator = candidates.front();  // this worker is a candidate: never empty
    if (coordinator == w_.rank) {
      view = candidates;
      epoch = (step == epoch_step_ ? epoch_ : 0) + 1;
      std::vector<int64_t> msg = {step, static_cast<int64_t>(attempt), epoch};
      msg.insert(msg.end(), view.begin(), view.end());
      for (int r : *group) {
        if (r != w_.rank) (void)w_.t.Send(r, ViewTag(step), msg.data(), msg.size() * sizeof(int64_t));  // gone: no matter
      }
      break;
    }
    auto got = AwaitView(coordinator, step, attempt, &epoch);
    if (got.ok()) {
      view = *got;
      break;
    }
    if (got.status().code() != core::StatusCode::kPeerUnavailable) return got.status();
    candidates.erase(candidates.begin());  // the coordinator died: the next one
  }
  if (!std::binary_search(view.begin(), view.end(), w_.rank)) {
    return core::Status::PeerUnavailable("the coordinator of step " + std::to_string(step) +
                                         " left this worker out of the group");
  }
  std::vector<int> dropped;
  std::set_difference(group->begin(), group->end(), view.begin(), view.end(), std::back_inserter(dropped));
  epoch_step_ = step;
  epoch_ = epoch;
  *group = view;
  if (w_.rank == group->front()) {
    // A repeat that dropped nobody (a suspicion the coordinator overruled) is recorded too: a
    // replay must repeat where the run did (DDP reduces a repeated step whole).
    if (dropped.empty()) w_.records.Event({{"type", "repeated"}, {"step", step}, {"time", w_.Now()}, {"group", *group}});
    for (int d : dropped) {
      // A member evicted for what it sent (core::GroupGuard) is no crash: the event says why.
      const std::string why = w_.t.Evicted(d);
      Json e = {{"type", why.empty() ? "crash" : "evicted"}, {"step", step}, {"time", w_.Now()}, {"worker", d},
                {"detected", why.empty() ? "heartbeat" : "message"}, {"survivors", *group}};
      if (!why.empty()) e["reason"] = why;
      w_.records.Event(std::move(e));
    }
  }
  return core::Status::Ok();
}

core::Result<std::vector<int>> LiveRoster::AwaitView(int coordinator, int64_t step, uint64_t attempt, int64_t* epoch) {
  const double start = w_.t.clock().Now();
  std::vector<uint8_t> msg;
  while (w_.t.clock().Now() - start < w_.entry.sc.deploy.collective_timeout_s) {
    Answer(step);
    if (!core::GroupGuard::Lost(w_.t, {coordinator}, generations_).empty()) {
      return core::Status::PeerUnavailable("coordinator " + std::to_string(coordinator) + " is gone");
    }
    if (!w_.t.RecvMessage(coordinator, ViewTag(step), &msg, 0.02).ok()) continue;
    if (msg.size() < 3 * sizeof(int64_t) || msg.size() % sizeof(int64_t) != 0) continue;  // not a view
    std::vector<int64_t> v(msg.size() / sizeof(int64_t));
    std::memcpy(v.data(), msg.data(), msg.size());
    if (v[0] != step || static_cast<uint64_t>(v[1]) != attempt) continue;  // of another attempt
    *epoch = v[2];
    std::vector<int> view;
    for (size_t i = 3; i < v.size(); ++i) {
      if (v[i] < 0 || v[i] >= w_.entry.num_workers) return core::Status::InvalidArgument("a view names worker " + std::to_string(v[i]));
      view.push_back(static_cast<int>(v[i]));
    }
    std::sort(view.begin(), view.end());
    return view;
  }
  return core::Status::Timeout("no view of the group from coordinator " + std::to_string(coordinator) +
                               " within deploy.collective_timeout_s");
}

}  // namespace narrows::trainer
