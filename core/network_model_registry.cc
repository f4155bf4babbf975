#include "core/network_model_registry.h"

#include "core/check.h"
#include "core/registry.h"

namespace narrows::core {
namespace {

Registry<NetworkModelParser>& Parsers() {
  static Registry<NetworkModelParser> registry("network model");
  return registry;
}

}  // namespace

void RegisterNetworkModelParser(NetworkModelParser parser) {
  NARROWS_CHECK(parser.parse) << "network model '" << parser.name << "' registered without a parse function";
  const std::string name = parser.name;
  Parsers().Add(name, std::move(parser));
}

const NetworkModelParser* FindNetworkModelParser(const std::string& name) {
  return Parsers().Find(name);
}

std::vector<const NetworkModelParser*> NetworkModelParsers() {
  return Parsers().All();
}

}  // namespace narrows::core
