// Scenario: everything one narrows experiment is made of, resolved from a YAML file.
//
// LoadScenario reads a file, applies dotted command-line overrides (`--set train.lr=3e-4`),
// fills defaults (model presets first, then explicit keys), and checks every value. Unknown keys,
// wrong types and out-of-range values are InvalidArgument errors that name the file, line, column
// and key path; all errors of a file are reported together. The schema is docs/scenarios.md.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/codec.h"
#include "core/status.h"

namespace narrows::core {

enum class Positions { kLearned, kRope };
enum class Parameterization { kStandard, kCompleteP };
enum class DataFormat { kAuto, kAusten, kText, kShards };
enum class Sampling { kIid, kNonIid };
enum class LrSchedule { kCosine, kConstant };

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
};

struct DataSpec {
  std::string path = "austen";  // "austen", a text file, a folder, a .bin shard, or a glob of shards
  DataFormat format = DataFormat::kAuto;
  std::string val_path;          // optional separate validation shards/text
  int64_t vocab_size = 256;      // for shards; text is always bytes (256)
  double val_fraction = 0.05;    // when no val_path: every 1/val_fraction-th block is held out
  Sampling sampling = Sampling::kIid;
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
};

struct EvalSpec {
  int64_t every = 50;     // steps between evaluations; the last step is always evaluated
  int64_t batches = 8;    // fixed validation batches, the same for every evaluation and run
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
  double loss = 0.0;         // packet loss probability
};

enum class TopologyKind { kStar, kIslands };

struct Ns3Spec {
  std::string tcp = "cubic";   // cubic or newreno
  int64_t queue_packets = 0;   // per link direction; 0 = one bandwidth-delay product (at least 100)
};

struct NetworkSpec {
  std::string model = "analytic";       // analytic or ns3
  int mtu = 1500;                       // IP packet size: 1500, or 9000 for jumbo frames
  Ns3Spec ns3;
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
};

struct WorkersSpec {
  int count = 1;
  std::vector<double> speed;  // per-worker compute speed factors (size count), 1 = nominal
};

enum class ComputeMode { kMeasured, kModelled };
struct ComputeSpec {
  ComputeMode mode = ComputeMode::kMeasured;
  double device_flops = 1e12;  // modelled: sustained FLOP/s of one worker at speed 1
};

enum class FaultKind { kLeave, kJoin, kCrash, kLinkDown };
struct FaultSpec {
  FaultKind kind = FaultKind::kLeave;
  int worker = 0;        // leave, join, crash
  int64_t at_step = 0;   // leave, join, crash: takes effect before this step (0-based)
  std::string link;      // link_down: "worker:N" or "wan:K"
  double from_s = 0.0, to_s = 0.0;  // link_down: the interval of virtual time
};

enum class AlgorithmKind { kDdp, kDiloco, kStreamingDiloco, kAsyncDiloco, kDipaco };
enum class BatchSchedule { kConstant, kLinear, kNormTest };
enum class FragmentPattern { kStrided, kSequential };
enum class OuterOptimizer { kSgd, kNesterov, kAdam };
enum class CollectiveKind { kRing, kStar, kHierarchical };

// One entry of `compare:`.
// A deployment over a real network (`narrows worker`, `narrows launch`); the emulator ignores it.
struct DeploySpec {
  std::string security = "curve";      // curve: ZeroMQ CURVE, authenticated and encrypted; plain: TCP
  std::string key_file;                // curve: the cluster key pair (narrows keygen)
  double heartbeat_s = 0.5;
  double timeout_s = 5.0;              // a peer silent this long is declared dead
  std::string on_failure = "continue";  // ddp when a worker dies: continue with the survivors, or stop
  double collective_timeout_s = 600.0;  // a collective that makes no progress this long fails
  int64_t checkpoint_every = 0;        // diloco: outer steps between checkpoints of the global state
};

struct AlgorithmSpec {
  std::string name;
  AlgorithmKind kind = AlgorithmKind::kDdp;
  // The entry's model depth, when it differs from model.n_layers (0: the model's): to compare a
  // modular model's path with dense models of the same path size and of the same total size.
  int64_t n_layers = 0;
  int64_t inner_steps = 50;  // DiLoCo H
  OuterOptimizer outer_optimizer = OuterOptimizer::kNesterov;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  double drop_probability = 0.0;  // DiLoCo: each worker's outer gradient is dropped with this p
  CollectiveKind collective = CollectiveKind::kRing;
  // DDP: gradient buckets all-reduced as backward produces them, overlapping communication with
  // computation, as PyTorch DDP does (first bucket 1 MB, then bucket_mb).
  bool overlap = true;
  double bucket_mb = 25.0;
  // DiLoCo family: how outer gradients travel (core/codec.h); fp32 is the plain ring all-reduce.
  CodecSpec outer_gradient;
  // Streaming DiLoCo (arXiv 2501.18512): the transformer blocks in `fragments` fragments (strided:
  // fragment p holds blocks p, p+P, ...; sequential: consecutive blocks), fragment p synchronised
  // every inner_steps steps at offset p * inner_steps / fragments; its all-reduce overlaps
  // `overlap_steps` (tau) inner steps; the local fragment then becomes
  // (1 - merge_alpha) * local + merge_alpha * global.
  // DiLoCo with heterogeneous workers: DyLU (Async Local-SGD, arXiv 2401.09135 §4.2) gives each
  // worker floor(H * t_fastest / t_own) inner steps per round, t the step times measured in the last
  // round (virtual compute under the emulator, wall time over a network), so that all arrive at the
  // outer step together instead of everyone waiting for the slowest.
  bool dylu = false;
  // Asynchronous outer updates (async-diloco; Async Local-SGD, arXiv 2401.09135): a server applies
  // each worker's pseudo-gradient as it arrives and sends back the global parameters; with the
  // Nesterov outer optimiser, delayed Nesterov: the momentum takes the mean of the last
  // `nesterov_delay` pseudo-gradients once every that many arrivals (0: the worker count; 1: plain
  // Nesterov on every arrival, the naive asynchronous baseline).
  int64_t nesterov_delay = 0;
  // DiPaCo (arXiv 2403.10616): the model's transformer blocks in `levels` consecutive levels of
  // `modules` modules each; a path is one module per level (modules^levels paths, a worker's model
  // is one path). Worker w trains path w mod paths on the documents routed to it (k-means over a
  // feature of each document's first `route_tokens` tokens; documents are `document_tokens` long);
  // at each outer step every module is averaged DiLoCo-style, token-weighted, among the workers
  // whose path holds it, and the embeddings and final norm among all.
  int64_t levels = 2, modules = 2, document_tokens = 1024, route_tokens = 256;
  // Batch size (DDP, and DiLoCo's inner steps; arXiv 2412.21124): constant, a linear warm-up of the
  // batch multiple from 1 to max_multiple over ramp_steps steps, or the norm test
  // every test_every updates (grow when the gradient noise exceeds eta^2 of the mean gradient's
  // squared norm), up to max_multiple. The batch multiple is how many base batches (batch_size per
  // worker) one update accumulates; steps count base batches, so every schedule trains on the same
  // tokens, and a larger batch takes fewer, larger updates (and fewer all-reduces).
  BatchSchedule batch_schedule = BatchSchedule::kConstant;
  int64_t max_multiple = 8, ramp_steps = 0, test_every = 10;
  double eta = 0.2;
  int64_t fragments = 2;
  FragmentPattern fragment_pattern = FragmentPattern::kStrided;
  int64_t overlap_steps = 1;
  double merge_alpha = 0.5;
};

// Every entry of `compare:` starts from the same weights (the DiLoCo papers' setting): a model file
// written by `narrows train` (<run folder>/model.ckpt), or `steps` of single-replica pre-training
// done once and kept in the run folder, keyed by the model, data, seed and training settings.
struct WarmStartSpec {
  int64_t steps = 0;       // > 0: pre-train this many steps (the scenario's train settings)
  std::string checkpoint;  // or: start from this file
  bool enabled() const { return steps > 0 || !checkpoint.empty(); }
};

struct Scenario {
  std::string name;
  std::string source;  // the file it came from ("" for built-in)
  uint64_t seed = 0;
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
};

// Parses "a.b.c=value". InvalidArgument if there is no '=' or the key is empty.
Result<Override> ParseOverride(const std::string& text);

// Reads and checks a scenario. `path` names the file in errors.
Result<Scenario> LoadScenario(const std::string& path, const std::vector<Override>& overrides = {});
// Same, from YAML text (`origin` stands for the file name in errors).
Result<Scenario> ParseScenario(const std::string& yaml_text, const std::string& origin,
                               const std::vector<Override>& overrides = {});

// Names of the built-in model presets, smallest first.
std::vector<std::string> ModelPresetNames();

}  // namespace narrows::core
