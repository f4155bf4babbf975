// Roster: the membership of a run — who trains and who synchronises, round by round. It is the one
// thing that differs between a worker under the emulator and one over a real network, so that an
// algorithm never asks which.
//
//   ScriptedRoster  the scenario's faults (FaultPlan), known in advance to every worker: a
//                   leaving worker stops, a joining one receives the state of a member.
//   ReplayRoster    a deployment's membership trace (ExperimentOptions::trace) in the emulator:
//                   each round's members and joiners are the trace's; a worker present at a
//                   round's start but not among its members left in it (its work is lost), and
//                   comes back as a restarted process: inner state lost, data stream moved on.
//   LiveRoster      the transport's heartbeats (a deployment): collectives run through a
//                   core::GroupGuard; when a member dies the survivors drop it and repeat the
//                   collective; a restarted process votes itself in and is welcomed by the
//                   leader at the next round; crash faults are injected by the deployment
//                   (ExperimentOptions::before_step).
//
// A round is the steps between two synchronisations of the algorithm ([start, end): one step for
// DDP, H for DiLoCo). Every worker calls BeginRound and EndRound for every round, in order.
// Not thread-safe: one per worker.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/scenario.h"
#include "core/status.h"
#include "core/tags.h"
#include "core/transport.h"

namespace narrows::trainer {

struct WorkerContext;

struct Round {
  int64_t start = 0, end = 0;
  std::vector<int> members;  // who synchronises at the end of the round, ascending
  std::vector<int> joiners;  // who receive the shared state from `root` before the round
  int root = -1;
  bool Member(int rank) const;
  bool Joining(int rank) const;
};

// Live: what a restarted worker learns from the leader that welcomes it.
struct Welcome {
  int root = -1;  // the leader, who sends the shared state
  int64_t step = 0;
  std::vector<int> group, joiners;
};

class Roster {
 public:
  virtual ~Roster() = default;
  // Scripted from `plan` (the emulator), or live from the transport (a deployment).
  static std::unique_ptr<Roster> Create(WorkerContext& w);

  virtual bool live() const = 0;
  // Who takes part in [start, end). Live: the leader first welcomes the joiners the last round's
  // votes named (the driver then sends them the shared state).
  virtual core::Status BeginRound(int64_t start, int64_t end, Round* round) = 0;
  // After the round (every worker): the members as they ended it.
  virtual void EndRound(const Round& round) = 0;
  // Whether this worker trains in a round that starts at `start` (scripted: alive then).
  virtual bool Present(int64_t start) = 0;
  // Whether this worker trains `step` (scripted: still alive; live: yes, after the deployment's
  // fault layer had its say, which may end the process).
  virtual bool Trains(int64_t step) = 0;
  // This worker's leaves and crashes among the steps of [start, end): (step, crashed). Scripted.
  virtual std::vector<std::pair<int64_t, bool>> Departures(int64_t start, int64_t end) = 0;
  // Whether a worker that lost its state comes back as a new process does — its data stream from
  // the start, counted up to the step it joins at, its per-worker decisions afresh — as in a replay
  // of a deployment, rather than taking up its stream where it left it (the scenario's faults).
  virtual bool RestartsLostWorkers() const = 0;
  // Replay: this worker's inner steps for the round after the one ending at `round_end`, as the
  // deployment's leader recorded them (DyLU); nothing where none were recorded or not a replay.
  virtual std::optional<int64_t> RecordedInnerSteps(int64_t round_end) const = 0;
  // Replay: whether the deployment's collective at `step` failed and was repeated without the dead.
  virtual bool RecordedRepeat(int64_t step) const = 0;

  // Tag of collective `base` at `step` over `group`: live tags carry the step and a code of the
  // group, so that a repeated collective (always over fewer members) never reads a message of the
  // attempt that failed, nor one of another step, and two survivors whose views of the group differ
  // for a while (one saw a second death the other has not yet) do not read each other's messages;
  // once their views agree, so do their tags, whatever path each took there.
  virtual int Tag(int base, int64_t step, const std::vector<int>& group) const = 0;
  // Runs `collective` over `*group` (through a guard where members may die) after `fill`; its result
  // is `count` floats at `data`. Live: when it fails, the survivors first settle (Settle): if any of
  // them completed it, the others take that result; if none did, they drop the dead (a crash event)
  // and run it again, filling first. An error if this worker was dropped or may not continue
  // (`on_failure` kStop).
  virtual core::Status Run(std::vector<int>* group, int64_t step, core::OnFailure on_failure, const std::function<void()>& fill,
                           const std::function<core::Status(core::Transport&)>& collective, float* data,
                           int64_t count) = 0;
  // Live, for collectives started by hand (Guard): `count` floats at `data` are the result of the
  // collective of `group` at `step`, which this worker completed; it keeps a copy to give a member
  // whose own attempt failed (a peer that died after its last message to this worker, but before
  // its last to another, leaves one member with the whole result and another with none).
  virtual void Completed(const std::vector<int>& group, int64_t step, const float* data, int64_t count) = 0;
  // Live, for collectives started by hand: this worker starts the collective of `group` at `step`
  // (until Completed or Settle, a member settling it waits for this worker's outcome).
  virtual void Attempting(const std::vector<int>& group, int64_t step) = 0;
  // Live, after this worker's attempt at the collective of `group` at `step` failed: tells every
  // live member so and hears from each whether its own attempt failed too or completed (then with
  // the result, into `data`). True: a member completed it and `data` holds its result, so the
  // collective counts as done by the whole group; false: every live member failed, and they all
  // drop the dead (DropDead) and repeat it. Either way every live member decides alike.
  virtual core::Result<bool> Settle(const std::vector<int>& group, int64_t step, float* data, int64_t count) = 0;
  // The transport for collectives started by hand over `group`: a guard when live; nullptr when the
  // worker's own transport serves.
  virtual std::unique_ptr<core::Transport> Guard(const std::vector<int>& group) = 0;
  // After a hand-started collective over `*group` failed with `why`: as Run does between attempts.
  virtual core::Status DropDead(std::vector<int>* group, int64_t step, core::OnFailure on_failure, const core::Status& why) = 0;

  // Join votes, one float slot per worker carried in a round's all-reduce: a member writes 1 for each
  // live worker outside `group`; the summed slots name the joiners of the next round.
  virtual void Vote(const std::vector<int>& group, float* slots) = 0;
  virtual void CountVotes(const std::vector<int>& group, const float* slots) = 0;

  // Live: a restarted worker waits for the leader of the next round to welcome it.
  virtual core::Result<Welcome> AwaitWelcome() = 0;
  // Live: start from a checkpoint's (or a welcome's) group.
  virtual void SetGroup(std::vector<int> group) = 0;
  virtual int64_t failures() const = 0;
  virtual void set_failures(int64_t failures) = 0;

  static constexpr int kTagWelcome = core::tags::kWelcome;
};

}  // namespace narrows::trainer
