// summary.json of `narrows run` (tools/cli/run_command.h): the entries' evaluations read back, the
// comparison at equal quality, each curve's stability, this host beside the run, and the network
// model's measured error; written after every entry.
#include "tools/cli/run_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/result_record.h"
#include "core/run_writer.h"
#include "sim/analytic_model.h"
#include "tools/cli/build_version.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/run_folders.h"
#include "trainer/experiment.h"

namespace narrows::tools {

std::vector<Evaluation> Evaluations(const std::string& metrics_path) {
  std::vector<Evaluation> out;
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) {
    try {
      const auto m = nlohmann::json::parse(line);
      if (!m.contains("val_loss")) continue;
      const double t = m.contains("virtual_time_s") ? m["virtual_time_s"].get<double>() : m.value("wall_time_s", 0.0);
      out.push_back({t, m["val_loss"].get<double>(), m.value("bytes_sent", 0.0)});
    } catch (const std::exception&) {
      // A torn last line of an interrupted run: the evaluations before it stand.
    }
  }
  return out;
}

double LossAt(const std::vector<Evaluation>& evals, double time_s) {
  if (evals.empty()) return std::nan("");
  if (time_s <= evals.front().time_s) return evals.front().val_loss;
  for (size_t i = 1; i < evals.size(); ++i) {
    if (evals[i].time_s < time_s) continue;
    const Evaluation &a = evals[i - 1], &b = evals[i];
    const double f = b.time_s > a.time_s ? (time_s - a.time_s) / (b.time_s - a.time_s) : 1.0;
    return a.val_loss + f * (b.val_loss - a.val_loss);
  }
  return evals.back().val_loss;
}

namespace {

// Time and bytes at which `evals` first reach `target`: linearly interpolated between the last
// evaluation above it and the first at or below it (exact when one equals it or the first is
// already below: then `first`, and the time is only a bound); {-1, -1} if none reaches it.
struct Reached {
  double time_s = -1.0, bytes = -1.0;
  bool first = false;
};
Reached Reach(const std::vector<Evaluation>& evals, double target) {
  for (size_t i = 0; i < evals.size(); ++i) {
    const Evaluation& e = evals[i];
    if (e.val_loss > target) continue;
    if (i == 0 || e.val_loss == target) return {e.time_s, e.bytes, i == 0 && e.val_loss < target};
    const Evaluation& before = evals[i - 1];
    const double f = (before.val_loss - target) / (before.val_loss - e.val_loss);
    return {before.time_s + f * (e.time_s - before.time_s), before.bytes + f * (e.bytes - before.bytes), false};
  }
  return {};
}

// Each result's evaluations, from its metrics.jsonl under `run_dir`, in the results' order.
std::vector<std::vector<Evaluation>> EntryEvaluations(const std::string& run_dir, const nlohmann::json& results) {
  std::vector<std::vector<Evaluation>> out;
  for (const auto& r : results) out.push_back(Evaluations(run_dir + "/" + r.value("name", std::string()) + "/metrics.jsonl"));
  return out;
}

// AddEqualQuality from the entries' evaluations (EntryEvaluations).
void AddEqualQualityOf(const core::Scenario& sc, const std::vector<std::vector<Evaluation>>& entry_evals,
                       nlohmann::json* summary) {
  auto& results = (*summary)["results"];
  if (results.empty()) return;
  double target = sc.target_loss;
  std::string source = "scenario";
  if (target <= 0) {
    // The worst final loss among the entries that learned: one that diverged (its final loss is
    // worse than predicting every token uniformly, or 50% above its first evaluation) would make
    // almost any loss a target; it is reported as never reaching it.
    source = "worst final loss";
    for (size_t i = 0; i < results.size(); ++i) {
      auto& r = results[i];
      const auto& evals = entry_evals[i];
      const double final_loss = r.value("final_val_loss", 0.0);
      const double uniform = sc.model.vocab_size > 0 ? std::log(static_cast<double>(sc.model.vocab_size)) : 1e300;
      const bool diverged = !std::isfinite(final_loss) || final_loss > uniform ||
                            (!evals.empty() && final_loss > 1.5 * evals.front().val_loss);
      if (diverged) {
        r["diverged"] = true;
        source = "worst final loss of the entries that did not diverge";
      } else {
        target = std::max(target, final_loss);
      }
    }
    if (target <= 0) {  // every entry diverged
      source = "worst final loss";
      for (const auto& r : results) target = std::max(target, r.value("final_val_loss", 0.0));
    }
  }
  (*summary)["target_loss"] = target;
  (*summary)["target_source"] = source;
  (*summary)["eval_every"] = sc.eval.every;
  // Relative to the baseline's.
  const size_t b = BaselineIndex(results);
  const Reached base = b < results.size() && !results[b].value("diverged", false) ? Reach(entry_evals[b], target) : Reached{};
  const double first_time = base.time_s, first_bytes = base.bytes;
  for (size_t i = 0; i < results.size(); ++i) {
    auto& r = results[i];
    // A diverged entry never reaches the target, whatever it passed on the way.
    const Reached reached = r.value("diverged", false) ? Reached{} : Reach(entry_evals[i], target);
    const double time = reached.time_s, bytes = reached.bytes;
    // Below the target at its first evaluation: it got there sooner, by an unknown margin.
    if (reached.first) r["target_at_first_evaluation"] = true;
    r["time_to_target_s"] = time >= 0 ? nlohmann::json(time) : nlohmann::json();
    r["bytes_to_target"] = bytes >= 0 ? nlohmann::json(bytes) : nlohmann::json();
    r["speedup_at_target"] = time > 0 && first_time > 0 ? nlohmann::json(first_time / time) : nlohmann::json();
    r["bytes_saved_at_target"] = bytes > 0 && first_bytes > 0 ? nlohmann::json(first_bytes / bytes) : nlohmann::json();
  }
}

}  // namespace

void AddEqualQuality(const core::Scenario& sc, const std::string& run_dir, nlohmann::json* summary) {
  AddEqualQualityOf(sc, EntryEvaluations(run_dir, (*summary)["results"]), summary);
}

std::optional<nlohmann::json> FinishedSummary(const std::string& run_dir, size_t entries, size_t seeds) {
  std::ifstream in(run_dir + "/summary.json");
  if (!in) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(in);
    const size_t has = j.contains("seeds") ? j.at("seeds").size() : 1;
    if (j.at("results").size() == entries && has == seeds) return j;
  } catch (const std::exception&) {
    // A torn summary: the run is not finished.
  }
  return std::nullopt;
}

// This host beside the run: a worker's step as measured here (the entry with the median of the
// entries' median steps, and its 10th and 90th percentiles) and the FLOP rate that makes; where
// compute is modelled, the planner's speed-up over the baseline at this host's rate and at the
// modelled one, so a table computed at a fixed rate says what it would be on this machine.
void AddHost(const core::Scenario& sc, nlohmann::json* summary) {
  std::vector<nlohmann::json> measured;
  for (const auto& r : summary->at("results")) {
    if (r.contains("host_step_s")) measured.push_back(r["host_step_s"]);
  }
  if (measured.empty()) return;
  std::sort(measured.begin(), measured.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.at("median").get<double>() < b.at("median").get<double>();
  });
  const nlohmann::json& m = measured[measured.size() / 2];
  const double step = m.at("median"), rate = m.at("flops").get<double>() / step;
  nlohmann::json host = {{"step_s", step}, {"step_s_p10", m.at("p10")}, {"step_s_p90", m.at("p90")}, {"flops_per_s", rate}};
  if (sc.compute.mode == core::ComputeMode::kModelled) {
    host["modelled_flops_per_s"] = sc.compute.device_flops;
    // The planner on the analytic model: a ratio of two predictions needs no packets, and ns-3's
    // simulator is one per process (the run's own may still be alive).
    const core::Scenario analytic = core::WithNetworkModel(sc, "analytic");
    auto times = [&analytic](double flops) {
      PlanOptions o;
      o.flops = flops;
      o.bandwidths = false;
      std::map<std::string, double> out;
      auto plan = MakePlan(analytic, o);
      if (plan.ok()) {
        for (const auto& row : plan->rows) out.emplace(row.name, row.time_s);
      }
      return out;
    };
    const auto here = times(rate), modelled = times(sc.compute.device_flops);
    const auto& results = summary->at("results");
    const size_t b = BaselineIndex(results);
    const std::string first = results[b].value("name", std::string());
    nlohmann::json planned = nlohmann::json::object();
    // The planner's error against this run at the modelled rate: a figure scaled by the planner is
    // given only where it predicted both entries' times within kPlannerTrusted.
    constexpr double kPlannerTrusted = 0.05;
    auto planner_error = [&](size_t i) {
      const std::string name = results[i].value("name", std::string());
      const double emulated = results[i].value("time_s", 0.0);
      return modelled.count(name) && emulated > 0 ? modelled.at(name) / emulated - 1 : NAN;
    };
    nlohmann::json errors = nlohmann::json::object();
    for (size_t i = 0; i < results.size(); ++i) {
      const double e = planner_error(i);
      errors[results[i].value("name", std::string())] = std::isfinite(e) ? nlohmann::json(e) : nlohmann::json();
    }
    host["planner_error"] = errors;
    host["planner_trusted_within"] = kPlannerTrusted;
    for (size_t i = 0; i < results.size(); ++i) {
      if (i == b) continue;
      const std::string name = results[i].value("name", std::string());
      if (!here.count(first) || !here.count(name) || !modelled.count(first) || !modelled.count(name)) continue;
      const double at_host = here.at(first) / here.at(name), at_modelled = modelled.at(first) / modelled.at(name);
      // The emulated speed-up, scaled by how the planner's changes from the modelled rate to this host's.
      const double emulated = results[b].value("time_s", 0.0) / results[i].value("time_s", 1.0);
      nlohmann::json p = {{"host", at_host}, {"modelled", at_modelled}, {"emulated", emulated}};
      const double e0 = planner_error(b), ei = planner_error(i);
      if (std::fabs(e0) <= kPlannerTrusted && std::fabs(ei) <= kPlannerTrusted) {
        p["implied_here"] = emulated * at_host / at_modelled;
      }
      planned[name] = p;
    }
    host["planned_speedup"] = planned;
  }
  (*summary)["host"] = host;
}

namespace {

// The first instability of an entry's evaluations: {"kind": "rise"|"stall", "from_s", "to_s",
// "change"} (change: relative, over the span), or null.
nlohmann::json Instability(const std::vector<Evaluation>& evals) {
  for (size_t i = 1; i < evals.size(); ++i) {
    const double before = evals[i - 1].val_loss, after = evals[i].val_loss;
    if (before > 0 && after > before * (1 + kRiseFraction)) {
      return {{"kind", "rise"}, {"from_s", evals[i - 1].time_s}, {"to_s", evals[i].time_s}, {"change", after / before - 1}};
    }
  }
  for (size_t i = 0; i + kStallEvaluations < evals.size(); ++i) {
    bool stalled = true;
    for (int k = 0; k < kStallEvaluations; ++k) {
      const double a = evals[i + k].val_loss, b = evals[i + k + 1].val_loss;
      stalled = stalled && a > 0 && b > a * (1 - kStallFraction);
    }
    const double at = evals[i + kStallEvaluations].val_loss;
    if (stalled && evals.back().val_loss < at * (1 - kStallRecovery)) {
      return {{"kind", "stall"}, {"from_s", evals[i].time_s}, {"to_s", evals[i + kStallEvaluations].time_s},
              {"change", at / evals[i].val_loss - 1}};
    }
  }
  return nullptr;
}

// Each entry's `instability` (Instability), and the summary's `settings`: the shared learning rate
// and warm-up, untuned unless `narrows tune` chose them (it marks its summaries itself).
void AddStability(const core::Scenario& sc, const std::vector<std::vector<Evaluation>>& entry_evals,
                  nlohmann::json* summary) {
  auto& results = (*summary)["results"];
  for (size_t i = 0; i < results.size(); ++i) {
    const nlohmann::json unstable = Instability(entry_evals[i]);
    if (!unstable.is_null()) results[i]["instability"] = unstable;
  }
  (*summary)["settings"] = {{"lr", sc.train.lr}, {"warmup_steps", sc.train.warmup_steps}, {"tuned", false}};
}

}  // namespace

// The emulator's network model, and how far its predictions were measured from real runs of real
// TCP through the link emulator (tools/bench/fidelity --linkemu; docs/results/fidelity.md): each
// step's time over the four loss-free networks (home-100m, near-100m, shallow-100m, shallow-1g;
// DDP and DiLoCo), mean and max of the relative error. The table's footer states it.
nlohmann::json NetworkModelError(const core::Scenario& sc) {
  nlohmann::json out = {{"model", sc.network.model}, {"measured", "docs/results/fidelity.md"}};
  if (sc.network.model == "analytic") {
    const auto [window, acks] = sim::AnalyticFeaturesOf(sc);
    const bool host = sc.compute.host_bytes_per_s > 0.0;
    if (!window) {
      out["variant"] = "as flows (no TCP window, ACKs or hosts' work)";
      out["mean_error"] = 0.253;
      out["max_error"] = 0.588;
      out["better"] = "network.analytic.slow_start and .acks: true with compute.host_bytes_per_s: 4.5%";
    } else if (acks && host) {
      out["variant"] = "TCP window, ACKs and the hosts' work";
      out["mean_error"] = 0.045;
      out["max_error"] = 0.102;
    } else {
      out["variant"] = std::string("TCP window without ") + (acks ? "the hosts' work" : host ? "ACKs" : "ACKs or the hosts' work") +
                       " (measured with both: 4.5% mean error)";
    }
  } else if (sc.network.model == "ns3" && core::ResultKeys(sc.resolved_yaml)["network.ns3.host_qdisc"] == "drop_tail") {
    out["variant"] = "drop-tail queues at the hosts";
    out["mean_error"] = 0.030;
    out["max_error"] = 0.074;
  }
  return out;
}

core::Result<nlohmann::json> WriteSummary(const core::Scenario& sc, const std::string& run_dir,
                                          const nlohmann::json& results, const std::string& clock, bool keep_others) {
  nlohmann::json merged = nlohmann::json::array();
  std::ifstream in(run_dir + "/summary.json");
  if (keep_others && in) {
    try {
      const auto old = nlohmann::json::parse(in);
      for (const auto& e : old.at("results")) {
        bool repeated = false;
        for (const auto& n : results) repeated = repeated || n.at("name") == e.at("name");
        if (!repeated) merged.push_back(e);
      }
    } catch (const std::exception&) {
      // An unreadable earlier summary is replaced.
    }
  }
  for (const auto& r : results) {
    nlohmann::json e = r;
    if (clock == "wall") {
      e["wall_time_s"] = e["virtual_time_s"];
      e.erase("virtual_time_s");
    }
    merged.push_back(e);
  }
  // The baseline entry (the first unless one says baseline: true; the default entry alone).
  std::string baseline;
  for (const auto& a : sc.compare.empty() ? Entries(sc) : sc.compare) {
    if (a.baseline) baseline = a.name;
  }
  for (auto& e : merged) e["baseline"] = e.value("name", std::string()) == baseline;
  nlohmann::json summary = {{"scenario", sc.name}, {"scenario_digest", core::ResultDigest(sc.resolved_yaml)},
                            {"clock", clock}, {"narrows", BuildVersion()}, {"results", merged}};
  if (clock == "virtual") summary["network_model"] = NetworkModelError(sc);
  if (!sc.model.torchscript.empty()) {
    // A module of the user's: its size and FLOPs per token, and where those come from.
    const trainer::ModelCost cost = trainer::CostOf(sc.model);
    summary["model"] = {{"torchscript", sc.model.torchscript}, {"parameters", cost.params},
                        {"flops_per_token", cost.train_flops_per_token}, {"flops_per_token_from", cost.flops_source}};
  }
  const auto entry_evals = EntryEvaluations(run_dir, summary["results"]);  // read once, for both
  AddEqualQualityOf(sc, entry_evals, &summary);
  AddStability(sc, entry_evals, &summary);
  AddHost(sc, &summary);
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/summary.json", summary.dump(2) + "\n"));
  return summary;
}

}  // namespace narrows::tools
