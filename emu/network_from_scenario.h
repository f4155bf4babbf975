// Builds the network model a scenario describes: its topology (star or islands), per-worker link
// overrides, bandwidth schedules and link_down faults (bandwidth 0 over an interval).
#pragma once

#include <memory>

#include "core/scenario.h"
#include "sim/network_model.h"

namespace narrows::emu {

sim::Topology TopologyFromScenario(const core::Scenario& scenario);
std::unique_ptr<sim::NetworkModel> NetworkFromScenario(const core::Scenario& scenario);

}  // namespace narrows::emu
