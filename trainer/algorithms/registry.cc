// The registry of algorithm plug-ins (plugin.h). Each plug-in registers itself from its own file at
// static initialisation; the generated list of NARROWS_ALGORITHMS (algorithms_linked.cc, made by
// trainer/CMakeLists.txt) is referenced here, so that a static link keeps every listed file.
#include <map>

#include "core/check.h"
#include "trainer/algorithms/algorithm.h"

namespace narrows::trainer {

bool AlgorithmsLinked();  // algorithms_linked.cc (generated)

namespace {

std::map<std::string, AlgorithmPlugin>& Plugins() {
  static std::map<std::string, AlgorithmPlugin> plugins;
  return plugins;
}

}  // namespace

bool RegisterAlgorithm(AlgorithmPlugin plugin) {
  NARROWS_CHECK(plugin.make) << "algorithm '" << plugin.parser.name << "' registered without make";
  core::RegisterAlgorithmParser(plugin.parser);
  const std::string name = plugin.parser.name;
  NARROWS_CHECK(Plugins().emplace(name, std::move(plugin)).second) << "algorithm '" << name << "' registered twice";
  return true;
}

const AlgorithmPlugin* FindAlgorithm(const std::string& name) {
  NARROWS_CHECK(AlgorithmsLinked());
  const auto it = Plugins().find(name);
  return it == Plugins().end() ? nullptr : &it->second;
}

std::vector<const AlgorithmPlugin*> RegisteredAlgorithms() {
  NARROWS_CHECK(AlgorithmsLinked());
  std::vector<const AlgorithmPlugin*> out;
  for (const auto& [name, p] : Plugins()) out.push_back(&p);
  return out;
}

std::unique_ptr<Algorithm> MakeAlgorithm(WorkerContext& w) {
  const AlgorithmPlugin* plugin = FindAlgorithm(w.x.algo.algorithm);
  NARROWS_CHECK(plugin != nullptr) << "algorithm '" << w.x.algo.algorithm << "' is not registered";
  return plugin->make(w);
}

}  // namespace narrows::trainer
