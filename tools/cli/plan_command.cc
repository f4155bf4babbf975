#include "tools/cli/plan_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "core/run_writer.h"
#include "emu/network_from_scenario.h"
#include "sim/network_model.h"
#include "tools/cli/format.h"
#include "tools/cli/plan_predict.h"
#include "tools/cli/run_folders.h"
#include "tools/cli/run_command.h"
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

}  // namespace

// The entry's rows (its plug-in's prediction); none if its algorithm predicts nothing.
std::vector<trainer::PlanRow> Predict(const core::Scenario& sc, const core::AlgorithmSpec& a, const Workload& w,
                                      double flops) {
  const trainer::AlgorithmPlugin* plugin = trainer::FindAlgorithm(a.algorithm);
  if (plugin == nullptr || !plugin->plan) return {};
  std::vector<trainer::PlanRow> rows = plugin->plan(MakeInputs(sc, w, flops), a);
  if (!rows.empty() && rows.front().name.empty()) rows.front().name = a.name;
  return rows;
}

// The scenario with every link's bandwidth multiplied by `k`.
core::Scenario ScaledBandwidth(core::Scenario sc, double k) {
  sc.network.link.bandwidth_bps *= k;
  sc.network.intra.bandwidth_bps *= k;
  for (auto& o : sc.network.overrides) o.link.bandwidth_bps *= k;
  for (auto& c : sc.network.schedule) c.bandwidth_bps *= k;
  return core::WithNetworkModel(std::move(sc), "analytic");
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

namespace {

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
  const std::string dir = o.output.empty() ? sc.output.dir + "/" + sc.name : o.output;
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
