#include "core/network_model_registry.h"

#include <map>

#include "core/check.h"

namespace narrows::core {
namespace {

// Filled at static initialisation (before main), read-only afterwards.
std::map<std::string, NetworkModelParser>& Parsers() {
  static std::map<std::string, NetworkModelParser> parsers;
  return parsers;
}

}  // namespace

void RegisterNetworkModelParser(NetworkModelParser parser) {
  NARROWS_CHECK(!parser.name.empty() && parser.parse) << "a network model parser needs a name and a parse function";
  const std::string name = parser.name;
  NARROWS_CHECK(Parsers().emplace(name, std::move(parser)).second) << "network model '" << name << "' registered twice";
}

const NetworkModelParser* FindNetworkModelParser(const std::string& name) {
  const auto it = Parsers().find(name);
  return it == Parsers().end() ? nullptr : &it->second;
}

std::vector<const NetworkModelParser*> NetworkModelParsers() {
  std::vector<const NetworkModelParser*> out;
  for (const auto& [name, p] : Parsers()) out.push_back(&p);
  return out;
}

}  // namespace narrows::core
