// TrainSingle: `narrows train` — one replica trained on the scenario's data, with a run folder.
//
// The run folder `<output.dir>/<name>/` holds scenario.yaml (resolved, defaults included),
// metrics.jsonl (one JSON object per logged step) and summary.json (written atomically at the end).
// Everything the scenario names (device, data) is checked before the folder is touched, so bad
// input never clobbers an earlier run. Blocks until training ends. Torch-free header.
#pragma once

#include <cstdio>
#include <string>

#include "core/scenario.h"
#include "core/status.h"

namespace narrows::trainer {

struct TrainOptions {
  std::string data_root;          // where tools/setup put the Austen corpus ("" = DefaultDataRoot())
  std::FILE* progress = nullptr;  // progress line destination (nullptr = silent)
};

struct TrainSummary {
  std::string run_dir;
  int64_t steps = 0, tokens = 0, parameters = 0;
  double final_train_loss = 0.0, final_val_loss = 0.0, best_val_loss = 0.0;
  double final_val_bpb = -1.0;  // bits per byte, for byte-level corpora (-1 otherwise)
  double unigram_entropy = 0.0;  // nats per token of the training corpus
  double wall_time_s = 0.0, train_time_s = 0.0, tokens_per_s = 0.0;
  double flops_per_token = 0.0, achieved_flops = 0.0;
  int threads = 0;
};

core::Result<TrainSummary> TrainSingle(const core::Scenario& scenario, const TrainOptions& options);

}  // namespace narrows::trainer
