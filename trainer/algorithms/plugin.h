// An algorithm plug-in: everything narrows asks of one algorithm, registered from the algorithm's
// own file. Its parser reads and checks its block of a `compare:` entry (core/algorithm_registry.h),
// `make` builds what one worker runs (algorithm.h: round-based or owning its loop), and `plan`
// predicts an entry's time and bytes for `narrows plan` (empty: the planner says "no prediction").
//
// Adding one: trainer/algorithms/X.cc ending in
//   NARROWS_REGISTER_ALGORITHM(x, AlgorithmPlugin{...});
// and one line `x` in NARROWS_ALGORITHMS (trainer/CMakeLists.txt), which compiles the file and lists
// it in a generated file that the registry references, so that static linking keeps it. A plug-in
// outside that list (a test's) registers the same way from an object file linked directly.
// Torch-free header; the registry is filled at static initialisation and read-only afterwards.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/algorithm_registry.h"
#include "core/codec.h"
#include "trainer/algorithms/plan.h"

namespace narrows::trainer {

class Algorithm;
struct WorkerContext;

// What a deployment's events.jsonl record of an entry's membership, which `narrows replay` reads
// back: the members of every round (outer syncs: `sync` events), of every step whose collective
// lost a member (`step` events), or every push its server took, in order (`arrival` events).
enum class ReplayTrace { kRounds, kSteps, kArrivals };

// What an entry sends when `run --sizes-only` times it without training: an all-reduce of `part`
// of the parameters (in `codec`) every `every` steps and at the last step, and with `whole_every`
// > 0 one of all of them (fp32) every `whole_every` steps too, after it; or, where `gather_bytes` is
// set, instead of the all-reduce an all-gather of that many bytes from every worker to every other.
struct SizesOnlySchedule {
  int64_t every = 1;
  core::CodecSpec codec;    // fp32: the plain all-reduce
  bool outer_syncs = true;  // whether its all-reduces are outer steps (summary.json's outer_syncs)
  // The floats each all-reduce carries of a model of `params` (SPARTA's subsets); unset: all.
  std::function<int64_t(int64_t params)> part;
  int64_t whole_every = 0;  // 0: none
  // Each worker's block for a model of `model`'s shape among `workers` (DeMo's); unset: no all-gather.
  std::function<int64_t(const core::ModelSpec& model, int workers)> gather_bytes;
  // Whether each all-reduce also carries the contributor count and one vote per worker (1 + M floats).
  bool votes = false;
  // Whether every step each island of network.islands (all the workers without islands) all-reduces
  // the gradients and the loss in a ring among its members (hierarchical DiLoCo's inner steps).
  bool island_rings = false;
  // Why sizes only cannot time this entry as it would run (an option it does not model), or "".
  std::string not_modelled;
};

struct AlgorithmPlugin {
  core::AlgorithmParser parser;  // parser.name is the algorithm's name
  std::string summary;           // one line, for `narrows algorithms`
  std::function<std::unique_ptr<Algorithm>(WorkerContext&)> make;
  std::function<std::vector<PlanRow>(const PlanInputs&, const core::AlgorithmSpec&)> plan;
  // Why an entry cannot be replayed from a deployment's membership trace (Membership::kReplay), or
  // "" if it can. Unset: it cannot (its events do not record the members of every round).
  std::function<std::string(const core::AlgorithmSpec&)> replay;
  ReplayTrace replay_trace = ReplayTrace::kRounds;  // where `replay` allows it
  // Why an entry cannot be re-timed under another network from its training under one (a sweep that
  // varies only the network trains once: ExperimentOptions::timing_only, then AdoptTraining), or ""
  // if it can: what it computes must not depend on when its messages arrive, nor its messages on
  // its values. Unset: it cannot.
  std::function<std::string(const core::AlgorithmSpec&)> retime;
  // The entry's communication as `--sizes-only` runs it. Unset: not modelled there (an error).
  std::function<SizesOnlySchedule(const core::AlgorithmSpec&)> sizes_only;
  // Why real processes cannot run the entry under a scenario's scheduled leaves and joins, or "".
  // Unset: they can.
  std::function<std::string(const core::AlgorithmSpec&)> scheduled_membership;
  // Whether a scenario without `compare:` runs this algorithm's default entry (one plug-in at most).
  bool default_entry = false;
};

// Registers `plugin` here and its parser with the scenario; returns true (for the macro below).
bool RegisterAlgorithm(AlgorithmPlugin plugin);
// The plug-in named `name`, or null.
const AlgorithmPlugin* FindAlgorithm(const std::string& name);
// Every registered plug-in, by name.
std::vector<const AlgorithmPlugin*> RegisteredAlgorithms();

}  // namespace narrows::trainer

// At namespace scope of narrows::trainer, in the algorithm's file; `id` is its line in
// NARROWS_ALGORITHMS.
#define NARROWS_REGISTER_ALGORITHM(id, ...) \
  extern const bool kAlgorithmRegistered_##id; \
  const bool kAlgorithmRegistered_##id = ::narrows::trainer::RegisterAlgorithm(__VA_ARGS__)
