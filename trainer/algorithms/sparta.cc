// SPARTA, sparse parameter averaging (EXO Gym's method): every `every` steps each worker averages a
// random subset of its parameters with its peers — `share` of them (EXO Gym's default 0.5%) —
// chosen from the scenario's seed and the step, so that every worker picks the same subset without
// sending it. Nothing else is exchanged: the replicas drift apart everywhere else and are pulled
// together a few coordinates at a time. Beside DiLoCo (`inner_steps: H`, as EXO Gym's
// SPARTA-DiLoCo): every H steps also DiLoCo's outer step, an all-reduce of the whole
// pseudo-gradient from the global parameters and an outer Nesterov step.
//
// The subset is a function of (seed, step) alone (sparta_subset.h), so a restarted or resumed
// worker draws the same one as the others, and a checkpoint needs no generator's state.
#include <algorithm>
#include <cmath>
#include <functional>

#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/outer.h"
#include "trainer/algorithms/outer_optimizer.h"
#include "trainer/algorithms/sparta_subset.h"

namespace narrows::trainer {
namespace {

struct SpartaOptions : OuterOptions {
  double share = 0.005;  // of the parameters averaged at each sparse average
  int64_t every = 1;     // steps between sparse averages
  // inner_steps (OuterOptions): H of DiLoCo's outer step beside; 0: none (SPARTA alone).
};

class Sparta final : public RoundAlgorithm {
 public:
  explicit Sparta(WorkerContext& w)
      : w_(w), x_(w.entry), records_(w.records), o_(x_.algo.Options<SpartaOptions>()),
        n_params_(w.replica.model().num_params()), k_(SpartaSubsetSize(o_.share, n_params_)),
        global_(o_.inner_steps > 0 ? w.replica.model().flat_params().detach().clone() : torch::Tensor()),
        outer_(o_.inner_steps > 0 ? OuterOptimizerState::Like(global_) : OuterOptimizerState{}) {
    // The subset's values or the whole pseudo-gradient, then the contributor count and one join
    // vote per worker (Roster::Vote).
    tail_ = 1 + x_.num_workers;
    w.buffer.resize(static_cast<size_t>((o_.inner_steps > 0 ? n_params_ : k_) + tail_));
  }

  int64_t RoundSteps() const override { return o_.every; }

  SharedState Shared() override {
    if (o_.inner_steps == 0) return {{{"params", &w_.replica.model().flat_params()}}, nullptr};
    return {{{"params", &w_.replica.model().flat_params()}, {"global", &global_},
             {"outer_momentum", &outer_.momentum}, {"outer_adam_m", &outer_.adam_m}, {"outer_adam_v", &outer_.adam_v}},
            &outer_.steps};
  }

  // A joiner continues from a member's parameters and warms its inner learning rate up again.
  void OnJoin(int64_t step, InnerState inner) override {
    if (inner == InnerState::kLost) w_.replica.optimizer().Reset();
    rewarm_from_ = step;
  }

  core::Status Step(Round* round, int64_t step) override {
    const double loss = w_.InnerStep(step, rewarm_from_).loss;
    if (step + 1 < round->end) {
      w_.Record(step, loss);
    } else {
      last_loss_ = static_cast<float>(loss);  // recorded after the round's exchange
    }
    return core::Status::Ok();
  }

  core::Status EndRound(Round* round) override {
    const int64_t re = round->end;
    NARROWS_RETURN_IF_ERROR(SparseAverage(round));
    const bool outer = o_.inner_steps > 0 && (re % o_.inner_steps == 0 || re == x_.sc.train.steps);
    if (outer) NARROWS_RETURN_IF_ERROR(OuterRound(round));
    w_.Record(re - 1, last_loss_);
    if (w_.rank == round->members.front()) {
      records_.OuterSync(re, w_.Now(), {{"participants", round->members}, {"outer", outer}});
      records_.MaybeEvaluate(round->start, re, w_.Now(), w_.replica.model().flat_params());
    }
    return core::Status::Ok();
  }

  // Nothing beyond the replica and Shared(): the subsets follow from the steps.
  bool Checkpoints() const override { return true; }

 private:
  // The members' mean of `n` floats that `values` writes into the buffer, with the contributor
  // count and the join votes after them, into the buffer's first `n` floats. A worker whose values
  // are not finite contributes nothing; false (nothing to apply) when no one contributed or the sum
  // is not finite.
  core::Result<bool> MeanOver(Round* round, int64_t n, const std::function<void(float*)>& values) {
    auto& buffer = w_.buffer;
    NARROWS_RETURN_IF_ERROR(w_.Reduce(&round->members, n + tail_, round->end, [&] {
      values(buffer.data());
      const bool finite = AllFinite(buffer.data(), n);
      if (!finite) std::fill(buffer.begin(), buffer.begin() + n, 0.0f);
      buffer[static_cast<size_t>(n)] = finite ? 1.0f : 0.0f;
      std::fill(buffer.begin() + n + 1, buffer.begin() + n + tail_, 0.0f);
      w_.roster->Vote(round->members, buffer.data() + n + 1);
    }, core::OnFailure::kContinue));
    w_.roster->CountVotes(round->members, buffer.data() + n + 1);
    const float contributors = buffer[static_cast<size_t>(n)];
    if (!(contributors > 0) || !std::isfinite(contributors) || !AllFinite(buffer.data(), n)) return false;
    for (int64_t i = 0; i < n; ++i) buffer[static_cast<size_t>(i)] /= contributors;
    return true;
  }

  // The members' mean of the round's subset replaces it on every member.
  core::Status SparseAverage(Round* round) {
    const std::vector<int64_t> subset = SpartaSubset(x_.sc.seed, round->end, k_, n_params_);
    torch::Tensor params = w_.replica.model().flat_params();
    const torch::Tensor index = torch::tensor(subset, torch::kLong).to(params.device());
    auto apply = MeanOver(round, k_, [&](float* out) {
      torch::NoGradGuard no_grad;
      ToHost(params.detach().index_select(0, index), out);
    });
    if (!apply.ok()) return apply.status();
    if (!*apply) return core::Status::Ok();
    torch::Tensor mean = torch::empty({k_}, params.options());
    FromHost(w_.buffer.data(), mean);
    torch::NoGradGuard no_grad;
    params.index_copy_(0, index, mean);
    return core::Status::Ok();
  }

  // DiLoCo's outer step beside: the members' mean pseudo-gradient (global - local) applied to the
  // global parameters by the outer optimiser, which every member then continues from.
  core::Status OuterRound(Round* round) {
    torch::Tensor params = w_.replica.model().flat_params();
    auto apply = MeanOver(round, n_params_, [&](float* out) {
      torch::NoGradGuard no_grad;
      ToHost(global_ - params, out);
    });
    if (!apply.ok()) return apply.status();
    if (*apply) {
      torch::Tensor delta = torch::empty_like(global_);
      FromHost(w_.buffer.data(), delta);
      OuterStep(o_, global_, delta, outer_);
    }
    torch::NoGradGuard no_grad;
    params.copy_(global_);
    return core::Status::Ok();
  }

  WorkerContext& w_;
  const EntryContext& x_;
  Recorder& records_;
  const SpartaOptions& o_;
  const int64_t n_params_, k_;
  torch::Tensor global_;  // beside DiLoCo: the global parameters
  OuterOptimizerState outer_;
  int64_t tail_ = 0;
  int64_t rewarm_from_ = -1;
  float last_loss_ = 0.0f;
};

const core::KeyBlock kSpartaKeys("compare[]: sparta",
                                 "SPARTA (EXO Gym): each step the workers average a random subset of the parameters, "
                                 "the same on all; optionally beside DiLoCo's outer step.");
const core::NumberKey kShare(kSpartaKeys, "share", 0.005, 0.0, 1.0,
                             core::Doc("the share of the parameters averaged each time (EXO Gym's p_sparta)"),
                             core::Bound::kExclusive);
const core::IntKey kEvery(kSpartaKeys, "every", 1, 1, core::kNoMax,
                          core::Doc("steps between sparse averages", "steps"));
const core::IntKey kInnerSteps(kSpartaKeys, "inner_steps", 0, 0, core::kNoMax,
                               core::Doc("H of a DiLoCo outer step beside (a multiple of every); 0: none", "steps"));
const core::NumberKey kOuterLr(kSpartaKeys, "outer_lr", 0.7, 0.0, 100.0,
                               core::Doc("beside DiLoCo: the outer learning rate"), core::Bound::kExclusive);
const core::NumberKey kOuterMomentum(kSpartaKeys, "outer_momentum", 0.9, 0.0, 0.9999,
                                     core::Doc("beside DiLoCo: the outer Nesterov momentum"));

core::ParsedOptions ParseSparta(core::OptionReader& r, const core::Scenario&, const core::AlgorithmSpec&) {
  auto o = std::make_shared<SpartaOptions>();
  o->share = r.Double(kShare);
  o->every = r.Int(kEvery);
  o->inner_steps = r.Int(kInnerSteps);
  o->outer_lr = r.Double(kOuterLr);
  o->outer_momentum = r.Double(kOuterMomentum);
  if (o->inner_steps > 0 && o->inner_steps % o->every != 0) {
    r.ErrorAt("inner_steps", "must be a multiple of every (" + std::to_string(o->every) + ")");
  }
  return {o, o->inner_steps > 0 ? "sparta-diloco-h" + std::to_string(o->inner_steps) : "sparta"};
}

// The sparse averages as DiLoCo's rounds of `every` steps whose outer gradient is the subset; beside
// DiLoCo, its outer rounds' communication added (they wait for the subset's, and nothing hides them).
std::vector<PlanRow> PlanSparta(const PlanInputs& in, const core::AlgorithmSpec& entry) {
  const SpartaOptions& o = entry.Options<SpartaOptions>();
  PlanInputs sparse = in;
  sparse.workload.params = static_cast<double>(SpartaSubsetSize(o.share, static_cast<int64_t>(in.workload.params)));
  PlanRow r = PredictOuterRounds(sparse, o.every, 1, 0.0, core::CodecSpec{}, entry.collective);
  if (o.inner_steps > 0) {
    const PlanRow outer = PredictOuterRounds(in, o.inner_steps, 1, 0.0, core::CodecSpec{}, entry.collective);
    r.time_s += outer.time_s - in.critical_compute_s;
    r.bytes_per_worker += outer.bytes_per_worker;
    r.note = "its outer steps' all-reduces after the subset's";
  }
  return {r};
}

AlgorithmPlugin SpartaPlugin() {
  AlgorithmPlugin p;
  p.parser.name = "sparta";
  p.parser.shorthands = "sparta";
  p.parser.shorthand = [](const std::string& text) -> std::optional<core::ShorthandKeys> {
    if (text == "sparta") return core::ShorthandKeys{};
    return std::nullopt;
  };
  p.parser.parse = ParseSparta;
  p.summary = "SPARTA: every step the workers average a random subset of their parameters (optionally beside DiLoCo)";
  p.make = [](WorkerContext& w) -> std::unique_ptr<Algorithm> { return std::make_unique<Sparta>(w); };
  p.plan = PlanSparta;
  // Its sparse averages record their members (outer_sync's participants), and its joins their workers.
  p.replay = [](const core::AlgorithmSpec&) -> std::string { return ""; };
  // Its subsets and rounds follow the steps, never the arrivals.
  p.retime = [](const core::AlgorithmSpec&) -> std::string { return ""; };
  p.sizes_only = [](const core::AlgorithmSpec& entry) {
    const SpartaOptions& o = entry.Options<SpartaOptions>();
    SizesOnlySchedule s;
    s.every = o.every;
    s.part = [share = o.share](int64_t params) { return SpartaSubsetSize(share, params); };
    s.votes = true;
    s.whole_every = o.inner_steps;
    return s;
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_ALGORITHM(sparta, SpartaPlugin());

}  // namespace narrows::trainer
