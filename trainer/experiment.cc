#include "trainer/experiment.h"

#include <nlohmann/json.hpp>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

#include "core/collectives.h"
#include "core/group_guard.h"
#include "core/run_writer.h"
#include "trainer/checkpoint.h"
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
  ExperimentOptions opt;
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
  std::vector<bool> ran;  // ranks whose final state is known here (run here or merged)
  double host_compute_s = 0.0;
  int64_t outer_syncs = 0, tokens = 0;
  std::unique_ptr<Replica> evaluator;
  Experiment::ProgressFn progress;
  int64_t progress_step = 0;

  Impl(const core::Scenario& s, const core::AlgorithmSpec& a, std::shared_ptr<const Dataset> d)
      : sc(s), algo(a), data(std::move(d)), model(s.model), plan(s.faults, s.workers.count),
        num_workers(s.workers.count), final_stats(static_cast<size_t>(num_workers)),
        final_clock(static_cast<size_t>(num_workers)), compute_total(static_cast<size_t>(num_workers)),
        ran(static_cast<size_t>(num_workers), false) {
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
  // The records of this process as JSON (ExportPart), and merging another process's (MergePart).
  Json Export() {
    std::lock_guard<std::mutex> lock(mu);
    Json recs = Json::array(), ranks = Json::array(), ev = Json::array();
    for (const auto& r : records) {
      recs.push_back({r.worker, r.step, r.time, r.loss, r.compute_s, r.comm_s, r.idle_s, r.bytes_sent, r.bytes_received});
    }
    for (const auto& [step, e] : evals) ev.push_back({step, e.first, e.second});
    for (int w = 0; w < num_workers; ++w) {
      if (!ran[static_cast<size_t>(w)]) continue;
      const auto& st = final_stats[static_cast<size_t>(w)];
      ranks.push_back({{"rank", w}, {"clock", final_clock[static_cast<size_t>(w)]},
                       {"compute", compute_total[static_cast<size_t>(w)]},
                       {"stats", {st.bytes_sent, st.bytes_received, st.messages_sent, st.messages_received}}});
    }
    Json out = {{"records", recs}, {"events", events}, {"evals", ev}, {"ranks", ranks},
                {"host_compute_s", host_compute_s}, {"outer_syncs", outer_syncs}, {"tokens", tokens}};
    if (!error.ok()) out["error"] = {{"code", static_cast<int>(error.code())}, {"message", error.message()}};
    return out;
  }
  core::Status Merge(const Json& part) {
    try {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& r : part.at("records")) {
        records.push_back({r.at(0).get<int>(), r.at(1).get<int64_t>(), r.at(2).get<double>(), r.at(3).get<double>(),
                           r.at(4).get<double>(), r.at(5).get<double>(), r.at(6).get<double>(),
                           r.at(7).get<int64_t>(), r.at(8).get<int64_t>()});
      }
      for (const auto& e : part.at("events")) events.push_back(e);
      for (const auto& e : part.at("evals")) evals[e.at(0).get<int64_t>()] = {e.at(1).get<double>(), e.at(2).get<double>()};
      for (const auto& r : part.at("ranks")) {
        const int w = r.at("rank");
        if (w < 0 || w >= num_workers) return core::Status::InvalidArgument("part names worker " + std::to_string(w));
        const auto i = static_cast<size_t>(w);
        final_clock[i] = r.at("clock");
        compute_total[i] = r.at("compute");
        const auto& st = r.at("stats");
        final_stats[i] = {st.at(0).get<int64_t>(), st.at(1).get<int64_t>(), st.at(2).get<int64_t>(), st.at(3).get<int64_t>()};
        ran[i] = true;
      }
      host_compute_s += part.at("host_compute_s").get<double>();
      outer_syncs += part.at("outer_syncs").get<int64_t>();
      tokens += part.at("tokens").get<int64_t>();
      if (part.contains("error") && error.ok()) {
        error = core::Status(static_cast<core::StatusCode>(part["error"].at("code").get<int>()),
                             part["error"].at("message").get<std::string>());
      }
    } catch (const std::exception& e) {
      return core::Status::InvalidArgument(std::string("malformed experiment part: ") + e.what());
    }
    return core::Status::Ok();
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
  // A resumed worker continues its predecessor's clock and byte counts.
  double time_offset = 0.0;
  int64_t sent_before = 0, received_before = 0;

  // The transport's counts when this worker started (a transport may serve several entries).
  const core::TransportStats start_stats = t.stats();

  double Now() { return t.clock().Now() + time_offset; }
  core::TransportStats Stats() const {
    core::TransportStats s = t.stats();
    s.bytes_sent += sent_before - start_stats.bytes_sent;
    s.bytes_received += received_before - start_stats.bytes_received;
    s.messages_sent -= start_stats.messages_sent;
    s.messages_received -= start_stats.messages_received;
    return s;
  }

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
    const double before = Now();
    core::Status s = fn();
    (as_idle ? idle_s : comm_s) += Now() - before;
    return s;
  }
  void Record(int64_t step, double loss) {
    const auto stats = Stats();
    const double now = Now();
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
    x.final_stats[static_cast<size_t>(rank)] = Stats();
    x.final_clock[static_cast<size_t>(rank)] = Now();
    x.compute_total[static_cast<size_t>(rank)] = compute_s;
    x.ran[static_cast<size_t>(rank)] = true;
  }
  // --- live membership (a deployment) ---
  bool live() const { return x.opt.membership == Membership::kLive; }
  int64_t failures = 0;  // collectives that failed so far: part of every live tag
  // The generation of each worker's process when it became a member (a restart is a new member).
  std::vector<int64_t> generations = [this] {
    std::vector<int64_t> g(static_cast<size_t>(x.num_workers));
    for (int r = 0; r < x.num_workers; ++r) g[static_cast<size_t>(r)] = t.Generation(r);
    return g;
  }();
  // Live tags carry the step and the failure count, so that a repeated collective never reads a
  // message left over from the attempt that failed, nor one of another step.
  int Tag(int base, int64_t step) const {
    if (!live()) return base;
    return 1'000'000 + static_cast<int>(((step % 1000) * 8 + failures % 8) * 4096) + base % 4096;
  }
  // Live: a crash fault at `step` is a real one.
  void MaybeCrash(int64_t step) const {
    if (live() && !x.opt.rejoin && x.plan.CrashesAt(rank, step)) ::raise(SIGKILL);  // a restart does not crash again
  }
  // After a collective over `group` failed with `why`: the members declared dead are dropped and
  // the crash recorded; an error if this worker itself was dropped or may not continue.
  core::Status DropDead(std::vector<int>* group, int64_t step, bool may_continue, const core::Status& why) {
    ++failures;
    const std::vector<int> dead = core::GroupGuard::Lost(t, *group, generations);
    if (dead.empty() || std::find(dead.begin(), dead.end(), rank) != dead.end()) return why;
    std::string names;
    for (int d : dead) names += (names.empty() ? "" : ", ") + std::to_string(d);
    if (!may_continue) {
      return core::Status::Aborted("worker " + names + " died at step " + std::to_string(step) +
                                   "; stopping (deploy.on_failure: stop)");
    }
    std::vector<int> survivors;
    std::set_difference(group->begin(), group->end(), dead.begin(), dead.end(), std::back_inserter(survivors));
    *group = survivors;
    if (rank == group->front()) {
      for (int d : dead) {
        x.Event({{"type", "crash"}, {"step", step}, {"time", Now()}, {"worker", d},
                 {"detected", "heartbeat"}, {"survivors", *group}});
      }
    }
    return core::Status::Ok();
  }
  // All-reduce of the first `count` floats of `buffer` over `group`, `fill` writing this worker's
  // contribution first. Live: guarded, and repeated among the survivors when members die.
  core::Status Reduce(std::vector<int>* group, int64_t count, int64_t step, const std::function<void()>& fill,
                      bool may_continue) {
    while (true) {
      fill();
      core::Status s;
      if (live()) {
        core::GroupGuard guard(t, *group, x.sc.deploy.collective_timeout_s, generations);
        s = Timed(false, [&] { return core::AllReduceSum(guard, buffer.data(), count, Options(*group, Tag(kTagReduce, step))); });
      } else {
        s = Timed(false, [&] { return core::AllReduceSum(t, buffer.data(), count, Options(*group, kTagReduce)); });
      }
      if (s.ok() || !live() || s.code() != core::StatusCode::kPeerUnavailable) return s;
      NARROWS_RETURN_IF_ERROR(DropDead(group, step, may_continue, s));
    }
  }
  static constexpr int kTagReduce = 100;

  core::CollectiveOptions Options(std::vector<int> group, int tag) const {
    core::CollectiveOptions o;
    o.group = std::move(group);
    o.tag = tag;
    o.algorithm = ToAlgorithm(x.algo.collective);
    o.islands = x.sc.network.islands;
    // Over a real network the ring sends 1 MiB pieces (tools/bench/allreduce); the emulator's
    // messages stay whole (the sums are the same either way).
    if (live()) o.pipeline_bytes = int64_t{1} << 20;
    if (o.algorithm == core::AllReduceAlgorithm::kHierarchical && o.islands.empty()) {
      o.algorithm = core::AllReduceAlgorithm::kRing;  // a star has one island
    }
    return o;
  }
};

namespace {

constexpr int kTagReduce = WorkerContext::kTagReduce;
constexpr int kTagJoin = 200;
constexpr int kTagWelcome = 300;

// Sends `tensors` (flat, same device) from root to the joiners; everyone in {root} + joiners calls it.
core::Status SyncToJoiners(WorkerContext& w, int root, const std::vector<int>& joiners,
                           std::vector<torch::Tensor*> tensors, int64_t* counter, int tag = kTagJoin) {
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
  o.tag = tag;
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
  core::Result<double> Step(const TokenBatch& batch, const std::vector<int>& group, int64_t step) {
    group_ = group;
    step_ = step;
    guard_.reset();
    if (w_.live()) {
      guard_ = std::make_unique<core::GroupGuard>(w_.t, group, w_.x.sc.deploy.collective_timeout_s, w_.generations);
    }
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
    const int tag = w_.Tag(kTagBuckets + 3 * place_[i].first, step_);
    const int64_t count = b.numel + (&b == &buckets_[0] ? 1 : 0);
    core::Transport& via = guard_ ? static_cast<core::Transport&>(*guard_) : w_.t;
    b.work = core::AllReduceSumAsync(via, b.host.data(), count, w_.Options(group_, tag));
  }

  static constexpr int kTagBuckets = 1000;  // bucket b uses tags 1000 + 3b .. 1002 + 3b
  WorkerContext& w_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<int, int64_t>> place_;  // per slice: bucket, offset in its host buffer
  std::vector<int> group_;
  int64_t step_ = 0;
  std::unique_ptr<core::GroupGuard> guard_;  // live membership: the buckets' collectives go through it
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
  }
  w.buffer.resize(static_cast<size_t>(n_params + 1));  // all gradients + the loss, for one all-reduce
  const bool may_continue = x.sc.deploy.on_failure != "stop";
  std::vector<int> group = w.live() ? w.t.Members() : std::vector<int>{};
  for (int64_t step = 0; step < x.sc.train.steps; ++step) {
    w.MaybeCrash(step);
    if (!w.live()) {
      if (!x.plan.Alive(w.rank, step)) continue;
      group = x.plan.AliveSet(step);
    }
    if (step > 0 && !w.live()) {
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
          x.Event({{"type", "join"}, {"step", step}, {"time", w.Now()}, {"workers", joiners}});
        }
      }
    }
    const TokenBatch batch = w.sampler.Next(x.sc.train.batch_size);
    double local_loss = 0.0;
    bool reduced = false;  // flat_grads() holds the group's mean gradient
    double mean_loss = 0.0;
    if (overlapped) {
      auto loss = overlapped->Step(batch, group, step);
      if (loss.ok()) {
        mean_loss = *loss;
        reduced = true;
      } else if (w.live() && loss.status().code() == core::StatusCode::kPeerUnavailable) {
        // A member died during backward: the survivors reduce the step's gradients once more, whole.
        NARROWS_RETURN_IF_ERROR(w.DropDead(&group, step, may_continue, loss.status()));
        local_loss = overlapped->local_loss();
      } else {
        return loss.status();
      }
    } else {
      local_loss = w.Compute(w.StepFlops(), [&] { return rep.ComputeGradients(batch); });
    }
    if (!reduced) {
      NARROWS_RETURN_IF_ERROR(w.Reduce(&group, n_params + 1, step, [&] {
        ToHost(rep.model().flat_grads(), w.buffer.data());
        w.buffer[static_cast<size_t>(n_params)] = static_cast<float>(local_loss);
      }, may_continue));
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
      x.evals[step + 1] = {w.Now(), val};
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

core::Status SaveCheckpoint(WorkerContext& w, int64_t step, const std::vector<int>& group,
                            const std::vector<torch::Tensor*>& global_state, int64_t outer_steps,
                            const std::mt19937_64& drop_rng) {
  WorkerCheckpoint c;
  c.rank = w.rank;
  c.step = step;
  c.outer_steps = outer_steps;
  c.adam_steps = w.replica.optimizer().steps_taken();
  c.failures = w.failures;
  c.group = group;
  c.clock_s = w.Now();
  c.compute_s = w.compute_s;
  c.comm_s = w.comm_s;
  c.idle_s = w.idle_s;
  const auto stats = w.Stats();
  c.bytes_sent = stats.bytes_sent;
  c.bytes_received = stats.bytes_received;
  std::ostringstream rng;
  rng << drop_rng;
  c.drop_rng = rng.str();
  c.part = w.x.Export().dump();
  const char* names[] = {"global", "outer_momentum", "outer_adam_m", "outer_adam_v"};
  for (size_t i = 0; i < global_state.size(); ++i) c.tensors.emplace_back(names[i], *global_state[i]);
  c.tensors.emplace_back("params", w.replica.model().flat_params());
  c.tensors.emplace_back("exp_avg", w.replica.optimizer().exp_avg());
  c.tensors.emplace_back("exp_avg_sq", w.replica.optimizer().exp_avg_sq());
  char folder[32];
  std::snprintf(folder, sizeof folder, "/step-%06lld", static_cast<long long>(step));
  const std::string dir = w.x.opt.checkpoint_dir + folder;
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(dir));
  NARROWS_RETURN_IF_ERROR(WriteCheckpoint(CheckpointPath(dir, w.rank), c));
  if (w.rank == group.front()) {
    w.x.Event({{"type", "checkpoint"}, {"step", step}, {"time", w.Now()}, {"dir", dir}});
  }
  return core::Status::Ok();
}

core::Status RestoreCheckpoint(WorkerContext& w, const WorkerCheckpoint& c,
                               const std::vector<torch::Tensor*>& global_state, int64_t* outer_steps,
                               std::mt19937_64* drop_rng) {
  std::vector<torch::Tensor*> into = global_state;
  into.push_back(&w.replica.model().flat_params());
  into.push_back(&w.replica.optimizer().exp_avg());
  into.push_back(&w.replica.optimizer().exp_avg_sq());
  if (c.rank != w.rank || c.tensors.size() != into.size()) {
    return core::Status::InvalidArgument("checkpoint of worker " + std::to_string(c.rank) + " with " +
                                         std::to_string(c.tensors.size()) + " tensors does not fit worker " +
                                         std::to_string(w.rank));
  }
  for (size_t i = 0; i < into.size(); ++i) {
    if (c.tensors[i].second.numel() != into[i]->numel()) {
      return core::Status::InvalidArgument("checkpoint tensor " + c.tensors[i].first + " has " +
                                           std::to_string(c.tensors[i].second.numel()) + " values, the model " +
                                           std::to_string(into[i]->numel()) + " (another model?)");
    }
    torch::NoGradGuard no_grad;
    into[i]->copy_(c.tensors[i].second.to(into[i]->device()));
  }
  *outer_steps = c.outer_steps;
  w.replica.optimizer().set_steps_taken(c.adam_steps);
  w.failures = c.failures;
  w.time_offset = c.clock_s;
  w.compute_s = c.compute_s;
  w.comm_s = c.comm_s;
  w.idle_s = c.idle_s;
  w.sent_before = c.bytes_sent;
  w.received_before = c.bytes_received;
  std::istringstream rng(c.drop_rng);
  rng >> *drop_rng;
  try {
    return w.x.Merge(Json::parse(c.part));
  } catch (const std::exception& e) {
    return core::Status::InvalidArgument(std::string("checkpoint records: ") + e.what());
  }
}

// Live: the state a joining worker receives before the outer step it joins at.
struct Welcome {
  int64_t step = 0;
  std::vector<int> group, joiners;
};

// Live: a restarted worker waits for the leader of the next outer step to welcome it.
core::Result<std::pair<int, Welcome>> AwaitWelcome(WorkerContext& w) {
  const int n = w.x.num_workers;
  std::vector<int64_t> msg(static_cast<size_t>(2 + n));
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
         w.x.sc.deploy.collective_timeout_s) {
    for (int r : w.t.Members()) {
      if (r == w.rank || !w.t.Recv(r, kTagWelcome, msg.data(), msg.size() * 8, 0.05).ok()) continue;
      Welcome wel;
      wel.step = msg[0];
      w.failures = msg[1];
      for (int q = 0; q < n; ++q) {
        if (msg[static_cast<size_t>(2 + q)] >= 1) wel.group.push_back(q);
        if (msg[static_cast<size_t>(2 + q)] == 2) wel.joiners.push_back(q);
      }
      return std::make_pair(r, wel);
    }
  }
  return core::Status::Timeout("no live worker welcomed this one within deploy.collective_timeout_s");
}

core::Status RunDiloco(WorkerContext& w) {
  auto& x = w.x;
  auto& rep = w.replica;
  const int64_t n_params = rep.model().num_params();
  const int64_t H = x.algo.inner_steps, S = x.sc.train.steps;
  const int n = x.num_workers;
  torch::Tensor global = rep.model().flat_params().detach().clone();
  OuterOptimizerState outer{torch::zeros_like(global), torch::zeros_like(global), torch::zeros_like(global), 0};
  std::mt19937_64 drop_rng(x.sc.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(w.rank) + 1);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  // The outer gradient, the contributor count, and one join vote per worker (live membership:
  // summed, the votes tell every member the same joiners).
  const int64_t count = n_params + 1 + n;
  w.buffer.resize(static_cast<size_t>(count));
  std::vector<torch::Tensor*> global_state = {&global, &outer.momentum, &outer.adam_m, &outer.adam_v};
  auto members_of = [&](int64_t rs, int64_t re) {
    std::vector<int> m;
    for (int r = 0; r < n; ++r) {
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
  int64_t first = 0;
  std::vector<int> group = w.live() ? w.t.Members() : std::vector<int>{};  // live: this outer step's members
  std::vector<int> pending;                                              // live: joiners for the next
  auto become_global = [&](bool reset_inner, int64_t at_step) {
    torch::NoGradGuard no_grad;
    rep.model().flat_params().copy_(global);
    if (reset_inner) rep.optimizer().Reset();
    lost_state = false;
    rewarm_from = at_step;
    for (int64_t s = 0; s < at_step; ++s) w.sampler.Next(x.sc.train.batch_size);  // this worker's data order
  };
  if (w.live() && !x.opt.resume_from.empty()) {
    auto c = ReadCheckpoint(CheckpointPath(x.opt.resume_from, w.rank));
    if (!c.ok()) return c.status();
    NARROWS_RETURN_IF_ERROR(RestoreCheckpoint(w, *c, global_state, &outer.steps, &drop_rng));
    first = c->step;
    group = c->group;
    for (int64_t s = 0; s < first; ++s) w.sampler.Next(x.sc.train.batch_size);
  } else if (w.live() && x.opt.rejoin) {
    auto welcome = AwaitWelcome(w);
    if (!welcome.ok()) return welcome.status();
    const auto& [root, wel] = *welcome;
    NARROWS_RETURN_IF_ERROR(SyncToJoiners(w, root, wel.joiners, global_state, &outer.steps, w.Tag(kTagJoin, wel.step)));
    become_global(true, wel.step);
    first = wel.step;
    group = wel.group;
  }
  for (int64_t rs = first; rs < S; rs += H) {
    const int64_t re = std::min(S, rs + H);
    std::vector<int> members = w.live() ? group : members_of(rs, re);
    if (w.live() && !pending.empty()) {
      // The leader welcomes the joiners the last outer step's votes named and sends them the global state.
      std::vector<int> joined = group;
      joined.insert(joined.end(), pending.begin(), pending.end());
      std::sort(joined.begin(), joined.end());
      if (w.rank == group.front()) {
        std::vector<int64_t> msg(static_cast<size_t>(2 + n), 0);
        msg[0] = rs;
        msg[1] = w.failures;
        for (int r : group) msg[static_cast<size_t>(2 + r)] = 1;
        for (int r : pending) msg[static_cast<size_t>(2 + r)] = 2;
        for (int r : pending) NARROWS_RETURN_IF_ERROR(w.t.Send(r, kTagWelcome, msg.data(), msg.size() * 8));
        NARROWS_RETURN_IF_ERROR(SyncToJoiners(w, w.rank, pending, global_state, &outer.steps, w.Tag(kTagJoin, rs)));
        x.Event({{"type", "join"}, {"step", rs}, {"time", w.Now()}, {"workers", pending}});
      }
      for (int r : pending) w.generations[static_cast<size_t>(r)] = w.t.Generation(r);
      group = members = joined;
      pending.clear();
    }
    // Workers alive now that were not in the last round receive the global state from its lowest member.
    if (!w.live() && rs > 0 && !previous_members.empty()) {
      std::vector<int> joiners;
      for (int r : x.plan.AliveSet(rs)) {
        if (std::find(previous_members.begin(), previous_members.end(), r) == previous_members.end()) {
          joiners.push_back(r);
        }
      }
      const int root = previous_members.front();
      const bool joining = std::find(joiners.begin(), joiners.end(), w.rank) != joiners.end();
      if (!joiners.empty() && (joining || w.rank == root)) {
        NARROWS_RETURN_IF_ERROR(SyncToJoiners(w, root, joiners, global_state, &outer.steps));
        if (joining) {
          torch::NoGradGuard no_grad;
          rep.model().flat_params().copy_(global);
          if (lost_state) rep.optimizer().Reset();
          lost_state = false;
          rewarm_from = rs;
        } else {
          x.Event({{"type", "join"}, {"step", rs}, {"time", w.Now()}, {"workers", joiners}});
        }
      }
    }
    for (int64_t step = rs; step < re && !w.live(); ++step) {
      if (step > 0 && x.plan.Alive(w.rank, step - 1) && !x.plan.Alive(w.rank, step)) {
        const bool crash = x.plan.CrashesAt(w.rank, step);
        lost_state = lost_state || crash;
        x.Event({{"type", crash ? "crash" : "leave"}, {"step", step}, {"time", w.Now()},
                 {"worker", w.rank}});
      }
    }
    if (w.live() || x.plan.Alive(w.rank, rs)) {
      for (int64_t step = rs; step < re; ++step) {
        w.MaybeCrash(step);
        if (!w.live() && !x.plan.Alive(w.rank, step)) break;
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
      std::vector<int>& reduce_group = w.live() ? group : members;
      NARROWS_RETURN_IF_ERROR(w.Reduce(&reduce_group, count, re, [&] {
        {
          torch::NoGradGuard no_grad;
          ToHost(global - rep.model().flat_params(), w.buffer.data());  // pseudo-gradient
        }
        if (!keep) std::fill(w.buffer.begin(), w.buffer.end(), 0.0f);
        w.buffer[static_cast<size_t>(n_params)] = keep ? 1.0f : 0.0f;
        std::fill(w.buffer.begin() + n_params + 1, w.buffer.end(), 0.0f);
        if (w.live()) {
          for (int r : w.t.Members()) {
            if (!std::binary_search(group.begin(), group.end(), r)) w.buffer[static_cast<size_t>(n_params + 1 + r)] = 1.0f;
          }
        }
      }, true));
      if (w.live()) {
        members = group;  // the survivors
        for (int r = 0; r < n; ++r) {
          if (w.buffer[static_cast<size_t>(n_params + 1 + r)] > 0 && !std::binary_search(group.begin(), group.end(), r)) {
            pending.push_back(r);
          }
        }
      }
      const float contributors = w.buffer[static_cast<size_t>(n_params)];
      if (contributors > 0) {
        for (int64_t i = 0; i < n_params; ++i) w.buffer[static_cast<size_t>(i)] /= contributors;
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
        x.Event({{"type", "outer_sync"}, {"step", re}, {"time", w.Now()}, {"participants", members},
                 {"contributors", static_cast<int>(contributors)}});
        if (x.EvalDue(rs, re)) {
          const double val = x.Evaluate(global);
          std::lock_guard<std::mutex> lock(x.mu);
          x.evals[re] = {w.Now(), val};
        }
      }
      if (!keep) x.Event({{"type", "dropped_outer_gradient"}, {"step", re}, {"worker", w.rank}});
      const int64_t every = x.sc.deploy.checkpoint_every;
      if (w.live() && every > 0 && !x.opt.checkpoint_dir.empty() && ((re - 1) / H + 1) % every == 0 && re < S) {
        NARROWS_RETURN_IF_ERROR(SaveCheckpoint(w, re, group, global_state, outer.steps, drop_rng));
      }
    }
    if (!members.empty()) previous_members = members;
  }
  return core::Status::Ok();
}

}  // namespace

ModelCost CostOf(const core::ModelSpec& spec) {
  torch::manual_seed(0);
  Gpt model(spec, torch::kCPU);
  return {model.num_params(), model.TrainFlopsPerToken()};
}

Experiment::Experiment(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Experiment::~Experiment() = default;

core::Result<std::unique_ptr<Experiment>> Experiment::Create(const core::Scenario& scenario,
                                                             const core::AlgorithmSpec& algorithm,
                                                             std::shared_ptr<const Dataset> data,
                                                             const ExperimentOptions& options) {
  auto device = ResolveDevice(scenario.device);
  if (!device.ok()) return device.status();
  auto impl = std::make_unique<Impl>(scenario, algorithm, std::move(data));
  impl->device = *device;
  impl->opt = options;
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
  const bool dropped = s.code() == core::StatusCode::kPeerUnavailable || s.code() == core::StatusCode::kTimeout;
  if (w.live() && dropped) {
    // Live: a worker the others dropped (or that lost them) ends; the run goes on without it.
    x.Event({{"type", "dropped"}, {"time", w.Now()}, {"worker", rank}, {"reason", s.message()}});
  } else if (!s.ok()) {
    x.Fail(s, rank);
  }
  w.Done();
}

core::Status Experiment::status() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->error;
}

std::string Experiment::ExportPart() const { return impl_->Export().dump(); }

core::Status Experiment::MergePart(const std::string& part) {
  try {
    return impl_->Merge(Json::parse(part));
  } catch (const std::exception& e) {
    return core::Status::InvalidArgument(std::string("experiment part is not JSON: ") + e.what());
  }
}

core::Result<EntryResult> Experiment::Finish(const std::string& dir) {
  Impl& x = *impl_;
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
  const char* time_key = x.opt.membership == Membership::kLive ? "wall_time_s" : "virtual_time_s";
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
    Json line = {{"step", step + 1},        {time_key, time},         {"train_loss", loss},
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
  if (!x.error.ok()) return x.error;  // after writing what the workers recorded before it
  return r;
}

}  // namespace narrows::trainer
