// `narrows sweep`: a scenario over the cross product of `--grid key=v1,v2,...` axes, each point a
// `narrows run` in its own folder. Resumable: points whose folder holds every entry's results under
// the same scenario (core/result_record.h) are skipped; a point's folder of another scenario stops
// the sweep before anything runs, unless --force. Writes <output.dir>/<name>-sweep/results.csv (one row per point and entry) and prints
// DiLoCo's wall-clock speed-up over DDP for each point.
#pragma once

#include <string>
#include <vector>

#include "core/scenario.h"
#include "core/status.h"
#include "tools/cli/run_folders.h"

namespace narrows::tools {

struct SweepAxis {
  std::string key;
  std::vector<std::string> values;  // YAML values, as for --set
};
// "network.profile=home-100m,internet-1g" -> an axis. Commas inside [...] or {...} do not split.
core::Result<SweepAxis> ParseAxis(const std::string& text);

// Every point of the axes' cross product, as one value index per axis (the last axis fastest).
std::vector<std::vector<size_t>> CrossProduct(const std::vector<SweepAxis>& axes);
// A point's folder name: its keys' last parts and values ("lr-0.001_count-4"), made file-name safe.
std::string Slug(const std::vector<SweepAxis>& axes, const std::vector<size_t>& at);

struct SweepOptions {
  std::string scenario_file;
  std::vector<std::string> sets;
  std::vector<SweepAxis> axes;
  bool quiet = false;
  bool report = false;  // write <sweep folder>/report.html at the end
  std::string data_root;
  std::string output;   // the sweep folder ("" = <output.dir>/<name>-sweep)
  // Points run at once, each a `narrows run` process of its own (its table in <point>.log); where the
  // scenario's threads is 0 (all cores), each gets cores / jobs threads.
  int jobs = 1;
  // A point's folder holding another scenario's results refuses the whole sweep before anything
  // runs; kReplace (--force) runs every point again.
  OnOtherScenario existing = OnOtherScenario::kRefuse;
  // Where every axis is a network key and compute is modelled, the first point trains and the others
  // are timed with its losses (RunOptions::retime_from), entry by entry where the entry allows it;
  // false (--no-retime) trains every point.
  bool retime = true;
  // Runs this one point of the grid (0-based, the grid's order) in this process and nothing else: what
  // each task of the Slurm job array does. -1: the whole sweep.
  int point = -1;
  // Slurm (tools/cli/sweep_slurm.cc): `submit` sends the unfinished points as one job array (sbatch
  // --array; --jobs caps how many run at once) and returns; the same command again, or `gather`,
  // waits for them and writes the table. A point that did not finish is named by `gather` and sent
  // again by `submit`.
  struct Slurm {
    bool submit = false;
    bool gather = false;
    std::string partition;  // sbatch --partition ("" = the cluster's default)
    std::string time;       // sbatch --time, per point ("" = the partition's default)
    std::vector<std::string> sbatch_args;  // more of sbatch's options, as they are (--account=A, --gres=gpu:1)
    int max_running = 0;  // tasks of the array run at once (sbatch --array=...%N); 0 = as many as Slurm allows
    double poll_s = 5;  // how often squeue is asked while waiting
  } slurm;
};

core::Status RunSweep(const SweepOptions& options);

}  // namespace narrows::tools
