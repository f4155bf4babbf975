// Experiment::AdoptTraining: a run that was timed, not trained (ExperimentOptions::timing_only),
// takes its losses from one that trained the same entry under another network.
//
// The timed run did everything the trained one did that moves time (each step's charged compute,
// each message), and no math that only moves the losses. Its records keep their times, bytes and
// compute; their losses, the evaluations, the events' contents and the host's measured compute are
// the trained run's. Before anything is taken, both runs must have done the same things apart from
// their times: an algorithm whose work depended on its values (a batch size from the gradients' noise,
// a gradient dropped as non-finite) or on when messages arrived would differ here, and is refused.

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "trainer/worker.h"

namespace narrows::trainer {

namespace {

using core::Status;

bool Near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)}); }

// An event's identity apart from its time and the values it reports: its type, step and worker.
std::string EventKey(const Json& e) {
  return e.value("type", std::string()) + "/" + (e.contains("step") ? e["step"].dump() : "") + "/" +
         (e.contains("worker") ? e["worker"].dump() : "");
}

// Each worker's step records in the order it made them: (step, compute_s, bytes sent, received).
using StepKey = std::tuple<int64_t, double, int64_t, int64_t>;
std::map<int, std::vector<StepKey>> ByWorker(const Json& records) {
  std::map<int, std::vector<StepKey>> out;
  for (const auto& r : records) {
    out[r.at(0).get<int>()].emplace_back(r.at(1).get<int64_t>(), r.at(4).get<double>(), r.at(7).get<int64_t>(),
                                         r.at(8).get<int64_t>());
  }
  return out;
}

// Whether an event's field is a time or a duration, which the network decides ("time", "sent_at",
// "step_time_s"); every other field reports what was computed or who took part.
bool IsTime(const std::string& field) {
  auto ends = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return field.size() >= n && field.compare(field.size() - n, n, suffix) == 0;
  };
  return field == "time" || ends("_at") || ends("_s");
}

Status Differ(const std::string& what) {
  return Status::InvalidArgument("the timed run differs from the trained run: " + what);
}

// The first difference between what the two runs did, or OK.
Status SameWork(const Json& timed, const Json& trained) {
  for (const char* key : {"outer_syncs", "tokens", "varying_batch"}) {
    if (timed.at(key) != trained.at(key)) {
      return Differ(std::string(key) + " " + timed.at(key).dump() + " against " + trained.at(key).dump());
    }
  }
  const auto mine = ByWorker(timed.at("records")), theirs = ByWorker(trained.at("records"));
  if (mine.size() != theirs.size()) {
    return Differ(std::to_string(mine.size()) + " workers recorded steps against " + std::to_string(theirs.size()));
  }
  for (const auto& [w, steps] : mine) {
    const auto it = theirs.find(w);
    if (it == theirs.end()) return Differ("worker " + std::to_string(w) + " trained in one run only");
    if (steps.size() != it->second.size()) {
      return Differ("worker " + std::to_string(w) + " recorded " + std::to_string(steps.size()) + " steps against " +
                    std::to_string(it->second.size()));
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto& [s, c, sent, received] = steps[i];
      const auto& [s2, c2, sent2, received2] = it->second[i];
      if (s != s2 || !Near(c, c2) || sent != sent2 || received != received2) {
        return Differ("worker " + std::to_string(w) + "'s record " + std::to_string(i) + ": step " + std::to_string(s) +
                      ", " + std::to_string(sent) + " bytes sent, " + std::to_string(c) + " s of compute against step " +
                      std::to_string(s2) + ", " + std::to_string(sent2) + " bytes, " + std::to_string(c2) + " s");
      }
    }
  }
  auto steps_of = [](const Json& evals) {
    std::vector<int64_t> out;
    for (const auto& e : evals) out.push_back(e.at(0).get<int64_t>());
    return out;
  };
  if (steps_of(timed.at("evals")) != steps_of(trained.at("evals"))) return Differ("evaluated at other steps");
  std::vector<std::tuple<int64_t, int64_t>> parts, parts2;
  for (const auto& e : timed.value("partial_evals", Json::array())) parts.emplace_back(e.at(0), e.at(2));
  for (const auto& e : trained.value("partial_evals", Json::array())) parts2.emplace_back(e.at(0), e.at(2));
  std::sort(parts.begin(), parts.end());
  std::sort(parts2.begin(), parts2.end());
  if (parts != parts2) return Differ("evaluated other parts");
  std::map<int, Json> ranks;
  for (const auto& r : trained.at("ranks")) ranks[r.at("rank").get<int>()] = r;
  for (const auto& r : timed.at("ranks")) {
    const int w = r.at("rank").get<int>();
    const auto it = ranks.find(w);
    if (it == ranks.end()) return Differ("worker " + std::to_string(w) + " finished in one run only");
    if (r.at("stats") != it->second.at("stats")) {
      return Differ("worker " + std::to_string(w) + " sent " + r.at("stats").dump() + " (bytes sent, received, messages) against " +
                    it->second.at("stats").dump());
    }
    if (!Near(r.at("compute").get<double>(), it->second.at("compute").get<double>())) {
      return Differ("worker " + std::to_string(w) + "'s compute");
    }
  }
  if (ranks.size() != timed.at("ranks").size()) return Differ("other workers finished");
  std::multiset<std::string> events, events2;
  for (const auto& e : timed.at("events")) events.insert(EventKey(e));
  for (const auto& e : trained.at("events")) events2.insert(EventKey(e));
  if (events != events2) {
    for (const auto& k : events2) {
      if (events.count(k) != events2.count(k)) return Differ("its events: " + k + " (type/step/worker)");
    }
    return Differ("its events");
  }
  return Status::Ok();
}

}  // namespace

core::Status Experiment::AdoptTraining(const std::string& trained_text) {
  Impl& x = *impl_;
  if (!x.opt.timing_only) return Status::InvalidArgument("AdoptTraining: this run trained (it was not timing_only)");
  Json trained;
  try {
    trained = Json::parse(trained_text);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("the training record is not JSON: ") + e.what());
  }
  const Json timed = x.Export();  // takes the lock
  try {
    NARROWS_RETURN_IF_ERROR(SameWork(timed, trained));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("malformed training record: ") + e.what());
  }
  std::lock_guard<std::mutex> lock(x.mu);
  if (x.spool) return Status::InvalidArgument("AdoptTraining: a spooled run cannot be re-timed");
  // Losses: each worker's i-th record takes the trained run's i-th loss of that worker.
  std::map<int, std::vector<double>> losses;
  for (const auto& r : trained.at("records")) losses[r.at(0).get<int>()].push_back(r.at(3).get<double>());
  std::map<int, size_t> next;
  for (auto& r : x.records) r.loss = losses[r.worker][next[r.worker]++];
  for (const auto& e : trained.at("evals")) {
    const int64_t step = e.at(0).get<int64_t>();
    x.evals[step].second = e.at(2).get<double>();
    x.eval_se.erase(step);
    if (e.size() > 3 && e.at(3).is_number()) x.eval_se[step] = e.at(3).get<double>();
  }
  x.eval_domains.clear();
  for (const auto& e : trained.value("eval_domains", Json::array())) {
    x.eval_domains[e.at(0).get<int64_t>()] = e.at(1).get<std::vector<double>>();
  }
  for (const auto& e : trained.value("partial_evals", Json::array())) {
    x.partial_evals[e.at(0).get<int64_t>()].parts[e.at(2).get<int64_t>()] = {e.at(3).get<double>(), e.at(4).get<double>()};
  }
  // Events: the trained run's, in order, each with the times of its counterpart here (the n-th event
  // of a type, step and worker here is the n-th one there): the values it reports are the training's,
  // its times this run's.
  std::map<std::string, std::vector<Json>> counterparts;
  for (const auto& e : timed.at("events")) counterparts[EventKey(e)].push_back(e);
  std::map<std::string, size_t> taken;
  x.events.clear();
  for (Json e : trained.at("events")) {
    const std::string key = EventKey(e);
    const Json& here = counterparts[key][taken[key]++];
    for (auto& [field, value] : e.items()) {
      if (IsTime(field) && here.contains(field)) value = here[field];
    }
    x.events.push_back(std::move(e));
  }
  // The host's measured compute is the training's (the timed run computed next to nothing).
  x.host_compute_s = trained.at("host_compute_s").get<double>();
  x.host_rates = trained.value("host_rates", Json::array()).get<std::vector<double>>();
  return Status::Ok();
}

}  // namespace narrows::trainer
