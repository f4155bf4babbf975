// Synchronous data parallelism, as PyTorch DDP: every step, the members all-reduce their gradients
// (and losses) and apply the mean with AdamW, so all replicas stay identical. The all-reduce runs
// in buckets started during backward (OverlappedGradients) or once after it. A joiner receives the
// parameters and the AdamW state of a member; in a deployment a restarted process votes itself in
// through one slot per worker after the loss (Roster::Vote), as DiLoCo's do, and is welcomed at the
// next step. With an adaptive batch size (batch_size.h) an update
// accumulates several base batches and all-reduces once after the last backward (no buckets), its
// tail carrying each worker's squared gradient norm when the norm test runs.
#include <algorithm>
#include <chrono>

#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/batch_size.h"

namespace narrows::trainer {
namespace {

// The most buckets a step's gradient is cut into: their all-reduces lie in the entry's private tag
// range (core/tags.h), kCollectiveSpan tags each.
constexpr int kMaxBuckets = 333;
static_assert(kMaxBuckets * core::tags::kCollectiveSpan <= core::tags::kPrivateSize);

struct DdpOptions : core::AlgorithmOptions {
  // Gradient buckets all-reduced as backward produces them, overlapping communication with
  // computation, as PyTorch DDP does (first bucket 1 MB, then bucket_mb).
  bool overlap = true;
  double bucket_mb = 25.0;
  BatchOptions batch;
};

using SteadyClock = std::chrono::steady_clock;

// PyTorch DDP's scheme for overlapping communication with backward: gradients are packed into
// buckets in the order backward produces them (last layer first, the tied embedding last); each
// bucket's all-reduce starts, beside the rest of backward, as soon as its last gradient is ready.
// Compute is charged to the clock as backward proceeds, so each bucket starts at its true time.
class OverlappedGradients {
 public:
  OverlappedGradients(WorkerContext& w, double bucket_mb) : w_(w) {
    const auto& slices = w.replica.model().slices();
    const int64_t layers = w.entry.model.n_layers;
    auto readiness = [&](const ParamSlice& s) -> int64_t {  // higher = ready earlier
      if (const int64_t block = BlockOf(s); block >= 0) return block;
      return s.name.rfind("ln_f", 0) == 0 ? layers : -1;
    };
    std::vector<size_t> order(slices.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return readiness(slices[a]) > readiness(slices[b]);
    });
    place_.resize(slices.size());
    for (size_t i : order) {
      const double cap_bytes = (buckets_.size() <= 1 ? std::min(1.0, bucket_mb) : bucket_mb) * 1e6;
      // At most kMaxDdpBuckets (the tag range reserved for them): the last one takes the rest.
      const bool full = !buckets_.empty() && buckets_.back().numel > 0 &&
                        4.0 * (buckets_.back().numel + slices[i].numel) > cap_bytes;
      if (buckets_.empty() || (full && buckets_.size() < static_cast<size_t>(kMaxBuckets))) {
        buckets_.emplace_back();
      }
      Bucket& b = buckets_.back();
      place_[i] = {static_cast<int>(buckets_.size() - 1), b.numel};
      b.slices.push_back(i);
      b.numel += slices[i].numel;
    }
    // Bucket 0 carries the loss and the join votes; the others are the gradients alone.
    for (auto& b : buckets_) b.host.resize(static_cast<size_t>(b.numel + (&b == &buckets_[0] ? 1 + w.entry.num_workers : 0)));
    total_numel_ = w.replica.model().num_params();
    const auto& params = w.replica.model().parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      torch::Tensor p = params[i];
      p.register_hook([this, i](const torch::Tensor& grad) { Ready(i, grad); });
    }
  }

  // Forward and backward of one step with the bucket all-reduces started during backward; then
  // waits for them and leaves the averaged gradients in the model's flat_grads(). Returns the mean loss.
  core::Result<double> Step(const TokenBatch& batch, const std::vector<int>& group, int64_t step) {
    group_ = group;
    step_ = step;
    w_.roster->Attempting(group, step);
    guard_ = w_.roster->Guard(group);
    ready_numel_ = 0;
    for (auto& b : buckets_) b.pending = static_cast<int>(b.slices.size());
    active_ = true;
    mark_ = SteadyClock::now();
    step_flops_ = w_.StepFlops();
    charged_flops_ = 0.0;
    // The loss is known before backward: it travels in the first bucket.
    w_.replica.ComputeGradients(batch, [this](double loss) { loss_ = loss; });
    w_.replica.FinishOnDevice();  // this replica's kernels are charged to it
    active_ = false;
    ChargeUntilNow(step_flops_);
    const double backward_end = w_.t.clock().Now();
    core::Status status;
    for (auto& b : buckets_) {
      const core::Status s = b.work->Wait();
      if (status.ok() && !s.ok()) status = s;
      b.work.reset();
    }
    w_.comm_s += w_.t.clock().Now() - backward_end;  // communication not hidden behind backward
    if (w_.roster->live()) {
      // Live: the sums of every bucket, end to end, are this step's result; a survivor whose
      // attempt failed takes them from one that completed it (Roster::Settle) before repeating.
      std::vector<float>& sums = sums_;  // reused: no allocation per step
      sums.clear();
      for (auto& b : buckets_) sums.insert(sums.end(), b.host.begin(), b.host.end());
      if (status.ok()) {
        w_.roster->Completed(group_, step_, sums.data(), static_cast<int64_t>(sums.size()));
      } else if (status.code() == core::StatusCode::kPeerUnavailable) {
        auto settled = w_.roster->Settle(group_, step_, sums.data(), static_cast<int64_t>(sums.size()));
        if (!settled.ok()) return settled.status();
        if (*settled) {
          size_t at = 0;
          for (auto& b : buckets_) {
            std::copy(sums.begin() + static_cast<std::ptrdiff_t>(at), sums.begin() + static_cast<std::ptrdiff_t>(at + b.host.size()),
                      b.host.begin());
            at += b.host.size();
          }
          status = core::Status::Ok();
        }
      }
    }
    NARROWS_RETURN_IF_ERROR(status);
    w_.roster->CountVotes(group_, buckets_[0].host.data() + buckets_[0].numel + 1);
    const float inv = 1.0f / static_cast<float>(group_.size());
    const auto& slices = w_.replica.model().slices();
    auto flat = w_.replica.model().flat_grads();
    for (auto& b : buckets_) {
      for (size_t i : b.slices) {
        torch::Tensor dst = flat.narrow(0, slices[i].offset, slices[i].numel);
        torch::NoGradGuard no_grad;
        dst.copy_(torch::from_blob(b.host.data() + place_[i].second, {slices[i].numel}, torch::kFloat32) * inv);
      }
    }
    return static_cast<double>(buckets_[0].host[static_cast<size_t>(buckets_[0].numel)]) * inv;
  }
  // This worker's loss of the last Step (before averaging).
  double local_loss() const { return loss_; }

 private:
  struct Bucket {
    std::vector<size_t> slices;
    int64_t numel = 0;
    std::vector<float> host;
    int pending = 0;
    std::unique_ptr<core::Work> work;
  };

  // Charges the compute done so far: measured host time, or the modelled share (forward = 1/3 of
  // the step's FLOPs, backward = 2/3 in proportion to the parameters whose gradients are ready).
  void ChargeUntilNow(double modelled_flops_so_far) {
    const double host = std::chrono::duration<double>(SteadyClock::now() - mark_).count();
    w_.ChargeCompute(modelled_flops_so_far - charged_flops_, host);
    // From after the charge: a real clock's pacing (a slow worker's wait) is no host compute.
    mark_ = SteadyClock::now();
    charged_flops_ = modelled_flops_so_far;
  }

  void Ready(size_t i, const torch::Tensor& grad) {
    if (!active_) return;
    const auto& slice = w_.replica.model().slices()[i];
    ready_numel_ += slice.numel;
    ChargeUntilNow(step_flops_ / 3.0 + 2.0 * step_flops_ / 3.0 * static_cast<double>(ready_numel_) /
                                           static_cast<double>(total_numel_));
    Bucket& b = buckets_[static_cast<size_t>(place_[i].first)];
    ToHost(grad.reshape({-1}), b.host.data() + place_[i].second);
    if (--b.pending > 0) return;
    if (&b == &buckets_[0]) {
      b.host[static_cast<size_t>(b.numel)] = static_cast<float>(loss_);
      std::fill(b.host.begin() + b.numel + 1, b.host.end(), 0.0f);
      w_.roster->Vote(group_, b.host.data() + b.numel + 1);
    }
    const int tag = w_.roster->Tag(kTagBuckets + core::tags::kCollectiveSpan * place_[i].first, step_, group_);
    const auto count = static_cast<int64_t>(b.host.size());
    core::Transport& via = guard_ ? *guard_ : w_.t;
    core::CollectiveOptions options = w_.Options(group_, tag);
    w_.NoteCollective(options, {});
    b.work = core::AllReduceSumAsync(via, b.host.data(), count, std::move(options));
  }

  // Bucket b's all-reduce at kTagBuckets + kCollectiveSpan * b, in the entry's private range (core/tags.h).
  static constexpr int kTagBuckets = core::tags::Private(0);
  WorkerContext& w_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<int, int64_t>> place_;  // per slice: bucket, offset in its host buffer
  std::vector<int> group_;
  int64_t step_ = 0;
  std::unique_ptr<core::Transport> guard_;  // live: the buckets' collectives go through it
  std::vector<float> sums_;  // live: every bucket's sums end to end, the step's result
  int64_t total_numel_ = 0, ready_numel_ = 0;
  bool active_ = false;
  SteadyClock::time_point mark_;
  double step_flops_ = 0.0, charged_flops_ = 0.0, loss_ = 0.0;
};

class Ddp final : public RoundAlgorithm {
 public:
  explicit Ddp(WorkerContext& w)
      : w_(w), x_(w.entry), records_(w.records), o_(x_.algo.Options<DdpOptions>()), n_params_(w.replica.model().num_params()),
        on_failure_(x_.sc.deploy.on_failure),
        updates_(w, o_.batch, NormTestSamples::kWorkers) {
    if (o_.overlap && x_.sc.train.grad_accum == 1 && !updates_.adaptive()) {
      overlapped_ = std::make_unique<OverlappedGradients>(w, o_.bucket_mb);
    }
    // All gradients + the loss (+ the squared norm of the worker's gradient) + a join vote per
    // worker, for one all-reduce.
    votes_at_ = n_params_ + (updates_.adaptive() ? 2 : 1);
    w.buffer.resize(static_cast<size_t>(votes_at_ + x_.num_workers));
  }

  int64_t RoundSteps() const override { return 1; }

  SharedState Shared() override {
    auto& rep = w_.replica;
    inner_steps_ = rep.optimizer().steps_taken();
    SharedState shared{{{"params", &rep.model().flat_params()}}, &inner_steps_};
    for (const auto& state : rep.optimizer().State()) shared.tensors.push_back(state);
    return shared;
  }
  void OnJoin(int64_t, InnerState) override { w_.replica.optimizer().set_steps_taken(inner_steps_); }

  // Live checkpoints hold the replica and its optimiser (a round is one step). Not with adaptive
  // batch sizes: a resumed worker finds its place in the data by counting base batches.
  bool Checkpoints() const override { return !updates_.adaptive(); }

  core::Status Step(Round* round, int64_t step) override {
    return updates_.adaptive() ? AdaptiveStep(round, step) : ConstantStep(round, step);
  }

 private:
  core::Status ConstantStep(Round* round, int64_t step) {
    auto& rep = w_.replica;
    std::vector<int>& group = round->members;
    const TokenBatch batch = w_.sampler.Next(x_.sc.train.batch_size);
    double local_loss = 0.0;
    bool reduced = false;  // flat_grads() holds the group's mean gradient
    double mean_loss = 0.0;
    // A replay reduces whole where the deployment did: at a step whose bucketed all-reduce failed.
    if (overlapped_ && !w_.roster->RecordedRepeat(step)) {
      auto loss = overlapped_->Step(batch, group, step);
      if (loss.ok()) {
        mean_loss = *loss;
        reduced = true;
      } else if (loss.status().code() == core::StatusCode::kPeerUnavailable) {
        // A member died during backward: the survivors reduce the step's gradients once more, whole.
        NARROWS_RETURN_IF_ERROR(w_.roster->DropDead(&group, step, on_failure_, loss.status()));
        local_loss = overlapped_->local_loss();
      } else {
        return loss.status();
      }
    } else {
      local_loss = w_.Compute(w_.StepFlops(), [&] { return rep.ComputeGradients(batch); });
    }
    if (!reduced) {
      NARROWS_RETURN_IF_ERROR(w_.Reduce(&group, static_cast<int64_t>(w_.buffer.size()), step, [&] {
        ToHost(rep.model().flat_grads(), w_.buffer.data());
        w_.buffer[static_cast<size_t>(n_params_)] = static_cast<float>(local_loss);
        Vote(group);
      }, on_failure_));
      w_.roster->CountVotes(group, w_.buffer.data() + votes_at_);
      const float inv = 1.0f / static_cast<float>(group.size());
      for (auto& v : w_.buffer) v *= inv;
      FromHost(w_.buffer.data(), rep.model().flat_grads());
      mean_loss = w_.buffer[static_cast<size_t>(n_params_)];
    }
    const double lr = w_.InnerLearningRate(step, -1);
    w_.Compute(0.0, [&] { return rep.ApplyGradients(lr); });
    w_.Record(step, mean_loss);
    if (group.front() == w_.rank) records_.MaybeEvaluate(step, step + 1, w_.Now(), rep.model().flat_params());
    return core::Status::Ok();
  }

  // One base batch of an update of several (batch_size.h); the last one reduces and steps.
  core::Status AdaptiveStep(Round* round, int64_t step) {
    auto& rep = w_.replica;
    std::vector<int>& group = round->members;
    bool done = false;
    const double loss = updates_.Step(step, x_.sc.train.steps, &done);
    if (!done) {
      w_.Record(step, loss);
      return core::Status::Ok();
    }
    const bool testing = updates_.testing();
    const double local_sq = testing ? rep.model().flat_grads().square().sum().item<double>() : 0.0;
    NARROWS_RETURN_IF_ERROR(w_.Reduce(&group, static_cast<int64_t>(w_.buffer.size()), step, [&] {
      ToHost(rep.model().flat_grads(), w_.buffer.data());
      w_.buffer[static_cast<size_t>(n_params_)] = static_cast<float>(loss);
      w_.buffer[static_cast<size_t>(n_params_ + 1)] = static_cast<float>(local_sq);
      Vote(group);
    }, on_failure_));
    w_.roster->CountVotes(group, w_.buffer.data() + votes_at_);
    const auto m = static_cast<int64_t>(group.size());
    const double sum_sq = w_.buffer[static_cast<size_t>(n_params_ + 1)];
    const float inv = 1.0f / static_cast<float>(m);
    for (auto& v : w_.buffer) v *= inv;
    FromHost(w_.buffer.data(), rep.model().flat_grads());
    if (testing) {
      const double t = NormTestStatistic(sum_sq, rep.model().flat_grads().square().sum().item<double>(), m);
      updates_.schedule().Observe(t);
      if (group.front() == w_.rank) {
        records_.Event({{"type", "norm_test"}, {"step", step + 1}, {"statistic", t}, {"samples", m},
                  {"multiple", updates_.schedule().multiple()}});
      }
    }
    w_.Compute(0.0, [&] { return rep.ApplyGradients(w_.InnerLearningRate(updates_.start(), -1)); });
    w_.Record(step, w_.buffer[static_cast<size_t>(n_params_)]);
    if (group.front() == w_.rank) records_.MaybeEvaluate(updates_.start(), step + 1, w_.Now(), rep.model().flat_params());
    return core::Status::Ok();
  }

  // This worker's join votes into the buffer's slots (zero unless live and a worker is outside).
  void Vote(const std::vector<int>& group) {
    std::fill(w_.buffer.begin() + votes_at_, w_.buffer.end(), 0.0f);
    w_.roster->Vote(group, w_.buffer.data() + votes_at_);
  }

  WorkerContext& w_;
  const EntryContext& x_;
  Recorder& records_;
  const DdpOptions& o_;
  const int64_t n_params_;
  int64_t votes_at_ = 0;  // where the join votes start in the buffer
  const core::OnFailure on_failure_;
  std::unique_ptr<OverlappedGradients> overlapped_;
  int64_t inner_steps_ = 0;
  AdaptiveUpdates updates_;
};

const core::KeyBlock kDdpKeys("compare[]: ddp", "Synchronous data parallelism (PyTorch DDP), with a batch.");
const core::BoolKey kOverlap(kDdpKeys, "overlap", true,
                             core::Doc("all-reduce gradient buckets as backward produces them (needs grad_accum: 1); "
                                       "false: one all-reduce after backward"));
const core::NumberKey kBucketMb(kDdpKeys, "bucket_mb", 25.0, 0.001, 1e6,
                                core::Doc("bucket size; the first bucket is at most 1 MB, as in PyTorch", "MB"));
const core::StructureKey kBatchKey(kDdpKeys, "batch", core::KeyType::kMapping,
                                   core::Doc("an adaptive batch size; absent: constant", "", "none"), "an entry's batch");

core::ParsedOptions ParseDdp(core::OptionReader& r, const core::Scenario& sc, const core::AlgorithmSpec&) {
  auto o = std::make_shared<DdpOptions>();
  o->overlap = r.Bool(kOverlap);
  o->bucket_mb = r.Double(kBucketMb);
  o->batch = ReadBatchOptions(r, kBatchKey);
  if (o->batch.schedule != BatchScheduleKind::kConstant && !sc.faults.empty()) {
    r.ErrorAt("batch", "adaptive batch sizes do not support faults");
  }
  if (o->batch.schedule == BatchScheduleKind::kNormTest && sc.workers.count < 2) {
    r.ErrorAt("batch", "DDP's norm test compares the workers' gradients: it needs 2 or more");
  }
  return {o, "ddp"};
}

// Every update all-reduces the gradients and the loss in fp32. Overlapped, the all-reduce hides
// behind backward (two thirds of a step's compute) but for the last bucket, ready only when
// backward ends (a model within the first bucket: all of it). A linear batch warm-up takes fewer
// updates (counted with the trainer's own BatchSchedule); the norm test's growth depends on the
// gradients, so its rows assume the base batch.
std::vector<PlanRow> PlanDdp(const PlanInputs& in, const core::AlgorithmSpec& entry) {
  const DdpOptions& o = entry.Options<DdpOptions>();
  const int m = in.workers();
  const double bytes = 4.0 * (in.workload.params + 1 + in.workers());  // + the loss and a join vote per worker
  const double all = in.AllReduceSeconds(bytes, entry.collective);
  const double first_bucket = std::min(1.0, o.bucket_mb) * 1e6;
  const bool adaptive = o.batch.schedule != BatchScheduleKind::kConstant;  // one all-reduce after backward
  const double exposed = !o.overlap || adaptive || bytes <= first_bucket
                             ? all
                             : std::max(in.AllReduceSeconds(std::min(bytes, o.bucket_mb * 1e6), entry.collective),
                                        all - 2.0 / 3.0 * in.step_s);
  double updates = in.steps;
  if (o.batch.schedule == BatchScheduleKind::kLinear) {
    BatchSchedule schedule(o.batch, static_cast<int64_t>(in.steps));
    updates = 0;
    for (int64_t step = 0; step < static_cast<int64_t>(in.steps); ++updates) {
      schedule.BeginUpdate(step);
      step += schedule.multiple();
    }
  }
  PlanRow r;
  r.compute_s = in.compute_s;
  r.time_s = in.critical_compute_s + updates * exposed;
  if (o.batch.schedule == BatchScheduleKind::kConstant && entry.collective == core::CollectiveKind::kRing) {
    // The trainer's buckets (OverlappedGradients): 1 MB, then bucket_mb each, the last taking the
    // rest and the tied embedding (ready when backward ends); gradients come out evenly over
    // backward, the last two thirds of a step. Without overlap one ring after the step.
    std::vector<double> buckets, ready;
    if (!o.overlap || bytes <= first_bucket) {
      buckets = {bytes};
      ready = {1.0};
    } else {
      double at = 0.0;
      while (at < bytes) {
        const double cap = buckets.empty() ? first_bucket : o.bucket_mb * 1e6;
        const bool last = buckets.size() + 1 >= static_cast<size_t>(kMaxBuckets) || bytes - at <= cap;
        const double size = last ? bytes - at : cap;
        at += size;
        buckets.push_back(size);
        ready.push_back(last ? 1.0 : 1.0 / 3.0 + 2.0 / 3.0 * at / bytes);
      }
    }
    r.time_s = in.BucketedRingRoundsSeconds(buckets, ready, in.nominal_step_s, updates);
  }
  if (!adaptive && (!o.overlap || bytes <= first_bucket) && entry.collective == core::CollectiveKind::kTree &&
      in.deliveries) {
    // One tree after each worker's backward, on each worker's clock.
    r.time_s = in.TreeRoundsSeconds(bytes, bytes, in.nominal_step_s, updates);
  }
  r.bytes_per_worker = updates * 2.0 * (m - 1) / m * (bytes + (adaptive ? 4.0 : 0.0));
  if (o.batch.schedule == BatchScheduleKind::kNormTest) {
    r.note = "the norm test's batch growth depends on the gradients; predicted at the base batch "
             "(an upper bound on its time and bytes)";
  }
  return {r};
}

AlgorithmPlugin DdpPlugin() {
  AlgorithmPlugin p;
  p.parser.name = "ddp";
  p.parser.shorthands = "ddp";
  p.parser.shorthand = [](const std::string& text) -> std::optional<core::ShorthandKeys> {
    if (text == "ddp") return core::ShorthandKeys{};
    return std::nullopt;
  };
  p.parser.parse = ParseDdp;
  p.summary = "synchronous data parallelism (PyTorch DDP): an all-reduce of the gradients every step";
  p.make = [](WorkerContext& w) -> std::unique_ptr<Algorithm> { return std::make_unique<Ddp>(w); };
  p.plan = PlanDdp;
  // Its membership per step is in its crash, evicted and join events (narrows replay builds it); a
  // step with a crash was reduced whole.
  p.replay_trace = ReplayTrace::kSteps;
  p.replay = [](const core::AlgorithmSpec& entry) -> std::string {
    const DdpOptions& o = entry.Options<DdpOptions>();
    if (o.batch.schedule != BatchScheduleKind::kConstant) return "adaptive batch sizes keep per-worker state a restart loses";
    return "";
  };
  // Its batch sizes follow the gradients' noise where the norm test sets them; all else is by step.
  p.default_entry = true;  // a scenario without compare: trains DDP
  p.sizes_only = [](const core::AlgorithmSpec&) {
    SizesOnlySchedule s;
    s.outer_syncs = false;  // a gradient all-reduce every step
    return s;
  };
  p.retime = [](const core::AlgorithmSpec& entry) -> std::string {
    return entry.Options<DdpOptions>().batch.schedule == BatchScheduleKind::kNormTest
               ? "the norm test sets its batch sizes from the gradients"
               : "";
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_ALGORITHM(ddp, DdpPlugin());

}  // namespace narrows::trainer
