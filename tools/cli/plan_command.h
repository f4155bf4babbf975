// `narrows plan`: the capacity planner. Predicts wall-clock time and compute utilisation of a
// scenario's entries (each algorithm's own prediction, trainer/algorithms/plugin.h; a streaming
// variant of DiLoCo when asked) without training anything,
// for the scenario's model or for any size up to hundreds of billions of parameters, and the
// bandwidth each needs for a given compute utilisation. The compute and communication model is
// that of "Scaling Laws for DiLoCo" (arXiv 2503.09799, App. A), made explicit in docs/planner.md;
// all-reduce times come from the scenario's network model (sim/), so that `plan` agrees with
// `narrows run` where both can run.
#pragma once

#include <array>
#include <map>
#include <string>
#include <vector>

#include "core/scenario.h"
#include "core/status.h"
#include "tools/cli/fit_command.h"

namespace narrows::tools {

struct PlanOptions {
  std::string params;        // "" (the scenario's model), a count ("7e9"), or a preset: 1B, 10B, 405B
  double tokens = 0;         // tokens to train on, all workers together (0: the scenario's steps)
  double global_batch_tokens = 0;  // tokens per optimiser step over all workers (0: the scenario's)
  double flops = 0;          // sustained FLOP/s of one worker (0: compute.device_flops)
  // More entries to plan beside the scenario's, each as a compare: item ("diloco-h100",
  // "{algorithm: streaming-diloco, fragments: 4, outer_gradient: int4}"), read by its algorithm.
  std::vector<std::string> entries;
  bool bandwidths = true;    // search each row's bandwidth for 50-99% compute utilisation
  std::string output;        // the folder plan.json goes to ("": the scenario's run folder)
};

struct PlanRow {
  std::string name;
  double time_s = 0, compute_s = 0, bytes_per_worker = 0;
  int64_t syncs = 0;
  // Compute utilisation (percent) -> access-link bandwidth in bit/s reaching it (infinity: never).
  std::map<int, double> bandwidth_for;
  std::string note;  // what the prediction assumes where the run may differ
};
struct Plan {
  double params = 0, flops_per_token = 0, tokens = 0, batch_tokens = 0, flops_per_worker = 0;
  std::string label;
  std::vector<PlanRow> rows;
  std::vector<std::string> unpredicted;  // "name (algorithm)" of entries whose algorithm predicts nothing
};
core::Result<Plan> MakePlan(const core::Scenario& scenario, const PlanOptions& options);

// `collective: auto`: the entry with the collective the planner predicts fastest for it (its own
// prediction, the scenario's network and compute.device_flops) among ring, two-phase, tree and star,
// in that order on ties (a sparse format all-gathers whichever); `collective_auto` set. The ring if
// its algorithm predicts nothing.
core::AlgorithmSpec ChooseCollective(const core::Scenario& scenario, const core::AlgorithmSpec& entry);

// What of the scenario the planner does not model (faults, a bandwidth schedule), one line each;
// printed by `plan` as "left out" and written to plan.json's `left_out`.
std::vector<std::string> PlannerLeavesOut(const core::Scenario& scenario);
// MakePlan, printed as a table and written to <output.dir>/<name>/plan.json.
core::Status PlanScenario(const core::Scenario& scenario, const PlanOptions& options);

// The decision (`narrows plan SCENARIO --fit SWEEP`): for a target model size, token budget and
// the scenario's network, every fitted entry's predicted loss (its L(N, M) law from the sweep's
// final losses, tools/cli/fit.h) and wall-clock (the planner) at each number of workers; the frontier
// of loss against time; and per number of workers the break-even bandwidth below which DiLoCo
// (any entry that is not DDP) reaches DDP's predicted loss sooner than DDP. Equal loss is reached
// by the model size N' at which the entry's law predicts DDP's loss, trained at the sweep's tokens
// per parameter (the compute-optimal setting the laws were fitted in); N' < N where the entry's
// loss is lower, and then it is ahead at every bandwidth.
struct DecideOptions {
  std::string params;        // N: as PlanOptions::params ("": the scenario's model)
  double tokens = 0;         // D (0: the fits' tokens per parameter times N)
  std::vector<int> workers;  // M values (empty: those the fits span)
  double flops = 0;          // per worker (0: compute.device_flops)
};
struct DecisionRow {
  std::string entry, algorithm;
  int workers = 0;
  double loss = 0, loss_lo = 0, loss_hi = 0;  // the law's prediction and its 95% prediction interval
  bool extrapolated = false;                   // N or M outside the points the law was fitted on
  double time_s = 0, compute_s = 0, bytes_per_worker = 0;
  bool frontier = false;  // no other row is both faster and lower in loss
};
struct BreakEven {
  int workers = 0;
  std::string entry;              // the non-DDP entry with the highest break-even at this M
  double equal_loss_params = 0;   // N'
  double bandwidth_bps = 0;       // below it the entry is sooner (infinity: at every bandwidth; 0: never)
  // Predicted times against the access links' bandwidth: (bandwidth, DDP at N, the entry at N').
  std::vector<std::array<double, 3>> curve;
};
struct Decision {
  double params = 0, tokens = 0, tokens_per_param = 0;
  std::string baseline;  // the DDP entry
  std::vector<DecisionRow> rows;
  std::vector<BreakEven> break_even;
  std::vector<std::string> notes;
};
// `entries` are the sweep's (their names key `fits`); `tokens_per_param` the sweep's.
core::Result<Decision> Decide(const core::Scenario& scenario, const std::vector<EntryFit>& fits,
                              const std::vector<core::AlgorithmSpec>& entries, double tokens_per_param,
                              const DecideOptions& options);
// Decide on the fits of `sweep_dir`, printed and written to <output.dir>/<name>/decision.json and
// decision.html (the frontier and the break-even curves as charts).
core::Status DecideScenario(const core::Scenario& scenario, const std::string& sweep_dir, const DecideOptions& options);

}  // namespace narrows::tools
