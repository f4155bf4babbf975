// Experiment::Impl (worker.h): the records of all workers of one entry, behind one mutex — steps,
// events and evaluations as they come, and the JSON part that carries them between processes
// (Export, Merge). With it, the EntryContext that the entry's workers read.
#include <algorithm>
#include <cmath>
#include <string>

#include "trainer/worker.h"

namespace narrows::trainer {

EntryContext::EntryContext(const core::Scenario& s, const core::AlgorithmSpec& a, std::shared_ptr<const Dataset> d)
    : sc(s), algo(a), data(std::move(d)), model(s.model), schedule(s.train), plan(s.faults, s.workers.count),
      num_workers(s.workers.count) {
  model.vocab_size = data->vocab_size;
  if (a.n_layers > 0) model.n_layers = a.n_layers;
}

Experiment::Impl::Impl(const core::Scenario& s, const core::AlgorithmSpec& a, std::shared_ptr<const Dataset> d)
    : EntryContext(s, a, std::move(d)), final_stats(static_cast<size_t>(num_workers)),
      final_clock(static_cast<size_t>(num_workers)), compute_total(static_cast<size_t>(num_workers)),
      peak_round_bytes(static_cast<size_t>(num_workers), 0), ran(static_cast<size_t>(num_workers), false) {}

std::pair<int64_t, double> Experiment::Impl::SlowestStep() const {
  std::vector<int> expected;
  if (opt.membership == Membership::kLive) {
    for (const auto& [r, at] : running_steps) expected.push_back(r);
  } else {
    expected = plan.AliveSet(progress_step);
  }
  // The fewest steps, and among ranks at that step the latest clock: when the last of them got there.
  std::pair<int64_t, double> slowest = {-1, 0.0};
  for (int r : expected) {
    if (ran[static_cast<size_t>(r)]) continue;
    const auto it = running_steps.find(r);
    const std::pair<int64_t, double> at = it == running_steps.end() ? std::make_pair(int64_t{0}, 0.0) : it->second;
    if (slowest.first < 0 || at.first < slowest.first || (at.first == slowest.first && at.second > slowest.second)) {
      slowest = at;
    }
  }
  return slowest;
}

void Experiment::Impl::Fail(const core::Status& s, int rank) {
  std::lock_guard<std::mutex> lock(mu);
  if (error.ok()) error = core::Status(s.code(), "worker " + std::to_string(rank) + ": " + s.message());
}

namespace {
Json SpoolError(const core::Status& s) { return {{"type", "spool_error"}, {"step", 0}, {"message", s.message()}}; }
}  // namespace

void Experiment::Impl::Unspool() {
  if (!spool) return;
  const core::Status s = spool->Read(&records, &events, &host_rates);
  spool.reset();
  if (!s.ok()) events.push_back(SpoolError(s));
}

void Experiment::Impl::Event(Json e) {
  std::lock_guard<std::mutex> lock(mu);
  AddEvent(std::move(e));
}

void Experiment::Impl::OuterSync(int64_t step, double time, Json detail) {
  detail["type"] = "outer_sync";
  detail["step"] = step;
  detail["time"] = time;
  std::lock_guard<std::mutex> lock(mu);
  ++outer_syncs;
  AddEvent(std::move(detail));
}

double Experiment::Impl::Evaluate(const torch::Tensor& params, const std::vector<TokenBatch>* batches) {
  return EvaluateWithError(params, batches).loss;
}

Replica::Evaluation Experiment::Impl::EvaluateWithError(const torch::Tensor& params,
                                                        const std::vector<TokenBatch>* batches,
                                                        const torch::Tensor* buffers) {
  std::lock_guard<std::mutex> lock(mu);
  if (!evaluator) {
    torch::manual_seed(sc.seed);
    evaluator = std::make_unique<Replica>(model, sc.train, device);
    evaluator->set_timing_only(opt.timing_only);
  }
  {
    torch::NoGradGuard no_grad;
    evaluator->model().flat_params().copy_(params);
    if (buffers != nullptr && buffers->numel() > 0) evaluator->model().flat_buffers().copy_(*buffers);
  }
  return evaluator->EvaluateWithError(batches ? *batches : data->val_batches);
}

void Experiment::Impl::MarkVaryingBatch() {
  std::lock_guard<std::mutex> lock(mu);
  varying_batch = true;
}

void Experiment::Impl::AddPartialEval(int64_t step, double time, int64_t part, double loss, double weight) {
  std::lock_guard<std::mutex> lock(mu);
  PartialEval& e = partial_evals[step];
  e.time = std::max(e.time, time);
  e.parts[part] = {loss, weight};
}

void Experiment::Impl::MaybeEvaluate(int64_t from_step, int64_t to_step, double time, const torch::Tensor& params) {
  MaybeEvaluateWith(from_step, to_step, time, params, nullptr);
}

void Experiment::Impl::MaybeEvaluateWith(int64_t from_step, int64_t to_step, double time, const torch::Tensor& params,
                                         const torch::Tensor* buffers) {
  if (!EvalDue(from_step, to_step)) return;
  const Replica::Evaluation val = EvaluateWithError(params, nullptr, buffers);
  std::lock_guard<std::mutex> lock(mu);
  evals[to_step] = {time, val.loss};
  if (std::isfinite(val.standard_error)) eval_se[to_step] = val.standard_error;
  if (data->domains.size() > 1 && !val.rows.empty()) eval_domains[to_step] = data->ByDomain(val.rows);
}

Json Experiment::Impl::Export() {
  std::lock_guard<std::mutex> lock(mu);
  // What Merge brought, then what this process recorded (spooled, or in the same vectors).
  std::vector<StepRecord> all_records = records;
  std::vector<Json> all_events = events;
  std::vector<double> rates = host_rates;
  if (spool) {
    const core::Status s = spool->Read(&all_records, &all_events, &rates);
    if (!s.ok()) all_events.push_back(SpoolError(s));
  }
  Json recs = Json::array(), ranks = Json::array(), ev = Json::array();
  for (const auto& r : all_records) {
    recs.push_back({r.worker, r.step, r.time, r.loss, r.compute_s, r.comm_s, r.idle_s, r.bytes_sent, r.bytes_received});
  }
  for (const auto& [step, e] : evals) {
    const auto se = eval_se.find(step);
    ev.push_back({step, e.first, e.second, se != eval_se.end() ? Json(se->second) : Json()});
  }
  Json partial = Json::array();
  for (const auto& [step, e] : partial_evals) {
    for (const auto& [part, lw] : e.parts) partial.push_back({step, e.time, part, lw.first, lw.second});
  }
  for (int w = 0; w < num_workers; ++w) {
    if (!ran[static_cast<size_t>(w)]) continue;
    const auto& st = final_stats[static_cast<size_t>(w)];
    ranks.push_back({{"rank", w}, {"clock", final_clock[static_cast<size_t>(w)]},
                     {"compute", compute_total[static_cast<size_t>(w)]},
                     {"peak_round_bytes", peak_round_bytes[static_cast<size_t>(w)]},
                     {"stats", {st.bytes_sent, st.bytes_received, st.messages_sent, st.messages_received}}});
  }
  Json domains = Json::array();
  for (const auto& [step, losses] : eval_domains) domains.push_back({step, Json(losses)});
  Json out = {{"records", recs}, {"events", all_events}, {"evals", ev}, {"partial_evals", partial}, {"ranks", ranks},
              {"eval_domains", domains},
              {"host_compute_s", host_compute_s}, {"host_rates", rates}, {"step_flops", step_flops}, {"outer_syncs", outer_syncs}, {"tokens", tokens},
              {"varying_batch", varying_batch}};
  if (!error.ok()) out["error"] = {{"code", static_cast<int>(error.code())}, {"message", error.message()}};
  return out;
}

core::Status Experiment::Impl::Merge(const Json& part) {
  try {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& r : part.at("records")) {
      records.push_back({r.at(0).get<int>(), r.at(1).get<int64_t>(), r.at(2).get<double>(), r.at(3).get<double>(),
                         r.at(4).get<double>(), r.at(5).get<double>(), r.at(6).get<double>(),
                         r.at(7).get<int64_t>(), r.at(8).get<int64_t>()});
    }
    for (const auto& e : part.at("events")) events.push_back(e);
    for (const auto& e : part.at("evals")) {
      evals[e.at(0).get<int64_t>()] = {e.at(1).get<double>(), e.at(2).get<double>()};
      if (e.size() > 3 && e.at(3).is_number()) eval_se[e.at(0).get<int64_t>()] = e.at(3).get<double>();
    }
    for (const auto& e : part.value("eval_domains", Json::array())) {
      eval_domains[e.at(0).get<int64_t>()] = e.at(1).get<std::vector<double>>();
    }
    for (const auto& e : part.value("partial_evals", Json::array())) {
      PartialEval& p = partial_evals[e.at(0).get<int64_t>()];
      p.time = std::max(p.time, e.at(1).get<double>());
      p.parts[e.at(2).get<int64_t>()] = {e.at(3).get<double>(), e.at(4).get<double>()};
    }
    for (const auto& r : part.at("ranks")) {
      const int w = r.at("rank");
      if (w < 0 || w >= num_workers) return core::Status::InvalidArgument("part names worker " + std::to_string(w));
      const auto i = static_cast<size_t>(w);
      final_clock[i] = r.at("clock");
      compute_total[i] = r.at("compute");
      peak_round_bytes[i] = r.value("peak_round_bytes", int64_t{0});
      const auto& st = r.at("stats");
      final_stats[i] = {st.at(0).get<int64_t>(), st.at(1).get<int64_t>(), st.at(2).get<int64_t>(), st.at(3).get<int64_t>()};
      ran[i] = true;
    }
    host_compute_s += part.at("host_compute_s").get<double>();
    for (const auto& r : part.value("host_rates", Json::array())) host_rates.push_back(r.get<double>());
    step_flops = std::max(step_flops, part.value("step_flops", 0.0));
    outer_syncs += part.at("outer_syncs").get<int64_t>();
    tokens += part.at("tokens").get<int64_t>();
    varying_batch = varying_batch || part.value("varying_batch", false);
    if (part.contains("error") && error.ok()) {
      error = core::Status(static_cast<core::StatusCode>(part["error"].at("code").get<int>()),
                           part["error"].at("message").get<std::string>());
    }
  } catch (const std::exception& e) {
    return core::Status::InvalidArgument(std::string("malformed experiment part: ") + e.what());
  }
  return core::Status::Ok();
}

bool Experiment::Impl::EvalDue(int64_t from_step, int64_t to_step) const {
  if (to_step == sc.train.steps) return true;
  return sc.eval.every > 0 && to_step / sc.eval.every > from_step / sc.eval.every;
}

}  // namespace narrows::trainer
