// Algorithm: what one worker of a training algorithm does, over the shared WorkerContext. Two kinds:
// an Algorithm that owns its loop (Run: asynchronous outer updates), and a RoundAlgorithm whose
// loop is the driver's.
//
// RunRounds (the driver) owns a RoundAlgorithm's loop: it cuts training into rounds of RoundSteps() steps, asks
// the worker's Roster who takes part in each, sends a joiner the algorithm's SharedState from a
// member (after Finish, so nothing is in flight), records leaves and crashes, calls Step for each
// step this worker trains and EndRound for a member at the round's end, writes checkpoints, and
// calls Finish after the last round. It also keeps the worker's peak bytes per round (the most it
// sent between two synchronisations: the peak bandwidth the algorithm asks of the network). An
// algorithm fills in those calls and never asks whether it runs under the emulator or over a real
// network.
//
// Adding one: plugin.h. Internal to trainer/ (LibTorch). One instance per worker thread.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/algorithms/plugin.h"
#include "trainer/worker.h"

namespace narrows::trainer {

// State a joining worker receives from a member (and a checkpoint keeps): named flat tensors, and
// one counter sent along (an optimiser's step count).
// Whether a joining worker still holds the inner optimiser state of its own training.
enum class InnerState { kKept, kLost };

struct SharedState {
  std::vector<std::pair<std::string, torch::Tensor*>> tensors;
  int64_t* counter = nullptr;  // none: null
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // The whole training of this worker.
  virtual core::Status Run(WorkerContext& w) = 0;
};

class RoundAlgorithm;
// The whole training of worker `w` with `algorithm` (the driver described above).
core::Status RunRounds(WorkerContext& w, RoundAlgorithm& algorithm);

class RoundAlgorithm : public Algorithm {
 public:
  core::Status Run(WorkerContext& w) final {
    NARROWS_RETURN_IF_ERROR(Prepare());
    return RunRounds(w, *this);
  }

  // Before the first round, on every worker (DiPaCo: routing the documents to paths).
  virtual core::Status Prepare() { return core::Status::Ok(); }

  // Steps between two synchronisations: the roster is asked once per round.
  virtual int64_t RoundSteps() const = 0;
  // What a joiner receives; the tensors' current values are sent (and overwritten on the joiner).
  virtual SharedState Shared() = 0;
  // On a joiner, after it received Shared() before the round starting at `step`. kLost: it has no
  // inner optimiser state of its own (never trained, crashed, or a restarted process).
  virtual void OnJoin(int64_t step, InnerState inner) = 0;
  // One step this worker trains, in `round` (DDP: the whole synchronous step, its all-reduce
  // included; `round->members` shrinks if members die).
  virtual core::Status Step(Round* round, int64_t step) = 0;
  // A member's end of the round (DiLoCo: the outer step).
  virtual core::Status EndRound(Round* /*round*/) { return core::Status::Ok(); }
  // Completes what is still in flight (Streaming DiLoCo's overlapped all-reduce): after the last
  // round, and on a member before it sends Shared() to joiners, so that they get settled state.
  virtual core::Status Finish() { return core::Status::Ok(); }

  // Whether communication started in one round may still send in the next (Streaming DiLoCo with
  // tau > 0). Such an algorithm counts each synchronisation's bytes itself (WorkerContext::
  // CountSyncBytes); for the others the driver counts the bytes sent within each round.
  virtual bool OverlapsRounds() const { return false; }

  // Live checkpoints (deploy.checkpoint_every): whether this algorithm writes them, and the state
  // beyond Shared() and the replica that a resumed worker needs (as text).
  // Before a checkpoint the driver calls Finish, so that nothing is in flight; an algorithm whose
  // numbers that would change (an overlapped merge still to come) does not checkpoint.
  virtual bool Checkpoints() const { return false; }
  virtual std::string SaveExtra() const { return ""; }
  virtual core::Status RestoreExtra(const std::string& /*text*/) { return core::Status::Ok(); }
  // This worker's own state that joiners do not receive but a resumed worker needs (error-feedback
  // residuals, eager's last pseudo-gradients): named flat float tensors, of any size, given back in
  // the same order.
  using OwnState = std::vector<std::pair<std::string, torch::Tensor>>;
  virtual OwnState SaveOwn() const { return {}; }
  virtual core::Status RestoreOwn(const OwnState& state) {
    return state.empty() ? core::Status::Ok()
                         : core::Status::InvalidArgument("checkpoint: state " + state.front().first + " of another algorithm");
  }
};

// Error-feedback residuals (core::EncodingResiduals) in a checkpoint: `prefix`.sent and .owned.
void SaveResiduals(const std::string& prefix, const core::EncodingResiduals& r, RoundAlgorithm::OwnState* out);
// Reads them back from state[*at], state[*at + 1] (advancing *at); InvalidArgument if they are not there.
core::Status RestoreResiduals(const std::string& prefix, const RoundAlgorithm::OwnState& state, size_t* at,
                              core::EncodingResiduals* r);
// Copies state[*at], which must be named `name` and hold into->numel() values, into `*into`
// (advancing *at).
core::Status RestoreOwnTensor(const std::string& name, const RoundAlgorithm::OwnState& state, size_t* at,
                              torch::Tensor* into);

// The algorithm named by the entry (x.algo.algorithm, a registered plug-in), for worker `w`.
std::unique_ptr<Algorithm> MakeAlgorithm(WorkerContext& w);

}  // namespace narrows::trainer
