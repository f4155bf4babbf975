// `narrows tune`: a comparison on fair terms. Each entry of the scenario runs over the cross product
// of `--grid key=v1,v2,...` axes on tuning seeds; each entry's best point is chosen by its mean
// final validation loss (or, `--by time`, by its loss at the fastest run's finishing time); then the
// comparison runs with every entry at its own chosen values on fresh seeds (the scenario's seed,
// seed + 1, ...), paired as `narrows run --seeds` pairs them. An axis whose key names one entry
// (`compare.1.outer_lr`) varies that entry alone; any other axis varies every entry.
//
// Folder <output.dir>/<name>-tune/: tuning/<entry>/<point>-seed-<s>/ (the tuning runs),
// final/<entry>/seed-<s>/ (each entry's final runs), seed-<s>/ (the comparison for one seed, as a
// run folder), summary.json (the aggregate over the final seeds with a `tuning` block: the grid,
// every point's score per entry, the chosen values). Resumable: a finished run is not run again.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "tools/cli/run_folders.h"
#include "tools/cli/sweep_command.h"

namespace narrows::tools {

enum class TuneBy { kLoss, kTime };

struct TuneOptions {
  std::string scenario_file;
  std::vector<std::string> sets;  // --set overrides (and seeds=N for --seeds)
  std::vector<SweepAxis> axes;
  int tuning_seeds = 2;  // seeds scenario.seed + 1000, + 1001, ...: never among the final ones
  TuneBy by = TuneBy::kLoss;
  bool quiet = false;
  bool report = false;
  std::string data_root;
  std::string output;  // the tune folder ("" = <output.dir>/<name>-tune)
  // The tune folder holding another scenario's results is refused; kReplace (--force) empties it.
  OnOtherScenario existing = OnOtherScenario::kRefuse;
};

core::Status RunTune(const TuneOptions& options);

}  // namespace narrows::tools
