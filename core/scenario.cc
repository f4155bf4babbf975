#include "core/scenario.h"

#include <glob.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace narrows::core {
namespace {

struct Preset {
  const char* name;
  int64_t d_model, n_layers, n_heads, seq_len, vocab_size;
};

// Sizes with a byte vocabulary, except gpt2-124m which is GPT-2 small (Radford et al. 2019).
constexpr Preset kPresets[] = {
    {"nano", 32, 2, 2, 64, 256},         // ~0.03M + embeddings: unit tests
    {"tiny", 128, 4, 4, 128, 256},       // ~0.8M: the quickstart
    {"small", 256, 6, 8, 256, 256},      // ~4.8M
    {"medium", 512, 8, 8, 512, 256},     // ~25M
    {"gpt2-124m", 768, 12, 12, 1024, 50257},
};

struct Profile {
  const char* name;
  double bandwidth_bps, latency_ms;
};
// The network archetypes of "Scaling Laws for DiLoCo" (arXiv 2503.09799, App. A), plus internet and home.
constexpr Profile kProfiles[] = {
    {"dc-400g", 400e9, 0.1}, {"dc-100g", 100e9, 1.0},    {"region-10g", 10e9, 10.0},
    {"internet-1g", 1e9, 50.0}, {"home-100m", 100e6, 30.0},
};

// Where a value came from, for error messages: a file position or a command-line override.
struct Origin {
  std::string file;
  std::map<std::string, std::string> overrides;  // key path -> override text

  std::string Where(const YAML::Node& node, const std::string& path) const {
    for (const auto& [key, text] : overrides) {
      if (path == key || path.rfind(key + ".", 0) == 0) return "--set " + text;
    }
    std::ostringstream out;
    out << file;
    if (node.IsDefined() && node.Mark().line >= 0) {
      out << ":" << node.Mark().line + 1 << ":" << node.Mark().column + 1;
    }
    return out.str();
  }
};

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    default: return "an undefined value";
  }
}

}  // namespace

namespace internal {

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

  bool Has(const std::string& key) const { return Child(key).IsDefined() && !Child(key).IsNull(); }
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
        Error(n, Path(key), "expected an integer in [" + std::to_string(min) + ", " +
                                (max == std::numeric_limits<int64_t>::max() ? "inf"
                                                                            : std::to_string(max)) +
                                "], got " + std::to_string(value));
        // Nothing downstream is sized from a value out of range: it continues as the nearest bound.
        value = std::clamp(value, min, max);
      }
    }
    resolved_[key] = value;
    return value;
  }

  double Double(const std::string& key, double fallback, double min, double max,
                bool min_exclusive = false) {
    double value = fallback;
    if (const YAML::Node n = Take(key); n.IsDefined()) {
      if (!Convert(n, &value) || !std::isfinite(value)) {
        Error(n, Path(key), "expected a number, got " + Describe(n));
        value = fallback;
      } else if (value < min || value > max || (min_exclusive && value == min)) {
        std::ostringstream range;
        range << (min_exclusive ? "(" : "[") << min << ", " << max << "]";
        Error(n, Path(key), "expected a number in " + range.str() + ", got " + n.Scalar());
        value = fallback;
      }
    }
    resolved_[key] = value;
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
    for (const auto& [name, e] : names) {
      if (n.IsScalar() && n.Scalar() == name) {
        resolved_[key] = name;
        return e;
      }
      choices += (choices.empty() ? "" : ", ") + name;
    }
    Error(n, Path(key), "expected one of " + choices + "; got " + Describe(n));
    resolved_[key] = fallback_name;
    return fallback;
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
    for (double v : out) seq.push_back(v);
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
        Error(kv.first, Path(key), "unknown key (known here: " + known + ")");
      }
    }
  }

  // An error about the value of `key` in this mapping, at that value's position.
  void ErrorAt(const std::string& key, const std::string& what) {
    const YAML::Node value = Child(key);
    Error(value.IsDefined() ? value : node_, Path(key), what);
  }

  void Error(const YAML::Node& node, const std::string& path, const std::string& what) {
    errors_->push_back(origin_->Where(node, path) + ": " + path + ": " + what);
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
  std::set<std::string> seen_;
};

}  // namespace internal

namespace {

using internal::Section;

// Why a data path names nothing to read ("" when it names something): the built-in corpus needs no
// file; a glob must match at least one file; anything else must exist.
std::string MissingDataPath(const std::string& path, DataFormat format) {
  if (format == DataFormat::kAusten || (format == DataFormat::kAuto && path == "austen")) return "";
  if (path.empty()) return "expected a file, a folder or a glob, got an empty path";
  if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const bool matched = ::glob(path.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return matched ? "" : "no file matches '" + path + "'";
  }
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "'" + path + "' does not exist";
  return "";
}

Status ApplyOverride(YAML::Node root, const Override& o) {
  std::vector<std::string> parts;
  std::stringstream ss(o.key_path);
  for (std::string part; std::getline(ss, part, '.');) {
    if (part.empty()) return Status::InvalidArgument("--set " + o.text + ": empty key in path");
    parts.push_back(part);
  }
  YAML::Node value;
  try {
    value = YAML::Load(o.value);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("--set " + o.text + ": value is not valid YAML: " + e.msg);
  }
  // Walk with fresh handles: YAML::Node assignment rebinds, so never reassign a walking handle.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = chain.back()[parts[i]];
    if (next.IsDefined() && !next.IsNull() && !next.IsMap()) {
      return Status::InvalidArgument("--set " + o.text + ": '" + parts[i] +
                                     "' is not a mapping in the scenario");
    }
    chain.push_back(next);
  }
  chain.back()[parts.back()] = value;
  return Status::Ok();
}

void ReadModel(Section s, ModelSpec* m, int64_t data_vocab) {
  std::vector<std::pair<std::string, std::string>> preset_names;
  for (const auto& p : kPresets) preset_names.emplace_back(p.name, p.name);
  m->preset = s.Enum<std::string>("preset", "tiny", preset_names);
  const Preset* preset = &kPresets[1];
  for (const auto& p : kPresets) {
    if (m->preset == p.name) preset = &p;
  }
  m->d_model = s.Int("d_model", preset->d_model, 8, 65536);
  m->n_layers = s.Int("n_layers", preset->n_layers, 1, 1024);
  m->n_heads = s.Int("n_heads", preset->n_heads, 1, 1024);
  m->seq_len = s.Int("seq_len", preset->seq_len, 2, 1 << 20);
  m->mlp_ratio = s.Int("mlp_ratio", 4, 1, 64);
  m->vocab_size = data_vocab;
  m->positions = s.Enum<Positions>("positions", Positions::kLearned,
                                   {{"learned", Positions::kLearned}, {"rope", Positions::kRope}});
  m->init_std = s.Double("init_std", 0.02, 0.0, 1.0, /*min_exclusive=*/true);
  m->parameterization = s.Enum<Parameterization>(
      "parameterization", Parameterization::kStandard,
      {{"standard", Parameterization::kStandard}, {"completep", Parameterization::kCompleteP}});
  m->base_depth = s.Int("base_depth", m->n_layers, 1, 1024);
  m->base_width = s.Int("base_width", m->d_model, 1, 65536);
  if (m->d_model % m->n_heads != 0) {
    s.Error(s.node(), s.path() + ".n_heads",
            "d_model (" + std::to_string(m->d_model) + ") must be divisible by n_heads (" +
                std::to_string(m->n_heads) + ")");
  } else if (m->positions == Positions::kRope && (m->d_model / m->n_heads) % 2 != 0) {
    s.Error(s.node(), s.path() + ".positions", "rope needs an even head dimension");
  }
  s.Finish();
}

// A link: `profile` gives bandwidth and latency, explicit keys override it.
LinkSpec ReadLink(Section& s, const std::string& default_profile, const LinkSpec* inherit = nullptr,
                  std::string* profile_out = nullptr) {
  std::vector<std::pair<std::string, std::string>> names;
  for (const auto& p : kProfiles) names.emplace_back(p.name, p.name);
  names.emplace_back("custom", "custom");
  LinkSpec base;
  std::string profile = default_profile;
  if (inherit) {
    base = *inherit;
  }
  if (!inherit || s.Has("profile")) {
    profile = s.Enum<std::string>("profile", default_profile, names);
    for (const auto& p : kProfiles) {
      if (profile == p.name) {
        base.bandwidth_bps = p.bandwidth_bps;
        base.latency_ms = p.latency_ms;
      }
    }
  }
  if (profile_out) *profile_out = profile;
  LinkSpec link;
  link.bandwidth_bps = s.Double("bandwidth_bps", base.bandwidth_bps, 1e3, 1e13);
  link.latency_ms = s.Double("latency_ms", base.latency_ms, 0.0, 1e5);
  link.loss = s.Double("loss", base.loss, 0.0, 0.5);
  return link;
}

bool ValidLinkName(const std::string& name, int workers, int islands) {
  auto index = [&](const std::string& prefix, int limit) {
    if (name.rfind(prefix, 0) != 0) return false;
    try {
      size_t used = 0;
      const int i = std::stoi(name.substr(prefix.size()), &used);
      return used == name.size() - prefix.size() && i >= 0 && i < limit;
    } catch (...) {
      return false;
    }
  };
  return index("worker:", workers) || index("wan:", islands);
}

// Every registered algorithm's one-word entries, for messages.
std::string KnownShorthands() {
  std::string out;
  for (const AlgorithmParser* p : AlgorithmParsers()) out += (out.empty() ? "" : ", ") + p->shorthands;
  return out.empty() ? "none registered" : out;
}

// An entry of `compare:` (item `s`, node `node` in the file): a word one algorithm registered as a
// shorthand, or a mapping with `algorithm:`. The scenario reads name, algorithm, n_layers and
// collective; the algorithm's parser reads and checks the rest.
AlgorithmSpec ParseEntryItem(Section& s, const YAML::Node& node, const Scenario& sc) {
  AlgorithmSpec a;
  if (node.IsScalar()) {
    const std::string text = node.Scalar();
    std::optional<ShorthandKeys> keys;
    const AlgorithmParser* by = nullptr;
    for (const AlgorithmParser* p : AlgorithmParsers()) {
      if (p->shorthand && (keys = p->shorthand(text))) {
        by = p;
        break;
      }
    }
    if (!keys) {
      s.Error(node, s.path(), "unknown algorithm '" + text + "' (expected " + KnownShorthands() + ", or a mapping)");
      return a;
    }
    // The word stands for a mapping: its keys, read as if the file had spelt them out.
    YAML::Node expanded(YAML::NodeType::Map);
    expanded["name"] = text;
    expanded["algorithm"] = by->name;
    for (const auto& [key, value] : *keys) expanded[key] = YAML::Load(value);
    s.Rebind(expanded);
  } else if (!node.IsMap()) {
    s.Error(node, s.path(), "expected an algorithm name or a mapping, got " + Describe(node));
    return a;
  }
  std::vector<std::pair<std::string, std::string>> names;
  std::string fallback;
  for (const AlgorithmParser* p : AlgorithmParsers()) {
    names.emplace_back(p->name, p->name);
    if (p->is_default) fallback = p->name;
  }
  if (!s.Has("algorithm") && fallback.empty()) {
    s.Error(node, s.path(), "expected algorithm: (one of " + KnownShorthands() + ")");
    return a;
  }
  a.algorithm = s.Enum<std::string>("algorithm", fallback, names);
  const AlgorithmParser* parser = FindAlgorithmParser(a.algorithm);
  if (parser == nullptr) return a;  // the error is recorded
  a.n_layers = s.Int("n_layers", 0, 0, 1024);
  a.collective = s.Enum<CollectiveKind>("collective", CollectiveKind::kRing,
                                        {{"ring", CollectiveKind::kRing},
                                         {"star", CollectiveKind::kStar},
                                         {"hierarchical", CollectiveKind::kHierarchical}});
  OptionReader reader(&s);
  ParsedOptions parsed = parser->parse(reader, sc, a);
  a.options = std::move(parsed.options);
  a.name = s.String("name", parsed.default_name.empty() ? a.algorithm : parsed.default_name);
  return a;
}

}  // namespace

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

Result<Override> ParseOverride(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument("--set " + text + ": expected KEY.PATH=VALUE");
  }
  return Override{text.substr(0, eq), text.substr(eq + 1), text};
}

Result<Scenario> ParseScenario(const std::string& yaml_text, const std::string& origin_name,
                               const std::vector<Override>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    return Status::InvalidArgument(origin_name + ":" + std::to_string(e.mark.line + 1) + ":" +
                                   std::to_string(e.mark.column + 1) + ": not valid YAML: " + e.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) {
    const YAML::Mark mark = root.Mark();
    return Status::InvalidArgument(origin_name + ":" + std::to_string(std::max(mark.line, 0) + 1) + ":" +
                                   std::to_string(std::max(mark.column, 0) + 1) +
                                   ": expected a mapping of keys at the top level, got " + Describe(root));
  }
  Origin origin{origin_name, {}};
  for (const auto& o : overrides) {
    NARROWS_RETURN_IF_ERROR(ApplyOverride(root, o));
    origin.overrides[o.key_path] = o.text;
  }

  std::vector<std::string> errors;
  YAML::Node resolved(YAML::NodeType::Map);
  Section top(root, "", &origin, &errors, resolved);
  Scenario sc;
  sc.source = origin_name;
  const std::string stem = std::filesystem::path(origin_name).stem().string();
  sc.name = top.String("name", stem.empty() ? "scenario" : stem);
  if (sc.name.empty() || sc.name.find_first_of("/\\") != std::string::npos || sc.name == "." ||
      sc.name == "..") {
    top.Error(root["name"], "name", "expected a non-empty name without '/' (it names the run folder)");
  }
  sc.seed = static_cast<uint64_t>(top.Int("seed", 0, 0));
  sc.device = top.String("device", "cpu");
  if (sc.device != "cpu" && sc.device != "cuda" && sc.device.rfind("cuda:", 0) != 0) {
    top.Error(root["device"], "device", "expected cpu, cuda or cuda:N; got '" + sc.device + "'");
  }
  sc.threads = top.Int("threads", 0, 0, 4096);

  {
    Section d = top.Sub("data");
    DataSpec& data = sc.data;
    data.path = d.String("path", "austen");
    data.format = d.Enum<DataFormat>("format", DataFormat::kAuto,
                                     {{"auto", DataFormat::kAuto},
                                      {"austen", DataFormat::kAusten},
                                      {"text", DataFormat::kText},
                                      {"shards", DataFormat::kShards}});
    data.val_path = d.String("val_path", "");
    const bool shards = data.format == DataFormat::kShards ||
                        (data.format == DataFormat::kAuto &&
                         data.path.size() > 4 && data.path.substr(data.path.size() - 4) == ".bin");
    data.vocab_size = d.Int("vocab_size", shards ? 50257 : 256, 2, 65536);
    data.val_fraction = d.Double("val_fraction", 0.05, 0.0, 0.5, /*min_exclusive=*/true);
    data.sampling = d.Enum<Sampling>("sampling", Sampling::kIid,
                                     {{"iid", Sampling::kIid}, {"non-iid", Sampling::kNonIid}});
    // Refused here rather than minutes later when the run loads the data (paths are relative to
    // the working directory, as the loader reads them).
    if (const std::string why = MissingDataPath(data.path, data.format); !why.empty()) d.ErrorAt("path", why);
    if (!data.val_path.empty()) {
      if (const std::string why = MissingDataPath(data.val_path, data.format); !why.empty()) d.ErrorAt("val_path", why);
    }
    d.Finish();
  }
  ReadModel(top.Sub("model"), &sc.model, sc.data.vocab_size);
  {
    Section t = top.Sub("train");
    TrainSpec& tr = sc.train;
    tr.steps = t.Int("steps", 200, 1);
    tr.batch_size = t.Int("batch_size", 16, 1, 1 << 20);
    tr.grad_accum = t.Int("grad_accum", 1, 1, 1 << 20);
    if (tr.batch_size % tr.grad_accum != 0) {
      t.Error(t.node(), "train.grad_accum",
              "batch_size (" + std::to_string(tr.batch_size) + ") must be divisible by grad_accum (" +
                  std::to_string(tr.grad_accum) + ")");
    }
    tr.lr = t.Double("lr", 3e-3, 0.0, 10.0, /*min_exclusive=*/true);
    tr.schedule = t.Enum<LrSchedule>(
        "schedule", LrSchedule::kCosine,
        {{"cosine", LrSchedule::kCosine}, {"constant", LrSchedule::kConstant}});
    tr.warmup_steps = t.Int("warmup_steps", std::min<int64_t>(20, tr.steps / 10), 0);
    tr.min_lr_ratio = t.Double("min_lr_ratio", 0.1, 0.0, 1.0);
    tr.weight_decay = t.Double("weight_decay", 0.1, 0.0, 10.0);
    tr.beta1 = t.Double("beta1", 0.9, 0.0, 1.0);
    tr.beta2 = t.Double("beta2", 0.95, 0.0, 1.0);
    tr.eps = t.Double("eps", 1e-8, 0.0, 1.0, /*min_exclusive=*/true);
    tr.grad_clip = t.Double("grad_clip", 1.0, 0.0, 1e9);
    t.Finish();
  }
  {
    Section e = top.Sub("eval");
    sc.eval.every = e.Int("every", 50, 0);
    sc.eval.batches = e.Int("batches", 8, 1, 1 << 20);
    sc.eval.batch_size = e.Int("batch_size", sc.train.batch_size, 1, 1 << 20);
    e.Finish();
  }
  {
    Section o = top.Sub("output");
    sc.output.dir = o.String("dir", "runs");
    sc.output.log_every = o.Int("log_every", 10, 1);
    o.Finish();
  }
  {
    Section w = top.Sub("workers");
    sc.workers.count = static_cast<int>(w.Int("count", 1, 1, 4096));
    sc.workers.speed = w.DoubleList("speed", 1.0, static_cast<size_t>(sc.workers.count), 1e-3, 1e3);
    w.Finish();
  }
  {
    Section n = top.Sub("network");
    NetworkSpec& net = sc.network;
    net.model = n.Enum<std::string>("model", "analytic", {{"analytic", "analytic"}, {"ns3", "ns3"}});
    net.mtu = static_cast<int>(n.Int("mtu", 1500, 576, 9216));
    {
      Section ns3 = n.Sub("ns3");
      net.ns3.tcp = ns3.Enum<std::string>("tcp", "cubic", {{"cubic", "cubic"}, {"newreno", "newreno"}});
      net.ns3.queue_packets = ns3.Int("queue_packets", 0, 0, 1'000'000);
      ns3.Finish();
    }
    net.topology = n.Enum<TopologyKind>("topology", TopologyKind::kStar,
                                        {{"star", TopologyKind::kStar}, {"islands", TopologyKind::kIslands}});
    net.link = ReadLink(n, "home-100m", nullptr, &net.profile);
    net.islands = n.IntLists("islands");
    {
      Section intra = n.Sub("intra");
      net.intra = ReadLink(intra, "dc-100g");
      intra.Finish();
    }
    if (net.topology == TopologyKind::kIslands) {
      std::vector<int> seen(static_cast<size_t>(sc.workers.count), 0);
      for (const auto& island : net.islands) {
        for (int w : island) {
          if (w < 0 || w >= sc.workers.count) {
            n.Error(n.node(), "network.islands", "worker " + std::to_string(w) + " does not exist (workers.count is " +
                                                     std::to_string(sc.workers.count) + ")");
          } else {
            ++seen[static_cast<size_t>(w)];
          }
        }
      }
      for (int w = 0; w < sc.workers.count; ++w) {
        if (seen[static_cast<size_t>(w)] != 1) {
          n.Error(n.node(), "network.islands",
                  "worker " + std::to_string(w) + " must be in exactly one island");
          break;
        }
      }
    } else if (!net.islands.empty()) {
      n.Error(n.node(), "network.islands", "islands are only used with topology: islands");
    }
    n.Items("workers", [&](Section& item, const YAML::Node& node, size_t) {
      NetworkSpec::Override o;
      o.worker = static_cast<int>(item.Int("worker", 0, 0, sc.workers.count - 1));
      o.link = ReadLink(item, "custom", &net.link);
      if (node.IsDefined() && !node.IsMap()) item.Error(node, item.path(), "expected a mapping");
      net.overrides.push_back(o);
    });
    const int num_islands = static_cast<int>(net.islands.size());
    n.Items("schedule", [&](Section& item, const YAML::Node& node, size_t) {
      NetworkSpec::Change c;
      c.link = item.String("link", "worker:0");
      c.at_s = item.Double("at_s", 0.0, 0.0, 1e12);
      c.bandwidth_bps = item.Double("bandwidth_bps", 0.0, 0.0, 1e13);
      if (!ValidLinkName(c.link, sc.workers.count, num_islands)) {
        item.Error(node, item.path() + ".link", "expected worker:N or wan:K naming an existing link, got '" + c.link + "'");
      }
      net.schedule.push_back(c);
    });
    n.Finish();
  }
  {
    Section c = top.Sub("compute");
    sc.compute.mode = c.Enum<ComputeMode>("mode", ComputeMode::kMeasured,
                                          {{"measured", ComputeMode::kMeasured}, {"modelled", ComputeMode::kModelled}});
    sc.compute.device_flops = c.Double("device_flops", 1e12, 1e6, 1e18);
    c.Finish();
  }
  {
    Section d = top.Sub("deploy");
    DeploySpec& dep = sc.deploy;
    dep.security = d.Enum<std::string>("security", "curve", {{"curve", "curve"}, {"plain", "plain"}});
    dep.key_file = d.String("key_file", "");
    dep.heartbeat_s = d.Double("heartbeat_s", 0.5, 0.001, 3600, true);
    dep.timeout_s = d.Double("timeout_s", 5.0, 0.001, 86400, true);
    dep.on_failure = d.Enum<std::string>("on_failure", "continue", {{"continue", "continue"}, {"stop", "stop"}});
    dep.collective_timeout_s = d.Double("collective_timeout_s", 600.0, 0.001, 1e7, true);
    dep.checkpoint_every = d.Int("checkpoint_every", 0, 0);
    if (dep.timeout_s <= dep.heartbeat_s) d.Error(d.node(), "deploy.timeout_s", "must exceed deploy.heartbeat_s");
    d.Finish();
  }
  top.Items("faults", [&](Section& item, const YAML::Node& node, size_t) {
    FaultSpec f;
    f.kind = item.Enum<FaultKind>("type", FaultKind::kLeave,
                                  {{"leave", FaultKind::kLeave},
                                   {"join", FaultKind::kJoin},
                                   {"crash", FaultKind::kCrash},
                                   {"link_down", FaultKind::kLinkDown}});
    if (f.kind == FaultKind::kLinkDown) {
      f.link = item.String("link", "worker:0");
      f.from_s = item.Double("from_s", 0.0, 0.0, 1e12);
      f.to_s = item.Double("to_s", 0.0, 0.0, 1e12);
      if (!ValidLinkName(f.link, sc.workers.count, static_cast<int>(sc.network.islands.size()))) {
        item.Error(node, item.path() + ".link", "expected worker:N or wan:K naming an existing link, got '" + f.link + "'");
      }
      if (f.to_s <= f.from_s) item.Error(node, item.path() + ".to_s", "must be after from_s");
    } else {
      f.worker = static_cast<int>(item.Int("worker", 0, 0, sc.workers.count - 1));
      f.at_step = item.Int("at_step", 0, 0, sc.train.steps - 1);
    }
    if (node.IsDefined() && !node.IsMap()) item.Error(node, item.path(), "expected a mapping");
    sc.faults.push_back(f);
  });
  top.Items("compare", [&](Section& item, const YAML::Node& node, size_t) {
    sc.compare.push_back(ParseEntryItem(item, node, sc));
  });
  {
    std::set<std::string> names;
    for (const auto& a : sc.compare) {
      if (!names.insert(a.name).second) {
        top.Error(root["compare"], "compare", "two entries are named '" + a.name + "'; give one a name:");
      }
    }
  }
  sc.target_loss = top.Double("target_loss", 0.0, 0.0, 100.0);
  {
    Section w = top.Sub("warm_start");
    sc.warm_start.steps = w.Int("steps", 0, 0, 100'000'000);
    sc.warm_start.checkpoint = w.String("checkpoint", "");
    if (sc.warm_start.steps > 0 && !sc.warm_start.checkpoint.empty()) {
      w.ErrorAt("checkpoint", "give steps (pre-train here) or checkpoint (a narrows train model.ckpt), not both");
    } else if (!sc.warm_start.checkpoint.empty()) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(sc.warm_start.checkpoint, ec)) {
        w.ErrorAt("checkpoint", "'" + sc.warm_start.checkpoint + "' is not a file (narrows train writes <run folder>/model.ckpt)");
      }
    }
    w.Finish();
    for (size_t i = 0; i < sc.compare.size(); ++i) {
      if (sc.compare[i].n_layers > 0 && sc.compare[i].n_layers != sc.model.n_layers && sc.warm_start.enabled()) {
        top.Error(root["compare"][i]["n_layers"], "compare[" + std::to_string(i) + "].n_layers",
                  "differs from model.n_layers, so the warm start's model does not fit this entry");
      }
    }
  }
  top.Finish();

  if (!errors.empty()) {
    std::string message;
    for (const auto& e : errors) message += (message.empty() ? "" : "\n") + e;
    return Status::InvalidArgument(message);
  }
  YAML::Emitter emitter;
  emitter.SetDoublePrecision(15);
  emitter << resolved;
  sc.resolved_yaml = std::string(emitter.c_str()) + "\n";
  return sc;
}

Result<Scenario> LoadScenario(const std::string& path, const std::vector<Override>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open the scenario file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseScenario(buffer.str(), path, overrides);
}

Result<AlgorithmSpec> ParseEntry(const std::string& yaml_text, const Scenario& sc, const std::string& origin_name) {
  YAML::Node node;
  try {
    node = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    return Status::InvalidArgument(origin_name + ": not valid YAML: " + e.msg);
  }
  const Origin origin{origin_name, {}};
  std::vector<std::string> errors;
  YAML::Node resolved(YAML::NodeType::Map);
  Section item(node.IsMap() ? node : YAML::Node(), "entry", &origin, &errors, resolved);
  AlgorithmSpec a = ParseEntryItem(item, node, sc);
  item.Finish();
  if (!errors.empty()) {
    std::string message;
    for (const auto& e : errors) message += (message.empty() ? "" : "\n") + e;
    return Status::InvalidArgument(message);
  }
  return a;
}

// OptionReader forwards to the Section it stands for.
bool OptionReader::Has(const std::string& key) const { return section_->Has(key); }
bool OptionReader::HasMap(const std::string& key) const { return section_->HasMap(key); }
OptionReader OptionReader::Sub(const std::string& key) {
  OptionReader sub(nullptr);
  sub.owned_ = std::make_shared<Section>(section_->Sub(key));
  sub.section_ = sub.owned_.get();
  return sub;
}
int64_t OptionReader::Int(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  return section_->Int(key, fallback, min, max);
}
double OptionReader::Double(const std::string& key, double fallback, double min, double max, Bound lower) {
  return section_->Double(key, fallback, min, max, lower == Bound::kExclusive);
}
bool OptionReader::Bool(const std::string& key, bool fallback) { return section_->Bool(key, fallback); }
std::string OptionReader::String(const std::string& key, const std::string& fallback) {
  return section_->String(key, fallback);
}
size_t OptionReader::EnumIndex(const std::string& key, size_t fallback, const std::vector<std::string>& names) {
  return section_->EnumIndex(key, fallback, names);
}
void OptionReader::Set(const std::string& key, const std::string& value) { section_->Set(key, value); }
void OptionReader::ErrorAt(const std::string& key, const std::string& what) { section_->ErrorAt(key, what); }
void OptionReader::Error(const std::string& what) { section_->Error(section_->node(), section_->path(), what); }
void OptionReader::Finish() { section_->Finish(); }
const std::string& OptionReader::path() const { return section_->path(); }

}  // namespace narrows::core
