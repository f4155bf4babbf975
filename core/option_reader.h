// OptionReader: one mapping of the scenario file being read, as a plug-in (an algorithm, a network
// model) sees its own block. Typed getters take a declared key (core/keys.h); each records what it
// read (so that unknown keys are reported and the resolved scenario spells every default out) and
// collects an error naming file:line:column and the key path instead of stopping at the first.
// A reader lives as long as the ParseScenario call that handed it out; not thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/keys.h"

namespace narrows::core {

namespace internal {
class Section;  // core/section.h
}

class OptionReader {
 public:
  explicit OptionReader(internal::Section* section) : section_(section) {}

  // Whether `key` is given (not null) here; whether it is given as a mapping.
  bool Has(const std::string& key) const;
  bool HasMap(const std::string& key) const;
  // The mapping under a declared key (empty if absent), read with the same rules.
  OptionReader Sub(const StructureKey& key) { return Sub(key.info); }
  OptionReader Sub(const KeyInfo& key);

  // A declared key (core/keys.h): checked against its declaration, its default where absent. A
  // default given here is one that depends on other keys, as the declaration's help says.
  int64_t Int(const IntKey& key);
  int64_t Int(const IntKey& key, int64_t fallback);
  int64_t Int(const IntKey& key, int64_t fallback, int64_t min, int64_t max);  // a range from other keys
  double Double(const NumberKey& key);
  double Double(const NumberKey& key, double fallback);
  bool Bool(const BoolKey& key);
  bool Bool(const BoolKey& key, bool fallback);
  std::string String(const TextKey& key);
  template <typename E>
  E Enum(const EnumKey<E>& key) {
    return Enum(key, key.fallback_value);
  }
  template <typename E>
  E Enum(const EnumKey<E>& key, E fallback) {
    return key.values[Choice(key, key.IndexOf(fallback), key.names)].second;
  }
  // A choice among `names`, which a registry gives at the call; `fallback` where absent.
  std::string Choose(const ChoiceKey& key, const std::string& fallback, const std::vector<std::string>& names);
  // Records a resolved value that was not read from a key of this mapping (shorthand expansions).
  void Set(const std::string& key, const std::string& value);

  // An error about the value of `key` here, at that value's position (or this mapping's).
  void ErrorAt(const std::string& key, const std::string& what);
  // An error about this mapping as a whole.
  void Error(const std::string& what);
  // Reports every key of this mapping that no getter asked for (call once, after the last getter).
  void Finish();
  // The key path of this mapping ("compare[2]").
  const std::string& path() const;

 private:
  size_t Choice(const ChoiceKey& key, size_t fallback, const std::vector<std::string>& names);

  std::shared_ptr<internal::Section> owned_;  // a Sub's own section
  internal::Section* section_;
};

}  // namespace narrows::core
