// `narrows fit`: the scaling fits of a sweep folder: per entry, L(N, M) from each point's final
// validation loss, its model's parameter count and its workers (tools/fit.h).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "tools/fit.h"

namespace narrows::tools {

// Entries with too few points are left out, with why.
struct EntryFit {
  std::string entry;
  std::vector<ScalingPoint> points;
  PowerLawFit fit;
  std::string skipped;  // why there is no fit, or ""
  int seeds = 1;        // points run over several seeds: each seed's loss is a point
};
core::Result<std::vector<EntryFit>> FitSweep(const std::string& sweep_dir);
// The fits as a table on stdout.
core::Status PrintFits(const std::string& sweep_dir);

}  // namespace narrows::tools
