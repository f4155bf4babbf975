// DiPaCo (arXiv 2403.10616): a modular model trained path by path. The model's transformer blocks
// form L levels of K modules (paths.h); a worker's replica is one path (the embeddings and final
// norm, and one module per level) and trains, DiLoCo-style, H inner steps on the documents routed
// to its path (dipaco_routing.h). At the outer step each module's pseudo-gradient is averaged among
// the workers whose path holds the module only (the embeddings and final norm among all), weighted by
// the tokens of each path's shard as in the paper (and by the share of the round each worker
// trained): one all-reduce per module, each counted apart. The outer optimiser then steps the path, as
// in diloco.cc. Each validation window (the same as every entry's) is scored on the path its
// context routes it to; the validation loss is the token-weighted mean over paths. Faults are
// refused at load.
#include <cmath>

#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/outer.h"
#include "trainer/algorithms/outer_optimizer.h"
#include "trainer/algorithms/paths.h"
#include "trainer/algorithms/dipaco_routing.h"

namespace narrows::trainer {
namespace {

struct DipacoOptions : OuterOptions {
  // The model's transformer blocks in `levels` consecutive levels of `modules` modules each; a path
  // is one module per level (modules^levels paths). Worker w trains path w mod paths on the
  // documents routed to it (k-means over a feature of each document's first `route_tokens`
  // tokens; documents are `document_tokens` long).
  int64_t levels = 2, modules = 2, document_tokens = 1024, route_tokens = 256;
};

class Dipaco final : public RoundAlgorithm {
 public:
  explicit Dipaco(WorkerContext& w)
      : w_(w),
        x_(w.entry), records_(w.records),
        o_(x_.algo.Options<DipacoOptions>()),
        layout_{o_.levels, o_.modules},
        path_(layout_.PathOf(w.rank)),
        global_(w.replica.model().flat_params().detach().clone()),
        outer_(OuterOptimizerState::Like(global_)) {
    // Unit 0: everything outside the blocks; unit 1 + l: this path's module of level l.
    units_.resize(static_cast<size_t>(layout_.levels + 1));
    const int64_t per_level = x_.model.n_layers / layout_.levels;
    for (const ParamSlice& s : w.replica.model().slices()) {
      const int64_t block = BlockOf(s);
      Unit& u = units_[static_cast<size_t>(block < 0 ? 0 : 1 + block / per_level)];
      u.ranges.emplace_back(s.offset, s.numel);
      u.numel += s.numel;
    }
    int64_t largest = 0;
    for (size_t i = 0; i < units_.size(); ++i) {
      Unit& u = units_[i];
      largest = std::max(largest, u.numel);
      if (i == 0) {
        u.name = "shared";
        u.id = 0;
      } else {
        const int64_t level = static_cast<int64_t>(i) - 1, module = layout_.ModuleOf(path_, level);
        u.name = "l" + std::to_string(level) + "m" + std::to_string(module);
        u.id = 1 + level * layout_.modules + module;
      }
    }
    w.buffer.resize(static_cast<size_t>(largest + 1));  // a unit's weighted pseudo-gradient and its weight
    delta_host_.resize(static_cast<size_t>(global_.numel()));
  }

  core::Status Prepare() override {
    WorkerContext& w = w_;
    const DipacoOptions& a = o_;
    auto routing = x_.Share<PathRouting>("dipaco.routing", [&]() -> core::Result<PathRouting> {
      const Dataset& d = *x_.data;
      return RouteDocuments(d.corpus, d.split.train, d.val_corpus ? *d.val_corpus : d.corpus, d.val_windows,
                            {static_cast<int>(layout_.paths()), a.document_tokens, a.route_tokens, x_.sc.seed});
    });
    if (!routing.ok()) return routing.status();
    const PathRouting& r = **routing;
    const auto p = static_cast<size_t>(path_);
    if (layout_.paths() > 1) w.sampler.UseSpans(r.train[p], w.rank);
    // This path scores the validation windows routed to it: the same windows as every other entry,
    // so the token-weighted mean over paths is over the same tokens as a dense model's loss.
    int64_t val_total = 0;
    for (int64_t t : r.val_tokens) val_total += t;
    val_share_ = val_total > 0 ? static_cast<double>(r.val_tokens[p]) / static_cast<double>(val_total) : 0.0;
    val_batches_ = layout_.paths() == 1 ? x_.data->val_batches
                                        : SelectRows(x_.data->val_batches, r.val[p], x_.sc.eval.batch_size);
    // Each worker's pseudo-gradient weighs as its path's shard (the paper's token weighting of a
    // module's average), shared among the workers that train the path.
    int on_path = 0;
    for (int rank = 0; rank < x_.num_workers; ++rank) on_path += layout_.PathOf(rank) == path_ ? 1 : 0;
    int64_t train_total = 0;
    for (int64_t t : r.train_tokens) train_total += t;
    shard_weight_ = static_cast<double>(r.train_tokens[p]) / static_cast<double>(train_total) / on_path;
    if (w.rank == 0) {
      Json event = {{"type", "routing"}, {"paths", layout_.paths()}, {"train_tokens", r.train_tokens},
                    {"val_tokens", r.val_tokens}};
      if (x_.data->corpus.domains().size() > 1) {
        const Dataset& d = *x_.data;
        const DomainRouting by = RoutingByDomain(d.corpus, r, d.val_row_domain, static_cast<int>(d.domains.size()));
        event["by_domain"] = {{"domains", d.corpus.domains()}, {"train_tokens", by.train_tokens},
                              {"val_domains", d.domains}, {"val_windows", by.val_windows}};
      }
      records_.Event(std::move(event));
    }
    return core::Status::Ok();
  }

  int64_t RoundSteps() const override { return o_.inner_steps; }

  SharedState Shared() override {
    return {{{"global", &global_}, {"outer_momentum", &outer_.momentum}, {"outer_adam_m", &outer_.adam_m},
             {"outer_adam_v", &outer_.adam_v}},
            &outer_.steps};
  }
  void OnJoin(int64_t, InnerState) override {}  // no joins: faults are refused at load
  // Live checkpoints: the path's global parameters and outer state (the routing is made again).
  bool Checkpoints() const override { return true; }

  core::Status Step(Round* round, int64_t step) override {
    const StepStats stats = w_.InnerStep(step, -1);
    ++steps_this_round_;
    if (step + 1 < round->end) {
      w_.Record(step, stats.loss);
    } else {
      last_loss_ = static_cast<float>(stats.loss);  // recorded after the outer step
    }
    return core::Status::Ok();
  }

  core::Status EndRound(Round* round) override {
    const int64_t re = round->end;
    bool own_finite = true;
    const float contributed = OwnContribution(*round, &own_finite);
    std::vector<const Unit*> refused;  // units whose summed outer gradient is not finite
    for (size_t i = 0; i < units_.size(); ++i) {
      NARROWS_RETURN_IF_ERROR(ReduceUnit(round, i, contributed, &refused));
    }
    OuterStepBut(refused, own_finite);
    w_.Record(re - 1, last_loss_);
    if (w_.rank == round->members.front()) {
      records_.OuterSync(re, w_.Now(), {{"participants", round->members}});
    }
    // The lowest-ranked worker of each path scores the path on the documents routed to it.
    if (!val_batches_.empty() && LeadsPath(round->members) && records_.EvalDue(round->start, re)) {
      records_.AddPartialEval(re, w_.Now(), path_, records_.Evaluate(global_, &val_batches_), val_share_);
    }
    return core::Status::Ok();
  }

  core::Status Finish() override {
    Json bytes = Json::object();
    for (const Unit& u : units_) bytes[u.name] = u.bytes_sent;
    records_.Event({{"type", "module_bytes"}, {"step", x_.sc.train.steps}, {"worker", w_.rank}, {"path", path_},
                    {"bytes_sent", bytes}, {"shard_weight", shard_weight_}});
    return core::Status::Ok();
  }

 private:
  struct Unit {
    std::string name;
    int64_t id = 0;  // 0: shared; 1 + level * modules + module
    std::vector<std::pair<int64_t, int64_t>> ranges;  // (offset, numel) into the flat parameters
    int64_t numel = 0;
    int64_t bytes_sent = 0;
    core::EncodingResiduals residuals;  // error feedback of the unit's outer gradient
  };

  bool LeadsPath(const std::vector<int>& members) const {
    for (int r : members) {
      if (layout_.PathOf(r) == path_) return r == w_.rank;
    }
    return false;
  }

  // This worker's pseudo-gradient into delta_host_, and the weight it contributes with: its path's
  // share of the training tokens (split among the path's workers) times the share of the round it
  // trained. A replica that diverged contributes nothing (weight 0, *own_finite false) and restarts
  // from the global model with a fresh inner optimiser.
  float OwnContribution(const Round& round, bool* own_finite) {
    const int64_t re = round.end;
    const auto weight = static_cast<float>(shard_weight_ * static_cast<double>(steps_this_round_) /
                                           static_cast<double>(re - round.start));
    steps_this_round_ = 0;
    {
      torch::NoGradGuard no_grad;
      ToHost(global_ - w_.replica.model().flat_params(), delta_host_.data());
    }
    *own_finite = AllFinite(delta_host_.data(), static_cast<int64_t>(delta_host_.size()));
    if (!*own_finite) {
      std::fill(delta_host_.begin(), delta_host_.end(), 0.0f);
      records_.Event({{"type", "dropped_outer_gradient"}, {"step", re}, {"worker", w_.rank}, {"reason", "non-finite"}});
    }
    return *own_finite ? weight : 0.0f;
  }

  // Unit i's weighted pseudo-gradient averaged among the members whose paths hold it, into
  // delta_host_; a unit whose sum is not finite is zeroed there and added to *refused.
  core::Status ReduceUnit(Round* round, size_t i, float contributed, std::vector<const Unit*>* refused) {
    const int64_t re = round->end;
    auto& buffer = w_.buffer;
    Unit& u = units_[i];
    const auto level = static_cast<int64_t>(i) - 1;
    std::vector<int> group =
        i == 0 ? round->members : layout_.Sharing(round->members, level, layout_.ModuleOf(path_, level));
    const int64_t sent_before = w_.Stats().bytes_sent;
    NARROWS_RETURN_IF_ERROR(w_.Reduce(&group, u.numel + 1, re, [&] {
      int64_t at = 0;
      for (const auto& [offset, numel] : u.ranges) {
        for (int64_t j = 0; j < numel; ++j) buffer[static_cast<size_t>(at + j)] = contributed * delta_host_[static_cast<size_t>(offset + j)];
        at += numel;
      }
      buffer[static_cast<size_t>(u.numel)] = contributed;
    }, core::OnFailure::kStop, {&codec_, 1, &u.residuals}, kTagModules + core::tags::kCollectiveSpan * static_cast<int>(u.id)));
    u.bytes_sent += w_.Stats().bytes_sent - sent_before;
    const float total = buffer[static_cast<size_t>(u.numel)];
    // A non-finite sum (a peer that sent NaN or infinity) never reaches the outer step: every
    // member of the unit's group sees the same sum and keeps the unit as it was.
    if (!std::isfinite(total) || !AllFinite(buffer.data(), u.numel)) {
      refused->push_back(&u);
      if (w_.rank == group.front()) {
        records_.Event({{"type", "nonfinite_outer_gradient"}, {"step", re}, {"unit", u.name}, {"participants", group}});
      }
      std::fill(buffer.begin(), buffer.begin() + u.numel + 1, 0.0f);
    }
    int64_t at = 0;
    for (const auto& [offset, numel] : u.ranges) {
      for (int64_t j = 0; j < numel; ++j) {
        delta_host_[static_cast<size_t>(offset + j)] = total > 0 ? buffer[static_cast<size_t>(at + j)] / total : 0.0f;
      }
      at += numel;
    }
    return core::Status::Ok();
  }

  // The outer step on the averaged pseudo-gradients in delta_host_, but for the `refused` units;
  // the replica continues from the global parameters.
  void OuterStepBut(const std::vector<const Unit*>& refused, bool own_finite) {
    torch::Tensor delta = torch::empty_like(global_);
    FromHost(delta_host_.data(), delta);
    torch::NoGradGuard no_grad;
    // The outer step moves a unit with a zero gradient too (momentum): a refused unit's global
    // parameters and outer state are put back as they were.
    std::vector<torch::Tensor> before;
    if (!refused.empty()) before = {global_.clone(), outer_.momentum.clone(), outer_.adam_m.clone(), outer_.adam_v.clone()};
    OuterStep(o_, global_, delta, outer_);
    for (const Unit* u : refused) {
      for (const auto& [offset, numel] : u->ranges) {
        global_.narrow(0, offset, numel).copy_(before[0].narrow(0, offset, numel));
        outer_.momentum.narrow(0, offset, numel).copy_(before[1].narrow(0, offset, numel));
        outer_.adam_m.narrow(0, offset, numel).copy_(before[2].narrow(0, offset, numel));
        outer_.adam_v.narrow(0, offset, numel).copy_(before[3].narrow(0, offset, numel));
      }
    }
    w_.replica.model().flat_params().copy_(global_);
    if (!own_finite) w_.replica.optimizer().Reset();
  }

  // Unit u's collective at kTagModules + kCollectiveSpan * u, in the entry's private range (core/tags.h):
  // levels x modules <= 600, plus the shared unit.
  static constexpr int kTagModules = core::tags::Private(0);
  static constexpr int kMaxUnits = 601;
  static_assert(kMaxUnits * core::tags::kCollectiveSpan <= core::tags::kPrivateSize);
  WorkerContext& w_;
  const EntryContext& x_;
  Recorder& records_;
  const DipacoOptions& o_;
  const PathLayout layout_;
  const int64_t path_;
  torch::Tensor global_;
  OuterOptimizerState outer_;
  std::vector<Unit> units_;
  std::vector<float> delta_host_;
  const core::Codec codec_{o_.outer_gradient};
  std::vector<TokenBatch> val_batches_;
  double val_share_ = 0.0;
  double shard_weight_ = 1.0;  // this path's share of the training tokens, over the workers training it
  int64_t steps_this_round_ = 0;
  float last_loss_ = 0.0f;
};

const core::KeyBlock kDipacoKeys("compare[]: dipaco", "DiPaCo (arXiv 2403.10616): paths through modules, routed by document.");
const core::IntKey kLevels(kDipacoKeys, "levels", 2, 1, 64,
                           core::Doc("L levels of consecutive blocks; model.n_layers a multiple of L"));
const core::IntKey kModules(kDipacoKeys, "modules", 2, 1, 64,
                            core::Doc("K modules per level: K^L paths, worker w trains path w mod K^L (at least K^L workers)"));
const core::IntKey kDocumentTokens(kDipacoKeys, "document_tokens", 1024, 2, int64_t{1} << 30,
                                   core::Doc("a routed document's length; above model.seq_len", "tokens"));
const core::IntKey kRouteTokens(kDipacoKeys, "route_tokens", 256, 1, int64_t{1} << 30,
                                core::Doc("a document is routed by the hashed histogram of its first this many tokens",
                                          "tokens"));

core::ParsedOptions ParseDipaco(core::OptionReader& r, const core::Scenario& sc, const core::AlgorithmSpec& entry) {
  auto o = std::make_shared<DipacoOptions>();
  ReadOuterOptions(r, o.get());
  o->levels = r.Int(kLevels);
  o->modules = r.Int(kModules);
  o->document_tokens = r.Int(kDocumentTokens);
  o->route_tokens = r.Int(kRouteTokens);
  if (o->levels * o->modules > 600) {
    r.ErrorAt("modules", "levels x modules must be at most 600 (one tag range per module)");
  }
  if (!sc.model.torchscript.empty()) {
    r.ErrorAt("levels", "DiPaCo's paths are made of the built-in GPT's blocks; a torchscript model has none of its own "
                        "(use the built-in model, or another algorithm)");
  }
  const int64_t n_layers = entry.n_layers > 0 ? entry.n_layers : std::max<int64_t>(1, sc.model.n_layers);
  int64_t paths = 1;  // modules^levels, saturating above the worker count
  for (int64_t l = 0; l < o->levels && paths <= sc.workers.count; ++l) paths *= o->modules;
  if (n_layers % o->levels != 0) {
    r.ErrorAt("levels", "the model's n_layers = " + std::to_string(n_layers) +
                            " must be a multiple of levels (a level is a group of blocks)");
  } else if (paths > sc.workers.count) {
    r.ErrorAt("modules", std::to_string(o->modules) + "^" + std::to_string(o->levels) +
                             " paths need at least as many workers (workers.count = " +
                             std::to_string(sc.workers.count) + ")");
  }
  if (o->document_tokens <= sc.model.seq_len) {
    r.ErrorAt("document_tokens", "must exceed model.seq_len = " + std::to_string(sc.model.seq_len));
  }
  if (!sc.faults.empty()) r.Error("dipaco does not support faults (a path's leaving would orphan its modules)");
  return {o, RoundsName("dipaco", *o)};
}

// DiLoCo's rounds, but each outer step is one ring all-reduce of the embeddings and final norm
// among all M workers, then per level one ring per module among the workers whose path holds it
// (the level's rings at once, on disjoint workers), each of a module's fp32 pseudo-gradient and
// its token weight. Block and shared sizes from the scenario's model (a block: the parameters one
// more layer adds).
std::vector<PlanRow> PlanDipaco(const PlanInputs& in, const core::AlgorithmSpec& entry) {
  const DipacoOptions& a = entry.Options<DipacoOptions>();
  const core::Scenario& sc = *in.sc;
  const int m = in.workers();
  core::ModelSpec spec = sc.model;
  if (spec.vocab_size <= 0) spec.vocab_size = 256;
  spec.n_layers = 1;
  const double one = static_cast<double>(CostOf(spec).params);
  spec.n_layers = 2;
  const double block = static_cast<double>(CostOf(spec).params) - one, shared = one - block;
  const double module = block * static_cast<double>((entry.n_layers > 0 ? entry.n_layers : sc.model.n_layers) / a.levels);
  const PathLayout layout{a.levels, a.modules};
  std::vector<int> all(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) all[static_cast<size_t>(i)] = i;
  double per_round_s = 0, per_round_bytes = 0;
  per_round_s += in.ConcurrentRingsSeconds({all}, 4.0 * (shared + 1), &per_round_bytes);
  for (int64_t l = 0; l < a.levels; ++l) {
    std::vector<std::vector<int>> groups;
    for (int64_t k = 0; k < a.modules; ++k) groups.push_back(layout.Sharing(all, l, k));
    per_round_s += in.ConcurrentRingsSeconds(groups, 4.0 * (module + 1), &per_round_bytes);
  }
  const double rounds = std::ceil(in.steps / static_cast<double>(a.inner_steps));
  PlanRow r;
  r.compute_s = in.compute_s;
  r.syncs = static_cast<int64_t>(rounds);
  r.time_s = in.critical_compute_s + rounds * per_round_s;
  r.bytes_per_worker = rounds * per_round_bytes;
  return {r};
}

AlgorithmPlugin DipacoPlugin() {
  AlgorithmPlugin p;
  p.parser.name = "dipaco";
  p.parser.shorthands = "dipaco, dipaco-hN";
  p.parser.shorthand = [](const std::string& text) { return InnerStepsShorthand("dipaco", text); };
  p.parser.parse = ParseDipaco;
  p.summary = "DiPaCo: paths of modules over routed documents, each module averaged among its holders";
  p.make = [](WorkerContext& w) -> std::unique_ptr<Algorithm> { return std::make_unique<Dipaco>(w); };
  p.plan = PlanDipaco;
  p.replay = [](const core::AlgorithmSpec&) -> std::string {
    return "its modules synchronise in groups of their own, not as one group a round, the form of the trace";
  };
  // Its rounds, fragments and messages follow the steps, never the arrivals.
  p.retime = [](const core::AlgorithmSpec&) -> std::string { return ""; };
  return p;
}

}  // namespace

NARROWS_REGISTER_ALGORITHM(dipaco, DipacoPlugin());

}  // namespace narrows::trainer
