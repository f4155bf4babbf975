// ComputeTrace: each worker's compute per step as a run measured it (compute.trace), for the
// emulator to replay in modelled time: what the run's network would have cost with the same
// computation, or how a network model fares against a real run whose compute it is given step by
// step (a calibration from the mean leaves out the steps a host was slow in, which a synchronous
// algorithm waits for). Read from a run's entry metrics.jsonl, logged every step
// (output.log_every: 1); with compute.statistic: each there, each step's own host time. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace narrows::trainer {

struct ComputeTrace {
  // seconds[w][s]: worker w's compute in step s (0-based; the file's step s + 1).
  std::vector<std::vector<double>> seconds;
  std::string path;
};

// Reads `path` (an entry's metrics.jsonl) for a run of `workers` workers and `steps` steps:
// InvalidArgument naming the file (and line) if it cannot be read, is not one, has another number
// of workers, skips a step, or ends before `steps`.
core::Result<ComputeTrace> LoadComputeTrace(const std::string& path, int workers, int64_t steps);

}  // namespace narrows::trainer
