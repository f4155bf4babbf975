#include "trainer/roster.h"


#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <set>
#include <string>
#include <thread>

#include "core/group_guard.h"
#include "trainer/worker.h"

namespace narrows::trainer {

bool Round::Member(int rank) const { return std::find(members.begin(), members.end(), rank) != members.end(); }
bool Round::Joining(int rank) const { return std::find(joiners.begin(), joiners.end(), rank) != joiners.end(); }

namespace {

// The emulator's rosters: every member's answer is known in advance, so collectives run over the
// worker's own transport once, and nothing of the live protocol (tags per attempt, settling,
// votes, welcomes) is needed.
class EmulatedRoster : public Roster {
 public:
  explicit EmulatedRoster(WorkerContext& w) : w_(w) {}

  bool live() const override { return false; }
  int Tag(int base, int64_t, const std::vector<int>&) const override { return base; }
  core::Status Run(std::vector<int>*, int64_t, core::OnFailure, const std::function<void()>& fill,
                   const std::function<core::Status(core::Transport&)>& collective, float*, int64_t) override {
    fill();
    return collective(w_.t);
  }
  void Completed(const std::vector<int>&, int64_t, const float*, int64_t) override {}
  void Attempting(const std::vector<int>&, int64_t) override {}
  core::Result<bool> Settle(const std::vector<int>&, int64_t, float*, int64_t) override { return false; }
  std::unique_ptr<core::Transport> Guard(const std::vector<int>&) override { return nullptr; }
  core::Status DropDead(std::vector<int>*, int64_t, core::OnFailure, const core::Status& why) override { return why; }
  void Vote(const std::vector<int>&, float*) override {}
  void CountVotes(const std::vector<int>&, const float*) override {}
  core::Result<Welcome> AwaitWelcome() override {
    return core::Status::InvalidArgument("an emulated worker is never restarted");
  }
  void SetGroup(std::vector<int>) override {}
  int64_t failures() const override { return 0; }
  void set_failures(int64_t) override {}

 protected:
  WorkerContext& w_;
};

// The emulator's membership: the scenario's faults, the same answer on every worker.
class ScriptedRoster final : public EmulatedRoster {
 public:
  explicit ScriptedRoster(WorkerContext& w) : EmulatedRoster(w), plan_(w.entry.plan) {}

  core::Status BeginRound(int64_t start, int64_t end, Round* round) override {
    round->start = start;
    round->end = end;
    round->members.clear();
    round->joiners.clear();
    round->root = -1;
    for (int r = 0; r < w_.entry.num_workers; ++r) {
      if (plan_.Alive(r, start) && plan_.Alive(r, end - 1)) round->members.push_back(r);
    }
    // Workers alive now that were not members of the last round receive the state from a worker
    // that was, preferring one still here.
    if (start > 0 && !previous_.empty()) {
      for (int r : plan_.AliveSet(start)) {
        if (!std::binary_search(previous_.begin(), previous_.end(), r)) round->joiners.push_back(r);
      }
      round->root = previous_.front();
      for (int r : previous_) {
        if (plan_.Alive(r, start)) {
          round->root = r;
          break;
        }
      }
    }
    return core::Status::Ok();
  }
  void EndRound(const Round& round) override {
    if (!round.members.empty()) previous_ = round.members;
  }
  bool Present(int64_t start) override { return plan_.Alive(w_.rank, start); }
  bool Trains(int64_t step) override { return plan_.Alive(w_.rank, step); }
  bool RestartsLostWorkers() const override { return false; }
  std::optional<int64_t> RecordedInnerSteps(int64_t) const override { return std::nullopt; }
  bool RecordedRepeat(int64_t) const override { return false; }
  std::vector<std::pair<int64_t, bool>> Departures(int64_t start, int64_t end) override {
    std::vector<std::pair<int64_t, bool>> out;
    for (int64_t step = std::max<int64_t>(start, 1); step < end; ++step) {
      if (plan_.Alive(w_.rank, step - 1) && !plan_.Alive(w_.rank, step)) {
        out.emplace_back(step, plan_.CrashesAt(w_.rank, step));
      }
    }
    return out;
  }

 private:
  const FaultPlan& plan_;
  std::vector<int> previous_;  // the members of the last round with any
};

// A deployment's membership, replayed from its trace in the emulator: who the members are comes from
// the trace, and what the deployment's wall time decided (DyLU's inner steps, DDP's repeated steps).
class ReplayRoster final : public EmulatedRoster {
 public:
  explicit ReplayRoster(WorkerContext& w) : EmulatedRoster(w), trace_(*w.entry.opt.trace) {
    for (int r = 0; r < w.entry.num_workers; ++r) group_.push_back(r);
    present_ = members_ = group_;
  }

  core::Status BeginRound(int64_t start, int64_t end, Round* round) override {
    round->start = start;
    round->end = end;
    round->root = -1;
    round->joiners.clear();
    if (const auto j = trace_.joiners.find(start); j != trace_.joiners.end()) {
      for (int r : j->second) {
        if (!std::binary_search(group_.begin(), group_.end(), r)) round->joiners.push_back(r);
      }
    }
    if (!round->joiners.empty()) round->root = group_.front();  // as the live leader: the lowest member
    present_.clear();
    std::set_union(group_.begin(), group_.end(), round->joiners.begin(), round->joiners.end(),
                   std::back_inserter(present_));
    const auto m = trace_.members.find(end);
    if (m == trace_.members.end()) {
      return core::Status::InvalidArgument("membership trace: no synchronisation at step " + std::to_string(end) +
                                           " (the round from step " + std::to_string(start) + ")");
    }
    if (!std::includes(present_.begin(), present_.end(), m->second.begin(), m->second.end()) || m->second.empty()) {
      return core::Status::InvalidArgument("membership trace: the members at step " + std::to_string(end) +
                                           " are not among the workers present in the round from step " +
                                           std::to_string(start));
    }
    round->members = m->second;
    members_ = m->second;
    return core::Status::Ok();
  }
  void EndRound(const Round& round) override { group_ = round.members; }
  // Only the round's members train it: the work of one that left in it is lost whatever it was (and
  // an algorithm that synchronises inside its steps, as DDP, must not start a collective without it).
  bool Present(int64_t) override { return std::binary_search(members_.begin(), members_.end(), w_.rank); }
  bool Trains(int64_t) override { return true; }
  // A worker present at the round's start and not among its members left in it: a crash (the live
  // process was killed somewhere in the round; where does not change what the members computed).
  std::vector<std::pair<int64_t, bool>> Departures(int64_t, int64_t end) override {
    if (!std::binary_search(present_.begin(), present_.end(), w_.rank) || Present(end)) return {};
    return {{end - 1, true}};
  }
  bool RestartsLostWorkers() const override { return true; }
  std::optional<int64_t> RecordedInnerSteps(int64_t round_end) const override {
    const auto it = trace_.inner_steps.find(round_end);
    if (it == trace_.inner_steps.end() || static_cast<size_t>(w_.rank) >= it->second.size()) return std::nullopt;
    return it->second[static_cast<size_t>(w_.rank)];
  }
  bool RecordedRepeat(int64_t step) const override { return trace_.repeated.count(step) > 0; }

 private:
  const MembershipTrace& trace_;
  std::vector<int> group_;    // the members of the last round: who the next one starts with
  std::vector<int> present_;  // the group and the joiners of the round begun last
  std::vector<int> members_;  // its members (before any round: everyone)
};

// A deployment's membership: heartbeats, survivors, restarts that rejoin.
class LiveRoster final : public Roster {
 public:
  explicit LiveRoster(WorkerContext& w)
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

  bool live() const override { return true; }

  core::Status BeginRound(int64_t start, int64_t end, Round* round) override {
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
  void EndRound(const Round& round) override { group_ = round.members; }
  bool Present(int64_t start) override { return scheduled_.Alive(w_.rank, start); }
  bool Trains(int64_t step) override {
    if (w_.entry.opt.before_step) w_.entry.opt.before_step(w_.rank, step);  // the deployment's fault layer
    Answer();
    return scheduled_.Alive(w_.rank, step);
  }
  std::vector<std::pair<int64_t, bool>> Departures(int64_t start, int64_t end) override {
    std::vector<std::pair<int64_t, bool>> out;
    for (int64_t step = std::max<int64_t>(start, 1); step < end; ++step) {
      if (scheduled_.Alive(w_.rank, step - 1) && !scheduled_.Alive(w_.rank, step)) out.emplace_back(step, false);
    }
    return out;
  }

  bool RestartsLostWorkers() const override { return false; }  // it is a new process already
  std::optional<int64_t> RecordedInnerSteps(int64_t) const override { return std::nullopt; }
  bool RecordedRepeat(int64_t) const override { return false; }

  int Tag(int base, int64_t step, const std::vector<int>& group) const override {
    return core::tags::kLiveBase + static_cast<int>(LiveKey(step, AttemptCode(group, step)) * core::tags::kAlgorithmEnd) +
           base % core::tags::kAlgorithmEnd;
  }
  // What a live tag folds above the algorithm's own tag: the step and the attempt's code, each modulo
  // its range (core/tags.h).
  static int64_t LiveKey(int64_t step, uint64_t code) {
    return (step % core::tags::kLiveSteps) * core::tags::kLiveGroupCodes +
           static_cast<int64_t>(code % core::tags::kLiveGroupCodes);
  }

  core::Status Run(std::vector<int>* group, int64_t step, core::OnFailure on_failure, const std::function<void()>& fill,
                   const std::function<core::Status(core::Transport&)>& collective, float* data, int64_t count) override {
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

  void Completed(const std::vector<int>& group, int64_t step, const float* data, int64_t count) override {
    kept_.assign(data, data + count);
    kept_step_ = step;
    kept_code_ = AttemptCode(group, step);
    if (attempt_.active) End(true, data, count);
  }

  void Attempting(const std::vector<int>& group, int64_t step) override { Begin(step, group); }

  core::Result<bool> Settle(const std::vector<int>& group, int64_t step, float* data, int64_t count) override {
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

  std::unique_ptr<core::Transport> Guard(const std::vector<int>& group) override {
    return std::make_unique<core::GroupGuard>(w_.t, group, w_.entry.sc.deploy.collective_timeout_s, generations_);
  }
  core::Status DropDead(std::vector<int>* group, int64_t step, core::OnFailure on_failure, const core::Status& why) override {
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

  void Vote(const std::vector<int>& group, float* slots) override {
    for (int r : w_.t.Members()) {
      // A worker the scenario's leave and join faults move comes in by them (BeginRound), not by votes.
      if (!std::binary_search(group.begin(), group.end(), r) && !Scheduled(r)) slots[r] = 1.0f;
    }
  }
  void CountVotes(const std::vector<int>& group, const float* slots) override {
    for (int r = 0; r < w_.entry.num_workers; ++r) {
      if (slots[r] > 0 && !std::binary_search(group.begin(), group.end(), r)) pending_.push_back(r);
    }
  }

  core::Result<Welcome> AwaitWelcome() override {
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
  void SetGroup(std::vector<int> group) override { group_ = std::move(group); }
  int64_t failures() const override { return failures_; }
  void set_failures(int64_t failures) override { failures_ = failures; }

 private:
  // Settling (Settle): a member whose attempt at a collective failed sends every live member a
  // notice naming the attempt (its step and its group's code) and waits for each one's answer about
  // that attempt: completed, with the result, or not. Notices and answers carry the step in their
  // tags and the attempt in their bytes, so that members whose views of the group differ (and so
  // made different attempts) still hear each other.
  struct Notice {
    int64_t step;
    uint64_t code;
  };
  struct AnswerHeader {
    int64_t step;
    uint64_t code;
    int64_t completed;  // 1: the result follows
  };
  // An attempt's code: its group's, and the coordinator's view count at its step.
  uint64_t AttemptCode(const std::vector<int>& group, int64_t step) const {
    const uint64_t epoch = step == epoch_step_ ? static_cast<uint64_t>(epoch_) : 0;
    return (GroupCode(group) ^ (epoch * 0x9e3779b97f4a7c15ull)) * 1099511628211ull;
  }
  static uint64_t GroupCode(const std::vector<int>& group) {
    uint64_t code = 14695981039346656037ull;  // FNV-1a over the members
    for (int r : group) code = (code ^ static_cast<uint64_t>(r + 1)) * 1099511628211ull;
    return code;
  }
  int NoticeTag(int64_t step) const { return SettleTag(kTagSettleNotice, step); }
  int ViewTag(int64_t step) const { return SettleTag(core::tags::kSettleView, step); }
  // Settling's tags: the step alone (what they are about is in their bytes).
  int SettleTag(int base, int64_t step) const {
    return core::tags::kLiveBase + static_cast<int>(LiveKey(step, 0) * core::tags::kAlgorithmEnd) + base;
  }

  // Worker r's current process (as this one has heard it) is the member from now on.
  void TakeProcessOf(int r) {
    generations_[static_cast<size_t>(r)] = w_.t.Generation(r);
    was_member_[static_cast<size_t>(r)] = true;
  }

  // A restarted worker that waits for its welcome has made no attempt at any collective: members
  // that counted it in their group (its welcome went astray: the leader had not heard this process
  // yet) and settle a failed attempt hear so at once, instead of waiting deploy.collective_timeout_s
  // for its answer. Its notices carry the step in their tags, which it does not know: every step's.
  void AnswerUnwelcomed() {
    for (int64_t key = 0; key < core::tags::kLiveSteps; ++key) {
      TakeNotices(key, [this](int from, const Notice& n) { Send(from, {n.step, n.code, 0}, nullptr, 0); });
    }
  }
  // Calls `on_notice(sender, notice)` for each notice queued under the tag of `step`.
  template <typename Fn>
  void TakeNotices(int64_t step, Fn&& on_notice) {
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

  // The votes that name a joiner may come before its hello (they ride the data plane, the hello the
  // control plane, and its hello goes to each member on its own), and a member that started a moment
  // ago votes for the processes its rendezvous table lists until it finds them dead. A member that
  // took the joiner's generation before hearing its new process would hold the previous one's: it
  // would see the new process as a replacement at the first collective and fail that alone, while
  // the others wait for it. A leader that welcomed it then sent the welcome to the dead process
  // (lost), and the new one never heard it. So each member, the leader before it welcomes, waits
  // for the hello of a process other than the one the joiner was when last a member here,
  // answering settling members meanwhile, for at most deploy.timeout_s (a joiner with no new
  // process is then lost at the collective, at every member, and dropped).
  // Whether the scenario's leave and join faults move worker `r` at all.
  bool Scheduled(int r) const {
    for (const auto& f : w_.entry.sc.faults) {
      if ((f.kind == core::FaultKind::kLeave || f.kind == core::FaultKind::kJoin) && f.worker == r) return true;
    }
    return false;
  }
  // Whether the scenario's schedule had `r` out before `step` and has it back then: the same process
  // returns, not a new one.
  bool ScheduledBack(int r, int64_t step) const {
    if (!scheduled_.Alive(r, step)) return false;
    for (int64_t s = 0; s < step; ++s) {
      if (!scheduled_.Alive(r, s)) return true;
    }
    return false;
  }
  void AwaitJoiners(int64_t start_step) {
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

  // The coordinator's view of the group for the repeat of attempt `attempt` at `step` (and its view
  // count, into *epoch); PeerUnavailable if the coordinator is lost first.
  core::Result<std::vector<int>> AwaitView(int coordinator, int64_t step, uint64_t attempt, int64_t* epoch) {
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
  int AnswerTag(int64_t step) const { return SettleTag(kTagSettleResult, step); }

  void Send(int dst, const AnswerHeader& h, const float* data, int64_t count) {
    std::vector<uint8_t> out(sizeof h + (h.completed != 0 ? static_cast<size_t>(count) * sizeof(float) : 0));
    std::memcpy(out.data(), &h, sizeof h);
    if (h.completed != 0) std::memcpy(out.data() + sizeof h, data, static_cast<size_t>(count) * sizeof(float));
    (void)w_.t.Send(dst, AnswerTag(h.step), out.data(), out.size());  // a member gone needs no answer
  }

  // The attempt this worker is making now: a notice about it waits for its end.
  void Begin(int64_t step, const std::vector<int>& group) {
    Purge(step);
    const uint64_t code = AttemptCode(group, step);
    // A member's notice that it failed this attempt came before this worker began it (answered
    // then as not completed): waiting for that member's pieces would wait for
    // deploy.collective_timeout_s while the member waits for a view, so the attempt is settled now.
    const bool failed = std::find(refused_.begin(), refused_.end(), std::make_pair(step, code)) != refused_.end();
    attempt_ = {true, step, code, {}, failed};
  }

  // An attempt this worker gave up: the pieces of it queued here, and those that arrive late (from a
  // member that sent them before it failed, or a process that has died since), are dropped — before
  // each later attempt, for half the tags' step range — so that none meets a receive kLiveSteps
  // steps on, whose tag (step modulo kLiveSteps, the same group and view) would be the same.
  void Abandon(int64_t step, uint64_t code) {
    if (std::find(abandoned_.begin(), abandoned_.end(), std::make_pair(step, code)) == abandoned_.end()) {
      abandoned_.emplace_back(step, code);
    }
    Purge(step);
  }
  // A restarted process drops, for its first kLiveSteps / 4 steps, whatever came under the tags of
  // the kLiveSteps / 2 steps before it joined: attempts it never made, whose pieces a member still
  // making one sent to it once it had replaced the member's old process (core::GroupGuard refuses
  // such sends; this catches one that raced the replacement). Nothing of its own is among them: it
  // takes part from the step it joined at, and its tags kLiveSteps / 4 steps on are not theirs yet.
  void Purge(int64_t step) {
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
  void End(bool completed, const float* data, int64_t count) {
    for (int r : attempt_.deferred) Send(r, {attempt_.step, attempt_.code, completed ? 1 : 0}, data, count);
    attempt_ = {};
  }

  // Answers the notices of members settling an attempt: with the kept result if it is the last
  // collective this worker completed; not completed if this worker is not making it now (it failed
  // it, or never made it: its view differed); after its end if it is the one in progress. Before
  // each step, while a collective waits, and while settling step `settling` (notices about it too).
  void Answer(int64_t settling = -1) {
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

  static constexpr int kTagSettleNotice = core::tags::kSettleNotice;
  static constexpr int kTagSettleResult = core::tags::kSettleResult;
  // The scenario's leave and join faults, which every process follows as the emulator does (its
  // crash faults are real deaths: CrashLayer in tools/deploy_command.cc).
  static std::vector<core::FaultSpec> ScheduledFaults(const std::vector<core::FaultSpec>& faults) {
    std::vector<core::FaultSpec> out;
    for (const auto& f : faults) {
      if (f.kind == core::FaultKind::kLeave || f.kind == core::FaultKind::kJoin) out.push_back(f);
    }
    return out;
  }

  WorkerContext& w_;
  const FaultPlan scheduled_;
  std::set<int> left_by_schedule_;  // workers out by a scheduled leave (or join), their process the same
  std::vector<int> group_;    // this round's members
  std::vector<int> pending_;  // joiners of the next round, from the votes
  // The generation of each worker's process when it became a member (a restart is a new member).
  std::vector<int64_t> generations_;
  std::vector<bool> was_member_;  // whether each worker was a member here before
  int64_t failures_ = 0;  // collectives that failed so far (checkpoints keep it; no tag depends on it)
  // The result of the last collective this worker completed, for members whose attempt failed.
  std::vector<float> kept_;
  int64_t kept_step_ = -1;
  uint64_t kept_code_ = 0;
  struct Attempt {
    bool active = false;
    int64_t step = -1;
    uint64_t code = 0;
    std::vector<int> deferred;  // members whose notice about it waits for its end
    bool abandoned = false;     // a member said it failed this attempt
  } attempt_;
  // Views the coordinator gave at step epoch_step_ (each repeat of a collective after one).
  int64_t epoch_step_ = -1, epoch_ = 0;
  std::vector<std::pair<int64_t, uint64_t>> abandoned_;  // (step, code) of attempts given up, recent ones
  std::vector<std::pair<int64_t, uint64_t>> refused_;    // (step, code) of attempts a notice said failed
  int64_t joined_step_ = -1;  // a restarted process: the step it was welcomed at
};

}  // namespace

std::unique_ptr<Roster> Roster::Create(WorkerContext& w) {
  if (w.entry.opt.membership == Membership::kLive) return std::make_unique<LiveRoster>(w);
  if (w.entry.opt.membership == Membership::kReplay) return std::make_unique<ReplayRoster>(w);
  return std::make_unique<ScriptedRoster>(w);
}

}  // namespace narrows::trainer
