// Streaming DiLoCo (arXiv 2501.18512): DiLoCo whose parameters are split into P fragments of
// transformer blocks (§2.2: strided — fragment p holds blocks p, p+P, ... — or sequential), each
// synchronised every H inner steps at its own offset, so a round of H / P steps ends with one
// fragment's outer step and the peak bandwidth is a P-th of DiLoCo's. The fragment's all-reduce
// runs beside the next tau inner steps (§2.3, overlap); when it lands, the outer optimiser (one
// state per fragment) updates the global fragment and the local one becomes
// (1 - alpha) * local + alpha * global. Outer gradients may travel compressed (§2.4; outer_gradient).
// Embeddings belong to the first fragment, the final LayerNorm to the last block's fragment.
//
// With P = 1, alpha = 1 and tau = 0 this is DiLoCo step for step (tested): the same buffer layout
// (pseudo-gradient, contributor count, join votes), the same all-reduce, the same outer step.
//
// Eager outer updates (arXiv 2502.12996, `eager: true`; `eager-diloco` is P = 1): the fragment's
// outer step is taken at once, on this worker's fresh pseudo-gradient and the others' of the
// fragment's previous synchronisation (EagerOuterGradient), and its all-reduce runs beside the whole
// next round (tau = H / P); what it brings is used at the fragment's next synchronisation. After the
// last round every fragment's outstanding part (the others' last pseudo-gradients) is applied once,
// as a plain step of the outer learning rate, so that the final model holds every contribution.
#include "trainer/algorithms/fragments.h"

#include <algorithm>
#include <cmath>

#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/island_inner.h"
#include "trainer/algorithms/outer.h"
#include "trainer/algorithms/outer_optimizer.h"

namespace narrows::trainer {

std::vector<Fragment> SplitIntoFragments(const std::vector<ParamSlice>& slices, int64_t n_layers, int64_t fragments,
                                         FragmentPattern pattern) {
  std::vector<Fragment> out(static_cast<size_t>(fragments));
  auto fragment_of_block = [&](int64_t block) {
    if (pattern == FragmentPattern::kStrided) return block % fragments;
    return block * fragments / n_layers;  // sequential: consecutive blocks, as even as they divide
  };
  for (const auto& s : slices) {
    int64_t f = 0;
    if (const int64_t block = BlockOf(s); block >= 0) {
      f = fragment_of_block(block);
    } else if (s.name.rfind("ln_f", 0) == 0) {
      f = fragment_of_block(n_layers - 1);
    }
    Fragment& frag = out[static_cast<size_t>(f)];
    // Adjacent slices of one fragment merge into one range.
    if (!frag.ranges.empty() && frag.ranges.back().first + frag.ranges.back().second == s.offset) {
      frag.ranges.back().second += s.numel;
    } else {
      frag.ranges.emplace_back(s.offset, s.numel);
    }
    frag.numel += s.numel;
  }
  return out;
}

torch::Tensor EagerOuterGradient(const torch::Tensor& own, const torch::Tensor& previous_sum,
                                 const torch::Tensor& previous_own, int64_t members) {
  // own + (sum - own_prev): with one worker the bracket is exactly zero, and this is DiLoCo's own.
  torch::Tensor delta = own + (previous_sum - previous_own);
  if (members != 1) delta.div_(static_cast<double>(members));
  return delta;
}

namespace {

struct StreamingOptions : OuterOptions {
  int64_t fragments = 2;  // P
  FragmentPattern fragment_pattern = FragmentPattern::kStrided;
  int64_t overlap_steps = 1;  // tau: inner steps a fragment's all-reduce runs beside
  double merge_alpha = 0.5;   // the local fragment becomes (1 - alpha) * local + alpha * global
  bool eager = false;         // eager outer updates (tau = H / P)
  InnerMode inner = InnerMode::kLocal;  // ddp: each island one data-parallel replica (island_inner.h)
};

class StreamingDiloco final : public RoundAlgorithm {
 public:
  explicit StreamingDiloco(WorkerContext& w)
      : w_(w),
        x_(w.entry), records_(w.records),
        o_(x_.algo.Options<StreamingOptions>()),
        spacing_(o_.inner_steps / o_.fragments),
        codec_(o_.outer_gradient),
        fragments_(SplitIntoFragments(w.replica.model().slices(), x_.model.n_layers, o_.fragments,
                                      o_.fragment_pattern)) {
    torch::Tensor flat = w.replica.model().flat_params().detach();
    int64_t largest = 0;
    for (auto& f : fragments_) {
      state_.push_back({Gather(flat, f), OuterOptimizerState{}, core::EncodingResiduals{}, {}, {}});
      state_.back().outer = OuterOptimizerState::Like(state_.back().global);
      if (o_.eager) {
        state_.back().eager_sum = torch::zeros_like(state_.back().global);
        state_.back().eager_own = torch::zeros_like(state_.back().global);
      }
      largest = std::max(largest, f.numel);
    }
    outer_steps_ = torch::zeros({o_.fragments}, flat.options());
    // One fragment's outer gradient, the contributor count, one join vote per worker.
    w.buffer.resize(static_cast<size_t>(largest + 1 + x_.num_workers));
  }

  int64_t RoundSteps() const override { return spacing_; }

  SharedState Shared() override {
    SharedState s;
    for (size_t f = 0; f < state_.size(); ++f) {
      const std::string p = "fragment" + std::to_string(f) + ".";
      s.tensors.emplace_back(p + "global", &state_[f].global);
      s.tensors.emplace_back(p + "outer_momentum", &state_[f].outer.momentum);
      s.tensors.emplace_back(p + "outer_adam_m", &state_[f].outer.adam_m);
      s.tensors.emplace_back(p + "outer_adam_v", &state_[f].outer.adam_v);
      if (o_.eager) s.tensors.emplace_back(p + "eager_sum", &state_[f].eager_sum);
    }
    // Outer step counts (per fragment: Adam's bias correction) travel as floats, exact below 2^24.
    torch::Tensor steps = torch::empty({o_.fragments}, torch::kFloat32);
    for (size_t f = 0; f < state_.size(); ++f) steps[static_cast<int64_t>(f)] = static_cast<float>(state_[f].outer.steps);
    outer_steps_.copy_(steps);
    s.tensors.emplace_back("outer_steps", &outer_steps_);
    s.counter = &counter_;
    return s;
  }

  void OnJoin(int64_t step, InnerState inner) override {
    const torch::Tensor steps = outer_steps_.to(torch::kCPU);
    for (size_t f = 0; f < state_.size(); ++f) {
      state_[f].outer.steps = static_cast<int64_t>(steps[static_cast<int64_t>(f)].item<float>());
    }
    torch::NoGradGuard no_grad;
    for (size_t f = 0; f < state_.size(); ++f) Scatter(state_[f].global, fragments_[f]);
    if (inner == InnerState::kLost) w_.replica.optimizer().Reset();
    // A joiner's own last pseudo-gradient is not in the members' sums.
    for (auto& st : state_) {
      if (o_.eager) st.eager_own.zero_();
    }
    rewarm_from_ = step;
  }

  core::Status Step(Round* round, int64_t step) override {
    if (pending_.work && step >= pending_due_) NARROWS_RETURN_IF_ERROR(Complete());
    if (o_.inner == InnerMode::kDdp) {
      std::vector<int> island = IslandOf(x_.sc, round->members, w_.rank);
      auto loss = IslandInnerStep(w_, &island, step, rewarm_from_, &island_buffer_);
      if (!loss.ok()) return loss.status();
      w_.Record(step, *loss);
      return core::Status::Ok();
    }
    const StepStats stats = w_.InnerStep(step, rewarm_from_);
    w_.Record(step, stats.loss);
    return core::Status::Ok();
  }

  // The round's fragment: its pseudo-gradient leaves now; the outer step lands tau steps later.
  core::Status EndRound(Round* round) override {
    if (pending_.work) NARROWS_RETURN_IF_ERROR(Complete());
    const int64_t re = round->end;
    pending_fragment_ = static_cast<size_t>((re / spacing_) % o_.fragments);
    const Fragment& frag = fragments_[pending_fragment_];
    FragmentState& st = state_[pending_fragment_];
    auto& buffer = w_.buffer;
    count_ = frag.numel + 1 + x_.num_workers;
    torch::Tensor own;
    {
      torch::NoGradGuard no_grad;
      own = st.global - Gather(w_.replica.model().flat_params(), frag);  // pseudo-gradient
      ToHost(own, buffer.data());
    }
    if (o_.eager) EagerStep(*round, own);
    buffer[static_cast<size_t>(frag.numel)] = 1.0f;
    std::fill(buffer.begin() + frag.numel + 1, buffer.begin() + count_, 0.0f);
    w_.roster->Vote(round->members, buffer.data() + frag.numel + 1);
    contribution_.assign(buffer.begin(), buffer.begin() + count_);  // to send again if a member dies
    pending_round_ = *round;
    pending_due_ = re + o_.overlap_steps;
    comm_from_ = w_.Now();
    sent_before_ = w_.SyncBytesSent();
    pending_ = w_.StartReduce(round->members, buffer.data(), count_, re, {&codec_, 1 + x_.num_workers, &st.residuals});
    if (o_.overlap_steps == 0 || re == x_.sc.train.steps) NARROWS_RETURN_IF_ERROR(Complete());
    *round = pending_round_;  // survivors, if members died
    if (o_.eager && re == x_.sc.train.steps) CatchUp();
    if (o_.eager && w_.rank == round->members.front() && records_.EvalDue(round->start, re)) {
      records_.MaybeEvaluate(round->start, re, w_.Now(), GlobalParams());
    }
    return core::Status::Ok();
  }

  bool OverlapsRounds() const override { return o_.overlap_steps > 0; }

  // Eager's all-reduce only brings what the next round uses, so completing it before a checkpoint
  // changes no number; an overlapped merge (tau > 0) would land early: no checkpoints then.
  bool Checkpoints() const override { return o_.eager || o_.overlap_steps == 0; }
  OwnState SaveOwn() const override {
    OwnState out;
    for (size_t f = 0; f < state_.size(); ++f) {
      const std::string p = "fragment" + std::to_string(f) + ".";
      SaveResiduals(p + "residuals", state_[f].residuals, &out);
      if (o_.eager) out.emplace_back(p + "eager_own", state_[f].eager_own.clone());
    }
    return out;
  }
  core::Status RestoreOwn(const OwnState& state) override {
    const torch::Tensor steps = outer_steps_.to(torch::kCPU);  // restored with Shared(): the per-fragment counts
    for (size_t f = 0; f < state_.size(); ++f) {
      state_[f].outer.steps = static_cast<int64_t>(steps[static_cast<int64_t>(f)].item<float>());
    }
    size_t at = 0;
    for (size_t f = 0; f < state_.size(); ++f) {
      const std::string p = "fragment" + std::to_string(f) + ".";
      NARROWS_RETURN_IF_ERROR(RestoreResiduals(p + "residuals", state, &at, &state_[f].residuals));
      if (o_.eager) NARROWS_RETURN_IF_ERROR(RestoreOwnTensor(p + "eager_own", state, &at, &state_[f].eager_own));
    }
    return at == state.size() ? core::Status::Ok()
                              : core::Status::InvalidArgument("checkpoint: unexpected state " + state[at].first);
  }

  core::Status Finish() override {
    if (pending_.work) NARROWS_RETURN_IF_ERROR(Complete());
    return core::Status::Ok();
  }

 private:
  struct FragmentState {
    torch::Tensor global;  // the fragment's global parameters, packed
    OuterOptimizerState outer;
    core::EncodingResiduals residuals;  // error feedback of the fragment's outer gradient
    // Eager: the members' pseudo-gradients of the fragment's last synchronisation (their sum, as the
    // all-reduce brought it) and this worker's own among them.
    torch::Tensor eager_sum, eager_own;
  };

  // The fragment's elements of `flat`, packed in order.
  static torch::Tensor Gather(const torch::Tensor& flat, const Fragment& f) {
    std::vector<torch::Tensor> parts;
    for (const auto& [offset, numel] : f.ranges) parts.push_back(flat.narrow(0, offset, numel));
    return parts.size() == 1 ? parts[0].clone() : torch::cat(parts);
  }
  // Writes `packed` into the fragment's elements of the local parameters.
  void Scatter(const torch::Tensor& packed, const Fragment& f) {
    torch::NoGradGuard no_grad;
    torch::Tensor flat = w_.replica.model().flat_params();
    int64_t at = 0;
    for (const auto& [offset, numel] : f.ranges) {
      flat.narrow(0, offset, numel).copy_(packed.narrow(0, at, numel));
      at += numel;
    }
  }

  // Waits for the fragment's all-reduce (live: repeated among the survivors if members died), then
  // the outer step and the merge.
  core::Status Complete() {
    const Fragment& frag = fragments_[pending_fragment_];
    FragmentState& st = state_[pending_fragment_];
    auto& buffer = w_.buffer;
    const double before = w_.Now();
    core::Status s = pending_.work->Wait();
    pending_ = {};
    w_.comm_s += w_.Now() - before;  // the part of the all-reduce not hidden behind inner steps
    if (s.ok()) {
      w_.roster->Completed(pending_round_.members, pending_round_.end, buffer.data(), count_);
    } else if (s.code() == core::StatusCode::kPeerUnavailable) {
      // Did another survivor complete it? Then its result stands for every member; else repeat.
      auto settled = w_.roster->Settle(pending_round_.members, pending_round_.end, buffer.data(), count_);
      if (!settled.ok()) return settled.status();
      if (*settled) {
        s = core::Status::Ok();
      } else {
        NARROWS_RETURN_IF_ERROR(w_.roster->DropDead(&pending_round_.members, pending_round_.end, core::OnFailure::kContinue, s));
        s = w_.Reduce(&pending_round_.members, count_, pending_round_.end,
                      [&] { std::copy(contribution_.begin(), contribution_.end(), buffer.begin()); }, core::OnFailure::kContinue,
                      {&codec_, 1 + x_.num_workers, &st.residuals});
      }
    }
    NARROWS_RETURN_IF_ERROR(s);
    if (OverlapsRounds()) w_.CountSyncBytes(w_.SyncBytesSent() - sent_before_);  // this fragment's bytes
    w_.roster->CountVotes(pending_round_.members, buffer.data() + frag.numel + 1);
    const float contributors = buffer[static_cast<size_t>(frag.numel)];
    // A non-finite sum (a peer that sent NaN or infinity) never reaches the outer step: every
    // member skips it alike and the fragment's global copy stays as it was.
    const bool finite = contributors > 0 && std::isfinite(contributors) && AllFinite(buffer.data(), frag.numel);
    if (!finite && w_.rank == pending_round_.members.front()) {
      records_.Event({{"type", "nonfinite_outer_gradient"}, {"step", pending_round_.end}, {"fragment", pending_fragment_},
                      {"participants", pending_round_.members}});
    }
    if (o_.eager) {  // kept for the fragment's next synchronisation (EagerStep)
      if (finite) {
        FromHost(buffer.data(), st.eager_sum);
      } else {
        st.eager_sum.zero_();
      }
      return core::Status::Ok();
    }
    if (finite) {
      for (int64_t i = 0; i < frag.numel; ++i) buffer[static_cast<size_t>(i)] /= contributors;
      torch::Tensor delta = torch::empty_like(st.global);
      FromHost(buffer.data(), delta);
      OuterStep(o_, st.global, delta, st.outer);
    }
    Merge(st, frag);
    const Round& r = pending_round_;
    if (w_.rank == r.members.front()) {
      records_.OuterSync(r.end, w_.Now(),
                   {{"participants", r.members}, {"contributors", finite ? static_cast<int>(contributors) : 0},
                    {"fragment", pending_fragment_}, {"sent_at", comm_from_}, {"digest", Digest(st.global)}});
      if (records_.EvalDue(r.start, r.end)) records_.MaybeEvaluate(r.start, r.end, w_.Now(), GlobalParams());  // assembled only when due
    }
    return core::Status::Ok();
  }

  // Eager: the fragment's outer step now, on this worker's fresh pseudo-gradient `own` and the
  // others' of the fragment's previous synchronisation; the local fragment is merged at once.
  void EagerStep(const Round& round, const torch::Tensor& own) {
    const Fragment& frag = fragments_[pending_fragment_];
    FragmentState& st = state_[pending_fragment_];
    torch::NoGradGuard no_grad;
    const torch::Tensor delta =
        EagerOuterGradient(own, st.eager_sum, st.eager_own, static_cast<int64_t>(round.members.size()));
    OuterStep(o_, st.global, delta, st.outer);
    st.eager_own.copy_(own);
    Merge(st, frag);
    if (w_.rank == round.members.front()) {
      records_.OuterSync(round.end, w_.Now(),
                         {{"participants", round.members}, {"fragment", pending_fragment_}, {"eager", true}});
    }
  }

  // Eager, after the last round: each fragment's outstanding part, the others' last pseudo-gradients
  // (their sum less this worker's own, over the members), as a plain step of the outer learning
  // rate; nothing with one worker.
  void CatchUp() {
    torch::NoGradGuard no_grad;
    const double members = static_cast<double>(pending_round_.members.size());
    for (size_t f = 0; f < state_.size(); ++f) {
      FragmentState& st = state_[f];
      st.global.sub_((st.eager_sum - st.eager_own).div_(members), o_.outer_lr);
      Merge(st, fragments_[f]);
    }
  }

  // The local fragment becomes (1 - alpha) * local + alpha * global.
  void Merge(const FragmentState& st, const Fragment& frag) {
    const double alpha = o_.merge_alpha;
    if (alpha == 1.0) {
      Scatter(st.global, frag);
    } else {
      torch::NoGradGuard no_grad;
      Scatter(Gather(w_.replica.model().flat_params(), frag).mul_(1.0 - alpha).add_(st.global, alpha), frag);
    }
  }

  // The global model: every fragment's global parameters in place.
  torch::Tensor GlobalParams() {
    torch::Tensor flat = w_.replica.model().flat_params().detach().clone();
    for (size_t f = 0; f < fragments_.size(); ++f) {
      int64_t at = 0;
      for (const auto& [offset, numel] : fragments_[f].ranges) {
        flat.narrow(0, offset, numel).copy_(state_[f].global.narrow(0, at, numel));
        at += numel;
      }
    }
    return flat;
  }

  WorkerContext& w_;
  const EntryContext& x_;
  Recorder& records_;
  const StreamingOptions& o_;
  const int64_t spacing_;  // H / P: steps between two fragments' synchronisations
  const core::Codec codec_;
  const std::vector<Fragment> fragments_;
  std::vector<FragmentState> state_;
  torch::Tensor outer_steps_;  // per fragment, for joiners
  int64_t counter_ = 0;
  int64_t rewarm_from_ = -1;
  // The fragment all-reduce in flight.
  WorkerContext::PendingReduce pending_;
  size_t pending_fragment_ = 0;
  int64_t pending_due_ = 0, count_ = 0;
  Round pending_round_;
  std::vector<float> contribution_;
  std::vector<float> island_buffer_;  // inner: ddp: the island's gradient all-reduce
  double comm_from_ = 0.0;
  int64_t sent_before_ = 0;
};

const core::KeyBlock kStreamingKeys("compare[]: streaming-diloco",
                                    "Streaming DiLoCo (arXiv 2501.18512): fragments of blocks synchronised in turn, "
                                    "beside the inner steps.");
const core::IntKey kFragments(kStreamingKeys, "fragments", 2, 1, 1024,
                              core::Doc("P fragments of transformer blocks; at most model.n_layers, inner_steps a multiple"));
const core::EnumKey<FragmentPattern> kFragmentPattern(
    kStreamingKeys, "fragment_pattern",
    {{"strided", FragmentPattern::kStrided}, {"sequential", FragmentPattern::kSequential}}, FragmentPattern::kStrided,
    core::Doc("strided: block b in fragment b mod P; sequential: consecutive blocks"));
const core::BoolKey kEager(kStreamingKeys, "eager", false,
                           core::Doc("eager outer updates: a fragment's all-reduce overlaps the whole next round"));
const core::IntKey kOverlapSteps(kStreamingKeys, "overlap_steps", 1, 0, 1 << 20,
                                 core::Doc("tau: inner steps a fragment's all-reduce runs beside; below inner_steps / "
                                           "fragments; not with eager, which overlaps a whole round", "steps"));
const core::NumberKey kMergeAlpha(kStreamingKeys, "merge_alpha", 0.5, 0.0, 1.0,
                                  core::Doc("the local fragment becomes (1 - alpha) local + alpha global", "",
                                            "0.5 (eager: 1)"));

core::ParsedOptions ParseStreaming(core::OptionReader& r, const core::Scenario& sc, const core::AlgorithmSpec& entry) {
  auto o = std::make_shared<StreamingOptions>();
  ReadOuterOptions(r, o.get());
  o->fragments = r.Int(kFragments);
  o->fragment_pattern = r.Enum(kFragmentPattern);
  o->eager = r.Bool(kEager);
  const int64_t spacing = o->inner_steps / o->fragments;
  if (o->eager && r.Has("overlap_steps")) {
    r.Int(kOverlapSteps);  // read, so that the error below is the only one
    r.ErrorAt("overlap_steps", "eager outer updates overlap a fragment's all-reduce with the whole next round "
                               "(inner_steps / fragments steps): leave overlap_steps out");
  }
  o->overlap_steps = o->eager ? spacing : r.Int(kOverlapSteps);
  o->merge_alpha = r.Double(kMergeAlpha, o->eager ? 1.0 : 0.5);
  if (o->inner_steps % o->fragments != 0) {
    r.ErrorAt("fragments", "inner_steps (" + std::to_string(o->inner_steps) + ") must be a multiple of fragments (" +
                               std::to_string(o->fragments) +
                               "): fragment p is synchronised at offset p * inner_steps / fragments");
  } else if (!o->eager && o->overlap_steps >= spacing) {
    r.ErrorAt("overlap_steps", "must be below inner_steps / fragments = " + std::to_string(spacing) +
                                   " (one fragment's all-reduce in flight at a time)");
  }
  const int64_t n_layers = entry.n_layers > 0 ? entry.n_layers : sc.model.n_layers;
  if (n_layers == 0) {
    r.ErrorAt("fragments", "a fragment is a set of the model's blocks: give model.n_layers, the number of numbered "
                           "blocks (layers.N, h.N, blocks.N) of the torchscript module");
  } else if (o->fragments > n_layers) {
    r.ErrorAt("fragments", "expected at most the model's n_layers = " + std::to_string(n_layers) +
                               " fragments (a fragment is a set of transformer blocks)");
  }
  if (o->inner_steps % o->fragments == 0) o->inner = ReadInnerMode(r, sc, spacing);
  return {o, InnerModePrefix(o->inner) +
                 RoundsName(o->eager && o->fragments == 1 ? "eager-diloco" : "streaming-diloco", *o)};
}

// streaming-diloco, streaming-diloco-hN; eager-diloco, eager-diloco-hN: eager outer updates of the
// whole model (one fragment).
std::optional<core::ShorthandKeys> StreamingShorthand(const std::string& text) {
  if (auto keys = InnerStepsShorthand("streaming-diloco", text)) return keys;
  auto keys = InnerStepsShorthand("eager-diloco", text);
  if (keys) keys->insert(keys->end(), {{"fragments", "1"}, {"eager", "true"}});
  return keys;
}

// P synchronisations per H steps, each of a fragment's outer gradient behind tau inner steps.
std::vector<PlanRow> PlanStreaming(const PlanInputs& in, const core::AlgorithmSpec& entry) {
  const StreamingOptions& o = entry.Options<StreamingOptions>();
  PlanRow r = PredictOuterRounds(in, o.inner_steps, o.fragments, static_cast<double>(o.overlap_steps), o.outer_gradient,
                                 entry.collective);
  if (o.inner == InnerMode::kDdp) AddIslandRings(in, &r);
  return {r};
}

AlgorithmPlugin StreamingPlugin() {
  AlgorithmPlugin p;
  p.parser.name = "streaming-diloco";
  p.parser.shorthands = "streaming-diloco, streaming-diloco-hN, eager-diloco, eager-diloco-hN";
  p.parser.shorthand = StreamingShorthand;
  p.parser.parse = ParseStreaming;
  p.summary = "Streaming DiLoCo: fragments synchronised in turn, each overlapped with tau inner steps "
              "(eager: true, or eager-diloco: eager outer updates, each all-reduce beside a whole round)";
  p.make = [](WorkerContext& w) -> std::unique_ptr<Algorithm> { return std::make_unique<StreamingDiloco>(w); };
  p.plan = PlanStreaming;
  // Without overlap a fragment's synchronisation ends its round, as DiLoCo's does: its outer steps
  // record their members and its joins their workers.
  p.replay = [](const core::AlgorithmSpec& entry) -> std::string {
    if (entry.Options<StreamingOptions>().overlap_steps == 0) return "";
    return "a fragment's all-reduce completes during the next round (overlap_steps > 0, or eager), in which a "
           "worker killed there would still have to take part";
  };
  // Its rounds, fragments and messages follow the steps, never the arrivals.
  p.retime = [](const core::AlgorithmSpec&) -> std::string { return ""; };
  return p;
}

}  // namespace

NARROWS_REGISTER_ALGORITHM(streaming_diloco, StreamingPlugin());

}  // namespace narrows::trainer
