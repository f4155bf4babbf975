// A sweep's points resolved to scenarios: shared by the runner on this machine
// (tools/cli/sweep_command.cc) and the one that submits the points to Slurm (tools/cli/sweep_slurm.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/scenario.h"
#include "core/status.h"
#include "tools/cli/sweep_command.h"

namespace narrows::tools {

// Every point is checked before any runs: a typo in the last value fails now, not in an hour.
struct SweepPlan {
  std::string dir;
  // Per point, where only network keys set it apart from an earlier point and compute is modelled:
  // that point, whose training it takes (timed, not trained); -1 where it trains.
  std::vector<int> retime_from;
  std::vector<bool> keep_training;  // per point: others take its training
  std::string name;  // the base scenario's
  std::vector<std::vector<size_t>> points;
  std::vector<core::Scenario> scenarios;  // one per point
  std::vector<std::vector<std::string>> sets;  // one per point: the overrides that make it from the file
};

core::Result<SweepPlan> ResolveSweep(const SweepOptions& o);

// A point's run folder.
std::string PointDir(const core::Scenario& sc);
// A point's summary.json when its folder holds every entry of this very scenario (the point is
// finished).
std::optional<nlohmann::json> FinishedPoint(const core::Scenario& sc);

// Point `i` in this process, its table to stdout (what `sweep --point I` does).
core::Status RunPoint(const SweepPlan& plan, const SweepOptions& o, size_t i);

// `sweep --slurm` and `--gather`: waits for the points this sweep folder has in Slurm (slurm.json,
// squeue), then submits those unfinished as a job array (--slurm) or names them (--gather, an error).
// True when every point has finished and the table can be written.
core::Result<bool> SweepOnSlurm(const SweepPlan& plan, const SweepOptions& o);
// InvalidArgument where the folder's points went to Slurm with another grid than `o`'s (slurm.json
// names points by their place in it); checked before anything in the folder is written.
core::Status CheckSlurmGrid(const std::string& dir, const SweepOptions& o);

}  // namespace narrows::tools
