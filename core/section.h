// internal::Section: the scenario reader behind core::OptionReader — one mapping of the YAML being
// read, with typed getters that record what they read (unknown-key checks, the resolved scenario)
// and collect errors naming file:line:column and the key path. Internal to core/ (scenario.cc,
// option_reader.cc); everything else reads through OptionReader.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/did_you_mean.h"
#include "core/keys.h"
#include "core/option_reader.h"
#include "core/result_record.h"
#include "core/scenario.h"

namespace narrows::core::internal {

// Where a value came from, for error messages: a file position or a command-line override.
struct Origin {
  std::string file;
  std::map<std::string, std::string> overrides;  // key path -> the option and its text ("--set a.b=1")
  // The key path of each error, in the order of the errors: a wrong value that others are checked
  // against (workers.count, train.steps) reports alone, not with the errors that follow from it.
  mutable std::vector<std::string> error_paths;

  std::string Where(const YAML::Node& node, const std::string& path) const {
    // The override that set this value, one inside it (key.sub, key[i]), or one that made the
    // mapping it names (an unknown key `trian` from --set trian.steps=10).
    for (const auto& [dotted, text] : overrides) {
      // An override names a list's item by its number (compare.1.outer_lr), an error path by
      // brackets (compare[1].outer_lr).
      std::string key;
      std::stringstream parts(dotted);
      for (std::string part; std::getline(parts, part, '.');) {
        const bool index = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
        key += index && !key.empty() ? "[" + part + "]" : (key.empty() ? "" : ".") + part;
      }
      if (path == key || path.rfind(key + ".", 0) == 0 || path.rfind(key + "[", 0) == 0 ||
          key.rfind(path + ".", 0) == 0 || key.rfind(path + "[", 0) == 0) {
        return text;
      }
    }
    std::ostringstream out;
    out << file;
    if (node.IsDefined() && node.Mark().line >= 0) {
      out << ":" << node.Mark().line + 1 << ":" << node.Mark().column + 1;
    }
    return out.str();
  }
};

// A number for the resolved scenario: the shortest text that reads back to the same double (0.05,
// not 0.050000000000000003; 40, not 4e+01), as a scalar that reads back as that number.
inline YAML::Node NumberNode(double v) { return YAML::Node(ShortestNumber(v)); }

inline std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    default: return "an undefined value";
  }
}


// A mapping of the scenario being read: typed getters that record what they read (for unknown-key
// checks and for the resolved scenario) and collect errors instead of stopping at the first.
class Section {
 public:
  Section(YAML::Node node, std::string path, const Origin* origin, std::vector<std::string>* errors,
          YAML::Node resolved)
      : node_(std::move(node)),
        path_(std::move(path)),
        origin_(origin),
        errors_(errors),
        resolved_(resolved) {
    if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
      Error(node_, path_, "expected a mapping of keys, got " + Describe(node_));
      node_ = YAML::Node();
    }
  }

  // Whether `key` is given with a value. Asking makes it a key of this mapping: given with no value
  // (`key:`), it takes its default, never "unknown key".
  bool Has(const std::string& key) const {
    seen_.insert(key);
    return Child(key).IsDefined() && !Child(key).IsNull();
  }
  bool HasMap(const std::string& key) const { return Child(key).IsMap(); }

  Section Sub(const std::string& key) {
    seen_.insert(key);
    YAML::Node out = resolved_[key];
    return Section(Child(key), Path(key), origin_, errors_, out);
  }

  int64_t Int(const std::string& key, int64_t fallback, int64_t min,
              int64_t max = std::numeric_limits<int64_t>::max()) {
    int64_t value = fallback;
    if (const YAML::Node n = Take(key); n.IsDefined()) {
      if (!Convert(n, &value) || static_cast<double>(value) != std::floor(static_cast<double>(value))) {
        Error(n, Path(key), "expected an integer, got " + Describe(n));
      } else if (value < min || value > max) {
        Error(n, Path(key), "expected an integer in " + IntRangeText(min, max) + ", got " + std::to_string(value));
        // Nothing downstream is sized from a value out of range: it continues as the nearest bound.
        value = std::clamp(value, min, max);
      }
    }
    resolved_[key] = value;
    return value;
  }

  double Double(const std::string& key, double fallback, double min, double max, Bound lower = Bound::kInclusive) {
    const bool min_exclusive = lower == Bound::kExclusive;
    double value = fallback;
    if (const YAML::Node n = Take(key); n.IsDefined()) {
      if (!Convert(n, &value) || !std::isfinite(value)) {
        Error(n, Path(key), "expected a number, got " + Describe(n));
        value = fallback;
      } else if (value < min || value > max || (min_exclusive && value == min)) {
        Error(n, Path(key), "expected a number in " + NumberRangeText(min, max, lower) + ", got " + n.Scalar());
        value = fallback;
      }
    }
    resolved_[key] = NumberNode(value);
    return value;
  }

  bool Bool(const std::string& key, bool fallback) {
    bool value = fallback;
    if (const YAML::Node n = Take(key); n.IsDefined()) {
      if (!Convert(n, &value)) Error(n, Path(key), "expected true or false, got " + Describe(n));
    }
    resolved_[key] = value;
    return value;
  }

  std::string String(const std::string& key, const std::string& fallback) {
    std::string value = fallback;
    if (const YAML::Node n = Take(key); n.IsDefined()) {
      if (!n.IsScalar()) {
        Error(n, Path(key), "expected a string, got " + Describe(n));
      } else {
        value = n.Scalar();
      }
    }
    resolved_[key] = value;
    return value;
  }

  template <typename E>
  E Enum(const std::string& key, E fallback, const std::vector<std::pair<std::string, E>>& names) {
    std::string fallback_name;
    for (const auto& [name, e] : names) {
      if (e == fallback) fallback_name = name;
    }
    const YAML::Node n = Take(key);
    if (!n.IsDefined()) {
      resolved_[key] = fallback_name;
      return fallback;
    }
    std::string choices;
    std::vector<std::string> all;
    for (const auto& [name, e] : names) {
      if (n.IsScalar() && n.Scalar() == name) {
        resolved_[key] = name;
        return e;
      }
      choices += (choices.empty() ? "" : ", ") + name;
      all.push_back(name);
    }
    Error(n, Path(key), "expected one of " + choices + "; got " + Describe(n) +
                            (n.IsScalar() ? core::DidYouMean(n.Scalar(), all) : ""));
    resolved_[key] = fallback_name;
    return fallback;
  }

  // The declared keys (core/keys.h): the declaration's name, default and range; a default (and a
  // range) given here is one that depends on other keys, as the declaration's help says.
  int64_t Int(const IntKey& k) { NoteKeyRead(k.info); return Int(k.info.name, k.fallback, k.min, k.max); }
  int64_t Int(const IntKey& k, int64_t fallback) { NoteKeyRead(k.info); return Int(k.info.name, fallback, k.min, k.max); }
  int64_t Int(const IntKey& k, int64_t fallback, int64_t min, int64_t max) { NoteKeyRead(k.info); return Int(k.info.name, fallback, min, max); }
  double Double(const NumberKey& k) { NoteKeyRead(k.info); return Double(k.info.name, k.fallback, k.min, k.max, k.lower); }
  double Double(const NumberKey& k, double fallback) { NoteKeyRead(k.info); return Double(k.info.name, fallback, k.min, k.max, k.lower); }
  double Double(const NumberKey& k, double fallback, double min, double max) {
    NoteKeyRead(k.info);
    return Double(k.info.name, fallback, min, max, k.lower);
  }
  bool Bool(const BoolKey& k) { NoteKeyRead(k.info); return Bool(k.info.name, k.fallback); }
  bool Bool(const BoolKey& k, bool fallback) { NoteKeyRead(k.info); return Bool(k.info.name, fallback); }
  std::string String(const TextKey& k) { NoteKeyRead(k.info); return String(k.info.name, k.fallback); }
  std::string String(const TextKey& k, const std::string& fallback) { NoteKeyRead(k.info); return String(k.info.name, fallback); }
  template <typename E>
  E Enum(const EnumKey<E>& k) {
    return Enum(k, k.fallback_value);
  }
  template <typename E>
  E Enum(const EnumKey<E>& k, E fallback) {
    NoteKeyRead(k.info);
    return k.values[EnumIndex(k.info.name, k.IndexOf(fallback), k.names)].second;
  }
  // A choice among `names` (a registry's, at the call; the declaration's where empty).
  std::string Choose(const ChoiceKey& k, const std::string& fallback, const std::vector<std::string>& names = {}) {
    NoteKeyRead(k.info);
    const std::vector<std::string>& all = names.empty() ? k.names : names;
    size_t index = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] == fallback) index = i;
    }
    return all.empty() ? fallback : all[EnumIndex(k.info.name, index, all)];
  }
  std::vector<double> DoubleList(const NumbersKey& k, size_t count) {
    NoteKeyRead(k.info);
    return DoubleList(k.info.name, k.fallback, count, k.min, k.max);
  }
  std::vector<std::vector<int>> IntLists(const StructureKey& k) {
    NoteKeyRead(k.info);
    return IntLists(k.info.name);
  }
  void Items(const StructureKey& k, const std::function<void(Section&, const YAML::Node&, size_t)>& fn) {
    NoteKeyRead(k.info);
    Items(k.info.name, fn);
  }
  Section Sub(const StructureKey& k) { return Sub(k.info); }
  Section Sub(const KeyInfo& k) {
    NoteKeyRead(k);
    return Sub(k.name);
  }

  // Records a resolved value that was not read from a key of this mapping (shorthand expansions).
  template <typename T>
  void Set(const std::string& key, const T& value) {
    resolved_[key] = value;
  }

  // A number or a list of numbers; a single number is repeated `count` times.
  std::vector<double> DoubleList(const std::string& key, double fallback, size_t count, double min,
                                 double max) {
    std::vector<double> out(count, fallback);
    const YAML::Node n = Take(key);
    if (n.IsDefined()) {
      if (n.IsScalar()) {
        double v = fallback;
        if (!Convert(n, &v) || !(v >= min && v <= max)) {
          Error(n, Path(key), "expected a number in [" + Num(min) + ", " + Num(max) + "] or a list of them");
          v = fallback;
        }
        out.assign(count, v);
      } else if (n.IsSequence()) {
        if (n.size() != count) {
          Error(n, Path(key), "expected " + std::to_string(count) + " values (one per worker), got " +
                                  std::to_string(n.size()));
        }
        for (size_t i = 0; i < n.size() && i < count; ++i) {
          double v = 0;
          if (!Convert(n[i], &v) || !(v >= min && v <= max)) {
            Error(n[i], Path(key) + "[" + std::to_string(i) + "]",
                  "expected a number in [" + Num(min) + ", " + Num(max) + "], got " + Describe(n[i]));
          } else {
            out[i] = v;
          }
        }
      } else {
        Error(n, Path(key), "expected a number or a list, got " + Describe(n));
      }
    }
    YAML::Node seq(YAML::NodeType::Sequence);
    for (double v : out) seq.push_back(NumberNode(v));
    resolved_[key] = seq;
    return out;
  }

  // Lists of integer lists, e.g. islands: [[0, 1], [2, 3]].
  std::vector<std::vector<int>> IntLists(const std::string& key) {
    std::vector<std::vector<int>> out;
    const YAML::Node n = Take(key);
    YAML::Node seq(YAML::NodeType::Sequence);
    if (n.IsDefined()) {
      if (!n.IsSequence()) {
        Error(n, Path(key), "expected a list of lists of worker indices, got " + Describe(n));
      } else {
        for (size_t i = 0; i < n.size(); ++i) {
          std::vector<int> group;
          YAML::Node resolved_group(YAML::NodeType::Sequence);
          if (!n[i].IsSequence()) {
            Error(n[i], Path(key) + "[" + std::to_string(i) + "]", "expected a list of worker indices");
            continue;
          }
          for (size_t j = 0; j < n[i].size(); ++j) {
            int v = 0;
            if (!Convert(n[i][j], &v)) {
              Error(n[i][j], Path(key) + "[" + std::to_string(i) + "][" + std::to_string(j) + "]",
                    "expected a worker index, got " + Describe(n[i][j]));
            }
            group.push_back(v);
            resolved_group.push_back(v);
          }
          out.push_back(group);
          seq.push_back(resolved_group);
        }
      }
    }
    resolved_[key] = seq;
    return out;
  }

  // Calls fn(item_section, item_node, index) for each element of the list under `key`.
  // Scalar items are passed with an empty section so the caller can read shorthand.
  void Items(const std::string& key, const std::function<void(Section&, const YAML::Node&, size_t)>& fn) {
    const YAML::Node n = Take(key);
    YAML::Node seq(YAML::NodeType::Sequence);
    if (n.IsDefined() && !n.IsSequence()) {
      Error(n, Path(key), "expected a list, got " + Describe(n));
    } else if (n.IsDefined()) {
      for (size_t i = 0; i < n.size(); ++i) {
        YAML::Node out(YAML::NodeType::Map);
        const std::string path = Path(key) + "[" + std::to_string(i) + "]";
        Section item(n[i].IsMap() ? n[i] : YAML::Node(), path, origin_, errors_, out);
        fn(item, n[i], i);
        item.Finish();
        seq.push_back(out);
      }
    }
    resolved_[key] = seq;
  }

  // Reports every key of this mapping that no getter asked for, and keys given twice.
  void Finish() {
    if (!node_.IsMap()) return;
    std::set<std::string> keys;
    for (const auto& kv : node_) {
      if (!kv.first.IsScalar()) {
        Error(kv.first, path_.empty() ? "(top level)" : path_, "expected a key name, got " + Describe(kv.first));
        continue;
      }
      const std::string key = kv.first.Scalar();
      if (!keys.insert(key).second) Error(kv.first, Path(key), "key given twice");
      if (!seen_.count(key)) {
        std::string known;
        for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
        Error(kv.first, Path(key),
              "unknown key" + core::DidYouMean(key, {seen_.begin(), seen_.end()}) +
                  (known.empty() ? " (this block has no keys)" : " (known here: " + known + ")"));
      }
    }
  }

  // An error for each of `keys` this mapping (an item of a list: `what`) does not give.
  void Require(const std::vector<std::string>& keys, const std::string& what) {
    if (!node_.IsMap()) return;  // not a mapping: its own error
    std::string all;
    for (const auto& k : keys) all += (all.empty() ? "" : ", ") + k;
    for (const auto& k : keys) {
      if (!Has(k)) Error(node_, Path(k), "missing: " + what + " needs " + all);
    }
  }

  // An error about the value of `key` in this mapping, at that value's position.
  void ErrorAt(const std::string& key, const std::string& what) {
    const YAML::Node value = Child(key);
    Error(value.IsDefined() ? value : node_, Path(key), what);
  }

  void Error(const YAML::Node& node, const std::string& path, const std::string& what) {
    errors_->push_back(origin_->Where(node, path) + ": " + path + ": " + what);
    origin_->error_paths.push_back(path);
  }
  const std::string& path() const { return path_; }
  const YAML::Node& node() const { return node_; }
  // Reads `node` (a mapping) from now on; for items given as one word that stand for a mapping.
  void Rebind(YAML::Node node) { node_ = std::move(node); }
  // Like Enum, with the names alone: the index of the chosen one.
  size_t EnumIndex(const std::string& key, size_t fallback, const std::vector<std::string>& names) {
    std::vector<std::pair<std::string, size_t>> indexed;
    for (size_t i = 0; i < names.size(); ++i) indexed.emplace_back(names[i], i);
    return Enum<size_t>(key, fallback, indexed);
  }

 private:
  YAML::Node Child(const std::string& key) const {
    if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& const_node = node_;  // const lookup never inserts
    YAML::Node child = const_node[key];
    return child ? child : YAML::Node(YAML::NodeType::Undefined);
  }
  YAML::Node Take(const std::string& key) {
    seen_.insert(key);
    YAML::Node n = Child(key);
    if (n.IsDefined() && n.IsNull()) return YAML::Node(YAML::NodeType::Undefined);  // `key:` = default
    return n;
  }
  std::string Path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  static std::string Num(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  }
  template <typename T>
  static bool Convert(const YAML::Node& n, T* out) {
    if (!n.IsScalar()) return false;
    try {
      *out = n.as<T>();
      return true;
    } catch (const YAML::Exception&) {
      return false;
    }
  }

  YAML::Node node_;
  std::string path_;
  const Origin* origin_;
  std::vector<std::string>* errors_;
  YAML::Node resolved_;
  mutable std::set<std::string> seen_;
};

// The block plug-in `chosen` (the value of `key` in `s`) of `slot`: every registered plug-in of the
// slot reads its own block `s.<name>` where given, and the chosen one's options are returned (null,
// with an error at `key`, if none of that name is registered). core/block_plugins.cc.
std::shared_ptr<const PluginOptions> ReadBlockPlugin(Section& s, BlockSlot slot, const std::string& key,
                                                     const std::string& chosen, const Scenario& sc);

// The sections of ParseScenario that live in their own files: core/scenario_blocks.cc, and
// core/scenario_model.cc (the model's).
void ReadData(Section d, Scenario& sc);
void ReadModel(Section s, ModelSpec* m, int64_t data_vocab);
void ReadTrain(Section t, Scenario& sc);
void ReadEval(Section e, Scenario& sc);
void ReadOutput(Section o, Scenario& sc);
void ReadWorkers(Section w, Scenario& sc);
void ReadCompute(Section c, Scenario& sc);
void ReadDeploy(Section d, Scenario& sc);
FaultSpec ReadFault(Section& item, const YAML::Node& node, const Scenario& sc);  // an item of faults
void ReadWarmStart(Section w, Scenario& sc);
// and core/scenario_network.cc.
void ReadNetwork(Section n, Scenario& sc);
// Whether `name` names a link of the network (worker:N, wan:N) for a fault.
bool ValidLinkName(const std::string& name, int workers, int islands);

}  // namespace narrows::core::internal
