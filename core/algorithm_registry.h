// The algorithms that a scenario's `compare:` entries may name, as the scenario parser sees them:
// how each reads its own block of options. core names no algorithm: each registers itself from its
// own file (trainer/algorithms/X.cc, through trainer/algorithms/plugin.h), and the parser asks this
// registry for the one an entry names. Registration happens at static initialisation; lookups
// afterwards are read-only and thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/option_reader.h"

namespace narrows::core {

struct Scenario;
struct AlgorithmSpec;

// An algorithm's own options, parsed and checked by its plug-in; read back with
// AlgorithmSpec::Options<T>().
class AlgorithmOptions {
 public:
  virtual ~AlgorithmOptions() = default;
};

// The keys a one-word entry stands for ("diloco-h100" -> {{"inner_steps", "100"}}), values in YAML.
using ShorthandKeys = std::vector<std::pair<std::string, std::string>>;

struct ParsedOptions {
  std::shared_ptr<const AlgorithmOptions> options;
  std::string default_name;  // the entry's name when it gives none ("diloco-h50")
};

struct AlgorithmParser {
  std::string name;        // the value of `algorithm:`
  std::string shorthands;  // how its one-word entries are spelt, for messages ("diloco, diloco-hN")
  // The keys `text` stands for, if it is one of this algorithm's one-word entries (it may also set
  // `algorithm:` to another registered name: local-sgd-hN is a diloco entry).
  std::function<std::optional<ShorthandKeys>(const std::string& text)> shorthand;
  // Reads the entry's own keys from `r` (everything but name, algorithm, n_layers and collective,
  // which the scenario reads into `entry` first) and checks them against the scenario's sections
  // read before `compare:` (model, train, workers, network, faults). Errors go to `r`.
  std::function<ParsedOptions(OptionReader& r, const Scenario& sc, const AlgorithmSpec& entry)> parse;
  // Whether an entry given as a mapping without `algorithm:` is of this algorithm (one at most).
  bool is_default = false;
};

// Adds `parser`; a second parser of the same name is a broken invariant (CHECK).
void RegisterAlgorithmParser(AlgorithmParser parser);
// The parser of `name`, or null.
const AlgorithmParser* FindAlgorithmParser(const std::string& name);
// Every registered parser, by name.
std::vector<const AlgorithmParser*> AlgorithmParsers();

}  // namespace narrows::core
