// Plug-ins chosen by name in one section of the scenario, each reading its own block of that
// section, as the scenario parser sees them: the network model (`network.model: ns3` reads
// `network.ns3`) and the inner optimiser (`train.optimizer: adamw` reads `train.adamw`). core names
// none of them: each registers its parser from its own file (sim/network_registry.h,
// trainer/inner_optimizer.h), which also builds it. Registration happens at static initialisation;
// lookups afterwards are read-only and thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/option_reader.h"

namespace narrows::core {

struct Scenario;

// A plug-in's own options, parsed and checked by it; read back as its own type with
// NetworkSpec::ModelOptions<T>() or TrainSpec::OptimizerOptions<T>().
class PluginOptions {
 public:
  virtual ~PluginOptions() = default;
};

// Where a block plug-in is chosen.
enum class BlockSlot { kNetworkModel, kInnerOptimizer };

struct BlockParser {
  std::string name;  // the value of the choosing key (`network.model`, `train.optimizer`)
  // Reads its block (`network.<name>`, `train.<name>`; empty when absent) from `block`, checked
  // against the sections read before this one. Errors go to `block`.
  std::function<std::shared_ptr<const PluginOptions>(OptionReader& block, const Scenario& sc)> parse;
};

// Adds `parser` to `slot`; a second parser of the same name there is a broken invariant (CHECK).
void RegisterBlockParser(BlockSlot slot, BlockParser parser);
// The parser of `name` in `slot`, or null.
const BlockParser* FindBlockParser(BlockSlot slot, const std::string& name);
// Every parser registered in `slot`, by name.
std::vector<const BlockParser*> BlockParsers(BlockSlot slot);

}  // namespace narrows::core
