// The network models that a scenario's `network.model` may name, as the scenario parser sees them:
// how each reads its own block (`network.<name>`, for example `network.ns3`). core names no model:
// each registers itself from its own file in sim/ (sim/network_registry.h), which also builds it.
// Registration happens at static initialisation; lookups afterwards are read-only and thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/option_reader.h"

namespace narrows::core {

struct Scenario;

// A model's own options, parsed and checked by it; read back with NetworkSpec::ModelOptions<T>().
class NetworkModelOptions {
 public:
  virtual ~NetworkModelOptions() = default;
};

struct NetworkModelParser {
  std::string name;  // the value of `network.model`
  // Reads `network.<name>` (empty when absent) from `block`, checked against the sections read
  // before `network:` (data, model, train, workers). Errors go to `block`.
  std::function<std::shared_ptr<const NetworkModelOptions>(OptionReader& block, const Scenario& sc)> parse;
};

// Adds `parser`; a second parser of the same name is a broken invariant (CHECK).
void RegisterNetworkModelParser(NetworkModelParser parser);
// The parser of `name`, or null.
const NetworkModelParser* FindNetworkModelParser(const std::string& name);
// Every registered parser, by name.
std::vector<const NetworkModelParser*> NetworkModelParsers();

}  // namespace narrows::core
