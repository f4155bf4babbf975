// `narrows fit`: the scaling fits of a sweep folder: per entry, L(N, M) from each point's final
// validation loss, its model's parameter count and its workers (tools/cli/fit.h).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "tools/cli/fit.h"
#include "tools/cli/run_folders.h"

namespace narrows::tools {

// Entries with too few points are left out, with why.
struct EntryFit {
  std::string entry;
  std::vector<ScalingPoint> points;
  PowerLawFit fit;
  std::string skipped;  // why there is no fit, or ""
  int seeds = 1;        // points run over several seeds: each seed's loss is a point
};
// `sweep_dir` may also be a CSV of points (a header naming at least params, workers, entry and
// final_val_loss; each row one seed's loss; with a `folder` column and several folders, each
// folder's entries are fitted apart as FOLDER/ENTRY): the form docs/scaling/export.py keeps in the
// repository, where run folders are not kept. An error names the file and line.
core::Result<std::vector<EntryFit>> FitSweep(const std::string& sweep_dir);
// The same for a sweep already loaded.
core::Result<std::vector<EntryFit>> FitSweep(const Sweep& sweep);
// The fits as a table on stdout.
core::Status PrintFits(const std::string& sweep_dir);

// The held-out test of the laws: per entry, L(N, M) fitted on the points below the largest model
// size, its prediction at the largest size for each M with the 95% prediction interval, against
// the measured mean over seeds with its 95% t-interval; the error is prediction / measured − 1.
struct HeldOut {
  std::string entry;
  double params = 0;
  int workers = 0;
  double predicted = 0, predicted_lo = 0, predicted_hi = 0;
  double measured = 0, measured_half_width = 0;  // NaN half-width with one seed
  int seeds = 0;
  double error = 0;  // predicted / measured − 1
};
core::Result<std::vector<HeldOut>> HoldOutLargest(const std::string& sweep_dir);
// HoldOutLargest as a table on stdout.
core::Status PrintHoldOut(const std::string& sweep_dir);

}  // namespace narrows::tools
