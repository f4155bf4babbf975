// DiPaCo (arXiv 2403.10616): a modular model trained path by path. The model's transformer blocks
// form L levels of K modules (paths.h); a worker's replica is one path (the embeddings and final
// norm, and one module per level) and trains, DiLoCo-style, H inner steps on the documents routed
// to its path (routing.h). At the outer step each module's pseudo-gradient is averaged, weighted by
// the tokens each worker trained on this round, among the workers whose path holds the module only
// (the embeddings and final norm among all): one all-reduce per module, each counted apart. The
// outer optimiser then steps the path, as in diloco.cc. A held-out document is scored on its own
// path; the validation loss is the token-weighted mean over paths. Faults are refused at load.

#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/outer_optimizer.h"
#include "trainer/algorithms/paths.h"
#include "trainer/routing.h"

namespace narrows::trainer {
namespace {

class Dipaco final : public Algorithm {
 public:
  explicit Dipaco(WorkerContext& w)
      : w_(w),
        x_(w.x),
        layout_{x_.algo.levels, x_.algo.modules},
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

  core::Status Run(WorkerContext& w) override {
    const core::AlgorithmSpec& a = x_.algo;
    auto routing = x_.Share<PathRouting>("dipaco.routing", [&]() -> core::Result<PathRouting> {
      const Dataset& d = *x_.data;
      return RouteDocuments(d.corpus, d.split.train, d.val_corpus ? *d.val_corpus : d.corpus, d.split.val,
                            {static_cast<int>(layout_.paths()), a.document_tokens, a.route_tokens, x_.sc.seed});
    });
    if (!routing.ok()) return routing.status();
    const PathRouting& r = **routing;
    const auto p = static_cast<size_t>(path_);
    if (layout_.paths() > 1) w.sampler.UseSpans(r.train[p], w.rank);
    int64_t val_total = 0;
    for (int64_t t : r.val_tokens) val_total += t;
    val_share_ = val_total > 0 ? static_cast<double>(r.val_tokens[p]) / static_cast<double>(val_total) : 0.0;
    bool has_window = false;
    for (const auto& s : r.val[p]) has_window = has_window || s.length > x_.model.seq_len;
    if (layout_.paths() == 1) {
      val_batches_ = x_.data->val_batches;
    } else if (has_window) {
      val_batches_ = ValidationBatches(x_.data->val_corpus ? *x_.data->val_corpus : x_.data->corpus, r.val[p],
                                       x_.model.seq_len, x_.sc.eval.batches, x_.sc.eval.batch_size);
    } else {
      val_share_ = 0.0;  // no held-out document went to this path
    }
    if (w.rank == 0) {
      x_.Event({{"type", "routing"}, {"paths", layout_.paths()}, {"train_tokens", r.train_tokens},
                {"val_tokens", r.val_tokens}});
    }
    return RunRounds(w, *this);
  }

  int64_t RoundSteps() const override { return x_.algo.inner_steps; }

  SharedState Shared() override {
    return {{{"global", &global_}, {"outer_momentum", &outer_.momentum}, {"outer_adam_m", &outer_.adam_m},
             {"outer_adam_v", &outer_.adam_v}},
            &outer_.steps};
  }
  void OnJoin(int64_t, bool) override {}  // no joins: faults are refused at load

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
    // Token weight of this worker's pseudo-gradient, in units of a full round's tokens (the same
    // batch everywhere, so the constant cancels in the weighted mean).
    const float weight = static_cast<float>(steps_this_round_) / static_cast<float>(re - round->start);
    steps_this_round_ = 0;
    {
      torch::NoGradGuard no_grad;
      ToHost(global_ - w_.replica.model().flat_params(), delta_host_.data());
    }
    auto& buffer = w_.buffer;
    for (size_t i = 0; i < units_.size(); ++i) {
      Unit& u = units_[i];
      const auto level = static_cast<int64_t>(i) - 1;
      std::vector<int> group =
          i == 0 ? round->members : layout_.Sharing(round->members, level, layout_.ModuleOf(path_, level));
      const int64_t sent_before = w_.Stats().bytes_sent;
      NARROWS_RETURN_IF_ERROR(w_.Reduce(&group, u.numel + 1, re, [&] {
        int64_t at = 0;
        for (const auto& [offset, numel] : u.ranges) {
          for (int64_t j = 0; j < numel; ++j) buffer[static_cast<size_t>(at + j)] = weight * delta_host_[static_cast<size_t>(offset + j)];
          at += numel;
        }
        u.error_feedback.Apply(codec_, buffer.data(), u.numel);
        buffer[static_cast<size_t>(u.numel)] = weight;
      }, false, &codec_, 1, kTagModules + 3 * static_cast<int>(u.id)));
      u.bytes_sent += w_.Stats().bytes_sent - sent_before;
      const float total = buffer[static_cast<size_t>(u.numel)];
      int64_t at = 0;
      for (const auto& [offset, numel] : u.ranges) {
        for (int64_t j = 0; j < numel; ++j) {
          delta_host_[static_cast<size_t>(offset + j)] = total > 0 ? buffer[static_cast<size_t>(at + j)] / total : 0.0f;
        }
        at += numel;
      }
    }
    torch::Tensor delta = torch::empty_like(global_);
    FromHost(delta_host_.data(), delta);
    OuterStep(x_.algo, global_, delta, outer_);
    {
      torch::NoGradGuard no_grad;
      w_.replica.model().flat_params().copy_(global_);
    }
    w_.Record(re - 1, last_loss_);
    if (w_.rank == round->members.front()) {
      {
        std::lock_guard<std::mutex> lock(x_.mu);
        ++x_.outer_syncs;
      }
      x_.Event({{"type", "outer_sync"}, {"step", re}, {"time", w_.Now()}, {"participants", round->members}});
    }
    // The lowest-ranked worker of each path scores the path on the documents routed to it.
    if (val_share_ > 0 && LeadsPath(round->members) && x_.EvalDue(round->start, re)) {
      x_.AddPartialEval(re, w_.Now(), path_, x_.Evaluate(global_, &val_batches_), val_share_);
    }
    return core::Status::Ok();
  }

  core::Status Finish() override {
    Json bytes = Json::object();
    for (const Unit& u : units_) bytes[u.name] = u.bytes_sent;
    x_.Event({{"type", "module_bytes"}, {"step", x_.sc.train.steps}, {"worker", w_.rank}, {"path", path_},
              {"bytes_sent", bytes}});
    return core::Status::Ok();
  }

 private:
  struct Unit {
    std::string name;
    int64_t id = 0;  // 0: shared; 1 + level * modules + module
    std::vector<std::pair<int64_t, int64_t>> ranges;  // (offset, numel) into the flat parameters
    int64_t numel = 0;
    int64_t bytes_sent = 0;
    ErrorFeedback error_feedback;
  };

  bool LeadsPath(const std::vector<int>& members) const {
    for (int r : members) {
      if (layout_.PathOf(r) == path_) return r == w_.rank;
    }
    return false;
  }

  static constexpr int kTagModules = 2000;  // unit id u uses tags 2000 + 3u .. 2002 + 3u
  WorkerContext& w_;
  Experiment::Impl& x_;
  const PathLayout layout_;
  const int64_t path_;
  torch::Tensor global_;
  OuterOptimizerState outer_;
  std::vector<Unit> units_;
  std::vector<float> delta_host_;
  const core::Codec codec_{x_.algo.outer_gradient};
  std::vector<TokenBatch> val_batches_;
  double val_share_ = 0.0;
  int64_t steps_this_round_ = 0;
  float last_loss_ = 0.0f;
};

}  // namespace

std::unique_ptr<Algorithm> MakeDipaco(WorkerContext& w) { return std::make_unique<Dipaco>(w); }

}  // namespace narrows::trainer
