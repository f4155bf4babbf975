// The planner's steps that `narrows plan` (tools/cli/plan_command.cc) and its decision
// (tools/cli/plan_decision.cc) share: an entry's prediction by its algorithm's plug-in, a model size
// given on the command line, and the scenario with its bandwidths scaled. Pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/scenario.h"
#include "core/status.h"
#include "trainer/algorithms/plan.h"

namespace narrows::tools {

// The entry's rows (its plug-in's prediction) for workload `w` at `flops` FLOP/s per worker; none
// if its algorithm predicts nothing.
std::vector<trainer::PlanRow> Predict(const core::Scenario& sc, const core::AlgorithmSpec& a, const trainer::Workload& w,
                                      double flops);

// The scenario with every link's bandwidth multiplied by `k`, on the analytic model.
core::Scenario ScaledBandwidth(core::Scenario sc, double k);

// --params: a count ("7e9") or a preset (1B, 10B, 405B).
core::Result<double> ParamCount(const std::string& text);

}  // namespace narrows::tools
