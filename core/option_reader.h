// OptionReader: one mapping of the scenario file being read, as a plug-in (an algorithm, a network
// model) sees its own block. Typed getters take a key, a default and a range; each records what it
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

namespace narrows::core {

namespace internal {
class Section;  // core/section.h
}

// Whether a range's lower bound is itself allowed.
enum class Bound { kInclusive, kExclusive };

class OptionReader {
 public:
  explicit OptionReader(internal::Section* section) : section_(section) {}

  // Whether `key` is given (not null) here; whether it is given as a mapping.
  bool Has(const std::string& key) const;
  bool HasMap(const std::string& key) const;
  // The mapping under `key` (empty if absent), read with the same rules.
  OptionReader Sub(const std::string& key);

  int64_t Int(const std::string& key, int64_t fallback, int64_t min,
              int64_t max = std::numeric_limits<int64_t>::max());
  double Double(const std::string& key, double fallback, double min, double max, Bound lower = Bound::kInclusive);
  bool Bool(const std::string& key, bool fallback);
  std::string String(const std::string& key, const std::string& fallback);
  // One of `names` (name, value); the fallback's name is what the resolved scenario shows.
  template <typename E>
  E Enum(const std::string& key, E fallback, const std::vector<std::pair<std::string, E>>& names) {
    std::vector<std::string> labels;
    size_t fallback_index = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      labels.push_back(names[i].first);
      if (names[i].second == fallback) fallback_index = i;
    }
    return names[EnumIndex(key, fallback_index, labels)].second;
  }
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
  size_t EnumIndex(const std::string& key, size_t fallback, const std::vector<std::string>& names);

  std::shared_ptr<internal::Section> owned_;  // a Sub's own section
  internal::Section* section_;
};

}  // namespace narrows::core
