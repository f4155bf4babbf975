// `narrows run --sizes-only`: the scenario's entries as their communication alone, at the size of
// the scenario's model, with modelled compute and size-only messages (Transport::SendSizeOnly):
// no model, no data, no training, so no loss. What it answers: virtual time, bytes, compute
// utilisation and every link's traffic for worker counts that training cannot reach on one host.
// DDP all-reduces every step's gradients after the step (no overlap with backward); the DiLoCo
// family's `diloco` all-reduces its outer gradient every H steps, in its codec and collective.
// Other algorithms, worker faults and hierarchical collectives are refused with the reason.
#pragma once

#include <nlohmann/json.hpp>

#include "core/scenario.h"
#include "core/status.h"
#include "tools/cli/run_command.h"

namespace narrows::tools {

// Runs every entry, writes <output.dir>/<name>/summary.json ("mode": "sizes-only") and each
// entry's links.json, prints a table; returns the summary.
core::Result<nlohmann::json> RunSizesOnly(const core::Scenario& scenario, const RunOptions& options);

}  // namespace narrows::tools
