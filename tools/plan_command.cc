#include "tools/plan_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "core/run_writer.h"
#include "emu/network_from_scenario.h"
#include "sim/network_model.h"
#include "tools/format.h"
#include "tools/report_blocks.h"
#include "tools/report_command.h"
#include "tools/run_folders.h"
#include "tools/run_command.h"
#include "trainer/algorithms/plugin.h"
#include "trainer/experiment.h"

namespace narrows::tools {
namespace {

using core::Status;

using trainer::PlanInputs;
using trainer::Workload;

// When the last of `messages`, all sent at time 0, arrives on the scenario's network model.
std::vector<double> Deliveries(const core::Scenario& sc, const std::vector<trainer::PlanMessage>& messages) {
  auto model = emu::NetworkFromScenario(sc);
  std::vector<sim::Message> sent;
  for (const auto& m : messages) sent.push_back({m.src, m.dst, m.bytes, 0.0});
  return sim::SimulateMessages(*model, sent);
}

double SlowestDelivery(const core::Scenario& sc, const std::vector<trainer::PlanMessage>& messages) {
  const auto delivered = Deliveries(sc, messages);
  return *std::max_element(delivered.begin(), delivered.end());
}

// What every prediction starts from: the steps, and the compute of the workers at their speeds.
// Every synchronisation waits for the slowest worker; utilisation is the workers' mean compute over
// the time, as `narrows run` reports it.
PlanInputs MakeInputs(const core::Scenario& sc, const Workload& w, double flops) {
  const int m = sc.workers.count;
  const double slowest = *std::min_element(sc.workers.speed.begin(), sc.workers.speed.end());
  PlanInputs in;
  in.sc = &sc;
  in.workload = w;
  in.steps = std::ceil(w.tokens / w.batch_tokens);
  in.nominal_step_s = w.flops_per_token * w.batch_tokens / m / flops;
  in.step_s = in.nominal_step_s / slowest;
  in.critical_compute_s = in.steps * in.step_s;
  double mean_speed_inverse = 0;
  for (double s : sc.workers.speed) mean_speed_inverse += 1.0 / s / m;
  in.compute_s = in.steps * in.nominal_step_s * mean_speed_inverse;
  in.slowest_delivery = [&sc](const std::vector<trainer::PlanMessage>& messages) { return SlowestDelivery(sc, messages); };
  in.deliveries = [&sc](const std::vector<trainer::PlanMessage>& messages) { return Deliveries(sc, messages); };
  return in;
}

// The entry's rows (its plug-in's prediction); none if its algorithm predicts nothing.
std::vector<trainer::PlanRow> Predict(const core::Scenario& sc, const core::AlgorithmSpec& a, const Workload& w,
                                      double flops) {
  const trainer::AlgorithmPlugin* plugin = trainer::FindAlgorithm(a.algorithm);
  if (plugin == nullptr || !plugin->plan) return {};
  std::vector<trainer::PlanRow> rows = plugin->plan(MakeInputs(sc, w, flops), a);
  if (!rows.empty() && rows.front().name.empty()) rows.front().name = a.name;
  return rows;
}

// The scenario's network and settings with `m` workers of speed 1 (per-worker links beyond them
// dropped).
core::Scenario WithWorkers(core::Scenario sc, int m) {
  sc.workers.count = m;
  sc.workers.speed.assign(static_cast<size_t>(m), 1.0);
  auto& o = sc.network.overrides;
  o.erase(std::remove_if(o.begin(), o.end(), [m](const core::NetworkSpec::Override& v) { return v.worker >= m; }), o.end());
  return sc;
}

// The scenario with every link's bandwidth multiplied by `k`.
core::Scenario ScaledBandwidth(core::Scenario sc, double k) {
  sc.network.link.bandwidth_bps *= k;
  sc.network.intra.bandwidth_bps *= k;
  for (auto& o : sc.network.overrides) o.link.bandwidth_bps *= k;
  for (auto& c : sc.network.schedule) c.bandwidth_bps *= k;
  return core::WithNetworkModel(std::move(sc), "analytic");
}

// The access-link bandwidth at which row `row` of the entry reaches compute utilisation `target`
// (bisection on a log scale between 1 kbit/s and 100 Tbit/s); infinity if even that is not enough.
double BandwidthFor(const core::Scenario& sc, const core::AlgorithmSpec& a, const Workload& w, double flops, size_t row,
                    double target) {
  auto util = [&](double k) {
    const trainer::PlanRow r = Predict(ScaledBandwidth(sc, k), a, w, flops).at(row);
    return r.compute_s / r.time_s;
  };
  const double base = sc.network.link.bandwidth_bps;
  double lo = std::log(1e3 / base), hi = std::log(1e14 / base);
  if (util(std::exp(hi)) < target) return std::numeric_limits<double>::infinity();
  if (util(std::exp(lo)) >= target) return 1e3;
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (util(std::exp(mid)) >= target ? hi : lo) = mid;
  }
  return base * std::exp(hi);
}



// --params: a count ("7e9") or a preset (1B, 10B, 405B).
core::Result<double> ParamCount(const std::string& text) {
  static const std::map<std::string, double> presets = {{"1B", 1e9}, {"10B", 1e10}, {"405B", 4.05e11}};
  const auto it = presets.find(text);
  if (it != presets.end()) return it->second;
  char* end = nullptr;
  const double n = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(n >= 1)) {
    return Status::InvalidArgument("--params: expected a count (7e9) or a preset (1B, 10B, 405B), got '" + text + "'");
  }
  return n;
}

core::Result<Workload> MakeWorkload(const core::Scenario& sc, const PlanOptions& o) {
  Workload w;
  w.batch_tokens = static_cast<double>(sc.train.batch_size * sc.model.seq_len) * sc.workers.count;
  w.tokens = static_cast<double>(sc.train.steps) * w.batch_tokens;
  if (o.params.empty()) {
    // The scenario's own model: its exact parameter count and FLOPs (byte-level vocabulary).
    core::ModelSpec spec = sc.model;
    spec.vocab_size = 256;
    const trainer::ModelCost cost = trainer::CostOf(spec);
    w.params = static_cast<double>(cost.params);
    w.flops_per_token = cost.train_flops_per_token;
    w.label = sc.model.torchscript.empty() ? sc.model.preset
                                           : std::filesystem::path(sc.model.torchscript).filename().string();
  } else {
    auto parsed = ParamCount(o.params);
    if (!parsed.ok()) return parsed.status();
    const double n = *parsed;
    w.params = n;
    w.flops_per_token = 6.0 * n;  // Kaplan et al.; App. A of the DiLoCo scaling laws
    w.label = Si(n, "") + " parameters";
    w.batch_tokens = 4194304;     // 2^22 tokens, the paper's order of magnitude
    w.tokens = 20.0 * n;          // Chinchilla-optimal unless told otherwise
  }
  if (o.tokens > 0) w.tokens = o.tokens;
  if (o.global_batch_tokens > 0) w.batch_tokens = o.global_batch_tokens;
  return w;
}

// The scenario's workload for `entry`: an entry with its own depth (n_layers) has its own size and
// cost.
Workload EntryWorkload(const core::Scenario& sc, Workload w, const core::AlgorithmSpec& entry) {
  if (entry.n_layers > 0) {
    core::ModelSpec spec = sc.model;
    spec.vocab_size = 256;
    spec.n_layers = entry.n_layers;
    const trainer::ModelCost cost = trainer::CostOf(spec);
    w.params = static_cast<double>(cost.params);
    w.flops_per_token = cost.train_flops_per_token;
  }
  return w;
}

}  // namespace

core::AlgorithmSpec ChooseCollective(const core::Scenario& sc, const core::AlgorithmSpec& entry) {
  core::AlgorithmSpec best = entry;
  best.collective = core::CollectiveKind::kRing;
  best.collective_auto = true;
  auto w = MakeWorkload(sc, {});
  if (!w.ok()) return best;
  const Workload entry_w = EntryWorkload(sc, *w, entry);
  double fastest = std::numeric_limits<double>::infinity();
  for (const auto kind : {core::CollectiveKind::kRing, core::CollectiveKind::kTwoPhase, core::CollectiveKind::kTree,
                          core::CollectiveKind::kStar}) {
    core::AlgorithmSpec candidate = best;
    candidate.collective = kind;
    const std::vector<trainer::PlanRow> rows = Predict(sc, candidate, entry_w, sc.compute.device_flops);
    if (rows.empty()) return best;  // the algorithm predicts nothing: the ring
    if (rows.front().time_s < fastest * (1 - 1e-9)) {
      fastest = rows.front().time_s;
      best.collective = kind;
    }
  }
  return best;
}

core::Result<Plan> MakePlan(const core::Scenario& sc, const PlanOptions& o) {
  auto w = MakeWorkload(sc, o);
  if (!w.ok()) return w.status();
  std::vector<core::AlgorithmSpec> entries = Entries(sc);
  for (const std::string& text : o.entries) {
    auto entry = core::ParseEntry(text, sc, "--entry " + text);
    if (!entry.ok()) return entry.status();
    if (entry->collective == core::CollectiveKind::kAuto) *entry = ChooseCollective(sc, *entry);
    for (const auto& e : entries) {
      if (e.name == entry->name) {
        return Status::InvalidArgument("--entry " + text + ": an entry named '" + e.name +
                                       "' is planned already; give it another name ({..., name: ...})");
      }
    }
    entries.push_back(*entry);
  }
  Plan plan;
  plan.params = w->params;
  plan.flops_per_token = w->flops_per_token;
  plan.tokens = w->tokens;
  plan.batch_tokens = w->batch_tokens;
  plan.flops_per_worker = o.flops > 0 ? o.flops : sc.compute.device_flops;
  plan.label = w->label;
  for (const auto& a : entries) {
    const Workload entry_w = o.params.empty() ? EntryWorkload(sc, *w, a) : *w;
    const std::vector<trainer::PlanRow> rows = Predict(sc, a, entry_w, plan.flops_per_worker);
    if (rows.empty()) {
      plan.unpredicted.push_back(a.name + " (" + a.algorithm + ")");
      continue;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const trainer::PlanRow& r = rows[i];
      tools::PlanRow row{r.name, r.time_s, r.compute_s, r.bytes_per_worker, r.syncs, {}, r.note};
      for (int t : {50, 80, 90, 95, 99}) {
        if (!o.bandwidths) break;
        row.bandwidth_for[t] = BandwidthFor(sc, a, entry_w, plan.flops_per_worker, i, t / 100.0);
      }
      plan.rows.push_back(row);
    }
  }
  return plan;
}

std::vector<std::string> PlannerLeavesOut(const core::Scenario& sc) {
  std::vector<std::string> out;
  for (size_t i = 0; i < sc.faults.size(); ++i) {
    const auto kind = sc.faults[i].kind;
    if (kind == core::FaultKind::kLeave || kind == core::FaultKind::kJoin || kind == core::FaultKind::kCrash) {
      out.push_back("faults[" + std::to_string(i) + "]: the planner keeps every worker for the whole run (no leave, "
                    "join or crash)");
    } else if (kind == core::FaultKind::kLinkDown) {
      out.push_back("faults[" + std::to_string(i) + "]: the planner keeps every link up (no link_down)");
    }
  }
  if (!sc.network.schedule.empty()) {
    out.push_back("network.schedule: each link at its bandwidth at time 0 (no change over the run)");
  }
  // Each collective's messages are timed on the scenario's own network (its model and options, the
  // hosts' work included), each from a fresh start; the bandwidth search scales the analytic model.
  if (sc.network.model != "analytic") {
    out.push_back("network.model " + sc.network.model + ": the bandwidths for 50-99% utilisation are searched on "
                  "the analytic model (the time column is " + sc.network.model + "'s)");
  }
  return out;
}

Status PlanScenario(const core::Scenario& sc, const PlanOptions& o) {
  auto plan = MakePlan(sc, o);
  if (!plan.ok()) return plan.status();
  std::printf("plan: %s, %s tokens in steps of %s tokens, %d workers at %s each, network %s\n", plan->label.c_str(),
              Si(plan->tokens, "").c_str(), Si(plan->batch_tokens, "").c_str(), sc.workers.count,
              Si(plan->flops_per_worker, "FLOP/s").c_str(), sc.network.profile.c_str());
  std::printf("%-26s %10s %8s %12s %7s | bandwidth for compute utilisation 50/80/90/95/99%%\n", "entry", "time",
              "compute", "sent/worker", "syncs");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : plan->rows) {
    std::string needs;
    nlohmann::json bw = nlohmann::json::object();
    for (const auto& [t, b] : r.bandwidth_for) {
      needs += (needs.empty() ? "" : " / ") + Si(b, "bit/s");
      bw[std::to_string(t)] = std::isfinite(b) ? nlohmann::json(b) : nlohmann::json();
    }
    std::printf("%-26s %10s %7.0f%% %12s %7lld | %s\n", r.name.c_str(), Duration(r.time_s).c_str(),
                100 * r.compute_s / r.time_s, Si(r.bytes_per_worker, "B").c_str(), static_cast<long long>(r.syncs),
                needs.c_str());
    out.push_back({{"name", r.name}, {"time_s", r.time_s}, {"compute_s", r.compute_s},
                   {"compute_utilization", r.compute_s / r.time_s}, {"bytes_sent_per_worker", r.bytes_per_worker},
                   {"syncs", r.syncs}, {"bandwidth_bps_for_utilization", bw}});
  }
  const std::string dir = sc.output.dir + "/" + sc.name;
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(dir));
  const nlohmann::json json = {{"scenario", sc.name}, {"params", plan->params}, {"tokens", plan->tokens},
                               {"batch_tokens", plan->batch_tokens}, {"flops_per_worker", plan->flops_per_worker},
                               {"entries", out}, {"left_out", PlannerLeavesOut(sc)}};
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(dir + "/plan.json", json.dump(2) + "\n"));
  std::printf("plan: %s/plan.json (\"never\": latency or compute bounds it below that utilisation)\n", dir.c_str());
  for (const auto& r : plan->rows) {
    if (!r.note.empty()) std::printf("plan: %s: %s\n", r.name.c_str(), r.note.c_str());
  }
  for (const auto& name : plan->unpredicted) std::printf("plan: %s: no prediction (its algorithm has no cost model)\n", name.c_str());
  for (const auto& what : PlannerLeavesOut(sc)) std::printf("plan: left out: %s\n", what.c_str());
  return Status::Ok();
}

}  // namespace narrows::tools

namespace narrows::tools {
namespace {

// The planner's workload for a model of `params` trained on `tokens` by `m` workers, each step of
// the scenario's per-worker batch; FLOPs as 6N (the presets' rule).
Workload SizedWorkload(const core::Scenario& sc, double params, double tokens, int m) {
  Workload w;
  w.params = params;
  w.flops_per_token = 6.0 * params;
  w.tokens = tokens;
  w.batch_tokens = static_cast<double>(sc.train.batch_size * sc.model.seq_len) * m;
  w.label = Si(params, "") + " parameters";
  return w;
}

// The entry's predicted time on `sc` (NaN where its algorithm predicts nothing).
trainer::PlanRow TimeOf(const core::Scenario& sc, core::AlgorithmSpec a, const Workload& w, double flops) {
  if (a.collective == core::CollectiveKind::kAuto) a.collective = core::CollectiveKind::kRing;
  const std::vector<trainer::PlanRow> rows = Predict(sc, a, w, flops);
  if (rows.empty()) return {a.name, NAN, NAN, NAN, 0, ""};
  return rows.front();
}

}  // namespace

core::Result<Decision> Decide(const core::Scenario& sc, const std::vector<EntryFit>& fits,
                              const std::vector<core::AlgorithmSpec>& entries, double tokens_per_param,
                              const DecideOptions& o) {
  if (!sc.network.islands.empty()) {
    return Status::InvalidArgument("plan --fit: the scenario's network has islands; the decision varies the number of "
                                   "workers on a star of access links");
  }
  if (!(tokens_per_param > 0)) return Status::InvalidArgument("plan --fit: the fits' tokens per parameter are unknown");
  Decision out;
  if (o.params.empty()) {
    core::ModelSpec spec = sc.model;
    spec.vocab_size = 256;
    out.params = static_cast<double>(trainer::CostOf(spec).params);
  } else {
    auto n = ParamCount(o.params);
    if (!n.ok()) return n.status();
    out.params = *n;
  }
  out.tokens_per_param = tokens_per_param;
  out.tokens = o.tokens > 0 ? o.tokens : tokens_per_param * out.params;
  const double ratio = out.tokens / out.params;
  if (std::abs(ratio / tokens_per_param - 1) > 0.1) {
    out.notes.push_back(Printf("the laws were fitted at %.3g tokens per parameter and hold there; at ", tokens_per_param) +
                        Printf("%.3g their losses are extrapolations in data", ratio));
  }
  const double flops = o.flops > 0 ? o.flops : sc.compute.device_flops;
  std::map<std::string, core::AlgorithmSpec> spec_of;
  for (const auto& e : entries) spec_of[e.name] = e;
  const EntryFit* ddp = nullptr;
  std::set<int> fitted_workers;
  for (const auto& f : fits) {
    if (!f.skipped.empty() || !spec_of.count(f.entry)) continue;
    if (spec_of[f.entry].baseline && ddp == nullptr) ddp = &f;
    for (const auto& p : f.points) fitted_workers.insert(static_cast<int>(p.workers));
  }
  std::vector<int> workers = o.workers;
  if (workers.empty()) workers.assign(fitted_workers.begin(), fitted_workers.end());
  // A law that does not vary with M holds at its one M alone.
  auto law_at = [](const EntryFit& f, int m) { return f.fit.uses_workers || std::abs(f.fit.workers_min - m) < 0.5; };
  for (int m : workers) {
    if (m < 1) return Status::InvalidArgument("plan --fit: --workers: expected counts of at least 1, got " + std::to_string(m));
    const core::Scenario at_m = WithWorkers(sc, m);
    for (const auto& f : fits) {
      if (!f.skipped.empty() || !spec_of.count(f.entry) || !law_at(f, m)) continue;
      const core::AlgorithmSpec& a = spec_of[f.entry];
      DecisionRow r;
      r.entry = f.entry;
      r.algorithm = a.algorithm;
      r.workers = m;
      r.loss = f.fit.Predict(out.params, m);
      const auto iv = f.fit.PredictionInterval(out.params, m);
      r.loss_lo = iv.lo;
      r.loss_hi = iv.hi;
      r.extrapolated = !f.fit.Covers(out.params, m);
      const trainer::PlanRow t = TimeOf(at_m, a, SizedWorkload(sc, out.params, out.tokens, m), flops);
      r.time_s = t.time_s;
      r.compute_s = t.compute_s;
      r.bytes_per_worker = t.bytes_per_worker;
      if (std::isnan(r.time_s)) continue;  // no cost model
      out.rows.push_back(r);
    }
  }
  for (auto& r : out.rows) {
    r.frontier = std::none_of(out.rows.begin(), out.rows.end(), [&](const DecisionRow& q) {
      return q.time_s <= r.time_s && q.loss <= r.loss && (q.time_s < r.time_s || q.loss < r.loss);
    });
  }
  if (ddp == nullptr) {
    out.notes.push_back("no fit for the baseline entry (baseline: true, by default the first): no break-even bandwidth");
    return out;
  }
  out.baseline = ddp->entry;
  for (int m : workers) {
    if (!law_at(*ddp, m)) continue;
    const core::Scenario at_m = WithWorkers(sc, m);
    const double target = ddp->fit.Predict(out.params, m);
    const Workload ddp_w = SizedWorkload(sc, out.params, out.tokens, m);
    BreakEven best;
    best.workers = m;
    best.bandwidth_bps = -1;
    for (const auto& f : fits) {
      if (&f == ddp || !f.skipped.empty() || !spec_of.count(f.entry) || !law_at(f, m)) continue;
      if (!f.fit.uses_params || !(f.fit.alpha < 0)) continue;  // no size reaches another loss
      const double scale = f.fit.a * (f.fit.uses_workers ? std::pow(m, f.fit.beta) : 1.0);
      const double n_equal = std::pow(target / scale, 1.0 / f.fit.alpha);
      const Workload w = SizedWorkload(sc, n_equal, ratio * n_equal, m);
      const core::AlgorithmSpec& a = spec_of[f.entry];
      auto gap = [&](double k) {  // DDP's time minus the entry's at equal loss, bandwidth times k
        const core::Scenario s = ScaledBandwidth(at_m, k);
        return std::array<double, 2>{TimeOf(s, spec_of[ddp->entry], ddp_w, flops).time_s, TimeOf(s, a, w, flops).time_s};
      };
      BreakEven b;
      b.workers = m;
      b.entry = f.entry;
      b.equal_loss_params = n_equal;
      const double base = at_m.network.link.bandwidth_bps;
      // From 1/1000 to 1000 times the scenario's bandwidth, 10 points a decade.
      double crossing = NAN;
      bool ahead_low = false, ahead_everywhere = true;
      double prev_k = 0, prev_gap = 0;
      for (int i = -30; i <= 30; ++i) {
        const double k = std::pow(10.0, i / 10.0);
        const auto t = gap(k);
        b.curve.push_back({base * k, t[0], t[1]});
        const double g = t[0] - t[1];
        if (i == -30) ahead_low = g > 0;
        ahead_everywhere = ahead_everywhere && g > 0;
        if (i > -30 && prev_gap > 0 && g <= 0 && std::isnan(crossing)) {
          double lo = std::log(prev_k), hi = std::log(k);  // bisection between the grid points
          for (int it = 0; it < 40; ++it) {
            const double mid = (lo + hi) / 2;
            const auto tm = gap(std::exp(mid));
            (tm[0] - tm[1] > 0 ? lo : hi) = mid;
          }
          crossing = base * std::exp(hi);
        }
        prev_k = k;
        prev_gap = g;
      }
      b.bandwidth_bps = ahead_everywhere ? INFINITY : (ahead_low && !std::isnan(crossing) ? crossing : 0.0);
      if (b.bandwidth_bps > best.bandwidth_bps) best = b;
    }
    if (best.bandwidth_bps >= 0) out.break_even.push_back(best);
  }
  return out;
}

}  // namespace narrows::tools

namespace narrows::tools {
namespace {

nlohmann::json DecisionJson(const core::Scenario& sc, const Decision& d) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  nlohmann::json rows = nlohmann::json::array(), be = nlohmann::json::array();
  for (const auto& r : d.rows) {
    rows.push_back({{"entry", r.entry}, {"algorithm", r.algorithm}, {"workers", r.workers}, {"loss", r.loss},
                    {"loss_95", {num(r.loss_lo), num(r.loss_hi)}}, {"extrapolated", r.extrapolated},
                    {"time_s", r.time_s}, {"compute_utilization", r.compute_s / r.time_s},
                    {"bytes_sent_per_worker", r.bytes_per_worker}, {"frontier", r.frontier}});
  }
  for (const auto& b : d.break_even) {
    be.push_back({{"workers", b.workers}, {"entry", b.entry}, {"equal_loss_params", b.equal_loss_params},
                  {"bandwidth_bps", std::isinf(b.bandwidth_bps) ? nlohmann::json("any") : nlohmann::json(b.bandwidth_bps)},
                  {"curve", b.curve}});
  }
  return {{"scenario", sc.name}, {"network", sc.network.profile}, {"params", d.params}, {"tokens", d.tokens},
          {"tokens_per_param", d.tokens_per_param}, {"baseline", d.baseline}, {"rows", rows},
          {"break_even", be}, {"notes", d.notes}};
}

// The decision as a report page: the rows, the frontier of loss against time, and the break-even
// curves (predicted time against bandwidth).
nlohmann::json DecisionPage(const core::Scenario& sc, const Decision& d) {
  using nlohmann::json;
  json rows = json::array();
  for (const auto& r : d.rows) {
    rows.push_back({r.entry, std::to_string(r.workers), Printf("%.4f", r.loss),
                    Printf("%.4f-", r.loss_lo) + Printf("%.4f", r.loss_hi) + (r.extrapolated ? " (extrapolated)" : ""),
                    Duration(r.time_s), Printf("%.0f%%", 100 * r.compute_s / r.time_s), Si(r.bytes_per_worker, "B"),
                    r.frontier ? "yes" : ""});
  }
  std::map<std::string, json> by_entry;
  json frontier = json::array();
  std::vector<const DecisionRow*> on;
  for (const auto& r : d.rows) {
    by_entry[r.entry].push_back({r.time_s, r.loss});
    if (r.frontier) on.push_back(&r);
  }
  std::sort(on.begin(), on.end(), [](const DecisionRow* a, const DecisionRow* b) { return a->time_s < b->time_s; });
  for (const auto* r : on) frontier.push_back({r->time_s, r->loss});
  json series = json::array();
  for (auto& [name, points] : by_entry) series.push_back(page::Series(name, points, "points"));
  series.push_back(page::Series("frontier", frontier, "line"));
  json blocks = json::array();
  blocks.push_back(page::Text(Si(d.params, "") + " parameters, " + Si(d.tokens, "") + " tokens (" +
                              Printf("%.3g per parameter), network ", d.tokens / d.params) + sc.network.profile +
                              "; losses from the fitted laws with their 95% prediction intervals, times from the planner."));
  blocks.push_back(page::Table("Predicted loss and wall-clock per entry and number of workers",
                               {"entry", "workers", "loss", "95% interval", "time", "compute", "sent/worker", "frontier"}, rows));
  blocks.push_back(page::LineChart("decision-frontier", "Predicted loss against wall-clock time (each point a number of workers)",
                                   page::Axis("time (s)", true), page::Axis("predicted validation loss"), series));
  json be_rows = json::array(), curves = json::array();
  for (const auto& b : d.break_even) {
    be_rows.push_back({std::to_string(b.workers), b.entry, Si(b.equal_loss_params, ""),
                       std::isinf(b.bandwidth_bps) ? "any bandwidth" : b.bandwidth_bps > 0 ? Si(b.bandwidth_bps, "bit/s") : "never"});
    json ddp_points = json::array(), entry_points = json::array();
    for (const auto& c : b.curve) {
      ddp_points.push_back({c[0], c[1]});
      entry_points.push_back({c[0], c[2]});
    }
    const std::string m = ", M=" + std::to_string(b.workers);
    curves.push_back(page::Series(d.baseline + m, ddp_points, "line"));
    curves.push_back(page::Series(b.entry + " at equal loss" + m, entry_points, "dashed"));
  }
  if (!be_rows.empty()) {
    blocks.push_back(page::Table("Break-even: below this access-link bandwidth the entry reaches " + d.baseline +
                                     "'s predicted loss sooner (at the model size N' its law needs for it)",
                                 {"workers", "entry", "N'", "break-even bandwidth"}, be_rows));
    blocks.push_back(page::LineChart("decision-break-even", "Predicted time to " + d.baseline + "'s loss against bandwidth",
                                     page::Axis("access-link bandwidth (bit/s)", true), page::Axis("time (s)", true), curves));
  }
  for (const auto& n : d.notes) blocks.push_back(page::Text("Note: " + n));
  return {{"title", "narrows decision: " + sc.name}, {"sections", json::array({{{"title", "Decision"}, {"blocks", blocks}}})}};
}

}  // namespace

core::Status DecideScenario(const core::Scenario& sc, const std::string& sweep_dir, const DecideOptions& o) {
  if (sweep_dir.size() > 4 && sweep_dir.compare(sweep_dir.size() - 4, 4, ".csv") == 0) {
    return Status::InvalidArgument("--fit " + sweep_dir + ": plan --fit needs a sweep folder, whose points' scenarios "
                                   "give the entries and the tokens per parameter the decision extrapolates at; a CSV of "
                                   "points holds neither (narrows fit reads it for the laws alone)");
  }
  auto sweep = LoadSweep(sweep_dir);
  if (!sweep.ok()) return sweep.status();
  auto fits = FitSweep(*sweep);
  if (!fits.ok()) return fits.status();
  std::vector<core::AlgorithmSpec> entries;
  std::vector<double> ratios;
  for (const auto& p : sweep->points) {
    if (!p.run || !p.scenario) continue;
    if (entries.empty()) entries = Entries(*p.scenario);
    core::ModelSpec spec = p.scenario->model;
    spec.vocab_size = 256;
    const double n = static_cast<double>(trainer::CostOf(spec).params);
    const double d = static_cast<double>(p.scenario->train.steps * p.scenario->train.batch_size * p.scenario->model.seq_len) *
                     p.scenario->workers.count;
    ratios.push_back(d / n);
  }
  if (ratios.empty()) return Status::InvalidArgument(sweep_dir + ": no finished points to decide on");
  std::sort(ratios.begin(), ratios.end());
  auto d = Decide(sc, *fits, entries, ratios[ratios.size() / 2], o);
  if (!d.ok()) return d.status();
  if (ratios.back() > 1.1 * ratios.front()) {
    d->notes.push_back(Printf("the sweep's points span %.3g-", ratios.front()) +
                       Printf("%.3g tokens per parameter; the decision takes the median", ratios.back()));
  }
  std::printf("decision: %s parameters, %s tokens (%.3g per parameter), network %s; laws from %s\n", Si(d->params, "").c_str(),
              Si(d->tokens, "").c_str(), d->tokens / d->params, sc.network.profile.c_str(), sweep_dir.c_str());
  std::printf("%-20s %7s %8s %19s %10s %8s %12s %s\n", "entry", "workers", "loss", "95% interval", "time", "compute",
              "sent/worker", "frontier");
  for (const auto& r : d->rows) {
    std::printf("%-20s %7d %8.4f %19s %10s %7.0f%% %12s %s\n", r.entry.c_str(), r.workers, r.loss,
                (Printf("%.4f-", r.loss_lo) + Printf("%.4f", r.loss_hi) + (r.extrapolated ? "*" : "")).c_str(), Duration(r.time_s).c_str(),
                100 * r.compute_s / r.time_s, Si(r.bytes_per_worker, "B").c_str(), r.frontier ? "yes" : "");
  }
  for (const auto& b : d->break_even) {
    std::printf("break-even at %d workers: %s reaches %s's loss (as a %s-parameter model) sooner %s\n", b.workers, b.entry.c_str(),
                d->baseline.c_str(), Si(b.equal_loss_params, "").c_str(),
                std::isinf(b.bandwidth_bps) ? "at any bandwidth"
                : b.bandwidth_bps > 0       ? ("below " + Si(b.bandwidth_bps, "bit/s")).c_str()
                                            : "at no bandwidth");
  }
  for (const auto& n : d->notes) std::printf("decision: %s\n", n.c_str());
  if (std::any_of(d->rows.begin(), d->rows.end(), [](const DecisionRow& r) { return r.extrapolated; })) {
    std::printf("decision: * outside the sizes and worker counts the laws were fitted on\n");
  }
  const std::string dir = sc.output.dir + "/" + sc.name;
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(dir));
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(dir + "/decision.json", DecisionJson(sc, *d).dump(2) + "\n"));
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(dir + "/decision.html", RenderReport(DecisionPage(sc, *d))));
  std::printf("decision: %s/decision.json, %s/decision.html\n", dir.c_str(), dir.c_str());
  return Status::Ok();
}

}  // namespace narrows::tools
