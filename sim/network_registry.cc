#include "sim/network_registry.h"

#include <map>

#include "core/check.h"

namespace narrows::sim {

bool NetworkModelsLinked();  // network_models_linked.cc (generated)

namespace {

std::map<std::string, NetworkModelPlugin>& Plugins() {
  static std::map<std::string, NetworkModelPlugin> plugins;
  return plugins;
}

}  // namespace

bool RegisterNetworkModel(NetworkModelPlugin plugin) {
  NARROWS_CHECK(plugin.make) << "network model '" << plugin.parser.name << "' registered without make";
  core::RegisterNetworkModelParser(plugin.parser);
  const std::string name = plugin.parser.name;
  NARROWS_CHECK(Plugins().emplace(name, std::move(plugin)).second) << "network model '" << name << "' registered twice";
  return true;
}

const NetworkModelPlugin* FindNetworkModel(const std::string& name) {
  NARROWS_CHECK(NetworkModelsLinked());
  const auto it = Plugins().find(name);
  return it == Plugins().end() ? nullptr : &it->second;
}

std::vector<const NetworkModelPlugin*> RegisteredNetworkModels() {
  NARROWS_CHECK(NetworkModelsLinked());
  std::vector<const NetworkModelPlugin*> out;
  for (const auto& [name, p] : Plugins()) out.push_back(&p);
  return out;
}

}  // namespace narrows::sim
