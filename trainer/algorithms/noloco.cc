// NoLoCo (arXiv 2506.10911): DiLoCo's rounds without any collective. Each worker takes H inner steps
// from its own anchor (its parameters when the round began); at the round's end the workers are
// paired by a random perfect matching drawn per round (gossip.h: the same draw on every worker,
// emulated or real), each pair exchanges its parameters, and each worker takes the paper's outer
// step, a Nesterov-style momentum on the pair's mean progress plus a pull of its anchor towards the
// pair's mean anchor (GossipOuterStep). No step involves all workers: the replicas agree only
// through the chain of pairings, and a worker whose partner is gone (left, crashed, an odd count;
// live: its guard finds the partner dead or silent) steps alone instead of waiting. What is sent:
// the pair's local parameters in fp32 (with consensus_lr == outer_lr, the paper's setting), or the
// anchor and the local parameters. The evaluated model is the first member's (there is no global
// model). A live deployment does not welcome restarted workers back (no collective carries their
// votes); scripted joins receive a member's anchor and momentum.
#include "trainer/algorithms/gossip.h"

#include <cmath>
#include <random>
#include <sstream>

#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/outer.h"

namespace narrows::trainer {

std::vector<int> GossipPartners(int world, uint64_t seed, int64_t step) {
  // Fisher-Yates with a 64-bit Mersenne twister (its sequence is fixed by the standard; the
  // library's shuffle and distributions are not), then consecutive pairs of the drawn order.
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(step) + 0x6A09E667F3BCC909ULL));
  std::vector<int> order(static_cast<size_t>(world));
  for (int i = 0; i < world; ++i) order[static_cast<size_t>(i)] = i;
  for (int i = world - 1; i > 0; --i) {
    const auto j = static_cast<size_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[j]);
  }
  std::vector<int> partner(static_cast<size_t>(world), -1);
  for (int i = 0; i + 1 < world; i += 2) {
    partner[static_cast<size_t>(order[static_cast<size_t>(i)])] = order[static_cast<size_t>(i + 1)];
    partner[static_cast<size_t>(order[static_cast<size_t>(i + 1)])] = order[static_cast<size_t>(i)];
  }
  return partner;
}

void GossipOuterStep(const GossipStep& o, torch::Tensor& anchor, torch::Tensor& velocity, const torch::Tensor& mean_local,
                     const torch::Tensor& mean_anchor) {
  torch::NoGradGuard no_grad;
  velocity.mul_(o.momentum);
  if (o.consensus_lr == o.outer_lr) {
    velocity.add_(mean_local - anchor, o.outer_lr);
  } else {
    velocity.add_(mean_local - mean_anchor, o.outer_lr).add_(mean_anchor - anchor, o.consensus_lr);
  }
  anchor.add_(velocity);
}

namespace {

constexpr int kTagGossip = core::tags::Private(0);  // a pair's exchange of parameters (core/tags.h)

struct GossipOptions : core::AlgorithmOptions {
  int64_t inner_steps = 50;  // H
  GossipStep step;
};

class Gossip final : public RoundAlgorithm {
 public:
  explicit Gossip(WorkerContext& w)
      : w_(w),
        x_(w.entry),
        records_(w.records),
        o_(x_.algo.Options<GossipOptions>()),
        n_(w.replica.model().num_params()),
        anchor_(w.replica.model().flat_params().detach().clone()),
        velocity_(torch::zeros_like(anchor_)),
        both_(o_.step.consensus_lr != o_.step.outer_lr) {
    w.buffer.resize(static_cast<size_t>(n_ * (both_ ? 2 : 1)));
    theirs_.resize(w.buffer.size());
  }

  int64_t RoundSteps() const override { return o_.inner_steps; }

  SharedState Shared() override { return {{{"anchor", &anchor_}, {"velocity", &velocity_}}, &rounds_}; }

  void OnJoin(int64_t step, InnerState inner) override {
    torch::NoGradGuard no_grad;
    w_.replica.model().flat_params().copy_(anchor_);
    if (inner == InnerState::kLost) w_.replica.optimizer().Reset();
    rewarm_from_ = step;
  }

  core::Status Step(Round* round, int64_t step) override {
    const StepStats stats = w_.InnerStep(step, rewarm_from_);
    if (step + 1 < round->end) {
      w_.Record(step, stats.loss);
    } else {
      last_loss_ = static_cast<float>(stats.loss);  // recorded after the outer step
    }
    return core::Status::Ok();
  }

  core::Status EndRound(Round* round) override {
    const int64_t re = round->end;
    const std::vector<int> partners = GossipPartners(x_.num_workers, x_.sc.seed, re);
    int partner = partners[static_cast<size_t>(w_.rank)];
    if (partner >= 0 && !round->Member(partner)) partner = -1;  // left or crashed: this worker steps alone
    torch::Tensor local = w_.replica.model().flat_params().detach();
    if (!torch::isfinite(local).all().item<bool>()) {
      // A diverged replica restarts from its anchor with a fresh inner optimiser and is averaged as
      // that: nothing non-finite reaches the partner or the outer step.
      torch::NoGradGuard no_grad;
      local.copy_(anchor_);
      w_.replica.optimizer().Reset();
      records_.Event({{"type", "dropped_outer_gradient"}, {"step", re}, {"worker", w_.rank}, {"reason", "non-finite"}});
    }
    torch::Tensor mean_local = local, mean_anchor = anchor_;
    double distance = 0.0;
    if (partner >= 0) {
      ToHost(local, w_.buffer.data());
      if (both_) ToHost(anchor_, w_.buffer.data() + n_);
      const int tag = w_.roster->Tag(kTagGossip, re, {std::min(w_.rank, partner), std::max(w_.rank, partner)});
      const size_t bytes = w_.buffer.size() * sizeof(float);
      // Live, through a guard over the pair: a partner that dies, or that counts this worker gone
      // and never sends, ends the wait (deploy.collective_timeout_s at most) instead of hanging it.
      w_.NoteCollective("pairs");
      const auto guard = w_.roster->Guard({std::min(w_.rank, partner), std::max(w_.rank, partner)});
      core::Transport& via = guard ? *guard : w_.t;
      core::Status s = w_.Timed(WorkerContext::Spent::kCommunicating, [&] {
        NARROWS_RETURN_IF_ERROR(via.Send(partner, tag, w_.buffer.data(), bytes));
        return via.Recv(partner, tag, theirs_.data(), bytes);
      });
      // A partner that sent NaN or infinity is refused: this worker steps alone.
      const bool refused = s.ok() && !AllFinite(theirs_.data(), static_cast<int64_t>(theirs_.size()));
      if (s.code() == core::StatusCode::kPeerUnavailable || s.code() == core::StatusCode::kTimeout || refused) {
        records_.Event({{"type", "gossip_alone"}, {"step", re}, {"worker", w_.rank}, {"partner", partner},
                        {"reason", refused ? "non-finite parameters" : s.message()}});
        partner = -1;
      } else {
        NARROWS_RETURN_IF_ERROR(s);
        torch::NoGradGuard no_grad;
        torch::Tensor other = torch::empty_like(local);
        FromHost(theirs_.data(), other);
        distance = (local - other).norm().item<double>();
        mean_local = (local + other).mul_(0.5);
        if (both_) {
          FromHost(theirs_.data() + n_, other);
          mean_anchor = (anchor_ + other).mul_(0.5);
        }
      }
    }
    GossipOuterStep(o_.step, anchor_, velocity_, mean_local, mean_anchor);
    ++rounds_;
    {
      torch::NoGradGuard no_grad;
      w_.replica.model().flat_params().copy_(anchor_);
    }
    if (partner > w_.rank) {
      records_.Event({{"type", "gossip"}, {"step", re}, {"pair", {w_.rank, partner}}, {"distance", distance}});
    }
    w_.Record(re - 1, last_loss_);
    if (w_.rank == round->members.front()) {
      records_.OuterSync(re, w_.Now(), {{"participants", round->members}});
      records_.MaybeEvaluate(round->start, re, w_.Now(), anchor_);
    }
    return core::Status::Ok();
  }

  bool Checkpoints() const override { return true; }

 private:
  WorkerContext& w_;
  const EntryContext& x_;
  Recorder& records_;
  const GossipOptions& o_;
  const int64_t n_;
  torch::Tensor anchor_, velocity_;
  const bool both_;  // the anchors travel too (consensus_lr != outer_lr)
  std::vector<float> theirs_;
  int64_t rounds_ = 0, rewarm_from_ = -1;
  float last_loss_ = 0.0f;
};

const core::KeyBlock kNolocoKeys("compare[]: noloco",
                                 "NoLoCo (arXiv 2506.10911): no all-reduce; each outer step averages with one random peer.");
const core::IntKey kInnerSteps(kNolocoKeys, "inner_steps", 50, 1, core::kNoMax, core::Doc("H: inner steps between exchanges",
                                                                                        "steps"));
const core::NumberKey kOuterLr(kNolocoKeys, "outer_lr", 0.7, 0.0, 100.0, core::Doc("outer learning rate"),
                               core::Bound::kExclusive);
const core::NumberKey kOuterMomentum(kNolocoKeys, "outer_momentum", 0.3, 0.0, 0.9999, core::Doc("outer momentum"));
const core::NumberKey kConsensusLr(kNolocoKeys, "consensus_lr", 0.7, 0.0, 100.0,
                                   core::Doc("the pull towards the peer's parameters", "", "outer_lr"));

core::ParsedOptions ParseGossip(core::OptionReader& r, const core::Scenario&, const core::AlgorithmSpec&) {
  auto o = std::make_shared<GossipOptions>();
  o->inner_steps = r.Int(kInnerSteps);
  o->step.outer_lr = r.Double(kOuterLr);
  o->step.momentum = r.Double(kOuterMomentum);
  o->step.consensus_lr = r.Double(kConsensusLr, o->step.outer_lr);
  return {o, "noloco-h" + std::to_string(o->inner_steps)};
}

// Every H steps, each pair exchanges its parameters at once (the rounds' actual matchings, both
// directions); nothing overlaps the inner steps.
std::vector<PlanRow> PlanGossip(const PlanInputs& in, const core::AlgorithmSpec& entry) {
  const GossipOptions& o = entry.Options<GossipOptions>();
  const int m = in.workers();
  const double payload = 4.0 * in.workload.params * (o.step.consensus_lr != o.step.outer_lr ? 2 : 1);
  PlanRow r;
  r.compute_s = in.compute_s;
  r.time_s = in.critical_compute_s;
  const auto steps = static_cast<int64_t>(std::ceil(in.steps));
  double sent = 0;
  for (int64_t end = std::min(steps, o.inner_steps);; end = std::min(steps, end + o.inner_steps)) {
    std::vector<PlanMessage> messages;
    const std::vector<int> partners = GossipPartners(m, in.sc->seed, end);
    for (int i = 0; i < m; ++i) {
      if (partners[static_cast<size_t>(i)] >= 0) messages.push_back({i, partners[static_cast<size_t>(i)], static_cast<int64_t>(payload)});
    }
    if (!messages.empty()) r.time_s += in.slowest_delivery(messages);
    sent += payload * static_cast<double>(messages.size()) / m;
    ++r.syncs;
    if (end == steps) break;
  }
  r.bytes_per_worker = sent;
  return {r};
}

AlgorithmPlugin NolocoPlugin() {
  AlgorithmPlugin p;
  p.parser.name = "noloco";
  p.parser.shorthands = "noloco, noloco-hN";
  p.parser.shorthand = [](const std::string& text) { return InnerStepsShorthand("noloco", text); };
  p.parser.parse = ParseGossip;
  p.summary = "NoLoCo: no all-reduce; each round random pairs average their parameters with momentum";
  p.make = [](WorkerContext& w) -> std::unique_ptr<Algorithm> { return std::make_unique<Gossip>(w); };
  p.plan = PlanGossip;
  p.replay = [](const core::AlgorithmSpec&) -> std::string {
    return "it synchronises in pairs, not as one group a round, the form of the trace";
  };
  // Its rounds, fragments and messages follow the steps, never the arrivals.
  p.retime = [](const core::AlgorithmSpec&) -> std::string { return ""; };
  return p;
}

}  // namespace

NARROWS_REGISTER_ALGORITHM(noloco, NolocoPlugin());

}  // namespace narrows::trainer
