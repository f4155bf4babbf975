// `narrows run`: every entry of a scenario's compare: list, trained by emulated workers under the
// scenario's network, on the same model, data, workers and faults; a table and a run folder.
#pragma once

#include <cstdio>
#include <string>

#include "core/scenario.h"
#include "core/status.h"

namespace narrows::tools {

struct RunOptions {
  std::FILE* progress = stderr;  // nullptr = quiet
  std::string data_root;         // "" = trainer::DefaultDataRoot()
};

core::Status RunScenario(const core::Scenario& scenario, const RunOptions& options);

}  // namespace narrows::tools
