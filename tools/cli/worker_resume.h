// Where a worker group started again as a whole goes on from: torchrun's elastic agent restarts
// every worker when one fails (--max-restarts), with the same command line, and the workers find
// the run's newest complete checkpoint themselves, as a PyTorch training script under torchelastic
// does. `narrows worker --resume latest` asks for the same by hand.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/scenario.h"
#include "core/status.h"

namespace narrows::tools {

struct ResumePoint {
  std::vector<std::string> finished;  // entries whose results the run folder's summary.json holds
  std::string entry;                  // the first entry of compare: not among them ("" = none left)
  std::string checkpoint;             // its newest complete checkpoint folder ("" = none: it starts again)
};

// From <run_dir>: summary.json and <entry>/checkpoints/step-N/rank-R.ckpt. A checkpoint is complete
// where every rank of `world` wrote its file (or, for an entry whose checkpoints hold rank 0's file
// alone, as async DiLoCo's server, where rank 0 did).
ResumePoint LatestResumePoint(const core::Scenario& sc, const std::string& run_dir, int world);

// TORCHELASTIC_RESTART_COUNT: how many times torchrun has started this worker group again (0 at
// first, and without torchrun).
int ElasticRestarts(const std::map<std::string, std::string>& env);
// TORCHELASTIC_MAX_RESTARTS: how many restarts torchrun's agent allows (0 without torchrun).
int ElasticMaxRestarts(const std::map<std::string, std::string>& env);

}  // namespace narrows::tools
