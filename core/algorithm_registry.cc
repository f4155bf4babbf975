#include "core/algorithm_registry.h"

#include <map>

#include "core/check.h"

namespace narrows::core {
namespace {

// Filled at static initialisation (before main), read-only afterwards.
std::map<std::string, AlgorithmParser>& Parsers() {
  static std::map<std::string, AlgorithmParser> parsers;
  return parsers;
}

}  // namespace

void RegisterAlgorithmParser(AlgorithmParser parser) {
  NARROWS_CHECK(!parser.name.empty() && parser.parse) << "an algorithm parser needs a name and a parse function";
  if (parser.is_default) {
    for (const auto& [name, p] : Parsers()) {
      NARROWS_CHECK(!p.is_default) << "two default algorithms: " << name << " and " << parser.name;
    }
  }
  const std::string name = parser.name;
  NARROWS_CHECK(Parsers().emplace(name, std::move(parser)).second) << "algorithm '" << name << "' registered twice";
}

const AlgorithmParser* FindAlgorithmParser(const std::string& name) {
  const auto it = Parsers().find(name);
  return it == Parsers().end() ? nullptr : &it->second;
}

std::vector<const AlgorithmParser*> AlgorithmParsers() {
  std::vector<const AlgorithmParser*> out;
  for (const auto& [name, p] : Parsers()) out.push_back(&p);
  return out;
}

}  // namespace narrows::core
