// Network model plug-ins: a model is one file in sim/ that reads its own block of the scenario
// (`network.<name>`), builds itself over the scenario's topology, and registers both under its
// name with NARROWS_REGISTER_NETWORK_MODEL. The build lists the files (NARROWS_NETWORK_MODELS in
// sim/CMakeLists.txt) and generates a reference to each, so that a static link keeps them all.
// Registration happens at static initialisation; lookups afterwards are read-only and thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/block_plugins.h"
#include "sim/network_model.h"

namespace narrows::core {
struct Scenario;
}

namespace narrows::sim {

struct NetworkModelPlugin {
  core::BlockParser parser;
  // The model over `topology`, from the scenario (sc.network.model_options are this model's).
  std::function<std::unique_ptr<NetworkModel>(Topology topology, const core::Scenario& sc)> make;
};

// Registers `plugin` (its parser with core's registry too); returns true for the macro below.
bool RegisterNetworkModel(NetworkModelPlugin plugin);
// The plug-in named `name`, or null.
const NetworkModelPlugin* FindNetworkModel(const std::string& name);
// Every registered plug-in, by name.
std::vector<const NetworkModelPlugin*> RegisteredNetworkModels();

}  // namespace narrows::sim

// In a model's file, at namespace scope: `id` is the file's stem, as listed in NARROWS_NETWORK_MODELS.
#define NARROWS_REGISTER_NETWORK_MODEL(id, ...) \
  extern const bool kNetworkModelRegistered_##id; \
  const bool kNetworkModelRegistered_##id = ::narrows::sim::RegisterNetworkModel(__VA_ARGS__)
