#include "core/scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/algorithm_registry.h"
#include "core/section.h"

namespace narrows::core {

namespace {

// The declared keys of the core blocks (core/keys.h); `narrows reference` prints them.
const KeyBlock kTop("(top level)", "The run as a whole: its name, seeds, device and the blocks below.");
const TextKey kName(kTop, "name", "", Doc("names the run folder; no `/`", "", "the file's name without extension"));
const IntKey kSeed(kTop, "seed", 0, 0, kNoMax,
                   Doc("seeds initialisation and data sampling; the same seed gives the same losses, bit for bit, on a CPU"));
const IntKey kSeeds(kTop, "seeds", 1, 1, 1000,
                    Doc("runs of every entry, with seeds seed, seed+1, ...; entries share each seed, so comparisons are paired"));
const EnumKey<CollectiveKind> kCollective(kTop, "collective", {{"ring", CollectiveKind::kRing},
                                        {"star", CollectiveKind::kStar},
                                        {"hierarchical", CollectiveKind::kHierarchical},
                                        {"two-phase", CollectiveKind::kTwoPhase},
                                        {"tree", CollectiveKind::kTree},
                                        {"auto", CollectiveKind::kAuto}}, CollectiveKind::kRing,
                            Doc("every entry's collective unless the entry names one (`compare[].collective`)"));
const TextKey kDevice(kTop, "device", "cpu", Doc("`cpu`, `cuda` (= `cuda:0`) or `cuda:N`; CUDA needs a CUDA build of LibTorch"),
                      "cpu, cuda, cuda:N");
const IntKey kThreads(kTop, "threads", 0, 0, 4096, Doc("CPU intra-op threads; 0: all cores"));
const NumberKey kTargetLoss(kTop, "target_loss", 0.0, 0.0, 100.0,
                            Doc("the validation loss entries are compared at (time and bytes to target); 0: the worst entry's final loss"));
const StructureKey kDataKey(kTop, "data", KeyType::kMapping, Doc("where the tokens come from"), "data");
const StructureKey kModelKey(kTop, "model", KeyType::kMapping, Doc("the model every entry trains"), "model");
const StructureKey kTrainKey(kTop, "train", KeyType::kMapping, Doc("the inner optimisation every entry shares"), "train");
const StructureKey kEvalKey(kTop, "eval", KeyType::kMapping, Doc("validation"), "eval");
const StructureKey kOutputKey(kTop, "output", KeyType::kMapping, Doc("where results go"), "output");
const StructureKey kWorkersKey(kTop, "workers", KeyType::kMapping, Doc("the replicas"), "workers");
const StructureKey kNetworkKey(kTop, "network", KeyType::kMapping, Doc("the network model, topology and links"), "network");
const StructureKey kComputeKey(kTop, "compute", KeyType::kMapping, Doc("what a step's computation costs in virtual time"),
                               "compute");
const StructureKey kDeployKey(kTop, "deploy", KeyType::kMapping, Doc("a deployment over a real network (the emulator ignores it)"),
                              "deploy");
const StructureKey kFaultsKey(kTop, "faults", KeyType::kList, Doc("leaves, joins, crashes and link outages"), "faults[]");
const StructureKey kCompareKey(kTop, "compare", KeyType::kList,
                               Doc("the entries compared: an algorithm's one-word entry or a mapping; absent or empty: "
                                   "one ddp entry"),
                               "compare[]");
const StructureKey kWarmStartKey(kTop, "warm_start", KeyType::kMapping, Doc("pre-training shared by every entry"), "warm_start");

const KeyBlock kCompare("compare[]",
                        "An entry: the keys every algorithm reads; its algorithm's own keys follow in its block below.");
const ChoiceKey kAlgorithm(kCompare, "algorithm", {}, "diloco", Doc("the entry's algorithm"), "a registered algorithm");
const IntKey kEntryLayers(kCompare, "n_layers", 0, 0, 1024, Doc("this entry's model depth; 0: model.n_layers"));
const EnumKey<CollectiveKind> kEntryCollective(kCompare, "collective", {{"ring", CollectiveKind::kRing},
                                        {"star", CollectiveKind::kStar},
                                        {"hierarchical", CollectiveKind::kHierarchical},
                                        {"two-phase", CollectiveKind::kTwoPhase},
                                        {"tree", CollectiveKind::kTree},
                                        {"auto", CollectiveKind::kAuto}}, CollectiveKind::kRing,
                                 Doc("how its all-reduces run; auto: the fastest the planner predicts of ring, two-phase, tree and star", "",
                                     "the top level's collective"));
const BoolKey kBaseline(kCompare, "baseline", false,
                        Doc("the entry every other is compared with; where none says so, the first", "", "true on the first entry"));
const TextKey kEntryName(kCompare, "name", "", Doc("names the entry's folder; unique", "", "its algorithm's name (diloco-h50)"));



using internal::Describe;
using internal::Origin;
using internal::Section;
using internal::ReadCompute;
using internal::ReadData;
using internal::ReadDeploy;
using internal::ReadEval;
using internal::ReadFault;
using internal::ReadModel;
using internal::ReadNetwork;
using internal::ReadOutput;
using internal::ReadTrain;
using internal::ReadWarmStart;
using internal::ReadWorkers;


// Whether the mapping path `dotted` leads to the scalar `auto`.
bool GivenAsAuto(const YAML::Node& root, const std::string& dotted) {
  std::vector<YAML::Node> chain{root};
  std::stringstream ss(dotted);
  for (std::string part; std::getline(ss, part, '.');) {
    if (!chain.back().IsMap()) return false;
    chain.push_back(chain.back()[part]);
  }
  return chain.back().IsScalar() && chain.back().Scalar() == "auto";
}

Status ApplyOverride(YAML::Node root, const Override& o) {
  std::vector<std::string> parts;
  std::stringstream ss(o.key_path);
  for (std::string part; std::getline(ss, part, '.');) {
    if (part.empty()) return Status::InvalidArgument(o.flag + " " + o.text + ": empty key in path");
    parts.push_back(part);
  }
  YAML::Node value;
  try {
    value = YAML::Load(o.value);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(o.flag + " " + o.text + ": value is not valid YAML: " + e.msg);
  }
  // Walk with fresh handles: YAML::Node assignment rebinds, so never reassign a walking handle.
  // A number after a list (compare.1.outer_lr) names its item, counted from 0.
  auto item = [](const YAML::Node& list, const std::string& part) -> std::optional<size_t> {
    if (!list.IsSequence() || part.empty() || part.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    const size_t i = std::stoul(part);
    return i < list.size() ? std::optional<size_t>(i) : std::nullopt;
  };
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node at = chain.back();
    if (at.IsSequence()) {
      const auto index = item(at, parts[i]);
      if (!index) {
        return Status::InvalidArgument(o.flag + " " + o.text + ": '" + parts[i] + "' is not an item of a list of " +
                                       std::to_string(at.size()));
      }
      YAML::Node next = at[*index];
      if (!next.IsMap()) {
        return Status::InvalidArgument(o.flag + " " + o.text + ": item " + parts[i] +
                                       " is not a mapping (write it as {algorithm: ..., ...} to set its keys)");
      }
      chain.push_back(next);
      continue;
    }
    YAML::Node next = at[parts[i]];
    if (next.IsDefined() && !next.IsNull() && !next.IsMap() && !next.IsSequence()) {
      return Status::InvalidArgument(o.flag + " " + o.text + ": '" + parts[i] +
                                     "' is not a mapping in the scenario");
    }
    chain.push_back(next);
  }
  if (chain.back().IsSequence()) {
    const auto index = item(chain.back(), parts.back());
    if (!index) return Status::InvalidArgument(o.flag + " " + o.text + ": '" + parts.back() + "' is not an item of the list");
    YAML::Node list = chain.back();
    list[*index] = value;
    return Status::Ok();
  }
  chain.back()[parts.back()] = value;
  return Status::Ok();
}


// Every registered algorithm's one-word entries, for messages.
std::string KnownShorthands() {
  std::string out;
  for (const AlgorithmParser* p : AlgorithmParsers()) out += (out.empty() ? "" : ", ") + p->shorthands;
  return out.empty() ? "none registered" : out;
}

// An entry of `compare:` (item `s`, node `node` in the file): a word one algorithm registered as a
// shorthand, or a mapping with `algorithm:`. The scenario reads name, algorithm, n_layers and
// collective and baseline (by default `baseline_by_default`); the algorithm's parser reads and checks
// the rest.
AlgorithmSpec ParseEntryItem(Section& s, const YAML::Node& node, const Scenario& sc, bool baseline_by_default = false) {
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
      std::vector<std::string> names;  // the algorithms and their one-word spellings ("diloco-hN")
      for (const AlgorithmParser* p : AlgorithmParsers()) {
        names.push_back(p->name);
        std::stringstream words(p->shorthands);
        for (std::string w; std::getline(words, w, ',');) names.push_back(w.substr(w.find_first_not_of(' ')));
      }
      s.Error(node, s.path(), "unknown algorithm '" + text + "'" + DidYouMean(text, names) + " (expected " +
                                  KnownShorthands() + ", or a mapping)");
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
  std::vector<std::string> names;
  std::string fallback;
  for (const AlgorithmParser* p : AlgorithmParsers()) {
    names.emplace_back(p->name);
    if (p->is_default) fallback = p->name;
  }
  if (!s.Has("algorithm") && fallback.empty()) {
    s.Error(node, s.path(), "expected algorithm: (one of " + KnownShorthands() + ")");
    return a;
  }
  a.algorithm = s.Choose(kAlgorithm, fallback, names);
  const AlgorithmParser* parser = FindAlgorithmParser(a.algorithm);
  if (parser == nullptr) return a;  // the error is recorded
  a.n_layers = s.Int(kEntryLayers);
  if (a.n_layers > 0 && !sc.model.torchscript.empty()) {
    s.ErrorAt("n_layers", "sets the built-in GPT's depth for this entry; a torchscript model's is its own");
  }
  a.collective = s.Enum(kEntryCollective, sc.collective);
  if (a.collective == CollectiveKind::kHierarchical && sc.network.islands.empty() && node.IsMap() &&
      node["collective"].IsDefined()) {
    s.ErrorAt("collective", "hierarchical reduces inside each island of network.islands and crosses between them; "
                            "this network has no islands (topology: islands and network.islands), so use ring");
  }
  a.baseline = s.Bool(kBaseline, baseline_by_default);
  OptionReader reader(&s);
  ParsedOptions parsed = parser->parse(reader, sc, a);
  a.options = std::move(parsed.options);
  a.name = s.String(kEntryName, parsed.default_name.empty() ? a.algorithm : parsed.default_name);
  return a;
}






// The top-level keys: the run's name (its folder), seed and seeds, device and threads.
void ReadTop(Section& top, const YAML::Node& root, const std::string& origin_name, Scenario& sc) {
  sc.source = origin_name;
  const std::string stem = std::filesystem::path(origin_name).stem().string();
  sc.name = top.String(kName, stem.empty() ? "scenario" : stem);
  const bool control = std::any_of(sc.name.begin(), sc.name.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
  if (sc.name.empty() || sc.name.find_first_of("/\\") != std::string::npos || sc.name == "." ||
      sc.name == ".." || control) {
    top.Error(root["name"], "name",
              "expected a non-empty name without '/' or control characters (it names the run folder)");
  }
  sc.seed = static_cast<uint64_t>(top.Int(kSeed));
  sc.seeds = top.Int(kSeeds);
  sc.collective = top.Enum(kCollective);
  sc.device = top.String(kDevice);
  const std::string ordinal = sc.device.rfind("cuda:", 0) == 0 ? sc.device.substr(5) : "";
  const bool numbered = !ordinal.empty() && ordinal.size() <= 4 && ordinal.find_first_not_of("0123456789") == std::string::npos;
  if (sc.device != "cpu" && sc.device != "cuda" && !numbered) {
    top.Error(root["device"], "device", "expected cpu, cuda or cuda:N; got '" + sc.device + "'");
  }
  sc.threads = top.Int(kThreads);
}



// compare: the entries, each read by its algorithm's registered parser; names must differ, and at
// most one is the baseline (the first where none says so).
void ReadCompare(Section& top, const YAML::Node& root, Scenario& sc) {
  bool marked = false;
  if (const YAML::Node list = root["compare"]; list.IsDefined() && list.IsSequence()) {
    for (const auto& item : list) {
      if (!item.IsMap()) continue;
      const YAML::Node b = item["baseline"];
      bool says = false;
      marked = marked || (b.IsDefined() && b.IsScalar() && YAML::convert<bool>::decode(b, says) && says);
    }
  }
  top.Items(kCompareKey, [&](Section& item, const YAML::Node& node, size_t i) {
    sc.compare.push_back(ParseEntryItem(item, node, sc, i == 0 && !marked));
  });
  std::vector<std::string> baselines;
  for (const auto& a : sc.compare) {
    if (a.baseline) baselines.push_back("'" + a.name + "'");
  }
  if (baselines.size() > 1) {
    top.Error(root["compare"], "compare", "entries " + baselines[0] + " and " + baselines[1] +
                                              " are both the baseline (baseline: true); at most one entry may be, "
                                              "and the others are compared with it");
  }
  std::set<std::string> names;
  for (const auto& a : sc.compare) {
    if (!names.insert(a.name).second) {
      top.Error(root["compare"], "compare", "two entries are named '" + a.name + "'; give one of them another name: (name: ...)");
    }
  }
}


// An entry of another depth than the model cannot start from the warm start's weights.
void CheckEntriesFitTheWarmStart(Section& top, const YAML::Node& root, const Scenario& sc) {
  for (size_t i = 0; i < sc.compare.size(); ++i) {
    if (sc.compare[i].n_layers > 0 && sc.compare[i].n_layers != sc.model.n_layers && sc.warm_start.enabled()) {
      top.Error(root["compare"][i]["n_layers"], "compare[" + std::to_string(i) + "].n_layers",
                "differs from model.n_layers, so the warm start's model does not fit this entry");
    }
  }
}

// The errors without those that follow from another: where a key that others are checked against
// is wrong, the checks against it report nothing new (a speed list "of the wrong length", a worker
// "out of range"), so only its own error is kept.
std::vector<std::string> FirstCauses(const std::vector<std::string>& errors, const std::vector<std::string>& paths) {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kDependents = {
      {"workers.count", {"workers.speed", "network.islands", "network.workers", "network.schedule", "faults"}},
      {"train.steps", {"faults", "train.warmup_steps", "eval.every", "warm_start"}},
      {"model.d_model", {"model.n_heads", "model.positions"}},
      {"model.n_heads", {"model.positions"}},
  };
  auto under = [](const std::string& path, const std::string& key) {
    return path == key || path.rfind(key + ".", 0) == 0 || path.rfind(key + "[", 0) == 0;
  };
  std::vector<std::string> kept;
  for (size_t i = 0; i < errors.size(); ++i) {
    const std::string& path = i < paths.size() ? paths[i] : std::string();
    bool follows = false;
    for (const auto& [cause, dependents] : kDependents) {
      if (std::find(paths.begin(), paths.end(), cause) == paths.end()) continue;
      for (const auto& d : dependents) follows = follows || under(path, d);
    }
    if (!follows) kept.push_back(errors[i]);
  }
  return kept.empty() ? errors : kept;
}

}  // namespace



Result<Override> ParseOverride(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument("--set " + text + ": expected KEY.PATH=VALUE");
  }
  return Override{text.substr(0, eq), text.substr(eq + 1), text};
}

Result<std::vector<Override>> ParseOverrides(const std::vector<std::string>& texts) {
  std::vector<Override> out;
  for (const auto& t : texts) {
    auto o = ParseOverride(t);
    if (!o.ok()) return o.status();
    out.push_back(std::move(*o));
  }
  return out;
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
  Origin origin{origin_name, {}, {}};
  for (const auto& o : overrides) {
    if (o.only_where_auto && !GivenAsAuto(root, o.key_path)) continue;
    NARROWS_RETURN_IF_ERROR(ApplyOverride(root, o));
    origin.overrides[o.key_path] = o.flag + " " + o.text;
  }

  std::vector<std::string> errors;
  YAML::Node resolved(YAML::NodeType::Map);
  Section top(root, "", &origin, &errors, resolved);
  Scenario sc;
  ReadTop(top, root, origin_name, sc);

  ReadData(top.Sub(kDataKey), sc);
  ReadModel(top.Sub(kModelKey), &sc.model, sc.data.vocab_size);
  ReadTrain(top.Sub(kTrainKey), sc);
  ReadEval(top.Sub(kEvalKey), sc);
  ReadOutput(top.Sub(kOutputKey), sc);
  ReadWorkers(top.Sub(kWorkersKey), sc);
  ReadNetwork(top.Sub(kNetworkKey), sc);
  ReadCompute(top.Sub(kComputeKey), sc);
  ReadDeploy(top.Sub(kDeployKey), sc);
  top.Items(kFaultsKey, [&](Section& item, const YAML::Node& node, size_t) { sc.faults.push_back(ReadFault(item, node, sc)); });

  if (sc.collective == CollectiveKind::kHierarchical && sc.network.islands.empty()) {
    top.Error(root["collective"], "collective",
              "hierarchical reduces inside each island of network.islands and crosses between them; this network "
              "has no islands (topology: islands and network.islands), so use ring");
  }
  ReadCompare(top, root, sc);
  sc.target_loss = top.Double(kTargetLoss);
  ReadWarmStart(top.Sub(kWarmStartKey), sc);
  CheckEntriesFitTheWarmStart(top, root, sc);
  top.Finish();

  if (!errors.empty()) {
    std::string message;
    for (const auto& e : FirstCauses(errors, origin.error_paths)) message += (message.empty() ? "" : "\n") + e;
    return Status::InvalidArgument(message);
  }
  YAML::Emitter emitter;
  emitter.SetDoublePrecision(15);
  emitter << resolved;
  sc.resolved_yaml = std::string(emitter.c_str()) + "\n";
  return sc;
}

std::string RunDigest(const Scenario& sc) {
  YAML::Node root = YAML::Load(sc.resolved_yaml);
  if (root.IsMap()) {
    root.remove("output");
    if (root["data"] && root["data"].IsMap()) root["data"].remove("path");
  }
  YAML::Emitter emitter;
  emitter.SetDoublePrecision(15);
  emitter << root;
  uint64_t h = 0xcbf29ce484222325;
  for (const char* c = emitter.c_str(); *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001b3;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
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
  const Origin origin{origin_name, {}, {}};
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

}  // namespace narrows::core
