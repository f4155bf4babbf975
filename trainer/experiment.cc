// Experiment: the entry's workers (trainer/algorithms/ over a WorkerContext) and its records.
#include "trainer/experiment.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <set>
#include <cmath>

#include "core/run_writer.h"
#include "trainer/algorithms/algorithm.h"
#include "trainer/checkpoint.h"
#include "trainer/script_model.h"
#include "trainer/worker.h"

namespace narrows::trainer {

ModelCost CostOf(const core::ModelSpec& spec) {
  torch::manual_seed(0);
  Gpt model(spec, torch::kCPU);
  return {model.num_params(), model.TrainFlopsPerToken(), model.FlopsSource()};
}

Experiment::Experiment(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Experiment::~Experiment() = default;

core::Result<std::unique_ptr<Experiment>> Experiment::Create(const core::Scenario& scenario,
                                                             const core::AlgorithmSpec& algorithm,
                                                             std::shared_ptr<const Dataset> data,
                                                             const ExperimentOptions& options) {
  auto device = ResolveDevice(scenario.device);
  if (!device.ok()) return device.status();
  if (!scenario.model.torchscript.empty()) NARROWS_RETURN_IF_ERROR(CheckScriptModel(scenario.model, scenario.train.precision));
  auto impl = std::make_unique<Impl>(scenario, algorithm, std::move(data));
  impl->device = *device;
  impl->opt = options;
  if (!options.spool_dir.empty()) {
    auto spool = Spool::Open(options.spool_dir, "process-" + std::to_string(::getpid()));
    if (!spool.ok()) return spool.status();
    impl->spool = std::move(spool).value();
  }
  if (!scenario.compute.trace.empty()) {
    auto trace = LoadComputeTrace(scenario.compute.trace, scenario.workers.count, scenario.train.steps);
    if (!trace.ok()) return trace.status();
    impl->compute_trace = std::make_shared<const ComputeTrace>(std::move(trace).value());
  }
  if (impl->plan.AliveSet(0).empty()) {
    return core::Status::InvalidArgument("faults: no worker is alive at step 0");
  }
  if (options.membership == Membership::kReplay) {
    const AlgorithmPlugin* plugin = FindAlgorithm(algorithm.algorithm);
    const std::string why = plugin == nullptr || !plugin->replay
                                ? "its events do not record the members of every round"
                                : plugin->replay(algorithm);
    if (!why.empty()) return core::Status::InvalidArgument(algorithm.name + ": cannot be replayed: " + why);
    if (options.trace == nullptr) return core::Status::InvalidArgument(algorithm.name + ": no membership trace to replay");
  }
  for (size_t i = 0; i < scenario.faults.size(); ++i) {
    const core::FaultSpec& f = scenario.faults[i];
    if ((f.kind == core::FaultKind::kCorrupt || f.kind == core::FaultKind::kRepeat) && options.membership == Membership::kScripted) {
      return core::Status::InvalidArgument("faults[" + std::to_string(i) + "]: a " +
                                           (f.kind == core::FaultKind::kCorrupt ? "corrupt" : "repeating") +
                                           " sender needs a deployment (narrows launch or narrows worker), whose members "
                                           "evict it; the emulator has no eviction");
    }
    if ((f.after_sends >= 0 || f.stall_s > 0) && options.membership == Membership::kScripted) {
      return core::Status::InvalidArgument("faults[" + std::to_string(i) + (f.after_sends >= 0 ? "].after_sends" : "].stall_s") +
                                           ": a crash inside a collective or after a stall needs a deployment "
                                           "(narrows launch or narrows worker); the emulator crashes workers between steps");
    }
  }
  return std::unique_ptr<Experiment>(new Experiment(std::move(impl)));
}

void Experiment::SetProgress(ProgressFn fn) { impl_->progress = std::move(fn); }

void Experiment::StartWithTheOthers() { impl_->opt.rejoin = false; }

core::Status Experiment::SetWarmStart(const std::string& path) {
  auto file = ReadModelFile(path, CostOf(impl_->model).params);
  if (!file.ok()) return file.status();
  Impl& x = *impl_;
  x.initial_params = file->tensors[0].second.to(x.device);
  if (x.sc.warm_start.optimizer != core::WarmStartOptimizer::kContinued) return core::Status::Ok();
  // Continue the warm start's inner optimiser (each worker checks that the state is its optimiser's)
  // and its place in the schedule.
  if (file->tensors.size() == 1) {
    return core::Status::InvalidArgument(path + ": holds no inner optimiser state to continue (warm_start.optimizer: "
                                                "continued needs a model file written with it)");
  }
  for (size_t i = 1; i < file->tensors.size(); ++i) {
    x.initial_optimizer.emplace_back(file->tensors[i].first, file->tensors[i].second.to(x.device));
  }
  x.initial_inner_steps = file->inner_steps;
  x.schedule_offset = file->step;
  x.schedule.steps = file->step + x.sc.train.steps;
  return core::Status::Ok();
}

void Experiment::RunWorker(int rank, core::Transport& transport) {
  Impl& x = *impl_;
  ConfigureThreads(x.sc.threads);
  WorkerContext w(x, rank, transport);
  if (const core::Status warm = w.ContinueWarmStart(); !warm.ok()) {
    x.Fail(warm, rank);
    w.Done();
    return;
  }
  const std::unique_ptr<Algorithm> algorithm = MakeAlgorithm(w);
  core::Status s;
  try {
    s = algorithm->Run(w);
  } catch (const std::exception& e) {
    // LibTorch's (a model of the user's that fails on some batch): the worker fails, naming it,
    // instead of ending the process. The cause is the message's last line (a TorchScript error's
    // follows its traceback), without LibTorch's C++ backtrace.
    const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
    std::string what = torch_error != nullptr ? torch_error->what_without_backtrace() : e.what();
    while (!what.empty() && what.back() == '\n') what.pop_back();
    s = core::Status::Internal("stopped by an exception: " + what.substr(what.rfind('\n') + 1));
  }
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

namespace {

// N of a checkpoint folder …/step-N; -1 for none.
int64_t ResumedStep(const std::string& checkpoint) {
  if (checkpoint.empty()) return -1;
  std::string name = checkpoint;
  while (!name.empty() && name.back() == '/') name.pop_back();
  name = name.substr(name.rfind('/') + 1);
  if (name.rfind("step-", 0) != 0) return -1;
  try {
    return std::stoll(name.substr(5));
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

int Experiment::GatherLeftoverSpools() {
  Impl& x = *impl_;
  if (x.opt.spool_dir.empty()) return 0;
  auto leftovers = Spool::TakeLeftovers(x.opt.spool_dir);
  std::lock_guard<std::mutex> lock(x.mu);
  // A run resumed from step N holds every worker's records up to N from the checkpoint: what a
  // process of the run before the resume left is kept only where the checkpoint lacks it (a worker
  // and step not recorded yet), and only up to N; past N that run's training was done again. A
  // process of this run (killed after the resume) starts past N and is kept whole.
  const int64_t resumed_at = ResumedStep(x.opt.resume_from);
  std::set<std::pair<int, int64_t>> recorded;
  if (resumed_at >= 0) {
    for (const auto& r : x.records) recorded.emplace(r.worker, r.step);
  }
  for (auto& l : leftovers) {
    int64_t first = std::numeric_limits<int64_t>::max();
    for (const auto& r : l.records) first = std::min(first, r.step);
    if (resumed_at >= 0 && first <= resumed_at) {
      std::vector<StepRecord> kept;
      for (const auto& r : l.records) {
        if (r.step < resumed_at && recorded.count({r.worker, r.step}) == 0) kept.push_back(r);
      }
      std::vector<nlohmann::json> events;
      for (const auto& e : l.events) {
        const int64_t step = e.contains("step") && e["step"].is_number_integer() ? e["step"].get<int64_t>() : 0;
        if (step <= resumed_at && std::find(x.events.begin(), x.events.end(), e) == x.events.end()) events.push_back(e);
      }
      l.records = std::move(kept);
      l.events = std::move(events);
    }
    x.records.insert(x.records.end(), l.records.begin(), l.records.end());
    x.events.insert(x.events.end(), l.events.begin(), l.events.end());
    x.host_rates.insert(x.host_rates.end(), l.rates.begin(), l.rates.end());
    int64_t last = -1;
    for (const auto& r : l.records) last = std::max(last, r.step);
    Json e = {{"type", "gathered_spool"}, {"step", std::max<int64_t>(0, last)}, {"process", l.stem},
              {"records", l.records.size()}, {"events", l.events.size()}};
    if (!l.status.ok()) e["error"] = l.status.message();
    x.events.push_back(std::move(e));
  }
  return static_cast<int>(leftovers.size());
}

namespace {

// A worker's byte counters across its processes: a deployment's worker killed and started again
// (launch --chaos) counts from zero in its new process. Per worker, in time order, a count below
// the one before starts a new process; its counts are taken on top of the last the earlier
// processes recorded. `adjusted` maps each record to its counts so; `base` is each worker's offset
// for its last process (what its final stats add to).
struct ByteCounts {
  std::map<const StepRecord*, std::pair<double, double>> adjusted;  // sent, received
  std::vector<double> sent_base, received_base;
  std::vector<double> sent_most;  // the most a worker's records reached (a crashed one has no final stats)
};

ByteCounts CountAcrossProcesses(const Experiment::Impl& x) {
  ByteCounts c;
  c.sent_base.assign(static_cast<size_t>(x.num_workers), 0.0);
  c.received_base.assign(static_cast<size_t>(x.num_workers), 0.0);
  c.sent_most.assign(static_cast<size_t>(x.num_workers), 0.0);
  std::vector<std::vector<const StepRecord*>> mine(static_cast<size_t>(x.num_workers));
  for (const auto& rec : x.records) {
    if (rec.worker >= 0 && rec.worker < x.num_workers) mine[static_cast<size_t>(rec.worker)].push_back(&rec);
  }
  for (size_t w = 0; w < mine.size(); ++w) {
    std::stable_sort(mine[w].begin(), mine[w].end(), [](const StepRecord* a, const StepRecord* b) { return a->time < b->time; });
    double last_sent = 0.0, last_received = 0.0;
    for (const StepRecord* rec : mine[w]) {
      const auto sent = static_cast<double>(rec->bytes_sent), received = static_cast<double>(rec->bytes_received);
      if (sent < last_sent) {  // a new process
        c.sent_base[w] += last_sent;
        c.received_base[w] += last_received;
      }
      last_sent = sent;
      last_received = received;
      c.adjusted[rec] = {c.sent_base[w] + sent, c.received_base[w] + received};
      c.sent_most[w] = std::max(c.sent_most[w], c.sent_base[w] + sent);
    }
  }
  return c;
}

// The entry's line of summary.json; the partial evaluations folded into whole ones first.
EntryResult Summarise(Experiment::Impl& x) {
  EntryResult r;
  r.name = x.algo.name;
  r.algorithm = x.algo.algorithm;
  r.workers = x.num_workers;
  r.steps = x.sc.train.steps;
  r.tokens = x.tokens;
  r.outer_syncs = x.outer_syncs;
  r.host_compute_s = x.host_compute_s;
  r.step_flops = x.step_flops;
  if (!x.host_rates.empty()) {
    std::vector<double> rates = x.host_rates;
    std::sort(rates.begin(), rates.end());
    auto quantile = [&rates](double q) { return rates[static_cast<size_t>(q * static_cast<double>(rates.size() - 1))]; };
    r.host_step_s = quantile(0.5) * r.step_flops;
    r.host_step_s_p10 = quantile(0.1) * r.step_flops;
    r.host_step_s_p90 = quantile(0.9) * r.step_flops;
  }
  const ByteCounts counts = CountAcrossProcesses(x);
  for (int w = 0; w < x.num_workers; ++w) {
    r.virtual_time_s = std::max(r.virtual_time_s, x.final_clock[static_cast<size_t>(w)]);
    const auto k = static_cast<size_t>(w);
    r.bytes_sent_per_worker +=
        std::max(counts.sent_most[k], counts.sent_base[k] + static_cast<double>(x.final_stats[k].bytes_sent)) / x.num_workers;
    r.peak_bytes_per_round = std::max(r.peak_bytes_per_round, static_cast<double>(x.peak_round_bytes[static_cast<size_t>(w)]));
  }
  double compute_mean = 0.0;
  for (double c : x.compute_total) compute_mean += c / x.num_workers;
  r.compute_utilization = r.virtual_time_s > 0 ? compute_mean / r.virtual_time_s : 0.0;
  for (const auto& [step, e] : x.partial_evals) {
    double loss = 0.0, weight = 0.0;
    for (const auto& [part, lw] : e.parts) {
      loss += lw.second * lw.first;
      weight += lw.second;
    }
    if (weight > 0) x.evals[step] = {e.time, loss / weight};
  }
  r.final_val_loss_se = std::nan("");
  r.collective = x.collective.empty() ? "none" : x.collective;
  if (!x.evals.empty()) {
    r.final_val_loss = x.evals.rbegin()->second.second;
    const auto se = x.eval_se.find(x.evals.rbegin()->first);
    if (se != x.eval_se.end()) r.final_val_loss_se = se->second;
    const auto by_domain = x.eval_domains.find(x.evals.rbegin()->first);
    if (by_domain != x.eval_domains.end()) {
      for (size_t d = 0; d < by_domain->second.size() && d < x.data->domains.size(); ++d) {
        r.final_val_loss_by_domain.emplace_back(x.data->domains[d], by_domain->second[d]);
      }
    }
  }
  return r;
}

// The records by step, each step's in worker order; with an empty entry for an evaluation at a step
// no worker recorded.
std::map<int64_t, std::vector<const StepRecord*>> RecordsByStep(const Experiment::Impl& x) {
  std::map<int64_t, std::vector<const StepRecord*>> by_step;
  for (const auto& rec : x.records) by_step[rec.step].push_back(&rec);
  // Summed in worker order, not in the order the records came: algorithms record a step's loss at
  // different moments (DiLoCo the round's last after its outer step), and a float sum in another
  // order can differ in the last bit.
  for (auto& [step, recs] : by_step) {
    std::stable_sort(recs.begin(), recs.end(), [](const StepRecord* a, const StepRecord* b) { return a->worker < b->worker; });
  }
  // An evaluation at a step no worker recorded (DyLU's workers may all end a round early; async
  // DiLoCo's progress is not any worker's step) still gets its line.
  for (const auto& [step, e] : x.evals) {
    if (step > 0) by_step.try_emplace(step - 1);
  }
  return by_step;
}

// Adaptive batch sizes: each worker's batch multiple from the step its batch_size events name.
std::vector<std::map<int64_t, int64_t>> BatchMultiples(const Experiment::Impl& x) {
  std::vector<std::map<int64_t, int64_t>> multiples(static_cast<size_t>(x.num_workers));
  for (const auto& e : x.events) {
    if (e.value("type", "") == "batch_size") {
      multiples.at(e.at("worker").get<size_t>())[e.at("step").get<int64_t>()] = e.at("multiple").get<int64_t>();
    }
  }
  return multiples;
}

int64_t MultipleAt(const std::vector<std::map<int64_t, int64_t>>& multiples, int worker, int64_t step) {
  const auto& m = multiples[static_cast<size_t>(worker)];
  auto it = m.upper_bound(step);
  return it == m.begin() ? 1 : std::prev(it)->second;
}

// The evaluation at `step` (its loss `val_loss`) into `line`: its loss, standard error, per-domain
// losses, bits per byte.
void AddEvaluation(const Experiment::Impl& x, int64_t step, double val_loss, Json* line) {
  (*line)["val_loss"] = val_loss;
  if (const auto se = x.eval_se.find(step); se != x.eval_se.end()) (*line)["val_loss_se"] = se->second;
  if (const auto d = x.eval_domains.find(step); d != x.eval_domains.end()) {
    Json by_domain = Json::object();
    for (size_t i = 0; i < d->second.size() && i < x.data->domains.size(); ++i) by_domain[x.data->domains[i]] = d->second[i];
    (*line)["val_loss_by_domain"] = by_domain;
  }
  if (x.data->byte_level) (*line)["val_bpb"] = val_loss / std::log(2.0);
}

double PerWorkerMean(const Experiment::Impl& x, const std::vector<double>& v) {
  double sum = 0.0;
  for (double b : v) sum += b;
  return sum / static_cast<double>(x.num_workers);
}

// metrics.jsonl: one line per logged step: the slowest worker's time, mean loss and bytes, per-worker times.
core::Status WriteMetrics(const Experiment::Impl& x, const std::string& path, int64_t steps) {
  const char* time_key = x.opt.membership == Membership::kLive ? "wall_time_s" : "virtual_time_s";
  const std::map<int64_t, std::vector<const StepRecord*>> by_step = RecordsByStep(x);
  core::JsonlWriter metrics;
  NARROWS_RETURN_IF_ERROR(metrics.Open(path));
  std::vector<Json> per_worker(static_cast<size_t>(x.num_workers), Json::object());
  const bool adaptive = x.varying_batch;
  const std::vector<std::map<int64_t, int64_t>> multiples = BatchMultiples(x);
  const int64_t tokens_per_step = x.sc.train.batch_size * x.model.seq_len;
  int64_t tokens = 0;
  double last_sent = 0.0, last_received = 0.0;  // the counters as the last recorded step left them
  // Bytes per worker, defined once (docs/reference/outputs.md): every worker's bytes so far
  // (a worker that left keeps its count, one yet to join has none, one started again adds to what
  // its earlier processes recorded) over workers.count, as the summary's bytes_sent_per_worker is at
  // the end; so a figure to target is never above the total.
  std::vector<double> worker_sent(static_cast<size_t>(x.num_workers), 0.0), worker_received(worker_sent);
  const ByteCounts counts = CountAcrossProcesses(x);
  for (const auto& [step, recs] : by_step) {
    tokens += tokens_per_step * static_cast<int64_t>(recs.size());
    if (recs.empty()) {  // an evaluation alone: no training loss, the byte counters as they were
      const auto eval = x.evals.find(step + 1);
      Json line = {{"step", step + 1}, {time_key, eval->second.first}, {"tokens", tokens}, {"bytes_sent", last_sent},
                   {"bytes_received", last_received}, {"workers_active", 0}};
      AddEvaluation(x, eval->first, eval->second.second, &line);
      NARROWS_RETURN_IF_ERROR(metrics.Append(line.dump()));
      continue;
    }
    double time = 0.0, loss = 0.0;
    for (const auto* rec : recs) {
      time = std::max(time, rec->time);
      loss += rec->loss / static_cast<double>(recs.size());
      // The most the worker's counts reached (a later process's records can come at earlier steps).
      const auto& [sent_so_far, received_so_far] = counts.adjusted.at(rec);
      auto& ws = worker_sent[static_cast<size_t>(rec->worker)];
      auto& wr = worker_received[static_cast<size_t>(rec->worker)];
      ws = std::max(ws, sent_so_far);
      wr = std::max(wr, received_so_far);
      per_worker[static_cast<size_t>(rec->worker)] = {{"worker", rec->worker}, {"time_s", rec->time},
                                                      {"compute_s", rec->compute_s}, {"comm_s", rec->comm_s},
                                                      {"idle_s", rec->idle_s}, {"bytes_sent", rec->bytes_sent}};
    }
    const double sent = PerWorkerMean(x, worker_sent), received = PerWorkerMean(x, worker_received);
    last_sent = sent;
    last_received = received;
    const auto eval = x.evals.find(step + 1);
    if (eval == x.evals.end() && (step + 1) % x.sc.output.log_every != 0 && step + 1 != steps) continue;
    Json line = {{"step", step + 1},        {time_key, time},         {"train_loss", loss},
                 {"tokens", tokens},        {"bytes_sent", sent},     {"bytes_received", received},
                 {"workers_active", recs.size()}, {"workers", per_worker}};
    if (adaptive) {
      int64_t sequences = 0;  // per update, over the workers training at this step
      for (const auto* rec : recs) sequences += MultipleAt(multiples, rec->worker, step) * x.sc.train.batch_size;
      line["global_batch"] = sequences;
    }
    if (eval != x.evals.end()) AddEvaluation(x, eval->first, eval->second.second, &line);
    NARROWS_RETURN_IF_ERROR(metrics.Append(line.dump()));
  }
  return core::Status::Ok();
}

core::Status WriteEvents(Experiment::Impl& x, const std::string& path) {
  core::JsonlWriter events;
  NARROWS_RETURN_IF_ERROR(events.Open(path));
  std::stable_sort(x.events.begin(), x.events.end(), [](const Json& a, const Json& b) {
    return a.value("step", 0) < b.value("step", 0);
  });
  for (const auto& e : x.events) NARROWS_RETURN_IF_ERROR(events.Append(e.dump()));
  return core::Status::Ok();
}

}  // namespace

core::Result<EntryResult> Experiment::Finish(const std::string& dir) {
  Impl& x = *impl_;
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(dir));
  {
    std::lock_guard<std::mutex> lock(x.mu);
    x.Unspool();
  }
  const EntryResult r = Summarise(x);
  NARROWS_RETURN_IF_ERROR(WriteMetrics(x, dir + "/metrics.jsonl", r.steps));
  NARROWS_RETURN_IF_ERROR(WriteEvents(x, dir + "/events.jsonl"));
  if (!x.error.ok()) return x.error;  // after writing what the workers recorded before it
  // Live, the survivors of a failure finish the run; where none did (every worker dropped, this one
  // included), what was written is a run cut short, not a result.
  const int64_t last_eval = x.evals.empty() ? 0 : x.evals.rbegin()->first;
  if (x.opt.membership == Membership::kLive && last_eval < x.sc.train.steps) {
    return core::Status::Aborted("entry " + x.algo.name + " ended before its last step: no worker reached step " +
                                 std::to_string(x.sc.train.steps) + " (the last evaluation is at step " +
                                 std::to_string(last_eval) + "; events.jsonl says who was dropped and why); what it recorded is in " + dir);
  }
  return r;
}

}  // namespace narrows::trainer
