#include "core/algorithm_registry.h"

#include "core/check.h"
#include "core/registry.h"

namespace narrows::core {
namespace {

Registry<AlgorithmParser>& Parsers() {
  static Registry<AlgorithmParser> registry("algorithm");
  return registry;
}

}  // namespace

void RegisterAlgorithmParser(AlgorithmParser parser) {
  NARROWS_CHECK(parser.parse) << "algorithm '" << parser.name << "' registered without a parse function";
  if (parser.is_default) {
    for (const auto* p : Parsers().All()) {
      NARROWS_CHECK(!p->is_default) << "two default algorithms: " << p->name << " and " << parser.name;
    }
  }
  const std::string name = parser.name;
  Parsers().Add(name, std::move(parser));
}

const AlgorithmParser* FindAlgorithmParser(const std::string& name) {
  return Parsers().Find(name);
}

std::vector<const AlgorithmParser*> AlgorithmParsers() {
  return Parsers().All();
}

}  // namespace narrows::core
