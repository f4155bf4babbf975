// Scenario: everything one narrows experiment is made of, resolved from a YAML file.
//
// LoadScenario reads a file, applies dotted command-line overrides (`--set train.lr=3e-4`),
// fills defaults (model presets first, then explicit keys), and checks every value. Unknown keys,
// wrong types and out-of-range values are InvalidArgument errors that name the file, line, column
// and key path; all errors of a file are reported together. The schema is docs/scenarios.md.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/algorithm_registry.h"
#include "core/block_plugins.h"
#include "core/check.h"
#include "core/status.h"

namespace narrows::core {

enum class Positions { kLearned, kRope };
// A torchscript module's float32 buffers: each replica's own, or averaged among a round's members.
enum class ModelBuffers { kLocal, kAveraged };
enum class Parameterization { kStandard, kCompleteP };
enum class DataFormat { kAuto, kAusten, kMulti, kText, kShards };
enum class Sampling { kIid, kNonIid, kByDomain };
enum class LrSchedule { kCosine, kConstant };
// The arithmetic of a replica's forward and backward passes. kBf16: matrix products, attention and
// GELU in bfloat16; LayerNorm, the residual stream, the loss, the gradients, the master weights and
// the optimiser in float32 (as PyTorch's autocast to bfloat16).
enum class Precision { kFp32, kBf16 };

struct ModelSpec {
  std::string preset = "tiny";
  int64_t d_model = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t seq_len = 128;
  int64_t mlp_ratio = 4;
  int64_t vocab_size = 256;  // from the data: 256 for bytes, data.vocab_size for shards
  Positions positions = Positions::kLearned;
  double init_std = 0.02;
  // CompleteP (arXiv 2505.01618): multipliers m_d = n_layers / base_depth, m_w = d_model / base_width.
  Parameterization parameterization = Parameterization::kStandard;
  int64_t base_depth = 4;
  int64_t base_width = 128;
  double depth_alpha = 1.0;  // completep: residual branches scaled by m_d^-depth_alpha (0.5 to 1)
  // A TorchScript module of the user's instead of the built-in GPT (trainer/script_model.h); its
  // parameters come from the file, its FLOPs per token from flops_per_token (0: measured from a
  // profiled step), its float32 buffers kept per replica or averaged (buffers).
  std::string torchscript;
  double flops_per_token = 0.0;
  ModelBuffers buffers = ModelBuffers::kLocal;
};

struct DataSpec {
  // "austen", "multi" (the multi-domain corpus tools/setup builds), a text file, a folder (a folder
  // of folders: a domain per folder), a .bin shard, or a glob of shards
  std::string path = "austen";
  DataFormat format = DataFormat::kAuto;
  std::string val_path;          // optional separate validation shards/text
  int64_t vocab_size = 256;      // for shards; text is always bytes (256)
  double val_fraction = 0.05;    // when no val_path: every 1/val_fraction-th block is held out
  Sampling sampling = Sampling::kIid;
  // At most this many tokens of each domain, its first (0: all of them): an equal-sized mixture.
  int64_t domain_tokens = 0;
  // by-domain sampling: the share of a worker's sequences drawn from the whole corpus rather than
  // from its own domain.
  double domain_mix = 0.1;
};

struct TrainSpec {
  int64_t steps = 200;
  int64_t batch_size = 16;  // sequences per optimizer step per worker (after accumulation)
  int64_t grad_accum = 1;   // micro-batches per step; batch_size must divide by it
  double lr = 3e-3;
  LrSchedule schedule = LrSchedule::kCosine;
  int64_t warmup_steps = 20;
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // global L2 norm; 0 disables
  Precision precision = Precision::kFp32;
  // The inner optimiser, a registered plug-in (trainer/inner_optimizer.h), and what it read from
  // train.<optimizer> (null: its defaults). weight_decay, beta1, beta2 and eps above are shared by
  // the Adam-family updates every built-in optimiser applies somewhere.
  std::string optimizer = "adamw";
  std::shared_ptr<const PluginOptions> optimizer_options;

  // The optimiser's options as its own type, or null where the scenario gave none (defaults).
  template <typename T>
  const T* OptimizerOptions() const {
    if (!optimizer_options) return nullptr;
    const T* o = dynamic_cast<const T*>(optimizer_options.get());
    NARROWS_CHECK(o != nullptr) << "inner optimiser '" << optimizer << "' has no options of the type asked for";
    return o;
  }
};

struct EvalSpec {
  // The default validation set: enough batches for this many windows. On the quickstart's model the
  // windows' losses spread by about 0.13 nats, so 1024 windows give a standard error near 0.004.
  static constexpr int64_t kDefaultWindows = 1024;
  int64_t every = 50;     // steps between evaluations; the last step is always evaluated
  int64_t batches = kDefaultWindows / 16;  // fixed validation batches, the same for every evaluation and run
  int64_t batch_size = 16;
};

struct OutputSpec {
  std::string dir = "runs";
  int64_t log_every = 10;  // steps between metrics.jsonl lines (the last step is always logged)
};

// One link's parameters (one direction of an access or WAN link).
struct LinkSpec {
  double bandwidth_bps = 100e6;
  double latency_ms = 30.0;  // one-way, end to end for access links (split over up and down)
  double loss = 0.0;         // packet loss probability (in the good state, with bursts)
  // Bursty loss (`burst:`), Gilbert-Elliott in time: good and bad stays of these mean lengths
  // (exponential), `burst_loss` in the bad state. burst_good_s 0: no bursts.
  double burst_good_s = 0.0, burst_bad_s = 0.0, burst_loss = 0.0;
};

enum class TopologyKind { kStar, kIslands };

struct NetworkSpec {
  std::string model = "analytic";       // a registered network model (core/block_plugins.h)
  std::shared_ptr<const PluginOptions> model_options;  // what the model read from network.<model>
  int mtu = 1500;                       // IP packet size: 1500, or 9000 for jumbo frames
  // Each link's drop-tail queue, in ms at the link's bandwidth (at least 64 KiB); 0: each model's
  // own (the link emulator 100 ms, ns-3 `ns3.queue_packets`, the analytic model none).
  double queue_ms = 0.0;
  // Each worker's interface rate (bits/s): its packets reach its access link's queue at this pace,
  // as a NIC faster than its link feeds a router (the link emulator, ns-3, and the analytic model's
  // window with its queues). 0: a window reaches the queue at once.
  double nic_bps = 0.0;
  // The run fails when a message in transit moves no byte this long (virtual seconds; 0: never).
  double stall_timeout_s = 600.0;
  std::string profile = "home-100m";  // dc-400g, dc-100g, region-10g, internet-1g, home-100m, custom
  TopologyKind topology = TopologyKind::kStar;
  LinkSpec link;                        // every worker's access link (star) or the WAN (islands)
  std::vector<std::vector<int>> islands;  // islands: the workers of each island
  LinkSpec intra;                       // islands: access links inside an island
  struct Override {
    int worker = 0;
    LinkSpec link;
  };
  std::vector<Override> overrides;      // per-worker access links
  struct Change {
    std::string link;  // "worker:N" (both directions of its access link) or "wan:K"
    double at_s = 0.0;
    double bandwidth_bps = 0.0;
  };
  std::vector<Change> schedule;         // bandwidth changes over virtual time

  // The model's options as its own type; asking for another model's is a broken invariant.
  template <typename T>
  const T& ModelOptions() const {
    const T* o = dynamic_cast<const T*>(model_options.get());
    NARROWS_CHECK(o != nullptr) << "network model '" << model << "' has no options of the type asked for";
    return *o;
  }
};

struct WorkersSpec {
  int count = 1;
  std::vector<double> speed;  // per-worker compute speed factors (size count), 1 = nominal
};

enum class ComputeMode { kMeasured, kModelled };
// What a measured step is charged: the median host rate (seconds per FLOP) of the worker's recent
// computations times the step's FLOPs, so a host hiccup does not become virtual time; or each
// computation's own host time.
enum class ComputeStatistic { kMedian, kEach };
struct ComputeSpec {
  ComputeMode mode = ComputeMode::kMeasured;
  ComputeStatistic statistic = ComputeStatistic::kMedian;
  double device_flops = 1e12;  // modelled: sustained FLOP/s of one worker at speed 1
  // The emulator: the rate at which a worker's host handles a message's bytes outside the network
  // (framing, integrity check, copies, reduction; sim/host_work.h), on the sending and on the
  // receiving host. 0: free.
  double host_bytes_per_s = 0.0;
  // modelled: each worker's compute per step as a run measured it, replayed (a run's entry
  // metrics.jsonl, logged every step; trainer/compute_trace.h). "": FLOPs / device_flops.
  std::string trace;
};

// kCorrupt, a deployment's only: from at_step on, the worker's process sends every message to
// another short of its last 4 bytes (well-formed, authenticated frames a collective cannot use: a
// broken or hostile peer), so that its members evict it (docs/explanation/deployment.md).
// kRepeat, likewise: from at_step on it sends every message twice under one sequence number (a
// duplicating peer).
enum class FaultKind { kLeave, kJoin, kCrash, kLinkDown, kCorrupt, kRepeat };
struct FaultSpec {
  FaultKind kind = FaultKind::kLeave;
  int worker = 0;        // leave, join, crash, corrupt
  int64_t at_step = 0;   // leave, join, crash, corrupt: takes effect before this step (0-based)
  // crash, in a deployment only: the process dies inside step at_step - 1 instead, just before its
  // (after_sends + 1)-th message of that step (inside the step's collective); -1: between steps.
  int64_t after_sends = -1;
  double stall_s = 0.0;  // crash, in a deployment only: the process hangs this long before it dies
  std::string link;      // link_down: "worker:N" or "wan:K"
  double from_s = 0.0, to_s = 0.0;  // link_down: the interval of virtual time
};

// How an entry's all-reduces run (core/collectives.h): a ring, a star through worker 0, rings
// within islands joined across them, two-phase (reduce-scatter to owners, all-gather, each message
// sent at once) or a binary tree. Lossy dense outer-gradient codecs run over any of them but
// hierarchical (two-phase instead); sparse ones always all-gather.
// kAuto: the fastest the planner predicts for the entry among those its format allows (resolved
// before the run by tools/cli/plan_command.h ResolveAutoCollectives; the trainer never sees it).
enum class CollectiveKind { kRing, kStar, kHierarchical, kTwoPhase, kTree, kAuto };

// What the survivors of a deployment do when a worker dies during DDP's all-reduce: repeat the
// step's all-reduce among themselves, or stop with an error (the metrics so far are written).
enum class OnFailure { kContinue, kStop };

// How a deployment's processes talk: ZeroMQ CURVE, authenticated and encrypted (the bulk plane's
// records sealed with a key derived from the cluster key), or plain TCP.
enum class Security { kCurve, kPlain };

// A deployment over a real network (`narrows worker`, `narrows launch`); the emulator ignores it.
struct DeploySpec {
  Security security = Security::kCurve;
  std::string key_file;                // curve: the cluster key pair (narrows keygen)
  double heartbeat_s = 0.5;
  double timeout_s = 5.0;              // a peer silent this long is declared dead
  OnFailure on_failure = OnFailure::kContinue;
  double collective_timeout_s = 600.0;  // a collective that makes no progress this long fails
  int64_t checkpoint_every = 0;        // diloco: outer steps between checkpoints of the global state
  // Data over k raw TCP connections per peer (the bulk plane) instead of ZeroMQ's data socket;
  // 0: ZeroMQ; kAutoBulkStreams: from the network's bandwidth-delay product.
  int64_t bulk_streams = 1;
  static constexpr int64_t kAutoBulkStreams = -1;
  // Per sender, the bytes of its messages queued unread at a receiver beyond which the receiver
  // evicts it (a member that floods messages no receive takes); 0: no bound; kAutoMaxQueued: 1 GiB
  // plus four times the model's float32 size (more than any collective queues).
  int64_t max_queued_mb = kAutoMaxQueued;
  static constexpr int64_t kAutoMaxQueued = -1;
};

// One entry of `compare:`: what the scenario reads itself (name, algorithm, depth, collective), and
// the options its algorithm read from the rest of the entry (core/algorithm_registry.h; the
// algorithm's file says what they are).
struct AlgorithmSpec {
  std::string name;
  std::string algorithm;  // a registered algorithm's name
  // The entry's model depth, when it differs from model.n_layers (0: the model's): to compare a
  // modular model's path with dense models of the same path size and of the same total size.
  int64_t n_layers = 0;
  CollectiveKind collective = CollectiveKind::kRing;
  bool collective_auto = false;  // `collective` was chosen for `auto`
  // The entry the others are compared with (speed-ups, paired verdicts, a sweep's and a study's
  // reference): `baseline: true` on one entry, by default the first.
  bool baseline = false;
  std::shared_ptr<const AlgorithmOptions> options;

  // The options as the algorithm's own type; asking for another algorithm's is a broken invariant.
  template <typename T>
  const T& Options() const {
    const T* o = dynamic_cast<const T*>(options.get());
    NARROWS_CHECK(o != nullptr) << "entry '" << name << "' (" << algorithm << ") has no options of the type asked for";
    return *o;
  }
};

// Every entry of `compare:` starts from the same weights (the DiLoCo papers' setting): a model file
// written by `narrows train` (<run folder>/model.ckpt), or `steps` of single-replica pre-training
// done once and kept in the run folder, keyed by the model, data, seed and training settings.
// What the entries take from a warm start besides its weights: nothing (a fresh inner optimiser
// that warms its learning rate up again), or its inner optimiser's state and its place in the
// learning-rate schedule (one training run that the warm start began).
enum class WarmStartOptimizer { kFresh, kContinued };

struct WarmStartSpec {
  int64_t steps = 0;       // > 0: pre-train this many steps (the scenario's train settings)
  std::string checkpoint;  // or: start from this file
  WarmStartOptimizer optimizer = WarmStartOptimizer::kFresh;
  bool enabled() const { return steps > 0 || !checkpoint.empty(); }
};

struct Scenario {
  std::string name;
  std::string source;  // the file it came from ("" for built-in)
  uint64_t seed = 0;
  // Runs of every entry, with seeds seed, seed + 1, ...: initialisation and data order differ
  // between seeds, and the entries share each seed, so that comparisons are paired.
  int64_t seeds = 1;
  // The collective of every entry that names none (an entry's `collective:` overrides it).
  CollectiveKind collective = CollectiveKind::kRing;
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:N"
  int64_t threads = 0;         // CPU intra-op threads; 0 = all cores
  ModelSpec model;
  DataSpec data;
  TrainSpec train;
  EvalSpec eval;
  OutputSpec output;
  WorkersSpec workers;
  NetworkSpec network;
  ComputeSpec compute;
  std::vector<FaultSpec> faults;
  DeploySpec deploy;
  std::vector<AlgorithmSpec> compare;  // empty: `narrows run` runs ddp alone
  double target_loss = 0.0;            // > 0: compare entries at this loss (else at the worst final one)
  WarmStartSpec warm_start;
  // The fully resolved scenario (every key, defaults included) as YAML text, for run folders.
  std::string resolved_yaml;
};

// One `--set key.path=value` override. The value is parsed as YAML (so `3e-4` is a number and
// `[1, 2]` a list).
struct Override {
  std::string key_path;
  std::string value;
  std::string text;  // as the user typed it, for error messages
  std::string flag = "--set";  // the option that gave it (a sweep's and a tune's grid: --grid)
  // Applied only where the scenario gives the key as `auto` (a launcher's world size for
  // `workers.count: auto`); elsewhere it changes nothing.
  bool only_where_auto = false;
};

// Parses "a.b.c=value". InvalidArgument if there is no '=' or the key is empty.
Result<Override> ParseOverride(const std::string& text);
// Each of `texts`; the first bad one is the error.
Result<std::vector<Override>> ParseOverrides(const std::vector<std::string>& texts);

// What every process of one deployment must agree on, as 16 hex digits: a hash (FNV-1a) of the
// resolved scenario without `output` and `data.path`, which each machine may set for itself.
std::string RunDigest(const Scenario& sc);

// Reads and checks a scenario. `path` names the file in errors.
Result<Scenario> LoadScenario(const std::string& path, const std::vector<Override>& overrides = {});
// Same, from YAML text (`origin` stands for the file name in errors).
Result<Scenario> ParseScenario(const std::string& yaml_text, const std::string& origin,
                               const std::vector<Override>& overrides = {});

// `sc` on network model `name` (a registered one): its options read from the scenario's own
// `network.<name>` block, as the scenario gave it, or that model's defaults where it gave none. For
// the planner and the commands that predict a scenario on another model than its own: the other
// model's options never stand in for this one's.
Scenario WithNetworkModel(Scenario sc, const std::string& name);

// One entry of `compare:` from its YAML text ("ddp", "{algorithm: diloco, inner_steps: 10}"), read
// against `sc` as the scenario file's entries are; `origin` names it in errors.
Result<AlgorithmSpec> ParseEntry(const std::string& yaml_text, const Scenario& sc, const std::string& origin);

// The built-in link profiles (network.profile, and a link's profile:), fastest first.
struct NetworkProfile {
  std::string name;
  double bandwidth_bps;
  double latency_ms;  // one way
};
std::vector<NetworkProfile> NetworkProfiles();

// The built-in model presets, smallest first, with the vocabulary each is meant for (the data's
// sets it in a scenario: 256 for text, data.vocab_size for shards).
std::vector<std::pair<std::string, ModelSpec>> ModelPresets();
// Names of the built-in model presets, smallest first.
std::vector<std::string> ModelPresetNames();

}  // namespace narrows::core
