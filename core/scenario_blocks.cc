// The scenario's blocks that every run has, each read from its own mapping: data, train, eval,
// output, workers, compute, deploy, a fault and warm_start, with their declared keys (the model
// block is in core/scenario_model.cc). Part of ParseScenario (core/scenario.cc), which hands each
// its Section.
#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <cstdio>

#include "core/scenario.h"
#include "core/section.h"

namespace narrows::core {
namespace {

using internal::Section;

// The declared keys of the blocks (core/keys.h); `narrows reference` prints them.
const KeyBlock kData("data", "Where the tokens come from, and how they are split and sampled.");
const TextKey kPath(kData, "path", "austen",
                    Doc("austen, multi, a text file, a folder of text files or of folders (one domain each), a .bin shard, "
                        "a folder of shards, or a glob"));
const EnumKey<DataFormat> kFormat(kData, "format",
                                  {{"auto", DataFormat::kAuto},
                                   {"austen", DataFormat::kAusten},
                                   {"multi", DataFormat::kMulti},
                                   {"text", DataFormat::kText},
                                   {"shards", DataFormat::kShards}},
                                  DataFormat::kAuto, Doc("auto: .bin files, globs and all-.bin folders are shards"));
const TextKey kValPath(kData, "val_path", "", Doc("separate validation data; otherwise split from path"));
const IntKey kVocabSize(kData, "vocab_size", 256, 2, 65536,
                        Doc("token ids must be below it", "", "256 (text), 50257 (shards)"));
const NumberKey kValFraction(kData, "val_fraction", 0.05, 0.0, 0.5,
                             Doc("every round(1/val_fraction)-th block of 64 Ki tokens of each domain is validation"),
                             Bound::kExclusive);
const EnumKey<Sampling> kSampling(kData, "sampling",
                                  {{"iid", Sampling::kIid}, {"non-iid", Sampling::kNonIid}, {"by-domain", Sampling::kByDomain}},
                                  Sampling::kIid,
                                  Doc("iid: all data; non-iid: worker w of M the w-th 1/M; by-domain: domain w mod D plus "
                                      "a domain_mix share of all"));
const IntKey kDomainTokens(kData, "domain_tokens", 0, 0, kNoMax, Doc("keep the first this-many tokens of every domain; 0: all",
                                                                     "tokens"));
const NumberKey kDomainMix(kData, "domain_mix", 0.1, 0.0, 1.0,
                           Doc("by-domain: the share of a worker's sequences drawn from the whole corpus"));

const KeyBlock kTrain("train", "The inner optimisation every entry shares.");
const IntKey kSteps(kTrain, "steps", 200, 1, kNoMax, Doc("optimiser steps per worker", "steps"));
const IntKey kBatchSize(kTrain, "batch_size", 16, 1, 1 << 20, Doc("sequences per step per worker", "sequences"));
const IntKey kGradAccum(kTrain, "grad_accum", 1, 1, 1 << 20, Doc("micro-batches per step; must divide batch_size"));
const NumberKey kLr(kTrain, "lr", 3e-3, 0.0, 10.0, Doc("peak learning rate of the inner optimiser"), Bound::kExclusive);
const EnumKey<LrSchedule> kSchedule(kTrain, "schedule", {{"cosine", LrSchedule::kCosine}, {"constant", LrSchedule::kConstant}},
                                    LrSchedule::kCosine, Doc("after warm-up: cosine to lr * min_lr_ratio at steps, or constant"));
const IntKey kWarmupSteps(kTrain, "warmup_steps", 20, 0, kNoMax, Doc("linear warm-up", "steps", "min(20, steps / 10)"));
const NumberKey kMinLrRatio(kTrain, "min_lr_ratio", 0.1, 0.0, 1.0, Doc("the cosine schedule's final lr over lr"));
const NumberKey kWeightDecay(kTrain, "weight_decay", 0.1, 0.0, 10.0,
                             Doc("decoupled (AdamW); matrices only, never LayerNorm gains or biases"));
const NumberKey kBeta1(kTrain, "beta1", 0.9, 0.0, 1.0, Doc("AdamW's first-moment decay"));
const NumberKey kBeta2(kTrain, "beta2", 0.95, 0.0, 1.0, Doc("AdamW's second-moment decay"));
const NumberKey kEps(kTrain, "eps", 1e-8, 0.0, 1.0, Doc("AdamW's epsilon"), Bound::kExclusive);
const NumberKey kGradClip(kTrain, "grad_clip", 1.0, 0.0, 1e9, Doc("global L2 norm; 0 disables"));
const EnumKey<Precision> kPrecision(kTrain, "precision", {{"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}},
                                    Precision::kFp32,
                                    Doc("bf16: matrix products, attention and GELU in bfloat16, the rest float32 (a torchscript model: under "
                                        "LibTorch's bf16 autocast, as torch.autocast)"));
const ChoiceKey kOptimizer(kTrain, "optimizer", {}, "adamw",
                           Doc("the inner optimiser, a registered plug-in that reads its own block train.<optimizer>"),
                           "a registered inner optimiser (adamw, muon)");

const KeyBlock kEval("eval", "Validation: how often, and on how many fixed batches.");
const IntKey kEvery(kEval, "every", 50, 0, kNoMax,
                    Doc("steps between evaluations; 0: only at the end (the last step is always evaluated)", "steps"));
const IntKey kEvalBatchSize(kEval, "batch_size", 16, 1, 1 << 20, Doc("sequences per validation batch", "", "train.batch_size"));
const IntKey kBatches(kEval, "batches", 64, 1, 1 << 20,
                      Doc("fixed validation batches spread over the validation data, the same in every run", "",
                          "enough for 1024 windows"));

const KeyBlock kOutput("output", "Where a run's folder goes and how often it logs.");
const TextKey kDir(kOutput, "dir", "runs", Doc("parent of run folders"));
const IntKey kLogEvery(kOutput, "log_every", 10, 1, kNoMax,
                       Doc("steps between metrics.jsonl lines (evaluations and the last step are always logged)", "steps"));

const KeyBlock kWorkers("workers", "The replicas: how many, and how fast each computes.");
const IntKey kCount(kWorkers, "count", 1, 1, 4096,
                     Doc("number of workers (replicas) M; auto: the world size of the launcher that starts `narrows worker` "
                         "(torchrun, srun, mpirun)"));
const NumbersKey kSpeed(kWorkers, "speed", 1.0, 1e-3, 1e3,
                        Doc("compute speed factor, one for all or a list of M; 0.5 takes twice as long per step"));

const KeyBlock kCompute("compute", "What a step's computation costs in virtual time: measured on this host, or modelled.");
const EnumKey<ComputeMode> kMode(kCompute, "mode", {{"measured", ComputeMode::kMeasured}, {"modelled", ComputeMode::kModelled}},
                                 ComputeMode::kMeasured,
                                 Doc("measured: this host's time; modelled: the step's FLOPs / device_flops (the same on every machine)"));
const EnumKey<ComputeStatistic> kStatistic(kCompute, "statistic",
                                           {{"median", ComputeStatistic::kMedian}, {"each", ComputeStatistic::kEach}},
                                           ComputeStatistic::kMedian,
                                           Doc("measured: median charges the median host rate of the last 31 steps; each, "
                                               "every computation its own time"));
const NumberKey kDeviceFlops(kCompute, "device_flops", 1e12, 1e6, 1e18, Doc("modelled: sustained rate of a worker at speed 1",
                                                                             "FLOP/s"));
const NumberKey kHostBytesPerS(kCompute, "host_bytes_per_s", 0.0, 0.0, 1e15,
                               Doc("the rate a worker's host handles a message's bytes outside the network; 0: free",
                                   "bytes/s"));
const TextKey kTrace(kCompute, "trace", "",
                     Doc("modelled: a run's entry metrics.jsonl (logged every step) whose compute is replayed step by step"));

const KeyBlock kDeploy("deploy", "A deployment over a real network: security, liveness and the bulk plane.");
const EnumKey<Security> kSecurity(kDeploy, "security", {{"curve", Security::kCurve}, {"plain", Security::kPlain}},
                                  Security::kCurve,
                                  Doc("curve: ZeroMQ CURVE, authenticated and encrypted; plain: unencrypted TCP"));
const TextKey kKeyFile(kDeploy, "key_file", "", Doc("curve: the key pair file (narrows keygen); --key overrides"));
const NumberKey kHeartbeatS(kDeploy, "heartbeat_s", 0.5, 0.001, 3600, Doc("interval of heartbeats", "s"), Bound::kExclusive);
const NumberKey kTimeoutS(kDeploy, "timeout_s", 5.0, 0.001, 86400,
                          Doc("a worker not heard from for this long is dead; must exceed heartbeat_s", "s"), Bound::kExclusive);
const EnumKey<OnFailure> kOnFailure(kDeploy, "on_failure", {{"continue", OnFailure::kContinue}, {"stop", OnFailure::kStop}},
                                    OnFailure::kContinue, Doc("DDP when a worker dies: continue with the survivors, or stop"));
const NumberKey kCollectiveTimeoutS(kDeploy, "collective_timeout_s", 600.0, 0.001, 1e7,
                                    Doc("a collective that receives nothing for this long fails", "s"), Bound::kExclusive);
const IntKey kCheckpointEvery(kDeploy, "checkpoint_every", 0, 0, kNoMax, Doc("rounds between live checkpoints; 0: none",
                                                                             "rounds"));
const TextKey kBulkStreams(kDeploy, "bulk_streams", "1",
                           Doc("TCP connections per peer of the bulk plane; auto: from the bandwidth-delay product; "
                               "0: ZeroMQ carries everything"),
                           "auto, [0, 64]");
const TextKey kMaxQueuedMb(kDeploy, "max_queued_mb", "auto",
                           Doc("per sender, the messages that may wait unread at a receiver before it is evicted; "
                               "auto: 1 GiB + 4 model sizes; 0: no bound",
                               "MB"),
                           "auto, [0, 2^30]");

const KeyBlock kFaults("faults[]", "One fault: a worker leaving, joining or crashing at a step, or a link down for a while.");
const EnumKey<FaultKind> kType(kFaults, "type",
                               {{"leave", FaultKind::kLeave},
                                {"join", FaultKind::kJoin},
                                {"crash", FaultKind::kCrash},
                                {"link_down", FaultKind::kLinkDown},
                                {"corrupt", FaultKind::kCorrupt},
                                {"repeat", FaultKind::kRepeat}},
                               FaultKind::kLeave,
                               Doc("leave (keeps its state), join, crash (loses it), link_down, and a deployment's "
                                   "corrupt and repeat senders"));
const TextKey kFaultLink(kFaults, "link", "worker:0", Doc("link_down: worker:N (its access link) or wan:K"));
const NumberKey kFromS(kFaults, "from_s", 0.0, 0.0, 1e12, Doc("link_down: when the outage starts, in virtual time", "s"));
const NumberKey kToS(kFaults, "to_s", 0.0, 0.0, 1e12, Doc("link_down: when it ends; after from_s", "s"));
const IntKey kFaultWorker(kFaults, "worker", 0, 0, kNoMax, Doc("the worker; below workers.count"));
const IntKey kAtStep(kFaults, "at_step", 0, 0, kNoMax, Doc("the step before which it happens; below train.steps", "steps"));
const IntKey kAfterSends(kFaults, "after_sends", 0, 0, int64_t{1} << 40,
                         Doc("crash: dies inside step at_step - 1 after this many sends (at_step >= 1)"));
const NumberKey kStallS(kFaults, "stall_s", 0.0, 0.0, 3600.0, Doc("crash: stalls this long before it dies", "s"));

const KeyBlock kWarmStart("warm_start", "Pre-training every entry starts from: steps run here, or a checkpoint.");
const IntKey kWarmSteps(kWarmStart, "steps", 0, 0, 100'000'000, Doc("pre-training steps run first, on one worker", "steps"));
const TextKey kCheckpoint(kWarmStart, "checkpoint", "", Doc("a narrows train model.ckpt; not with steps"));
const EnumKey<WarmStartOptimizer> kWarmOptimizer(
    kWarmStart, "optimizer", {{"fresh", WarmStartOptimizer::kFresh}, {"continued", WarmStartOptimizer::kContinued}},
    WarmStartOptimizer::kFresh, Doc("the inner optimiser's state: fresh, or continued from the warm start"));

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

// A key that is `auto` (then `auto_value`) or a whole number in [0, max]; its declared default is
// its text when the key is not given; `expected` names both forms in the error.
int64_t AutoOrNumber(Section& d, const TextKey& declared, int64_t auto_value, int64_t max, const std::string& expected) {
  const std::string& key = declared.info.name;
  const std::string& absent = declared.fallback;
  if (!d.Has(key)) d.Set(key, absent);  // the resolved scenario spells the default out
  const std::string text = d.Has(key) ? d.String(key, absent) : absent;
  if (text == "auto") return auto_value;
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    return d.Has(key) ? d.Int(key, 0, 0, max) : std::stoll(absent);
  }
  d.ErrorAt(key, "expected " + expected + ", got '" + text + "'");
  return 0;
}

}  // namespace

namespace internal {

// data: where the tokens come from and how they are split and sampled.
void ReadData(Section d, Scenario& sc) {
  DataSpec& data = sc.data;
  data.path = d.String(kPath);
  data.format = d.Enum(kFormat);
  data.val_path = d.String(kValPath);
  const bool shards = data.format == DataFormat::kShards ||
                      (data.format == DataFormat::kAuto &&
                       data.path.size() > 4 && data.path.substr(data.path.size() - 4) == ".bin");
  data.vocab_size = d.Int(kVocabSize, shards ? 50257 : 256);
  data.val_fraction = d.Double(kValFraction);
  data.sampling = d.Enum(kSampling);
  data.domain_tokens = d.Int(kDomainTokens);
  data.domain_mix = d.Double(kDomainMix);
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
  tr.steps = t.Int(kSteps);
  tr.batch_size = t.Int(kBatchSize);
  tr.grad_accum = t.Int(kGradAccum);
  if (tr.batch_size % tr.grad_accum != 0) {
    t.Error(t.node(), "train.grad_accum",
            "batch_size (" + std::to_string(tr.batch_size) + ") must be divisible by grad_accum (" +
                std::to_string(tr.grad_accum) + ")");
  }
  tr.lr = t.Double(kLr);
  tr.schedule = t.Enum(kSchedule);
  tr.warmup_steps = t.Int(kWarmupSteps, std::min<int64_t>(20, tr.steps / 10));
  tr.min_lr_ratio = t.Double(kMinLrRatio);
  tr.weight_decay = t.Double(kWeightDecay);
  tr.beta1 = t.Double(kBeta1);
  tr.beta2 = t.Double(kBeta2);
  tr.eps = t.Double(kEps);
  tr.grad_clip = t.Double(kGradClip);
  tr.precision = t.Enum(kPrecision);
  tr.optimizer = t.String(kOptimizer.info.name, kOptimizer.fallback);
  tr.optimizer_options = ReadBlockPlugin(t, BlockSlot::kInnerOptimizer, "optimizer", tr.optimizer, sc);
  t.Finish();
}
// deploy: a deployment over a real network (the emulator ignores it).
void ReadDeploy(Section d, Scenario& sc) {
  DeploySpec& dep = sc.deploy;
  dep.security = d.Enum(kSecurity);
  dep.key_file = d.String(kKeyFile);
  dep.heartbeat_s = d.Double(kHeartbeatS);
  dep.timeout_s = d.Double(kTimeoutS);
  dep.on_failure = d.Enum(kOnFailure);
  dep.collective_timeout_s = d.Double(kCollectiveTimeoutS);
  dep.checkpoint_every = d.Int(kCheckpointEvery);
  // bulk_streams: auto, or a count of connections per peer; max_queued_mb: auto, or megabytes (0: no bound).
  dep.bulk_streams = AutoOrNumber(d, kBulkStreams, DeploySpec::kAutoBulkStreams, 64, "auto or an integer in [0, 64]");
  dep.max_queued_mb = AutoOrNumber(d, kMaxQueuedMb, DeploySpec::kAutoMaxQueued, int64_t{1} << 30,
                                   "auto or a whole number of megabytes (0: no bound)");
  if (dep.timeout_s <= dep.heartbeat_s) d.Error(d.node(), "deploy.timeout_s", "must exceed deploy.heartbeat_s");
  d.Finish();
}
// An item of faults: a leave, join, crash, corrupt or repeating sender, or a link outage.
FaultSpec ReadFault(Section& item, const YAML::Node& node, const Scenario& sc) {
    FaultSpec f;
    item.Require({"type"}, "a fault");
    f.kind = item.Enum(kType);
    if (f.kind == FaultKind::kLinkDown) {
      item.Require({"link", "from_s", "to_s"}, "a link_down fault");
      f.link = item.String(kFaultLink);
      f.from_s = item.Double(kFromS);
      f.to_s = item.Double(kToS);
      if (!ValidLinkName(f.link, sc.workers.count, static_cast<int>(sc.network.islands.size()))) {
        item.Error(node, item.path() + ".link", "expected worker:N or wan:K naming an existing link, got '" + f.link + "'");
      }
      if (f.to_s <= f.from_s) item.Error(node, item.path() + ".to_s", "must be after from_s");
    } else {
      std::string kind;
      for (const auto& [name, k] : kType.values) {
        if (k == f.kind) kind = name;
      }
      if (item.Has("type")) item.Require({"worker", "at_step"}, "a " + kind + " fault");
      f.worker = static_cast<int>(item.Int(kFaultWorker, 0, 0, sc.workers.count - 1));
      f.at_step = item.Int(kAtStep, 0, 0, sc.train.steps - 1);
      if (item.Has("after_sends")) {
        if (f.kind != FaultKind::kCrash) item.Error(node, item.path() + ".after_sends", "only a crash can come after sends");
        f.after_sends = item.Int(kAfterSends);
        if (f.at_step == 0) item.Error(node, item.path() + ".after_sends", "needs at_step >= 1 (it dies inside step at_step - 1)");
      }
      if (item.Has("stall_s")) {
        if (f.kind != FaultKind::kCrash) item.Error(node, item.path() + ".stall_s", "only a crash can stall first");
        f.stall_s = item.Double(kStallS);
      }
    }
    if (node.IsDefined() && !node.IsMap()) item.Error(node, item.path(), "expected a mapping");
    return f;
}
void ReadEval(Section e, Scenario& sc) {
  sc.eval.every = e.Int(kEvery);
  sc.eval.batch_size = e.Int(kEvalBatchSize, sc.train.batch_size);
  const int64_t batches = (EvalSpec::kDefaultWindows + sc.eval.batch_size - 1) / sc.eval.batch_size;
  sc.eval.batches = e.Int(kBatches, batches);
  e.Finish();
}

void ReadOutput(Section o, Scenario& sc) {
  sc.output.dir = o.String(kDir);
  sc.output.log_every = o.Int(kLogEvery);
  o.Finish();
}

void ReadWorkers(Section w, Scenario& sc) {
  if (w.Has("count") && w.node()["count"].IsScalar() && w.node()["count"].Scalar() == "auto") {
    // A launcher's world size replaces it (core::Override::only_where_auto) before the file is read.
    w.ErrorAt("count", "auto takes the number of workers from a launcher (narrows worker under torchrun, srun or "
                       "mpirun, which set the world size); give a number to run without one");
    sc.workers.count = 1;
    sc.workers.speed.assign(1, 1.0);
    return;
  }
  sc.workers.count = static_cast<int>(w.Int(kCount));
  sc.workers.speed = w.DoubleList(kSpeed, static_cast<size_t>(sc.workers.count));
  w.Finish();
}

// compute: measured on this host, or modelled from FLOPs at a device's rate.
void ReadCompute(Section c, Scenario& sc) {
  sc.compute.mode = c.Enum(kMode);
  sc.compute.statistic = c.Enum(kStatistic);
  sc.compute.device_flops = c.Double(kDeviceFlops);
  sc.compute.host_bytes_per_s = c.Double(kHostBytesPerS);
  sc.compute.trace = c.String(kTrace);
  if (!sc.compute.trace.empty() && sc.compute.mode != ComputeMode::kModelled) {
    c.ErrorAt("trace", "replays a run's measured compute in modelled time: needs compute.mode: modelled");
  } else if (!sc.compute.trace.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(sc.compute.trace, ec)) {
      c.ErrorAt("trace", "'" + sc.compute.trace + "' is not a file (an entry's metrics.jsonl of a run logged every step)");
    }
  }
  c.Finish();
}
// warm_start: pre-training shared by every entry (steps here, or a checkpoint); entries must fit it.
void ReadWarmStart(Section w, Scenario& sc) {
  sc.warm_start.steps = w.Int(kWarmSteps);
  sc.warm_start.checkpoint = w.String(kCheckpoint);
  sc.warm_start.optimizer = w.Enum(kWarmOptimizer);
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
}

}  // namespace internal

}  // namespace narrows::core
