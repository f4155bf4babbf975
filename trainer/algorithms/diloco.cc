// DiLoCo (arXiv 2311.08105 Alg. 1): each worker takes H inner AdamW steps from the global
// parameters; at the round's end the members all-reduce their pseudo-gradients (global - local)
// and apply the mean with the outer optimiser. Also local SGD (outer SGD, lr 1, no momentum) and
// the paper's ablations: dropped outer gradients (a dropped worker continues from its own
// parameters), an adaptive pool of workers (joiners receive the global and outer state), and
// pseudo-gradients sent compressed (outer_gradient: bf16 ... sign, optionally with error feedback),
// and for workers of unequal speed DyLU: inner steps per round in proportion to each one's speed.
// Inner steps may take adaptive batch sizes (batch_size.h): each worker's own norm test, on the
// halves of its base batches. With `inner: ddp`, hierarchical DiLoCo: each island's workers take
// their inner steps as one data-parallel replica (island_inner.h).
#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/batch_size.h"
#include "trainer/algorithms/island_inner.h"
#include "trainer/algorithms/outer.h"
#include "trainer/algorithms/outer_optimizer.h"

namespace narrows::trainer {
namespace {

struct DilocoOptions : OuterOptions {
  double drop_probability = 0.0;  // each worker's outer gradient is dropped with this probability
  // DyLU (Async Local-SGD, arXiv 2401.09135 §4.2): each worker takes floor(H * t_fastest / t_own)
  // inner steps per round, t the step times measured in the last round (virtual compute under the
  // emulator, wall time over a network), so that all arrive at the outer step together.
  bool dylu = false;
  BatchOptions batch;
  InnerMode inner = InnerMode::kLocal;  // ddp: hierarchical DiLoCo
};

class Diloco final : public RoundAlgorithm {
 public:
  explicit Diloco(WorkerContext& w)
      : w_(w),
        x_(w.entry), records_(w.records),
        o_(x_.algo.Options<DilocoOptions>()),
        n_params_(w.replica.model().num_params()),
        global_(w.replica.model().flat_params().detach().clone()),
        outer_(OuterOptimizerState::Like(global_)),
        drop_rng_(x_.sc.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(w.rank) + 1) {
    // The outer gradient, the contributor count, one join vote per worker (Roster::Vote), and with
    // DyLU each worker's mean step time of the round (in its own slot).
    tail_ = 1 + x_.num_workers * (o_.dylu ? 2 : 1);
    w.buffer.resize(static_cast<size_t>(n_params_ + tail_));
  }

  int64_t RoundSteps() const override { return o_.inner_steps; }

  SharedState Shared() override {
    return {{{"global", &global_}, {"outer_momentum", &outer_.momentum}, {"outer_adam_m", &outer_.adam_m},
             {"outer_adam_v", &outer_.adam_v}},
            &outer_.steps};
  }

  // A joiner starts from the global parameters and warms its inner learning rate up again
  // (WorkerContext::InnerStep; a stale Adam's moments belong to other parameters).
  void OnJoin(int64_t step, InnerState inner) override {
    torch::NoGradGuard no_grad;
    w_.replica.model().flat_params().copy_(global_);
    if (inner == InnerState::kLost) {
      w_.replica.optimizer().Reset();
      residuals_ = {};  // what its encodings lost went with it
      my_inner_steps_ = o_.inner_steps;  // and DyLU's plan for it
    }
    rewarm_from_ = step;
  }

  core::Status Step(Round* round, int64_t step) override {
    if (step == round->start) round_compute_from_ = w_.compute_s;
    const int64_t my_end = std::min(round->end, round->start + my_inner_steps_);
    if (step >= my_end) return core::Status::Ok();  // DyLU: this worker's share of the round is done
    double loss = 0.0;
    if (updates_.adaptive()) {
      loss = AdaptiveInnerStep(step, my_end);
    } else if (o_.inner == InnerMode::kDdp) {
      std::vector<int> island = IslandOf(x_.sc, round->members, w_.rank);
      auto mean = IslandInnerStep(w_, &island, step, rewarm_from_, &island_buffer_);
      if (!mean.ok()) return mean.status();
      loss = *mean;
    } else {
      loss = w_.InnerStep(step, rewarm_from_).loss;
    }
    ++steps_this_round_;
    if (step + 1 < my_end) {
      w_.Record(step, loss);
    } else {
      last_loss_ = static_cast<float>(loss);  // recorded after the outer step
      last_step_ = step;
    }
    return core::Status::Ok();
  }

  core::Status EndRound(Round* round) override {
    const int64_t re = round->end;
    const bool keep = !(o_.drop_probability > 0 && uniform_(drop_rng_) < o_.drop_probability);
    bool own_finite = true;
    auto& buffer = w_.buffer;
    NARROWS_RETURN_IF_ERROR(w_.Reduce(&round->members, static_cast<int64_t>(buffer.size()), re, [&] {
      {
        torch::NoGradGuard no_grad;
        ToHost(global_ - w_.replica.model().flat_params(), buffer.data());  // pseudo-gradient
      }
      // A worker whose replica diverged contributes nothing (and restarts from the global model).
      own_finite = AllFinite(buffer.data(), n_params_);
      if (!keep || !own_finite) std::fill(buffer.begin(), buffer.end(), 0.0f);
      buffer[static_cast<size_t>(n_params_)] = keep && own_finite ? 1.0f : 0.0f;
      std::fill(buffer.begin() + n_params_ + 1, buffer.end(), 0.0f);
      w_.roster->Vote(round->members, buffer.data() + n_params_ + 1);
      if (o_.dylu && steps_this_round_ > 0) {
        buffer[static_cast<size_t>(n_params_ + 1 + x_.num_workers + w_.rank)] =
            static_cast<float>((w_.compute_s - round_compute_from_) / static_cast<double>(steps_this_round_));
      }
    }, core::OnFailure::kContinue, {&codec_, tail_, keep ? &residuals_ : nullptr}));
    w_.roster->CountVotes(round->members, buffer.data() + n_params_ + 1);
    if (o_.dylu) PlanNextRound(*round);
    steps_this_round_ = 0;
    const float contributors = buffer[static_cast<size_t>(n_params_)];
    // A non-finite sum (a peer that sent NaN or infinity) never reaches the outer step: every
    // member sees the same sum and skips the step alike, and the global model stays as it was.
    const bool sum_finite = std::isfinite(contributors) && AllFinite(buffer.data(), n_params_);
    if (!sum_finite && w_.rank == round->members.front()) {
      records_.Event({{"type", "nonfinite_outer_gradient"}, {"step", re}, {"participants", round->members}});
    }
    if (contributors > 0 && sum_finite) {
      for (int64_t i = 0; i < n_params_; ++i) buffer[static_cast<size_t>(i)] /= contributors;
      torch::Tensor delta = torch::empty_like(global_);
      FromHost(buffer.data(), delta);
      OuterStep(o_, global_, delta, outer_);
    }
    if (keep) {
      torch::NoGradGuard no_grad;
      w_.replica.model().flat_params().copy_(global_);
      if (!own_finite) w_.replica.optimizer().Reset();  // its moments diverged with it
    }
    w_.Record(o_.dylu ? last_step_ : re - 1, last_loss_);
    if (w_.rank == round->members.front()) {
      Json detail = {{"participants", round->members},
                     {"contributors", std::isfinite(contributors) ? static_cast<int>(contributors) : 0},
                     {"digest", Digest(global_)}};
      if (o_.dylu && std::any_of(planned_.begin(), planned_.end(), [](int64_t n) { return n > 0; })) {
        detail["inner_steps"] = planned_;  // each member's for the next round (0: not a member)
      }
      records_.OuterSync(re, w_.Now(), std::move(detail));
      records_.MaybeEvaluate(round->start, re, w_.Now(), global_);
    }
    if (!keep || !own_finite) {
      records_.Event({{"type", "dropped_outer_gradient"}, {"step", re}, {"worker", w_.rank},
                      {"reason", own_finite ? "drop_probability" : "non-finite"}});
    }
    return core::Status::Ok();
  }

  // DyLU (arXiv 2401.09135): the next round's inner steps from the step times just exchanged.
  // The leader records every member's (each computes its own alike), so that a replay can follow
  // what wall time decided.
  void PlanNextRound(const Round& round) {
    const float* times = w_.buffer.data() + n_params_ + 1 + x_.num_workers;
    double fastest = 0.0;
    for (int r : round.members) {
      const double t = times[r];
      if (t > 0 && (fastest == 0.0 || t < fastest)) fastest = t;
    }
    const double mine = times[w_.rank];
    const auto recorded = w_.roster->RecordedInnerSteps(round.end);
    const int64_t next = recorded ? *recorded : DyluInnerSteps(o_.inner_steps, fastest, mine);
    planned_.assign(static_cast<size_t>(x_.num_workers), 0);  // the leader's, for its outer_sync
    if (!recorded && w_.rank == round.members.front()) {
      for (int r : round.members) planned_[static_cast<size_t>(r)] = DyluInnerSteps(o_.inner_steps, fastest, times[r]);
    }
    if (next != my_inner_steps_) {
      records_.Event({{"type", "inner_steps"}, {"step", round.end}, {"worker", w_.rank}, {"inner_steps", next},
                {"step_time_s", mine}, {"fastest_step_time_s", fastest}});
    }
    my_inner_steps_ = next;
  }

  // One base batch of an inner update of several (batch_size.h; never past `end`, this worker's end
  // of the round); the last one steps AdamW. Returns the batch's loss, or the update's mean loss on
  // its last batch.
  double AdaptiveInnerStep(int64_t step, int64_t end) {
    bool done = false;
    const double loss = updates_.Step(step, end, &done);
    if (!done) return loss;
    if (updates_.testing()) {
      const double t = updates_.HalvesStatistic();
      updates_.schedule().Observe(t);
      records_.Event({{"type", "norm_test"}, {"step", step + 1}, {"worker", w_.rank}, {"statistic", t},
                {"samples", 2 * updates_.length()}, {"multiple", updates_.schedule().multiple()}});
    }
    const double lr = w_.InnerLearningRate(updates_.start(), rewarm_from_);
    w_.Compute(0.0, [&] { return w_.replica.ApplyGradients(lr); });
    return loss;
  }

  // A checkpoint keeps the dropped-gradient generator, DyLU's inner steps for the next round and
  // the error-feedback residuals.
  bool Checkpoints() const override { return true; }
  std::string SaveExtra() const override {
    std::ostringstream out;
    out << drop_rng_ << "\n" << my_inner_steps_;
    return out.str();
  }
  core::Status RestoreExtra(const std::string& text) override {
    std::istringstream in(text);
    in >> drop_rng_;
    if (!in) return core::Status::InvalidArgument("checkpoint: unreadable drop_rng state");
    int64_t steps = 0;
    if (in >> steps) my_inner_steps_ = steps;  // absent from older checkpoints: H
    return core::Status::Ok();
  }
  OwnState SaveOwn() const override {
    OwnState out;
    SaveResiduals("outer_gradient_residuals", residuals_, &out);
    return out;
  }
  core::Status RestoreOwn(const OwnState& state) override {
    if (state.empty()) return core::Status::Ok();  // an older checkpoint: no residuals yet
    size_t at = 0;
    return RestoreResiduals("outer_gradient_residuals", state, &at, &residuals_);
  }

 private:
  WorkerContext& w_;
  const EntryContext& x_;
  Recorder& records_;
  const DilocoOptions& o_;
  const int64_t n_params_;
  torch::Tensor global_;
  OuterOptimizerState outer_;
  std::mt19937_64 drop_rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  const core::Codec codec_{o_.outer_gradient};  // how pseudo-gradients travel
  core::EncodingResiduals residuals_;  // error feedback of the outer gradient
  int64_t rewarm_from_ = -1;
  int64_t tail_ = 0;                             // floats after the pseudo-gradient, sent exactly
  int64_t my_inner_steps_ = o_.inner_steps;  // DyLU: this worker's inner steps per round
  std::vector<int64_t> planned_;             // DyLU: every member's for the next round
  int64_t steps_this_round_ = 0, last_step_ = 0;
  double round_compute_from_ = 0.0;
  float last_loss_ = 0.0f;  // the round's last inner loss (single precision, as every record of it)
  AdaptiveUpdates updates_{w_, o_.batch, NormTestSamples::kHalvesOfEachBatch};
  std::vector<float> island_buffer_;  // inner: ddp: the island's gradient all-reduce
};

// diloco, diloco-hN; local-sgd, local-sgd-hN: outer SGD with lr 1 and no momentum (the
// average of the workers' parameters); sparseloco, sparseloco-hN (arXiv 2508.15706): the same
// outer SGD on chunked top-k outer gradients (2% of every chunk of 4096, 2-bit values) whose
// error feedback decays by 0.95 a round, the accumulator the paper puts in place of momentum.
std::optional<core::ShorthandKeys> DilocoShorthand(const std::string& text) {
  if (auto keys = InnerStepsShorthand("diloco", text)) return keys;
  const core::ShorthandKeys outer_sgd = {{"outer_optimizer", "sgd"}, {"outer_lr", "1.0"}, {"outer_momentum", "0.0"}};
  auto keys = InnerStepsShorthand("local-sgd", text);
  if (keys) keys->insert(keys->end(), outer_sgd.begin(), outer_sgd.end());
  if (!keys && (keys = InnerStepsShorthand("sparseloco", text))) {
    keys->insert(keys->end(), outer_sgd.begin(), outer_sgd.end());
    keys->push_back({"outer_gradient", "{format: topk, topk: 0.02, chunk: 4096, value_bits: 2, error_feedback: true, "
                                       "error_feedback_decay: 0.95}"});
  }
  return keys;
}

const core::KeyBlock kDilocoKeys("compare[]: diloco", "DiLoCo (arXiv 2311.08105), with the outer step's keys and a batch.");
const core::NumberKey kDropProbability(kDilocoKeys, "drop_probability", 0.0, 0.0, 1.0,
                                       core::Doc("each worker's outer gradient is dropped with this probability per outer step"));
const core::BoolKey kDylu(kDilocoKeys, "dylu", false,
                          core::Doc("each worker's inner steps scaled to its measured speed from the second round (DyLU)"));
const core::StructureKey kBatchKey(kDilocoKeys, "batch", core::KeyType::kMapping,
                                   core::Doc("an adaptive batch size; absent: constant", "", "none"), "an entry's batch");

core::ParsedOptions ParseDiloco(core::OptionReader& r, const core::Scenario& sc, const core::AlgorithmSpec&) {
  auto o = std::make_shared<DilocoOptions>();
  ReadOuterOptions(r, o.get());
  o->drop_probability = r.Double(kDropProbability);
  o->dylu = r.Bool(kDylu);
  o->batch = ReadBatchOptions(r, kBatchKey);
  if (o->batch.schedule != BatchScheduleKind::kConstant && !sc.faults.empty()) {
    r.ErrorAt("batch", "adaptive batch sizes do not support faults");
  }
  if (o->batch.schedule == BatchScheduleKind::kNormTest &&
      (sc.train.batch_size % 2 != 0 || (sc.train.batch_size / 2) % sc.train.grad_accum != 0)) {
    r.ErrorAt("batch", "DiLoCo's norm test splits each batch in halves: train.batch_size / 2 "
                       "must be a whole multiple of train.grad_accum");
  }
  o->inner = ReadInnerMode(r, sc, o->inner_steps);
  if (o->inner == InnerMode::kDdp) {
    // An island is one replica: its members must take the same steps from the same parameters.
    if (o->dylu) r.ErrorAt("dylu", "inner: ddp keeps an island's members in step: no DyLU");
    if (o->drop_probability > 0) r.ErrorAt("drop_probability", "inner: ddp keeps an island's members equal: no drops");
    if (o->batch.schedule != BatchScheduleKind::kConstant) r.ErrorAt("batch", "inner: ddp takes a constant batch");
  }
  return {o, InnerModePrefix(o->inner) + RoundsName("diloco", *o)};
}

// One fp32 (or encoded) all-reduce of the whole outer gradient every H steps.
std::vector<PlanRow> PlanDiloco(const PlanInputs& in, const core::AlgorithmSpec& entry) {
  const DilocoOptions& o = entry.Options<DilocoOptions>();
  PlanRow r = PredictOuterRounds(in, o.inner_steps, 1, 0.0, o.outer_gradient, entry.collective);
  if (o.inner == InnerMode::kDdp) AddIslandRings(in, &r);
  return {r};
}

AlgorithmPlugin DilocoPlugin() {
  AlgorithmPlugin p;
  p.parser.name = "diloco";
  p.parser.shorthands = "diloco, diloco-hN, local-sgd, local-sgd-hN, sparseloco, sparseloco-hN";
  p.parser.shorthand = DilocoShorthand;
  p.parser.parse = ParseDiloco;
  p.parser.is_default = true;  // an entry mapping without algorithm: (the papers' method)
  p.summary = "DiLoCo: H inner AdamW steps, then an outer Nesterov step on the mean pseudo-gradient";
  p.make = [](WorkerContext& w) -> std::unique_ptr<Algorithm> { return std::make_unique<Diloco>(w); };
  p.plan = PlanDiloco;
  // Its outer steps record their members (outer_sync's participants) and DyLU's inner steps, and its
  // joins their workers.
  p.replay = [](const core::AlgorithmSpec& entry) -> std::string {
    const DilocoOptions& o = entry.Options<DilocoOptions>();
    if (o.batch.schedule != BatchScheduleKind::kConstant) return "adaptive batch sizes keep per-worker state a restart loses";
    if (o.drop_probability > 0) return "drop_probability draws from a generator that a restarted process starts afresh";
    return "";
  };
  // Its batch sizes follow the gradients' noise where the norm test sets them; all else is by step.
  p.retime = [](const core::AlgorithmSpec& entry) -> std::string {
    return entry.Options<DilocoOptions>().batch.schedule == BatchScheduleKind::kNormTest
               ? "the norm test sets its batch sizes from the gradients"
               : "";
  };
  // Every H steps, the pseudo-gradient's all-reduce in its outer-gradient codec, with the count and
  // the votes; hierarchical DiLoCo's island rings every step. Drops, DyLU's unequal rounds and
  // adaptive batches are not modelled there.
  p.sizes_only = [](const core::AlgorithmSpec& entry) {
    const DilocoOptions& o = entry.Options<DilocoOptions>();
    SizesOnlySchedule s;
    s.every = o.inner_steps;
    s.codec = o.outer_gradient;
    s.votes = true;
    s.island_rings = o.inner == InnerMode::kDdp;
    if (o.drop_probability > 0) s.not_modelled = "drop_probability (dropped outer gradients)";
    if (o.dylu) s.not_modelled = "dylu (each worker's own number of inner steps)";
    if (o.batch.schedule != BatchScheduleKind::kConstant) s.not_modelled = "batch (an adaptive batch size)";
    return s;
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_ALGORITHM(diloco, DilocoPlugin());

}  // namespace narrows::trainer
