// WorkerContext (worker.h): one worker's replica, data order, clock accounting, membership and
// collectives; and the host copies of tensors that algorithms exchange.
#include "trainer/worker.h"

#include <cstdio>
#include <cstring>

#include "trainer/checkpoint.h"

namespace narrows::trainer {

void ToHost(const torch::Tensor& t, float* out) {
  auto host = t.detach().to(torch::kCPU).contiguous();
  std::memcpy(out, host.data_ptr<float>(), static_cast<size_t>(host.numel()) * sizeof(float));
}

void FromHost(const float* in, torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  t.copy_(torch::from_blob(const_cast<float*>(in), {t.numel()}, torch::kFloat32));
}

std::string Digest(const torch::Tensor& t) {
  const torch::Tensor host = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const float* v = host.data_ptr<float>();
  uint64_t h = 14695981039346656037ull;
  for (int64_t i = 0; i < host.numel(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof bits);
    h = (h ^ bits) * 1099511628211ull;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

namespace {

// Seeds LibTorch's generator with the scenario seed and returns the model spec, so that every
// replica starts from the same weights.
const core::ModelSpec& SeededModelSpec(const Experiment::Impl& impl) {
  torch::manual_seed(impl.sc.seed);
  return impl.model;
}

core::AllReduceAlgorithm ToAlgorithm(core::CollectiveKind k) {
  switch (k) {
    case core::CollectiveKind::kStar: return core::AllReduceAlgorithm::kStar;
    case core::CollectiveKind::kHierarchical: return core::AllReduceAlgorithm::kHierarchical;
    case core::CollectiveKind::kTwoPhase: return core::AllReduceAlgorithm::kTwoPhase;
    case core::CollectiveKind::kTree: return core::AllReduceAlgorithm::kTree;
    case core::CollectiveKind::kRing:
    case core::CollectiveKind::kAuto: break;  // resolved before the run; a ring if not
  }
  return core::AllReduceAlgorithm::kRing;
}

}  // namespace

void WorkerRecorder::MaybeEvaluate(int64_t from_step, int64_t to_step, double time, const torch::Tensor& params) {
  if (!x_.EvalDue(from_step, to_step)) return;
  if (hold_) {
    held_.push_back({from_step, to_step, time, params.detach().clone()});
    return;
  }
  x_.MaybeEvaluateWith(from_step, to_step, time, params, &replica_.model().flat_buffers());
}

void WorkerRecorder::Release() {
  hold_ = false;
  for (const Held& h : held_) x_.MaybeEvaluateWith(h.from_step, h.to_step, h.time, h.params, &replica_.model().flat_buffers());
  held_.clear();
}

WorkerContext::WorkerContext(Experiment::Impl& impl, int r, core::Transport& transport)
    : entry(impl),
      own_records(impl, replica),
      records(own_records),
      rank(r),
      t(transport),
      replica(SeededModelSpec(impl), impl.sc.train, impl.device),
      sampler(impl.data->corpus, impl.data->split.train, impl.model.seq_len, impl.sc.seed, r, impl.num_workers,
              impl.sc.data.sampling, impl.sc.data.domain_mix),
      speed(impl.sc.workers.speed[static_cast<size_t>(r)]),
      start_stats(transport.stats()),
      step_flops(replica.model().TrainFlopsPerToken() * static_cast<double>(impl.sc.train.batch_size * impl.model.seq_len)),
      recent_rate(step_flops),
      roster(Roster::Create(*this)),
      x(impl) {
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    impl.running_steps.emplace(r, std::make_pair(int64_t{0}, 0.0));
    impl.step_flops = step_flops;
  }
  replica.set_timing_only(impl.opt.timing_only);
  if (impl.initial_params.defined()) {
    torch::NoGradGuard no_grad;
    replica.model().flat_params().copy_(impl.initial_params);
  }
}

core::Status WorkerContext::ContinueWarmStart() {
  if (x.initial_optimizer.empty()) return core::Status::Ok();
  NARROWS_RETURN_IF_ERROR(CopyByName(x.initial_optimizer, replica.optimizer().State(),
                                     "warm start of the inner optimiser '" + x.sc.train.optimizer + "'"));
  replica.optimizer().set_steps_taken(x.initial_inner_steps);
  return core::Status::Ok();
}

core::TransportStats WorkerContext::Stats() const {
  core::TransportStats s = t.stats();
  s.bytes_sent += sent_before - start_stats.bytes_sent;
  s.bytes_received += received_before - start_stats.bytes_received;
  s.messages_sent -= start_stats.messages_sent;
  s.messages_received -= start_stats.messages_received;
  return s;
}

void WorkerContext::ChargeCompute(double modelled_flops, double host_s) {
  double charged = host_s;
  MedianRate::Charged robust{host_s, std::numeric_limits<double>::quiet_NaN()};
  if (modelled_flops > 0) robust = recent_rate.Charge(host_s, modelled_flops);
  if (x.sc.compute.mode == core::ComputeMode::kModelled) {
    charged = modelled_flops / x.sc.compute.device_flops;
  } else if (x.sc.compute.statistic == core::ComputeStatistic::kMedian && modelled_flops > 0) {
    charged = robust.seconds;
  }
  double seconds = charged / speed;
  if (x.sc.compute.mode == core::ComputeMode::kModelled && x.compute_trace) {
    // A run's measured compute, replayed: this computation's share of a step's FLOPs times that
    // step's seconds there (already this worker's, so not divided by its speed).
    const auto& mine = x.compute_trace->seconds[static_cast<size_t>(rank)];
    const size_t at = static_cast<size_t>(std::clamp<int64_t>(computing_step, 0, static_cast<int64_t>(mine.size()) - 1));
    seconds = step_flops > 0 ? modelled_flops / step_flops * mine[at] : 0.0;
  }
  // The clock says what the computation cost this worker: the charged seconds in virtual time; in
  // wall time what passed, paced to the worker's speed.
  compute_s += t.clock().Compute(seconds, host_s, speed);
  std::lock_guard<std::mutex> lock(x.mu);
  x.host_compute_s += host_s;
  if (!std::isnan(robust.step_rate)) x.AddHostRate(robust.step_rate);
}

double WorkerContext::InnerLearningRate(int64_t step, int64_t rewarm_from) const {
  double lr = LearningRate(x.schedule, x.schedule_offset + step);
  if (rewarm_from >= 0 && x.sc.train.warmup_steps > 0) {
    lr *= std::min(1.0, static_cast<double>(step - rewarm_from + 1) / x.sc.train.warmup_steps);
  }
  return lr;
}

StepStats WorkerContext::InnerStep(int64_t step, int64_t rewarm_from) {
  const TokenBatch batch = sampler.Next(x.sc.train.batch_size);
  const double lr = InnerLearningRate(step, rewarm_from);
  return Compute(StepFlops(), [&] { return replica.TrainStep(batch, lr); });
}

core::Status WorkerContext::Timed(Spent as, const std::function<core::Status()>& fn) {
  const double before = Now();
  core::Status s = fn();
  (as == Spent::kIdle ? idle_s : comm_s) += Now() - before;
  return s;
}

void WorkerContext::Record(int64_t step, double loss) {
  computing_step = step + 1;
  const auto stats = Stats();
  const double now = Now();
  bool advanced = false;
  std::pair<int64_t, double> slowest;
  {
    std::lock_guard<std::mutex> lock(x.mu);
    x.AddRecord({rank, step, now, loss, compute_s, comm_s, idle_s, stats.bytes_sent, stats.bytes_received});
    x.tokens += x.sc.train.batch_size * x.model.seq_len;
    auto& mine = x.running_steps[rank];
    mine = {std::max(mine.first, step + 1), now};
    slowest = x.SlowestStep();
    advanced = slowest.first > x.progress_step;
    if (advanced) x.progress_step = slowest.first;
  }
  if (advanced && x.progress) x.progress(slowest.first, slowest.second, loss);
}

void WorkerContext::Done() {
  std::lock_guard<std::mutex> lock(x.mu);
  x.final_stats[static_cast<size_t>(rank)] = Stats();
  x.final_clock[static_cast<size_t>(rank)] = Now();
  x.compute_total[static_cast<size_t>(rank)] = compute_s;
  x.peak_round_bytes[static_cast<size_t>(rank)] = peak_round_bytes;
  x.ran[static_cast<size_t>(rank)] = true;
}

namespace {

bool Encoded(const Encoding& e) { return e.codec != nullptr && !e.codec->lossless(); }
core::EncodingResiduals* Residuals(const Encoding& e) {
  return e.codec->spec().error_feedback ? e.residuals : nullptr;
}

}  // namespace

void WorkerContext::NoteCollective(const core::CollectiveOptions& o, const Encoding& encoding) {
  std::lock_guard<std::mutex> lock(x.mu);
  if (x.collective.empty()) {
    x.collective = core::CollectiveName(o, Encoded(encoding) ? encoding.codec : nullptr) + (x.algo.collective_auto ? " (auto)" : "");
  }
}

void WorkerContext::NoteCollective(const std::string& name) {
  std::lock_guard<std::mutex> lock(x.mu);
  if (x.collective.empty()) x.collective = name;
}

core::Status WorkerContext::Reduce(std::vector<int>* group, int64_t count, int64_t step,
                                   const std::function<void()>& fill, core::OnFailure on_failure, Encoding encoding,
                                   int tag) {
  return roster->Run(group, step, on_failure, fill, [&](core::Transport& via) {
    return Timed(Spent::kCommunicating, [&] {
      const core::CollectiveOptions o = Options(*group, roster->Tag(tag, step, *group));
      NoteCollective(o, encoding);
      if (Encoded(encoding)) {
        return core::AllReduceSumEncoded(via, buffer.data(), count, encoding.exact_tail, *encoding.codec, o,
                                         Residuals(encoding));
      }
      return core::AllReduceSum(via, buffer.data(), count, o);
    });
  }, buffer.data(), count);
}

core::Status WorkerContext::Reduce(std::vector<int>* group, float* data, int64_t count, int64_t step,
                                   const std::function<void()>& fill, core::OnFailure on_failure, int tag) {
  return roster->Run(group, step, on_failure, fill, [&](core::Transport& via) {
    return Timed(Spent::kCommunicating, [&] {
      return core::AllReduceSum(via, data, count, Options(*group, roster->Tag(tag, step, *group)));
    });
  }, data, count);
}

WorkerContext::PendingReduce WorkerContext::StartReduce(const std::vector<int>& group, float* data, int64_t count,
                                                        int64_t step, Encoding encoding) {
  PendingReduce p;
  roster->Attempting(group, step);
  p.guard = roster->Guard(group);
  core::Transport& via = p.guard ? *p.guard : t;
  core::CollectiveOptions o = Options(group, roster->Tag(kTagReduce, step, group));
  NoteCollective(o, encoding);
  if (Encoded(encoding)) {
    p.work = core::AllReduceSumEncodedAsync(via, data, count, encoding.exact_tail, *encoding.codec, std::move(o),
                                            Residuals(encoding));
  } else {
    p.work = core::AllReduceSumAsync(via, data, count, std::move(o));
  }
  return p;
}

core::CollectiveOptions WorkerContext::Options(std::vector<int> group, int tag) const {
  core::CollectiveOptions o;
  o.group = std::move(group);
  o.tag = tag;
  o.algorithm = ToAlgorithm(x.algo.collective);
  o.islands = x.sc.network.islands;
  // Over a real network the ring sends 1 MiB pieces (tools/bench/allreduce); the emulator's
  // messages stay whole (the sums are the same either way).
  if (live()) {
    o.pipeline_bytes = int64_t{1} << 20;
    // ... and keep the declared network's bandwidth-delay product in flight (one piece over a LAN).
    const auto& link = x.sc.network.link;
    o.send_ahead_bytes = static_cast<int64_t>(link.bandwidth_bps * 2e-3 * link.latency_ms / 8);
  }
  if (o.algorithm == core::AllReduceAlgorithm::kHierarchical && o.islands.empty()) {
    o.algorithm = core::AllReduceAlgorithm::kRing;  // a star has one island
  }
  return o;
}

core::Status SyncToJoiners(WorkerContext& w, int root, const std::vector<int>& joiners,
                           const std::vector<torch::Tensor*>& tensors, int64_t* counter, int tag) {
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
    buf[static_cast<size_t>(off)] = counter != nullptr ? static_cast<float>(*counter) : 0.0f;
  }
  std::vector<int> group = joiners;
  group.push_back(root);
  std::sort(group.begin(), group.end());
  core::CollectiveOptions o;
  o.group = group;
  o.root = root;
  o.tag = tag;
  NARROWS_RETURN_IF_ERROR(w.Timed(is_root ? WorkerContext::Spent::kCommunicating : WorkerContext::Spent::kIdle, [&] {
    if (!w.live()) return core::Broadcast(w.t, buf.data(), buf.size() * sizeof(float), o);
    // Live: the root sends to each joiner itself, so that one that died while joining (it is dropped
    // at the next collective) costs the others nothing.
    const size_t bytes = buf.size() * sizeof(float);
    if (!is_root) return w.t.Recv(root, tag, buf.data(), bytes);
    for (int j : joiners) {
      const core::Status s = w.t.Send(j, tag, buf.data(), bytes);
      if (!s.ok() && s.code() != core::StatusCode::kPeerUnavailable) return s;
    }
    return core::Status::Ok();
  }));
  if (!is_root) {
    int64_t off = 0;
    for (auto* t : tensors) {
      torch::Tensor view = t->narrow(0, 0, t->numel());
      FromHost(buf.data() + off, view);
      off += t->numel();
    }
    if (counter != nullptr) *counter = static_cast<int64_t>(buf[static_cast<size_t>(off)]);
  }
  return core::Status::Ok();
}

}  // namespace narrows::trainer
