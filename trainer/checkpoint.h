// Checkpoints of a DiLoCo worker at an outer step: the global parameters and outer optimiser
// state, the worker's own parameters and inner AdamW moments, the counters that make a resumed
// run continue exactly as an uninterrupted one, and the records so far (an Experiment part).
//
// One file per worker (`rank-R.ckpt` in a `step-N` folder), so that machines without a shared file
// system each keep their own. File: magic "NRWC", version, a JSON header (counters, tensor names
// and sizes, the records), the tensors as raw float32, and a CRC-32 of everything before it.
// Written atomically (temporary file, fsync, rename); a reader rejects a truncated, foreign or
// corrupt file with a message that names it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "trainer/torch_pch.h"

namespace narrows::trainer {

struct WorkerCheckpoint {
  int rank = 0;
  int64_t step = 0;           // inner steps done: the run continues at this step
  int64_t outer_steps = 0;    // the outer optimiser's step count
  int64_t inner_steps = 0;    // the inner optimiser's step count
  int64_t failures = 0;       // collectives failed so far (part of live tags)
  std::vector<int> group;     // the members at this outer step
  double clock_s = 0.0;       // the worker's clock
  double compute_s = 0.0, comm_s = 0.0, idle_s = 0.0;
  int64_t bytes_sent = 0, bytes_received = 0;
  std::string drop_rng;       // the dropped-gradient generator's state
  std::string part;           // Experiment::ExportPart of this worker so far
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // flat float32, on any device
};

// Copies `from` (a file's tensors) into `into` (a run's, by pointer), which must name the same
// tensors in the same order, each of the same size; InvalidArgument naming `what` and the first
// mismatch otherwise, before anything is copied.
core::Status CopyByName(const std::vector<std::pair<std::string, torch::Tensor>>& from,
                        const std::vector<std::pair<std::string, torch::Tensor*>>& into, const std::string& what);

// `dir`/rank-R.ckpt for worker R.
std::string CheckpointPath(const std::string& dir, int rank);
core::Status WriteCheckpoint(const std::string& path, const WorkerCheckpoint& c);
core::Result<WorkerCheckpoint> ReadCheckpoint(const std::string& path);

// Model files (`narrows train`'s <run folder>/model.ckpt, warm starts): the same format, "params"
// first, then the inner optimiser's state (InnerOptimizer::State, by name); `step` holds the steps
// trained, `inner_steps` the optimiser's count and `clock_s` the model's validation loss.
class Replica;
core::Status WriteModelFile(const std::string& path, Replica& replica, int64_t steps, double val_loss);
// A model file, whose parameters must number `numel` (InvalidArgument otherwise). It may hold
// "params" alone (no optimiser state to continue from).
core::Result<WorkerCheckpoint> ReadModelFile(const std::string& path, int64_t numel);

}  // namespace narrows::trainer
