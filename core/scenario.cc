#include "core/scenario.h"

#include <glob.h>
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

}  // namespace

namespace {

using internal::Describe;
using internal::Origin;
using internal::ReadNetwork;
using internal::ValidLinkName;
using internal::Section;

// Why a data path names nothing to read ("" when it names something): the built-in corpus needs no
// file; a glob must match at least one file; anything else must exist.
std::string MissingDataPath(const std::string& path, DataFormat format) {
  if (format == DataFormat::kAusten || (format == DataFormat::kAuto && path == "austen")) return "";
  if (format == DataFormat::kMulti || (format == DataFormat::kAuto && path == "multi")) return "";
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
  m->init_std = s.Double("init_std", 0.02, 0.0, 1.0, Bound::kExclusive);
  m->parameterization = s.Enum<Parameterization>(
      "parameterization", Parameterization::kStandard,
      {{"standard", Parameterization::kStandard}, {"completep", Parameterization::kCompleteP}});
  m->base_depth = s.Int("base_depth", m->n_layers, 1, 1024);
  m->base_width = s.Int("base_width", m->d_model, 1, 65536);
  m->depth_alpha = s.Double("depth_alpha", 1.0, 0.5, 1.0);
  if (m->parameterization == Parameterization::kStandard && m->depth_alpha != 1.0) {
    s.ErrorAt("depth_alpha", "applies to parameterization: completep only");
  }
  if (m->d_model % m->n_heads != 0) {
    s.Error(s.node(), s.path() + ".n_heads",
            "d_model (" + std::to_string(m->d_model) + ") must be divisible by n_heads (" +
                std::to_string(m->n_heads) + ")");
  } else if (m->positions == Positions::kRope && (m->d_model / m->n_heads) % 2 != 0) {
    s.Error(s.node(), s.path() + ".positions", "rope needs an even head dimension");
  }
  s.Finish();
}

const std::vector<std::pair<std::string, CollectiveKind>>& CollectiveNames() {
  static const std::vector<std::pair<std::string, CollectiveKind>> names = {
      {"ring", CollectiveKind::kRing},
      {"star", CollectiveKind::kStar},
      {"hierarchical", CollectiveKind::kHierarchical},
      {"two-phase", CollectiveKind::kTwoPhase},
      {"tree", CollectiveKind::kTree},
      {"auto", CollectiveKind::kAuto}};
  return names;
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
  a.collective = s.Enum<CollectiveKind>("collective", sc.collective, CollectiveNames());
  a.baseline = s.Bool("baseline", baseline_by_default);
  OptionReader reader(&s);
  ParsedOptions parsed = parser->parse(reader, sc, a);
  a.options = std::move(parsed.options);
  a.name = s.String("name", parsed.default_name.empty() ? a.algorithm : parsed.default_name);
  return a;
}

// data: where the tokens come from and how they are split and sampled.
void ReadData(Section d, Scenario& sc) {
  DataSpec& data = sc.data;
  data.path = d.String("path", "austen");
  data.format = d.Enum<DataFormat>("format", DataFormat::kAuto,
                                   {{"auto", DataFormat::kAuto},
                                    {"austen", DataFormat::kAusten},
                                    {"multi", DataFormat::kMulti},
                                    {"text", DataFormat::kText},
                                    {"shards", DataFormat::kShards}});
  data.val_path = d.String("val_path", "");
  const bool shards = data.format == DataFormat::kShards ||
                      (data.format == DataFormat::kAuto &&
                       data.path.size() > 4 && data.path.substr(data.path.size() - 4) == ".bin");
  data.vocab_size = d.Int("vocab_size", shards ? 50257 : 256, 2, 65536);
  data.val_fraction = d.Double("val_fraction", 0.05, 0.0, 0.5, Bound::kExclusive);
  data.sampling = d.Enum<Sampling>("sampling", Sampling::kIid,
                                   {{"iid", Sampling::kIid},
                                    {"non-iid", Sampling::kNonIid},
                                    {"by-domain", Sampling::kByDomain}});
  data.domain_tokens = d.Int("domain_tokens", 0, 0);
  data.domain_mix = d.Double("domain_mix", 0.1, 0.0, 1.0);
  // Refused here rather than minutes later when the run loads the data (paths are relative to
  // the working directory, as the loader reads them).
  if (const std::string why = MissingDataPath(data.path, data.format); !why.empty()) d.ErrorAt("path", why);
  if (!data.val_path.empty()) {
    if (const std::string why = MissingDataPath(data.val_path, data.format); !why.empty()) d.ErrorAt("val_path", why);
  }
  d.Finish();
}

// train: the inner optimisation every entry shares.
void ReadTrain(Section t, Scenario& sc) {
  TrainSpec& tr = sc.train;
  tr.steps = t.Int("steps", 200, 1);
  tr.batch_size = t.Int("batch_size", 16, 1, 1 << 20);
  tr.grad_accum = t.Int("grad_accum", 1, 1, 1 << 20);
  if (tr.batch_size % tr.grad_accum != 0) {
    t.Error(t.node(), "train.grad_accum",
            "batch_size (" + std::to_string(tr.batch_size) + ") must be divisible by grad_accum (" +
                std::to_string(tr.grad_accum) + ")");
  }
  tr.lr = t.Double("lr", 3e-3, 0.0, 10.0, Bound::kExclusive);
  tr.schedule = t.Enum<LrSchedule>(
      "schedule", LrSchedule::kCosine,
      {{"cosine", LrSchedule::kCosine}, {"constant", LrSchedule::kConstant}});
  tr.warmup_steps = t.Int("warmup_steps", std::min<int64_t>(20, tr.steps / 10), 0);
  tr.min_lr_ratio = t.Double("min_lr_ratio", 0.1, 0.0, 1.0);
  tr.weight_decay = t.Double("weight_decay", 0.1, 0.0, 10.0);
  tr.beta1 = t.Double("beta1", 0.9, 0.0, 1.0);
  tr.beta2 = t.Double("beta2", 0.95, 0.0, 1.0);
  tr.eps = t.Double("eps", 1e-8, 0.0, 1.0, Bound::kExclusive);
  tr.grad_clip = t.Double("grad_clip", 1.0, 0.0, 1e9);
  tr.precision = t.Enum<Precision>("precision", Precision::kFp32,
                                   {{"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}});
  tr.optimizer = t.String("optimizer", "adamw");
  tr.optimizer_options = ReadBlockPlugin(t, BlockSlot::kInnerOptimizer, "optimizer", tr.optimizer, sc);
  t.Finish();
}

// A key that is `auto` (then `auto_value`) or a whole number in [0, max]; `absent` is its text when
// the key is not given; `expected` names both forms in the error.
int64_t AutoOrNumber(Section& d, const std::string& key, const std::string& absent, int64_t auto_value, int64_t max,
                     const std::string& expected) {
  if (!d.Has(key)) d.Set(key, absent);  // the resolved scenario spells the default out
  const std::string text = d.Has(key) ? d.String(key, absent) : absent;
  if (text == "auto") return auto_value;
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    return d.Has(key) ? d.Int(key, 0, 0, max) : std::stoll(absent);
  }
  d.ErrorAt(key, "expected " + expected + ", got '" + text + "'");
  return 0;
}

// deploy: a deployment over a real network (the emulator ignores it).
void ReadDeploy(Section d, Scenario& sc) {
  DeploySpec& dep = sc.deploy;
  dep.security = d.Enum<Security>("security", Security::kCurve, {{"curve", Security::kCurve}, {"plain", Security::kPlain}});
  dep.key_file = d.String("key_file", "");
  dep.heartbeat_s = d.Double("heartbeat_s", 0.5, 0.001, 3600, Bound::kExclusive);
  dep.timeout_s = d.Double("timeout_s", 5.0, 0.001, 86400, Bound::kExclusive);
  dep.on_failure = d.Enum<OnFailure>("on_failure", OnFailure::kContinue,
                                     {{"continue", OnFailure::kContinue}, {"stop", OnFailure::kStop}});
  dep.collective_timeout_s = d.Double("collective_timeout_s", 600.0, 0.001, 1e7, Bound::kExclusive);
  dep.checkpoint_every = d.Int("checkpoint_every", 0, 0);
  // bulk_streams: auto, or a count of connections per peer; max_queued_mb: auto, or megabytes (0: no bound).
  dep.bulk_streams = AutoOrNumber(d, "bulk_streams", "1", DeploySpec::kAutoBulkStreams, 64, "auto or an integer in [0, 64]");
  dep.max_queued_mb = AutoOrNumber(d, "max_queued_mb", "auto", DeploySpec::kAutoMaxQueued, int64_t{1} << 30,
                                   "auto or a whole number of megabytes (0: no bound)");
  if (dep.timeout_s <= dep.heartbeat_s) d.Error(d.node(), "deploy.timeout_s", "must exceed deploy.heartbeat_s");
  d.Finish();
}

// faults: leaves, joins, crashes, corrupt and repeating senders and link outages, in steps or virtual seconds.
void ReadFaults(Section& top, Scenario& sc) {
  top.Items("faults", [&](Section& item, const YAML::Node& node, size_t) {
    FaultSpec f;
    f.kind = item.Enum<FaultKind>("type", FaultKind::kLeave,
                                  {{"leave", FaultKind::kLeave},
                                   {"join", FaultKind::kJoin},
                                   {"crash", FaultKind::kCrash},
                                   {"link_down", FaultKind::kLinkDown},
                                   {"corrupt", FaultKind::kCorrupt},
                                   {"repeat", FaultKind::kRepeat}});
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
      if (item.Has("after_sends")) {
        if (f.kind != FaultKind::kCrash) item.Error(node, item.path() + ".after_sends", "only a crash can come after sends");
        f.after_sends = item.Int("after_sends", 0, 0, int64_t{1} << 40);
        if (f.at_step == 0) item.Error(node, item.path() + ".after_sends", "needs at_step >= 1 (it dies inside step at_step - 1)");
      }
      if (item.Has("stall_s")) {
        if (f.kind != FaultKind::kCrash) item.Error(node, item.path() + ".stall_s", "only a crash can stall first");
        f.stall_s = item.Double("stall_s", 0.0, 0.0, 3600.0);
      }
    }
    if (node.IsDefined() && !node.IsMap()) item.Error(node, item.path(), "expected a mapping");
    sc.faults.push_back(f);
  });
}

// The top-level keys: the run's name (its folder), seed and seeds, device and threads.
void ReadTop(Section& top, const YAML::Node& root, const std::string& origin_name, Scenario& sc) {
  sc.source = origin_name;
  const std::string stem = std::filesystem::path(origin_name).stem().string();
  sc.name = top.String("name", stem.empty() ? "scenario" : stem);
  const bool control = std::any_of(sc.name.begin(), sc.name.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
  if (sc.name.empty() || sc.name.find_first_of("/\\") != std::string::npos || sc.name == "." ||
      sc.name == ".." || control) {
    top.Error(root["name"], "name",
              "expected a non-empty name without '/' or control characters (it names the run folder)");
  }
  sc.seed = static_cast<uint64_t>(top.Int("seed", 0, 0));
  sc.seeds = top.Int("seeds", 1, 1, 1000);
  sc.collective = top.Enum<CollectiveKind>("collective", CollectiveKind::kRing, CollectiveNames());
  sc.device = top.String("device", "cpu");
  if (sc.device != "cpu" && sc.device != "cuda" && sc.device.rfind("cuda:", 0) != 0) {
    top.Error(root["device"], "device", "expected cpu, cuda or cuda:N; got '" + sc.device + "'");
  }
  sc.threads = top.Int("threads", 0, 0, 4096);
}

// eval, output and workers: small blocks that every run has.
void ReadEvalOutputWorkers(Section& top, Scenario& sc) {
  {
    Section e = top.Sub("eval");
    sc.eval.every = e.Int("every", 50, 0);
    sc.eval.batch_size = e.Int("batch_size", sc.train.batch_size, 1, 1 << 20);
    const int64_t batches = (EvalSpec::kDefaultWindows + sc.eval.batch_size - 1) / sc.eval.batch_size;
    sc.eval.batches = e.Int("batches", batches, 1, 1 << 20);
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
}

// compute: measured on this host, or modelled from FLOPs at a device's rate.
void ReadCompute(Section c, Scenario& sc) {
  sc.compute.mode = c.Enum<ComputeMode>("mode", ComputeMode::kMeasured,
                                        {{"measured", ComputeMode::kMeasured}, {"modelled", ComputeMode::kModelled}});
  sc.compute.statistic = c.Enum<ComputeStatistic>(
      "statistic", ComputeStatistic::kMedian, {{"median", ComputeStatistic::kMedian}, {"each", ComputeStatistic::kEach}});
  sc.compute.device_flops = c.Double("device_flops", 1e12, 1e6, 1e18);
  sc.compute.host_bytes_per_s = c.Double("host_bytes_per_s", 0.0, 0.0, 1e15);
  sc.compute.trace = c.String("trace", "");
  if (!sc.compute.trace.empty() && sc.compute.mode != ComputeMode::kModelled) {
    c.ErrorAt("trace", "replays a run's measured compute in modelled time: needs compute.mode: modelled");
  }
  c.Finish();
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
  top.Items("compare", [&](Section& item, const YAML::Node& node, size_t i) {
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
      top.Error(root["compare"], "compare", "two entries are named '" + a.name + "'; give one a name:");
    }
  }
}

// warm_start: pre-training shared by every entry (steps here, or a checkpoint); entries must fit it.
void ReadWarmStart(Section& top, const YAML::Node& root, Scenario& sc) {
  Section w = top.Sub("warm_start");
  sc.warm_start.steps = w.Int("steps", 0, 0, 100'000'000);
  sc.warm_start.checkpoint = w.String("checkpoint", "");
  sc.warm_start.optimizer = w.Enum<WarmStartOptimizer>(
      "optimizer", WarmStartOptimizer::kFresh,
      {{"fresh", WarmStartOptimizer::kFresh}, {"continued", WarmStartOptimizer::kContinued}});
  if (sc.warm_start.optimizer == WarmStartOptimizer::kContinued && !sc.warm_start.enabled()) {
    w.ErrorAt("optimizer", "continued needs a warm start (steps or checkpoint)");
  }
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

std::vector<std::pair<std::string, ModelSpec>> ModelPresets() {
  std::vector<std::pair<std::string, ModelSpec>> out;
  for (const auto& p : kPresets) {
    ModelSpec m;
    m.preset = p.name;
    m.d_model = p.d_model;
    m.n_layers = p.n_layers;
    m.n_heads = p.n_heads;
    m.seq_len = p.seq_len;
    m.vocab_size = p.vocab_size;
    out.emplace_back(p.name, m);
  }
  return out;
}

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
    NARROWS_RETURN_IF_ERROR(ApplyOverride(root, o));
    origin.overrides[o.key_path] = o.flag + " " + o.text;
  }

  std::vector<std::string> errors;
  YAML::Node resolved(YAML::NodeType::Map);
  Section top(root, "", &origin, &errors, resolved);
  Scenario sc;
  ReadTop(top, root, origin_name, sc);

  ReadData(top.Sub("data"), sc);
  ReadModel(top.Sub("model"), &sc.model, sc.data.vocab_size);
  ReadTrain(top.Sub("train"), sc);
  ReadEvalOutputWorkers(top, sc);
  ReadNetwork(top.Sub("network"), sc);
  ReadCompute(top.Sub("compute"), sc);
  ReadDeploy(top.Sub("deploy"), sc);
  ReadFaults(top, sc);

  ReadCompare(top, root, sc);
  sc.target_loss = top.Double("target_loss", 0.0, 0.0, 100.0);
  ReadWarmStart(top, root, sc);
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
