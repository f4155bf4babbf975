// Roster::Create and the emulator's rosters (roster.h): scripted from the scenario's faults, or
// replayed from a deployment's membership trace. The live one is LiveRoster (live_roster.h).
#include "trainer/roster.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "trainer/live_roster.h"
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

}  // namespace

std::unique_ptr<Roster> Roster::Create(WorkerContext& w) {
  if (w.entry.opt.membership == Membership::kLive) return std::make_unique<LiveRoster>(w);
  if (w.entry.opt.membership == Membership::kReplay) return std::make_unique<ReplayRoster>(w);
  return std::make_unique<ScriptedRoster>(w);
}

}  // namespace narrows::trainer
