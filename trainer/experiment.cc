#include "trainer/experiment.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "core/collectives.h"
#include "core/run_writer.h"
#include "trainer/fault_plan.h"
#include "trainer/replica.h"

namespace narrows::trainer {
namespace {

using Json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

struct StepRecord {
  int worker;
  int64_t step;
  double time, loss, compute_s, comm_s, idle_s;
  int64_t bytes_sent, bytes_received;
};

core::AllReduceAlgorithm ToAlgorithm(core::CollectiveKind k) {
  switch (k) {
    case core::CollectiveKind::kStar: return core::AllReduceAlgorithm::kStar;
    case core::CollectiveKind::kHierarchical: return core::AllReduceAlgorithm::kHierarchical;
    case core::CollectiveKind::kRing: break;
  }
  return core::AllReduceAlgorithm::kRing;
}

void ToHost(const torch::Tensor& t, float* out) {
  auto host = t.detach().to(torch::kCPU).contiguous();
  std::memcpy(out, host.data_ptr<float>(), static_cast<size_t>(host.numel()) * sizeof(float));
}

void FromHost(const float* in, torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  t.copy_(torch::from_blob(const_cast<float*>(in), {t.numel()}, torch::kFloat32));
}

}  // namespace

struct Experiment::Impl {
  core::Scenario sc;
  core::AlgorithmSpec algo;
  std::shared_ptr<const Dataset> data;
  core::ModelSpec model;
  torch::Device device{torch::kCPU};
  FaultPlan plan;
  int num_workers;

  std::mutex mu;
  core::Status error;
  std::vector<StepRecord> records;
  std::vector<Json> events;
  std::map<int64_t, std::pair<double, double>> evals;  // step -> (time, val loss)
  std::vector<core::TransportStats> final_stats;
  std::vector<double> final_clock, compute_total;
  double host_compute_s = 0.0;
  int64_t outer_syncs = 0, tokens = 0;
  std::unique_ptr<Replica> evaluator;
  Experiment::ProgressFn progress;
  int64_t progress_step = 0;

  Impl(const core::Scenario& s, const core::AlgorithmSpec& a, std::shared_ptr<const Dataset> d)
      : sc(s), algo(a), data(std::move(d)), model(s.model), plan(s.faults, s.workers.count),
        num_workers(s.workers.count), final_stats(static_cast<size_t>(num_workers)),
        final_clock(static_cast<size_t>(num_workers)), compute_total(static_cast<size_t>(num_workers)) {
    model.vocab_size = data->vocab_size;
  }

  void Fail(const core::Status& s, int rank) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) error = core::Status(s.code(), "worker " + std::to_string(rank) + ": " + s.message());
  }
  void Event(Json e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(e));
  }
  // Validation loss of `params` (a flat parameter tensor), observed without charging virtual time.
  double Evaluate(const torch::Tensor& params) {
    std::lock_guard<std::mutex> lock(mu);
    if (!evaluator) {
      torch::manual_seed(sc.seed);
      evaluator = std::make_unique<Replica>(model, sc.train, device);
    }
    {
      torch::NoGradGuard no_grad;
      evaluator->model().flat_params().copy_(params);
    }
    return evaluator->Evaluate(data->val_batches);
  }
  bool EvalDue(int64_t from_step, int64_t to_step) const {
    if (to_step == sc.train.steps) return true;
    return sc.eval.every > 0 && to_step / sc.eval.every > from_step / sc.eval.every;
  }
};

// Seeds LibTorch's generator with the scenario seed and returns the model spec, so that every
// replica starts from the same weights (actors construct replicas one at a time, under the baton).
const core::ModelSpec& SeededModelSpec(const Experiment::Impl& impl) {
  torch::manual_seed(impl.sc.seed);
  return impl.model;
}

// Per-worker state shared by both algorithms.
struct WorkerContext {
  Experiment::Impl& x;
  int rank;
  core::Transport& t;
  Replica replica;
  BatchSampler sampler;
  double speed;
  double compute_s = 0.0, comm_s = 0.0, idle_s = 0.0;
  std::vector<float> buffer;

  WorkerContext(Experiment::Impl& impl, int r, core::Transport& transport)
      : x(impl),
        rank(r),
        t(transport),
        replica(SeededModelSpec(impl), impl.sc.train, impl.device),
        sampler(impl.data->corpus, impl.data->split.train, impl.model.seq_len, impl.sc.seed, r, impl.num_workers,
                impl.sc.data.sampling),
        speed(impl.sc.workers.speed[static_cast<size_t>(r)]) {}

  // Runs fn (real computation) and charges its time to this worker's clock: measured host time, or
  // FLOPs / device throughput when modelled; divided by the worker's speed factor.
  template <typename Fn>
  auto Compute(double modelled_flops, Fn&& fn) {
    const auto start = SteadyClock::now();
    auto out = fn();
    const double host = std::chrono::duration<double>(SteadyClock::now() - start).count();
    const double seconds =
        (x.sc.compute.mode == core::ComputeMode::kModelled ? modelled_flops / x.sc.compute.device_flops : host) / speed;
    t.clock().ChargeCompute(seconds);
    compute_s += seconds;
    {
      std::lock_guard<std::mutex> lock(x.mu);
      x.host_compute_s += host;
    }
    return out;
  }
  double StepFlops() {
    return replica.model().TrainFlopsPerToken() * static_cast<double>(x.sc.train.batch_size * x.model.seq_len);
  }
  // A collective, with its virtual duration counted as communication (or idle, for joiners).
  core::Status Timed(bool as_idle, const std::function<core::Status()>& fn) {
    const double before = t.clock().Now();
    core::Status s = fn();
    (as_idle ? idle_s : comm_s) += t.clock().Now() - before;
    return s;
  }
  void Record(int64_t step, double loss) {
    const auto stats = t.stats();
    const double now = t.clock().Now();
    bool advanced = false;
    {
      std::lock_guard<std::mutex> lock(x.mu);
      x.records.push_back({rank, step, now, loss, compute_s, comm_s, idle_s, stats.bytes_sent,
                           stats.bytes_received});
      x.tokens += x.sc.train.batch_size * x.model.seq_len;
      advanced = step + 1 > x.progress_step;
      if (advanced) x.progress_step = step + 1;
    }
    if (advanced && x.progress) x.progress(step + 1, now, loss);
  }
  void Done() {
    std::lock_guard<std::mutex> lock(x.mu);
    x.final_stats[static_cast<size_t>(rank)] = t.stats();
    x.final_clock[static_cast<size_t>(rank)] = t.clock().Now();
    x.compute_total[static_cast<size_t>(rank)] = compute_s;
  }
  core::CollectiveOptions Options(std::vector<int> group, int tag) const {
    core::CollectiveOptions o;
    o.group = std::move(group);
    o.tag = tag;
    o.algorithm = ToAlgorithm(x.algo.collective);
    o.islands = x.sc.network.islands;
    if (o.algorithm == core::AllReduceAlgorithm::kHierarchical && o.islands.empty()) {
      o.algorithm = core::AllReduceAlgorithm::kRing;  // a star has one island
    }
    return o;
  }
};

namespace {

constexpr int kTagReduce = 100;
constexpr int kTagJoin = 200;

// Sends `tensors` (flat, same device) from root to the joiners; everyone in {root} + joiners calls it.
core::Status SyncToJoiners(WorkerContext& w, int root, const std::vector<int>& joiners,
                           std::vector<torch::Tensor*> tensors, int64_t* counter) {
  int64_t total = 1;
  for (auto* t : tensors) total += t->numel();
  std::vector<float> buf(static_cast<size_t>(total));
  const bool is_root = w.rank == root;
  if (is_root) {
    int64_t off = 0;
    for (auto* t : tensors) {
      ToHost(*t, buf.data() + off);
      off += t->numel();
    }
    buf[static_cast<size_t>(off)] = static_cast<float>(*counter);
  }
  std::vector<int> group = joiners;
  group.push_back(root);
  std::sort(group.begin(), group.end());
  core::CollectiveOptions o;
  o.group = group;
  o.root = root;
  o.tag = kTagJoin;
  NARROWS_RETURN_IF_ERROR(w.Timed(!is_root, [&] {
    return core::Broadcast(w.t, buf.data(), buf.size() * sizeof(float), o);
  }));
  if (!is_root) {
    int64_t off = 0;
    for (auto* t : tensors) {
      torch::Tensor view = t->narrow(0, 0, t->numel());
      FromHost(buf.data() + off, view);
      off += t->numel();
    }
    *counter = static_cast<int64_t>(buf[static_cast<size_t>(off)]);
  }
  return core::Status::Ok();
}

// PyTorch DDP's scheme for overlapping communication with backward: gradients are packed into
// buckets in the order backward produces them (last layer first, the tied embedding last); each
// bucket's all-reduce starts, beside the rest of backward, as soon as its last gradient is ready.
// Compute is charged to the clock as backward proceeds, so each bucket starts at its true time.
class OverlappedGradients {
 public:
  OverlappedGradients(WorkerContext& w, double bucket_mb) : w_(w) {
    const auto& slices = w.replica.model().slices();
    const int64_t layers = w.x.model.n_layers;
    auto readiness = [&](const std::string& name) -> int64_t {  // higher = ready earlier
      if (name.rfind("h.", 0) == 0) return std::stoll(name.substr(2, name.find('.', 2) - 2));
      return name.rfind("ln_f", 0) == 0 ? layers : -1;
    };
    std::vector<size_t> order(slices.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return readiness(slices[a].name) > readiness(slices[b].name);
    });
    place_.resize(slices.size());
    for (size_t i : order) {
      const double cap_bytes = (buckets_.size() <= 1 ? std::min(1.0, bucket_mb) : bucket_mb) * 1e6;
      if (buckets_.empty() || (buckets_.back().numel > 0 && 4.0 * (buckets_.back().numel + slices[i].numel) > cap_bytes)) {
        buckets_.emplace_back();
      }
      Bucket& b = buckets_.back();
      place_[i] = {static_cast<int>(buckets_.size() - 1), b.numel};
      b.slices.push_back(i);
      b.numel += slices[i].numel;
    }
    for (auto& b : buckets_) b.host.resize(static_cast<size_t>(b.numel + 1));  // bucket 0 carries the loss
    total_numel_ = w.replica.model().num_params();
    const auto& params = w.replica.model().parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      torch::Tensor p = params[i];
      p.register_hook([this, i](const torch::Tensor& grad) { Ready(i, grad); });
    }
  }

  // Forward and backward of one step with the bucket all-reduces started during backward; then
  // waits for them and leaves the averaged gradients in the model's flat_grads(). Returns the mean loss.
  core::Result<double> Step(const TokenBatch& batch, const std::vector<int>& group) {
    group_ = group;
    ready_numel_ = 0;
    for (auto& b : buckets_) b.pending = static_cast<int>(b.slices.size());
    active_ = true;
    mark_ = SteadyClock::now();
    step_flops_ = w_.StepFlops();
    charged_flops_ = 0.0;
    // The loss is known before backward: it travels in the first bucket.
    w_.replica.ComputeGradients(batch, [this](double loss) { loss_ = loss; });
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
    NARROWS_RETURN_IF_ERROR(status);
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
    const auto now = SteadyClock::now();
    const double host = std::chrono::duration<double>(now - mark_).count();
    mark_ = now;
    double seconds = host;
    if (w_.x.sc.compute.mode == core::ComputeMode::kModelled) {
      seconds = (modelled_flops_so_far - charged_flops_) / w_.x.sc.compute.device_flops;
      charged_flops_ = modelled_flops_so_far;
    }
    seconds /= w_.speed;
    w_.t.clock().ChargeCompute(seconds);
    w_.compute_s += seconds;
    std::lock_guard<std::mutex> lock(w_.x.mu);
    w_.x.host_compute_s += host;
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
    if (&b == &buckets_[0]) b.host[static_cast<size_t>(b.numel)] = static_cast<float>(loss_);
    const int tag = kTagBuckets + 3 * place_[i].first;
    const int64_t count = b.numel + (&b == &buckets_[0] ? 1 : 0);
    b.work = core::AllReduceSumAsync(w_.t, b.host.data(), count, w_.Options(group_, tag));
  }

  static constexpr int kTagBuckets = 1000;  // bucket b uses tags 1000 + 3b .. 1002 + 3b
  WorkerContext& w_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<int, int64_t>> place_;  // per slice: bucket, offset in its host buffer
  std::vector<int> group_;
  int64_t total_numel_ = 0, ready_numel_ = 0;
  bool active_ = false;
  SteadyClock::time_point mark_;
  double step_flops_ = 0.0, charged_flops_ = 0.0, loss_ = 0.0;
};

core::Status RunDdp(WorkerContext& w) {
  auto& x = w.x;
  auto& rep = w.replica;
  const int64_t n_params = rep.model().num_params();
  std::unique_ptr<OverlappedGradients> overlapped;
  if (x.algo.overlap && x.sc.train.grad_accum == 1) {
    overlapped = std::make_unique<OverlappedGradients>(w, x.algo.bucket_mb);
  } else {
    w.buffer.resize(static_cast<size_t>(n_params + 1));  // one all-reduce of all gradients + the loss
  }
  for (int64_t step = 0; step < x.sc.train.steps; ++step) {
    if (!x.plan.Alive(w.rank, step)) continue;
    const std::vector<int> group = x.plan.AliveSet(step);
    if (step > 0) {
      std::vector<int> joiners, stayed;
      for (int r : group) (x.plan.Alive(r, step - 1) ? stayed : joiners).push_back(r);
      const bool involved = std::find(joiners.begin(), joiners.end(), w.rank) != joiners.end() ||
                            (!stayed.empty() && stayed.front() == w.rank);
      if (!joiners.empty() && !stayed.empty() && involved) {
        int64_t adam_steps = rep.optimizer().steps_taken();
        NARROWS_RETURN_IF_ERROR(SyncToJoiners(
            w, stayed.front(), joiners,
            {&rep.model().flat_params(), &rep.optimizer().exp_avg(), &rep.optimizer().exp_avg_sq()}, &adam_steps));
        rep.optimizer().set_steps_taken(adam_steps);
        if (stayed.front() == w.rank) {
          x.Event({{"type", "join"}, {"step", step}, {"time", w.t.clock().Now()}, {"workers", joiners}});
        }
      }
    }
    const TokenBatch batch = w.sampler.Next(x.sc.train.batch_size);
    double mean_loss = 0.0;
    if (overlapped) {
      auto loss = overlapped->Step(batch, group);
      if (!loss.ok()) return loss.status();
      mean_loss = *loss;
    } else {
      const double loss = w.Compute(w.StepFlops(), [&] { return rep.ComputeGradients(batch); });
      ToHost(rep.model().flat_grads(), w.buffer.data());
      w.buffer[static_cast<size_t>(n_params)] = static_cast<float>(loss);
      NARROWS_RETURN_IF_ERROR(w.Timed(false, [&] {
        return core::AllReduceSum(w.t, w.buffer.data(), n_params + 1, w.Options(group, kTagReduce));
      }));
      const float inv = 1.0f / static_cast<float>(group.size());
      for (auto& v : w.buffer) v *= inv;
      FromHost(w.buffer.data(), rep.model().flat_grads());
      mean_loss = w.buffer[static_cast<size_t>(n_params)];
    }
    const double lr = LearningRate(x.sc.train, step);
    w.Compute(0.0, [&] { return rep.ApplyGradients(lr); });
    w.Record(step, mean_loss);
    if (group.front() == w.rank && x.EvalDue(step, step + 1)) {
      const double val = x.Evaluate(rep.model().flat_params());
      std::lock_guard<std::mutex> lock(x.mu);
      x.evals[step + 1] = {w.t.clock().Now(), val};
    }
  }
  return core::Status::Ok();
}

// The outer optimiser of DiLoCo (arXiv 2311.08105 Alg. 1) on the global parameters.
struct OuterOptimizerState {
  torch::Tensor momentum, adam_m, adam_v;
  int64_t steps = 0;
};

void OuterStep(const core::AlgorithmSpec& a, torch::Tensor& global, const torch::Tensor& delta,
               OuterOptimizerState& s) {
  torch::NoGradGuard no_grad;
  ++s.steps;
  const double lr = a.outer_lr, mu = a.outer_momentum;
  switch (a.outer_optimizer) {
    case core::OuterOptimizer::kSgd:
      if (mu > 0) {
        s.momentum.mul_(mu).add_(delta);
        global.sub_(s.momentum, lr);
      } else {
        global.sub_(delta, lr);
      }
      break;
    case core::OuterOptimizer::kNesterov:  // PyTorch SGD(nesterov=True) on the pseudo-gradient
      s.momentum.mul_(mu).add_(delta);
      global.sub_(delta + mu * s.momentum, lr);
      break;
    case core::OuterOptimizer::kAdam: {
      constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
      s.adam_m.mul_(b1).add_(delta, 1 - b1);
      s.adam_v.mul_(b2).addcmul_(delta, delta, 1 - b2);
      const double bc1 = 1 - std::pow(b1, static_cast<double>(s.steps));
      const double bc2 = 1 - std::pow(b2, static_cast<double>(s.steps));
      global.addcdiv_(s.adam_m, (s.adam_v / bc2).sqrt_().add_(eps), -lr / bc1);
      break;
    }
  }
}

core::Status RunDiloco(WorkerContext& w) {
  auto& x = w.x;
  auto& rep = w.replica;
  const int64_t n_params = rep.model().num_params();
  const int64_t H = x.algo.inner_steps, S = x.sc.train.steps;
  torch::Tensor global = rep.model().flat_params().detach().clone();
  OuterOptimizerState outer{torch::zeros_like(global), torch::zeros_like(global), torch::zeros_like(global), 0};
  std::mt19937_64 drop_rng(x.sc.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(w.rank) + 1);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  w.buffer.resize(static_cast<size_t>(n_params + 1));
  auto members_of = [&](int64_t rs, int64_t re) {
    std::vector<int> m;
    for (int r = 0; r < x.num_workers; ++r) {
      if (x.plan.Alive(r, rs) && x.plan.Alive(r, re - 1)) m.push_back(r);
    }
    return m;
  };
  std::vector<int> previous_members;
  // A worker that never trained or crashed has no inner optimiser state and restarts AdamW; every
  // joining worker warms its inner learning rate up again (a fresh Adam's first steps are full-size
  // sign steps, and a stale one's moments belong to other parameters).
  bool lost_state = !x.plan.Alive(w.rank, 0);
  int64_t rewarm_from = -1;
  for (int64_t rs = 0; rs < S; rs += H) {
    const int64_t re = std::min(S, rs + H);
    const std::vector<int> members = members_of(rs, re);
    // Workers alive now that were not in the last round receive the global state from its lowest member.
    if (rs > 0 && !previous_members.empty()) {
      std::vector<int> joiners;
      for (int r : x.plan.AliveSet(rs)) {
        if (std::find(previous_members.begin(), previous_members.end(), r) == previous_members.end()) {
          joiners.push_back(r);
        }
      }
      const int root = previous_members.front();
      const bool joining = std::find(joiners.begin(), joiners.end(), w.rank) != joiners.end();
      if (!joiners.empty() && (joining || w.rank == root)) {
        NARROWS_RETURN_IF_ERROR(SyncToJoiners(w, root, joiners,
                                              {&global, &outer.momentum, &outer.adam_m, &outer.adam_v},
                                              &outer.steps));
        if (joining) {
          torch::NoGradGuard no_grad;
          rep.model().flat_params().copy_(global);
          if (lost_state) rep.optimizer().Reset();
          lost_state = false;
          rewarm_from = rs;
        } else {
          x.Event({{"type", "join"}, {"step", rs}, {"time", w.t.clock().Now()}, {"workers", joiners}});
        }
      }
    }
    for (int64_t step = rs; step < re; ++step) {
      if (step > 0 && x.plan.Alive(w.rank, step - 1) && !x.plan.Alive(w.rank, step)) {
        const bool crash = x.plan.CrashesAt(w.rank, step);
        lost_state = lost_state || crash;
        x.Event({{"type", crash ? "crash" : "leave"}, {"step", step}, {"time", w.t.clock().Now()},
                 {"worker", w.rank}});
      }
    }
    if (x.plan.Alive(w.rank, rs)) {
      for (int64_t step = rs; step < re; ++step) {
        if (!x.plan.Alive(w.rank, step)) break;
        const TokenBatch batch = w.sampler.Next(x.sc.train.batch_size);
        double lr = LearningRate(x.sc.train, step);
        if (rewarm_from >= 0 && x.sc.train.warmup_steps > 0) {
          lr *= std::min(1.0, static_cast<double>(step - rewarm_from + 1) / x.sc.train.warmup_steps);
        }
        const StepStats stats = w.Compute(w.StepFlops(), [&] { return rep.TrainStep(batch, lr); });
        if (step + 1 < re) w.Record(step, stats.loss);
        if (step + 1 == re) w.buffer[static_cast<size_t>(n_params)] = static_cast<float>(stats.loss);
      }
    }
    const bool member = std::find(members.begin(), members.end(), w.rank) != members.end();
    if (member) {
      const double last_loss = w.buffer[static_cast<size_t>(n_params)];
      const bool keep = !(x.algo.drop_probability > 0 && uniform(drop_rng) < x.algo.drop_probability);
      {
        torch::NoGradGuard no_grad;
        ToHost(global - rep.model().flat_params(), w.buffer.data());  // pseudo-gradient
      }
      if (!keep) std::fill(w.buffer.begin(), w.buffer.end(), 0.0f);
      w.buffer[static_cast<size_t>(n_params)] = keep ? 1.0f : 0.0f;
      NARROWS_RETURN_IF_ERROR(w.Timed(false, [&] {
        return core::AllReduceSum(w.t, w.buffer.data(), n_params + 1, w.Options(members, kTagReduce));
      }));
      const float contributors = w.buffer[static_cast<size_t>(n_params)];
      if (contributors > 0) {
        for (auto& v : w.buffer) v /= contributors;
        torch::Tensor delta = torch::empty_like(global);
        FromHost(w.buffer.data(), delta);
        OuterStep(x.algo, global, delta, outer);
      }
      if (keep) {
        torch::NoGradGuard no_grad;
        rep.model().flat_params().copy_(global);
      }
      w.Record(re - 1, last_loss);
      if (w.rank == members.front()) {
        {
          std::lock_guard<std::mutex> lock(x.mu);
          ++x.outer_syncs;
        }
        x.Event({{"type", "outer_sync"}, {"step", re}, {"time", w.t.clock().Now()}, {"participants", members},
                 {"contributors", static_cast<int>(contributors)}});
        if (x.EvalDue(rs, re)) {
          const double val = x.Evaluate(global);
          std::lock_guard<std::mutex> lock(x.mu);
          x.evals[re] = {w.t.clock().Now(), val};
        }
      }
      if (!keep) x.Event({{"type", "dropped_outer_gradient"}, {"step", re}, {"worker", w.rank}});
    }
    if (!members.empty()) previous_members = members;
  }
  return core::Status::Ok();
}

}  // namespace

Experiment::Experiment(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Experiment::~Experiment() = default;

core::Result<std::unique_ptr<Experiment>> Experiment::Create(const core::Scenario& scenario,
                                                             const core::AlgorithmSpec& algorithm,
                                                             std::shared_ptr<const Dataset> data) {
  auto device = ResolveDevice(scenario.device);
  if (!device.ok()) return device.status();
  auto impl = std::make_unique<Impl>(scenario, algorithm, std::move(data));
  impl->device = *device;
  if (impl->plan.AliveSet(0).empty()) {
    return core::Status::InvalidArgument("faults: no worker is alive at step 0");
  }
  return std::unique_ptr<Experiment>(new Experiment(std::move(impl)));
}

void Experiment::SetProgress(ProgressFn fn) { impl_->progress = std::move(fn); }

void Experiment::RunWorker(int rank, core::Transport& transport) {
  Impl& x = *impl_;
  ConfigureThreads(x.sc.threads);
  WorkerContext w(x, rank, transport);
  const core::Status s = x.algo.kind == core::AlgorithmKind::kDdp ? RunDdp(w) : RunDiloco(w);
  if (!s.ok()) x.Fail(s, rank);
  w.Done();
}

core::Result<EntryResult> Experiment::Finish(const std::string& dir) {
  Impl& x = *impl_;
  if (!x.error.ok()) return x.error;
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(dir));
  EntryResult r;
  r.name = x.algo.name;
  r.algorithm = x.algo.kind == core::AlgorithmKind::kDdp ? "ddp" : "diloco";
  r.workers = x.num_workers;
  r.steps = x.sc.train.steps;
  r.tokens = x.tokens;
  r.outer_syncs = x.algo.kind == core::AlgorithmKind::kDdp ? 0 : x.outer_syncs;
  r.host_compute_s = x.host_compute_s;
  for (int w = 0; w < x.num_workers; ++w) {
    r.virtual_time_s = std::max(r.virtual_time_s, x.final_clock[static_cast<size_t>(w)]);
    r.bytes_sent_per_worker += static_cast<double>(x.final_stats[static_cast<size_t>(w)].bytes_sent) / x.num_workers;
  }
  double compute_mean = 0.0;
  for (double c : x.compute_total) compute_mean += c / x.num_workers;
  r.compute_utilization = r.virtual_time_s > 0 ? compute_mean / r.virtual_time_s : 0.0;
  if (!x.evals.empty()) r.final_val_loss = x.evals.rbegin()->second.second;
  for (const auto& [step, e] : x.evals) {
    if (x.sc.target_loss > 0 && e.second <= x.sc.target_loss) {
      r.time_to_target_s = e.first;
      break;
    }
  }

  // One metrics line per logged step: the slowest worker's time, mean loss and bytes, per-worker times.
  std::map<int64_t, std::vector<const StepRecord*>> by_step;
  for (const auto& rec : x.records) by_step[rec.step].push_back(&rec);
  core::JsonlWriter metrics;
  NARROWS_RETURN_IF_ERROR(metrics.Open(dir + "/metrics.jsonl"));
  std::vector<Json> per_worker(static_cast<size_t>(x.num_workers), Json::object());
  const int64_t tokens_per_step = x.sc.train.batch_size * x.model.seq_len;
  int64_t tokens = 0;
  for (const auto& [step, recs] : by_step) {
    tokens += tokens_per_step * static_cast<int64_t>(recs.size());
    double time = 0.0, loss = 0.0, sent = 0.0, received = 0.0;
    for (const auto* rec : recs) {
      time = std::max(time, rec->time);
      loss += rec->loss / static_cast<double>(recs.size());
      sent += static_cast<double>(rec->bytes_sent) / static_cast<double>(recs.size());
      received += static_cast<double>(rec->bytes_received) / static_cast<double>(recs.size());
      per_worker[static_cast<size_t>(rec->worker)] = {{"worker", rec->worker}, {"time_s", rec->time},
                                                      {"compute_s", rec->compute_s}, {"comm_s", rec->comm_s},
                                                      {"idle_s", rec->idle_s}, {"bytes_sent", rec->bytes_sent}};
    }
    const auto eval = x.evals.find(step + 1);
    if (eval == x.evals.end() && (step + 1) % x.sc.output.log_every != 0 && step + 1 != r.steps) continue;
    Json line = {{"step", step + 1},        {"virtual_time_s", time}, {"train_loss", loss},
                 {"tokens", tokens},        {"bytes_sent", sent},     {"bytes_received", received},
                 {"workers_active", recs.size()}, {"workers", per_worker}};
    if (eval != x.evals.end()) {
      line["val_loss"] = eval->second.second;
      if (x.data->byte_level) line["val_bpb"] = eval->second.second / std::log(2.0);
    }
    NARROWS_RETURN_IF_ERROR(metrics.Append(line.dump()));
  }
  core::JsonlWriter events;
  NARROWS_RETURN_IF_ERROR(events.Open(dir + "/events.jsonl"));
  std::stable_sort(x.events.begin(), x.events.end(), [](const Json& a, const Json& b) {
    return a.value("step", 0) < b.value("step", 0);
  });
  for (const auto& e : x.events) NARROWS_RETURN_IF_ERROR(events.Append(e.dump()));
  return r;
}

}  // namespace narrows::trainer
