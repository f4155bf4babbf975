// DeMo, decoupled momentum (Peng, Quesnelle and Kingma 2024, arXiv 2411.19870; the optimiser of
// Nous Research's Psyche network). Each worker keeps its own momentum of every parameter tensor,
// m = decay m + lr g; every step it takes the momentum's fast components — each chunk's `topk`
// largest coefficients of a chunked DCT (demo_dct.h) — out of its momentum and sends them; the
// workers all-gather those components, average each coefficient over the workers that sent it,
// decode, and every worker applies the same sign update, p -= lr sign(decoded) (after decoupled
// weight decay). Nothing is averaged in full: the replicas stay equal because every worker applies
// the same update.
//
// The defaults are the paper's and its reference implementation's: chunks of 64, the top 32
// coefficients of each, momentum decay 0.999, no weight decay. On the wire, a coefficient is its
// value (fp32) and its index within the chunk (16 bits): 6 bytes; each block ends with the sender's
// loss and one join vote per worker.
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "core/all_gather.h"
#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/demo_dct.h"
#include "trainer/gpt.h"

namespace narrows::trainer {
namespace {

struct DemoOptions : core::AlgorithmOptions {
  int64_t chunk = 64;
  int64_t topk = 32;
  double decay = 0.999;
  double weight_decay = 0.0;
};

// Where each tensor's components lie in a block: its coefficients' values, then their indices
// packed two to a float.
struct Layout {
  std::vector<ChunkDct> transforms;
  std::vector<int64_t> k, first;  // per tensor: coefficients per chunk, its first in the block
  int64_t coefficients = 0, block = 0;
};

Layout MakeLayout(const std::vector<torch::Tensor>& params, const DemoOptions& o, int workers) {
  Layout l;
  for (const auto& p : params) {
    l.transforms.emplace_back(p.sizes().vec(), o.chunk, p.options());
    const ChunkDct& t = l.transforms.back();
    l.k.push_back(std::min(o.topk, t.elements()));
    l.first.push_back(l.coefficients);
    l.coefficients += t.chunks() * l.k.back();
  }
  l.block = l.coefficients + (l.coefficients + 1) / 2 + 1 + workers;
  return l;
}

class Demo final : public RoundAlgorithm {
 public:
  explicit Demo(WorkerContext& w)
      : w_(w), x_(w.entry), records_(w.records), o_(x_.algo.Options<DemoOptions>()),
        layout_(MakeLayout(w.replica.model().parameters(), o_, x_.num_workers)) {
    for (const auto& p : w.replica.model().parameters()) momentum_.push_back(torch::zeros_like(p));
    slots_.assign(static_cast<size_t>(layout_.block * x_.num_workers), 0.0f);
  }

  int64_t RoundSteps() const override { return 1; }
  SharedState Shared() override { return {{{"params", &w_.replica.model().flat_params()}}, nullptr}; }
  // A joiner's momentum starts again from zero where it was lost.
  void OnJoin(int64_t, InnerState inner) override {
    if (inner == InnerState::kLost) {
      for (auto& m : momentum_) m.zero_();
    }
  }
  bool Checkpoints() const override { return true; }
  OwnState SaveOwn() const override {
    OwnState out;
    for (size_t i = 0; i < momentum_.size(); ++i) out.emplace_back("momentum" + std::to_string(i), momentum_[i].clone());
    return out;
  }
  core::Status RestoreOwn(const OwnState& state) override {
    size_t at = 0;
    for (size_t i = 0; i < momentum_.size(); ++i) {
      NARROWS_RETURN_IF_ERROR(RestoreOwnTensor("momentum" + std::to_string(i), state, &at, &momentum_[i]));
    }
    return core::Status::Ok();
  }

  core::Status Step(Round* round, int64_t step) override {
    Replica& rep = w_.replica;
    const TokenBatch batch = w_.sampler.Next(x_.sc.train.batch_size);
    const double loss = w_.Compute(w_.StepFlops(), [&] { return rep.ComputeGradients(batch); });
    const double lr = w_.InnerLearningRate(step, -1);
    float* mine = slots_.data() + static_cast<int64_t>(w_.rank) * layout_.block;
    w_.Compute(0.0, [&] {  // Compute charges what returns a value
      Compress(lr, mine);
      return 0;
    });
    mine[layout_.block - 1 - x_.num_workers] = static_cast<float>(loss);
    std::vector<int>& group = round->members;
    const auto fill = [&] {
      std::fill(mine + layout_.block - x_.num_workers, mine + layout_.block, 0.0f);
      w_.roster->Vote(group, mine + layout_.block - x_.num_workers);
    };
    const auto gather = [&](core::Transport& via) {
      return w_.Timed(WorkerContext::Spent::kCommunicating, [&] {
        return core::AllGatherBlocks(via, slots_.data(), layout_.block, group, w_.roster->Tag(kTagGather, step, group));
      });
    };
    w_.NoteCollective("all-gather");
    NARROWS_RETURN_IF_ERROR(w_.roster->Run(&group, step, x_.sc.deploy.on_failure, fill, gather, slots_.data(),
                                           static_cast<int64_t>(slots_.size())));
    std::vector<float> votes(static_cast<size_t>(x_.num_workers), 0.0f);
    double mean_loss = 0.0;
    for (int r : group) {
      const float* b = slots_.data() + static_cast<int64_t>(r) * layout_.block;
      for (int v = 0; v < x_.num_workers; ++v) votes[static_cast<size_t>(v)] += b[layout_.block - x_.num_workers + v];
      mean_loss += b[layout_.block - 1 - x_.num_workers];
    }
    w_.roster->CountVotes(group, votes.data());
    w_.Compute(0.0, [&] {
      Update(group, lr);
      return 0;
    });
    w_.Record(step, mean_loss / static_cast<double>(group.size()));
    if (group.front() == w_.rank) records_.MaybeEvaluate(step, step + 1, w_.Now(), rep.model().flat_params());
    return core::Status::Ok();
  }

 private:
  static constexpr int kTagGather = core::tags::Private(0);  // the entry's private range (core/tags.h)

  // Momentum += lr g (after its decay); its fast components out of it and into `block`.
  void Compress(double lr, float* block) {
    torch::NoGradGuard no_grad;
    const auto& params = w_.replica.model().parameters();
    auto* indices = reinterpret_cast<uint16_t*>(block + layout_.coefficients);
    for (size_t i = 0; i < params.size(); ++i) {
      const ChunkDct& t = layout_.transforms[i];
      torch::Tensor& m = momentum_[i];
      m.mul_(o_.decay).add_(params[i].grad(), lr);
      const ChunkTopK top = TopKPerChunk(t.Encode(m), layout_.k[i]);
      m.sub_(t.Decode(Densify(top, t.chunks(), t.elements())));
      const torch::Tensor values = top.value.to(torch::kCPU).contiguous();
      const torch::Tensor index = top.index.to(torch::kCPU).contiguous();
      const int64_t n = values.numel(), first = layout_.first[i];
      std::memcpy(block + first, values.data_ptr<float>(), static_cast<size_t>(n) * sizeof(float));
      const int64_t* ix = index.data_ptr<int64_t>();
      for (int64_t j = 0; j < n; ++j) indices[first + j] = static_cast<uint16_t>(ix[j]);
    }
  }

  // Each tensor's coefficients averaged over the members that sent each, decoded; the same sign
  // step on every worker.
  void Update(const std::vector<int>& group, double lr) {
    torch::NoGradGuard no_grad;
    const auto& params = w_.replica.model().parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const ChunkDct& t = layout_.transforms[i];
      const int64_t k = layout_.k[i], n = t.chunks() * k, first = layout_.first[i];
      std::vector<ChunkTopK> sent;
      for (int r : group) {
        const float* b = slots_.data() + static_cast<int64_t>(r) * layout_.block;
        const auto* indices = reinterpret_cast<const uint16_t*>(b + layout_.coefficients);
        ChunkTopK s{torch::empty({t.chunks(), k}, torch::kLong), torch::empty({t.chunks(), k}, torch::kFloat32)};
        std::memcpy(s.value.data_ptr<float>(), b + first, static_cast<size_t>(n) * sizeof(float));
        int64_t* ix = s.index.data_ptr<int64_t>();
        for (int64_t j = 0; j < n; ++j) ix[j] = indices[first + j];
        sent.push_back(std::move(s));
      }
      const torch::Tensor mean = MeanOfSent(sent, t.chunks(), t.elements()).to(params[i].device());
      torch::Tensor p = params[i];
      if (o_.weight_decay != 0.0) p.mul_(1.0 - lr * o_.weight_decay);
      p.sub_(t.Decode(mean).sign(), lr);
    }
  }

  WorkerContext& w_;
  const EntryContext& x_;
  Recorder& records_;
  const DemoOptions& o_;
  const Layout layout_;
  std::vector<torch::Tensor> momentum_;  // per parameter tensor, this worker's own
  std::vector<float> slots_;             // one block per worker (core/all_gather.h)
};

const core::KeyBlock kDemoKeys("compare[]: demo",
                               "DeMo (arXiv 2411.19870): each worker's momentum; every step its chunked DCT's top-k "
                               "components all-gathered and applied as a sign update.");
const core::IntKey kChunk(kDemoKeys, "chunk", 64, 1, 4096,
                          core::Doc("the DCT's chunk length along each dimension (the largest divisor not above it)"));
const core::IntKey kTopk(kDemoKeys, "topk", 32, 1, 4096, core::Doc("coefficients sent per chunk"));
const core::NumberKey kDecay(kDemoKeys, "decay", 0.999, 0.0, 1.0, core::Doc("the momentum's decay"));
const core::NumberKey kWeightDecay(kDemoKeys, "weight_decay", 0.0, 0.0, 1.0, core::Doc("decoupled weight decay"));

core::ParsedOptions ParseDemo(core::OptionReader& r, const core::Scenario&, const core::AlgorithmSpec&) {
  auto o = std::make_shared<DemoOptions>();
  o->chunk = r.Int(kChunk);
  o->topk = r.Int(kTopk);
  o->decay = r.Double(kDecay);
  o->weight_decay = r.Double(kWeightDecay);
  if (o->decay >= 1.0) r.ErrorAt("decay", "must be below 1");
  if (o->chunk * o->chunk > 65536) r.ErrorAt("chunk", "a chunk's coefficients are indexed in 16 bits: at most 256");
  if (o->topk >= o->chunk * o->chunk) {
    r.ErrorAt("topk", "at least a whole chunk's coefficients (chunk² = " + std::to_string(o->chunk * o->chunk) +
                          "): every coefficient would be sent, nothing compressed; take fewer, or a larger chunk");
  }
  return {o, "demo"};
}

// The coefficients one worker sends a step: each parameter tensor's chunks times the coefficients
// taken of each. Counted on the scenario's model once per shape and options (a tiny model for the
// built-in presets; the planner asks again at every bandwidth it scans).
struct Counted {
  int64_t coefficients = 0, params = 0;
};
Counted SentCoefficients(const core::ModelSpec& model, int64_t n_layers, const DemoOptions& o) {
  static std::mutex mu;
  static std::map<std::string, Counted> counted;
  core::ModelSpec spec = model;
  if (spec.vocab_size <= 0) spec.vocab_size = 256;  // the byte-level corpus's (the planner's default)
  if (n_layers > 0) spec.n_layers = n_layers;
  const std::string key = spec.torchscript + "|" + std::to_string(spec.d_model) + "|" + std::to_string(spec.n_layers) +
                          "|" + std::to_string(spec.n_heads) + "|" + std::to_string(spec.seq_len) + "|" +
                          std::to_string(spec.vocab_size) + "|" + std::to_string(o.chunk) + "|" + std::to_string(o.topk);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = counted.find(key); it != counted.end()) return it->second;
  torch::manual_seed(0);
  const Gpt gpt(spec, torch::kCPU);
  return counted[key] = {MakeLayout(gpt.parameters(), o, 1).coefficients, gpt.num_params()};
}

// The bytes of one worker's block: each coefficient's value (fp32) and 16-bit index, the loss, and
// the members' votes (MakeLayout's block).
double BlockBytes(double coefficients, int workers) {
  return 4.0 * (coefficients + std::ceil(coefficients / 2) + 1 + workers);
}

// Every step: the compute, then one all-gather of each worker's block (every block to every other
// worker at once). A workload of another size than the scenario's model (the planner's model-size
// scans) scales the count with the parameters.
std::vector<PlanRow> PlanDemo(const PlanInputs& in, const core::AlgorithmSpec& entry) {
  const DemoOptions& o = entry.Options<DemoOptions>();
  const Counted c = SentCoefficients(in.sc->model, entry.n_layers, o);
  double coefficients = static_cast<double>(c.coefficients);
  PlanRow r;
  const double own = static_cast<double>(c.params);
  if (std::abs(own - in.workload.params) > 0.5) {
    coefficients *= in.workload.params / own;
    r.note = "coefficients scaled from the scenario's model to this size";
  }
  const double bytes = BlockBytes(coefficients, in.workers());
  r.compute_s = in.compute_s;
  const double gathers = std::ceil(in.steps);  // one every step, as DDP's all-reduce: no outer syncs
  r.time_s = in.critical_compute_s + gathers * in.AllGatherSeconds(bytes);
  r.bytes_per_worker = gathers * (in.workers() - 1) * bytes;
  return {r};
}

AlgorithmPlugin DemoPlugin() {
  AlgorithmPlugin p;
  p.parser.name = "demo";
  p.parser.shorthands = "demo";
  p.parser.shorthand = [](const std::string& text) -> std::optional<core::ShorthandKeys> {
    if (text == "demo") return core::ShorthandKeys{};
    return std::nullopt;
  };
  p.parser.parse = ParseDemo;
  p.summary = "DeMo: each worker's momentum; its chunked DCT's top-k all-gathered every step, applied as a sign update";
  p.make = [](WorkerContext& w) -> std::unique_ptr<Algorithm> { return std::make_unique<Demo>(w); };
  p.plan = PlanDemo;
  // A step's group is DDP's: the crash, evicted and join events name it.
  p.replay = [](const core::AlgorithmSpec&) -> std::string { return ""; };
  p.replay_trace = ReplayTrace::kSteps;
  p.retime = [](const core::AlgorithmSpec&) -> std::string { return ""; };
  p.sizes_only = [](const core::AlgorithmSpec& entry) {
    SizesOnlySchedule s;
    s.outer_syncs = false;
    s.gather_bytes = [o = entry.Options<DemoOptions>()](const core::ModelSpec& model, int workers) {
      return static_cast<int64_t>(BlockBytes(static_cast<double>(SentCoefficients(model, 0, o).coefficients), workers));
    };
    return s;
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_ALGORITHM(demo, DemoPlugin());

}  // namespace narrows::trainer
