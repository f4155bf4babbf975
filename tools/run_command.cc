#include "tools/run_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "core/progress.h"
#include "core/result_record.h"
#include "core/run_writer.h"
#include "emu/engine.h"
#include "emu/network_from_scenario.h"
#include "sim/analytic_model.h"
#include "tools/build_version.h"
#include "tools/format.h"
#include "tools/invariants.h"
#include "tools/plan_command.h"
#include "tools/report_command.h"
#include "tools/run_folders.h"
#include "trainer/algorithms/plugin.h"
#include "trainer/experiment.h"
#include "trainer/warm_start.h"

namespace narrows::tools {

std::vector<core::AlgorithmSpec> Entries(const core::Scenario& sc) {
  std::vector<core::AlgorithmSpec> entries = sc.compare;
  if (entries.empty()) {
    std::string algorithm;
    for (const auto* p : trainer::RegisteredAlgorithms()) {
      if (p->default_entry) algorithm = p->parser.name;
    }
    NARROWS_CHECK(!algorithm.empty()) << "no algorithm plug-in is the default entry";
    auto entry = core::ParseEntry("{algorithm: " + algorithm + "}", sc, "the default entry");
    NARROWS_CHECK(entry.ok()) << entry.status().ToString();
    entries.push_back(*entry);
    entries.back().baseline = true;
  }
  for (auto& e : entries) {
    if (e.collective == core::CollectiveKind::kAuto) e = ChooseCollective(sc, e);
  }
  return entries;
}

nlohmann::json EntryJson(const trainer::EntryResult& r, double host_s) {
  nlohmann::json j = {{"name", r.name},
                      {"algorithm", r.algorithm},
                      {"collective", r.collective},
                      {"workers", r.workers},
                      {"final_val_loss", r.final_val_loss},
                      {"final_val_loss_se", std::isfinite(r.final_val_loss_se) ? nlohmann::json(r.final_val_loss_se)
                                                                               : nlohmann::json()},
                      {"time_s", r.virtual_time_s},
                      {"virtual_time_s", r.virtual_time_s},
                      {"bytes_sent_per_worker", r.bytes_sent_per_worker},
                      {"peak_bytes_per_round", r.peak_bytes_per_round},
                      {"outer_syncs", r.outer_syncs},
                      {"steps", r.steps},
                      {"tokens", r.tokens},
                      {"compute_utilization", r.compute_utilization},
                      {"host_time_s", host_s},
                      {"host_compute_s", r.host_compute_s}};
  if (!r.final_val_loss_by_domain.empty()) {
    nlohmann::json by_domain = nlohmann::json::object();
    for (const auto& [name, loss] : r.final_val_loss_by_domain) by_domain[name] = loss;
    j["final_val_loss_by_domain"] = by_domain;
  }
  if (r.host_step_s > 0) {
    j["host_step_s"] = {{"median", r.host_step_s}, {"p10", r.host_step_s_p10}, {"p90", r.host_step_s_p90},
                        {"flops", r.step_flops}};
  }
  return j;  // the equal-quality figures: AddEqualQuality, over every entry
}

nlohmann::json LinksJson(const sim::NetworkModel& network, double seconds) {
  nlohmann::json links = nlohmann::json::array();
  const sim::LinkCounters* counters = network.counters();
  if (counters == nullptr) return nullptr;
  const auto& topology = network.topology().links();
  for (size_t l = 0; l < topology.size() && l < counters->links().size(); ++l) {
    const auto& c = counters->links()[l];
    const double bytes = c.bits / 8;
    links.push_back({{"link", topology[l].name},
                     {"bandwidth_bps", topology[l].bandwidth_bps},
                     {"packets", c.packets},
                     {"bytes", bytes},
                     {"mean_bps", seconds > 0 ? c.bits / seconds : 0.0},
                     {"utilization", seconds > 0 ? c.bits / seconds / topology[l].bandwidth_bps : 0.0},
                     {"dropped_loss", c.dropped_loss},
                     {"dropped_queue", c.dropped_queue},
                     {"queue_delay_mean_s", c.queued > 0 ? nlohmann::json(c.queue_delay_sum_s / static_cast<double>(c.queued))
                                                         : nlohmann::json()},
                     {"queue_delay_max_s", c.queued > 0 ? nlohmann::json(c.queue_delay_max_s) : nlohmann::json()},
                     {"bits_per_bin", c.bins}});
  }
  return {{"seconds", seconds}, {"bin_s", counters->bin_s()}, {"links", links}};
}

nlohmann::json NetworkSummary(const nlohmann::json& links) {
  const auto& all = links.at("links");
  std::vector<const nlohmann::json*> sorted;
  double bytes = 0, dropped_loss = 0, dropped_queue = 0;
  for (const auto& l : all) {
    sorted.push_back(&l);
    bytes += l.at("bytes").get<double>();
    dropped_loss += l.at("dropped_loss").get<double>();
    dropped_queue += l.at("dropped_queue").get<double>();
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const nlohmann::json* a, const nlohmann::json* b) {
    return a->at("utilization").get<double>() > b->at("utilization").get<double>();
  });
  nlohmann::json busiest = nlohmann::json::array();
  for (size_t i = 0; i < sorted.size() && i < 5; ++i) {
    const nlohmann::json& l = *sorted[i];
    busiest.push_back({{"link", l.at("link")},
                       {"utilization", l.at("utilization")},
                       {"bytes", l.at("bytes")},
                       {"dropped_loss", l.at("dropped_loss")},
                       {"dropped_queue", l.at("dropped_queue")},
                       {"queue_delay_mean_s", l.at("queue_delay_mean_s")}});
  }
  return {{"link_bytes", bytes},
          {"dropped_loss", dropped_loss},
          {"dropped_queue", dropped_queue},
          {"links", all.size()},
          {"busiest_links", busiest}};
}

namespace {

// Bits a link's histogram holds in [from, to): whole bins, and the overlapped share of partial ones.
double BitsBetween(const nlohmann::json& bins, double bin_s, double from, double to) {
  double bits = 0;
  if (!(to > from) || !(bin_s > 0)) return 0;
  const auto first = static_cast<size_t>(std::max(0.0, from / bin_s));
  for (size_t i = first; i < bins.size(); ++i) {
    const double lo = static_cast<double>(i) * bin_s, hi = lo + bin_s;
    if (lo >= to) break;
    const double overlap = std::min(hi, to) - std::max(lo, from);
    if (overlap > 0) bits += bins[i].get<double>() * overlap / bin_s;
  }
  return bits;
}

}  // namespace

core::Status AddNetworkToMetrics(const std::string& metrics_path, const nlohmann::json& links) {
  std::ifstream in(metrics_path);
  if (!in) return core::Status::Ok();  // nothing recorded
  const double bin_s = links.at("bin_s").get<double>();
  const auto& all = links.at("links");
  std::string out;
  double previous = 0;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json m;
    try {
      m = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      out += line + "\n";  // a torn line stays as it was
      continue;
    }
    if (!m.is_object() || !m.contains("virtual_time_s")) {
      out += line + "\n";
      continue;
    }
    const double now = m["virtual_time_s"].get<double>(), span = now - previous;
    double bytes = 0, utilization_sum = 0, busiest = -1;
    int counted = 0;
    std::string busiest_link;
    for (const auto& l : all) {
      const double bits = BitsBetween(l.at("bits_per_bin"), bin_s, previous, now);
      bytes += bits / 8;
      const double bandwidth = l.at("bandwidth_bps").get<double>();
      if (!(bandwidth > 0) || !(span > 0)) continue;
      const double u = bits / span / bandwidth;
      utilization_sum += u;
      ++counted;
      if (u > busiest) {
        busiest = u;
        busiest_link = l.at("link").get<std::string>();
      }
    }
    nlohmann::json network = {{"link_bytes", bytes}};
    if (counted > 0) {
      network["mean_utilization"] = utilization_sum / counted;
      network["busiest_link"] = busiest_link;
      network["busiest_utilization"] = busiest;
    }
    m["network"] = network;
    out += m.dump() + "\n";
    previous = now;
  }
  return core::WriteFileAtomic(metrics_path, out);
}

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
// already below); {-1, -1} if none reaches it.
std::pair<double, double> Reach(const std::vector<Evaluation>& evals, double target) {
  for (size_t i = 0; i < evals.size(); ++i) {
    const Evaluation& e = evals[i];
    if (e.val_loss > target) continue;
    if (i == 0 || e.val_loss == target) return {e.time_s, e.bytes};
    const Evaluation& before = evals[i - 1];
    const double f = (before.val_loss - target) / (before.val_loss - e.val_loss);
    return {before.time_s + f * (e.time_s - before.time_s), before.bytes + f * (e.bytes - before.bytes)};
  }
  return {-1.0, -1.0};
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
  const auto [first_time, first_bytes] = b < results.size() && !results[b].value("diverged", false)
                                             ? Reach(entry_evals[b], target)
                                             : std::pair{-1.0, -1.0};
  for (size_t i = 0; i < results.size(); ++i) {
    auto& r = results[i];
    // A diverged entry never reaches the target, whatever it passed on the way.
    const auto [time, bytes] = r.value("diverged", false) ? std::pair{-1.0, -1.0} : Reach(entry_evals[i], target);
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

namespace {

// The corpus's domains and their sizes, on one line.
void PrintDomains(const trainer::Dataset& data, std::FILE* out) {
  std::fprintf(out, "data: %.1fM tokens in %zu domains:", static_cast<double>(data.corpus.num_tokens()) / 1e6,
               data.corpus.domains().size());
  for (const auto& d : trainer::DomainSizes(data)) {
    std::fprintf(out, " %s %.2fM (%.2fM validation)", d.name.c_str(), static_cast<double>(d.tokens) / 1e6,
                 static_cast<double>(d.val_tokens) / 1e6);
  }
  std::fprintf(out, "\n");
}

}  // namespace

std::string WhyNotRetimed(const core::Scenario& sc, const core::AlgorithmSpec& entry, const std::string& from,
                          std::string* trained) {
  if (sc.compute.mode != core::ComputeMode::kModelled) return "its compute is measured (compute.mode: modelled re-times)";
  const trainer::AlgorithmPlugin* plugin = trainer::FindAlgorithm(entry.algorithm);
  if (plugin == nullptr || !plugin->retime) return entry.algorithm + " cannot be re-timed";
  if (std::string why = plugin->retime(entry); !why.empty()) return why;
  auto there = ReadText(from + "/scenario.yaml");
  if (!there.ok()) return "no scenario in " + from;
  const auto a = core::ResultKeys(*there), b = core::ResultKeys(sc.resolved_yaml);
  for (const auto& [key, value] : b) {
    const auto it = a.find(key);
    if ((it == a.end() || it->second != value) && key.rfind("network.", 0) != 0) return key + " differs from " + from + "'s";
  }
  for (const auto& [key, value] : a) {
    if (b.count(key) == 0 && key.rfind("network.", 0) != 0) return key + " differs from " + from + "'s";
  }
  auto record = ReadText(from + "/" + entry.name + "/trained.json");
  if (!record.ok()) return "no training record in " + from + "/" + entry.name;
  *trained = std::move(*record);
  return "";
}

core::Result<nlohmann::json> RunOneSeed(const core::Scenario& sc, const RunOptions& options) {
  auto data = trainer::LoadDataset(sc, options.data_root);
  if (!data.ok()) return data.status();
  if (options.progress != nullptr && (*data)->corpus.domains().size() > 1) PrintDomains(**data, options.progress);
  const std::vector<core::AlgorithmSpec> entries = Entries(sc);
  auto make = [&](const core::AlgorithmSpec& entry, bool timing_only) -> core::Result<std::unique_ptr<trainer::Experiment>> {
    trainer::ExperimentOptions eo;
    eo.timing_only = timing_only;
    if (!options.replay.empty()) {
      const auto trace = options.replay.find(entry.name);
      if (trace == options.replay.end()) return core::Status::InvalidArgument(entry.name + ": no membership trace to replay");
      eo.membership = trainer::Membership::kReplay;
      eo.trace = trace->second;
    }
    return trainer::Experiment::Create(sc, entry, *data, eo);
  };
  std::vector<std::unique_ptr<trainer::Experiment>> experiments;
  std::vector<std::string> trained(entries.size());  // the training record each re-timed entry takes
  std::vector<std::string> not_retimed(entries.size());  // why an entry trains although asked to re-time
  for (size_t i = 0; i < entries.size(); ++i) {
    bool retime = false;
    if (!options.retime_from.empty()) {
      not_retimed[i] = options.replay.empty() ? WhyNotRetimed(sc, entries[i], options.retime_from, &trained[i])
                                              : "a replay follows a deployment's membership";
      retime = not_retimed[i].empty();
      if (!retime && options.progress != nullptr) {
        std::fprintf(options.progress, "%s: trained, not re-timed from %s: %s\n", entries[i].name.c_str(),
                     options.retime_from.c_str(), not_retimed[i].c_str());
      }
    }
    auto e = make(entries[i], retime);
    if (!e.ok()) return e.status();
    experiments.push_back(std::move(e).value());
  }
  // Inputs are valid: from here on the run folder is ours.
  const std::string run_dir = sc.output.dir + "/" + sc.name;
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(run_dir));
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/scenario.yaml", sc.resolved_yaml));
  std::string warm_start;
  if (sc.warm_start.enabled()) {
    const std::string cache = options.warm_start_dir.empty() ? sc.output.dir + "/warm_start" : options.warm_start_dir;
    auto path = trainer::PrepareWarmStart(sc, **data, cache, options.progress);
    if (!path.ok()) return path.status();
    warm_start = *path;
    for (auto& e : experiments) NARROWS_RETURN_IF_ERROR(e->SetWarmStart(warm_start));
  }

  nlohmann::json results = nlohmann::json::array(), summary = {{"results", nlohmann::json::array()}};
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string entry_dir = run_dir + "/" + entries[i].name;
    const bool timed = !trained[i].empty();
    const std::string label = "[" + std::to_string(i + 1) + "/" + std::to_string(entries.size()) + "] " +
                              entries[i].name + (timed ? " re-timed, step" : " step");
    core::Progress progress(label, sc.train.steps, options.progress);
    experiments[i]->SetProgress([&progress, timed](int64_t steps, double virtual_s, double loss) {
      char detail[96];
      if (timed) {  // a timed run's losses are not the training's until it takes them
        std::snprintf(detail, sizeof detail, "virtual %.1f s", virtual_s);
      } else {
        std::snprintf(detail, sizeof detail, "virtual %.1f s | loss %.3f", virtual_s, loss);
      }
      progress.Update(steps, detail);
    });
    std::unique_ptr<emu::Engine> engine;
    const auto start = std::chrono::steady_clock::now();
    auto run = [&] {
      engine = std::make_unique<emu::Engine>(sc.workers.count, emu::NetworkFromScenario(sc));
      engine->SetStallTimeout(sc.network.stall_timeout_s);
      engine->Run([&](int rank) { experiments[i]->RunWorker(rank, engine->endpoint(rank)); });
    };
    run();
    if (timed && experiments[i]->status().ok()) {
      const core::Status adopted = experiments[i]->AdoptTraining(trained[i]);
      if (!adopted.ok()) {
        // What it did differed from the training: its losses would not be its own. Train it.
        if (options.progress != nullptr) {
          std::fprintf(options.progress, "\n%s: trained after all: %s\n", entries[i].name.c_str(), adopted.message().c_str());
        }
        auto e = make(entries[i], false);
        if (!e.ok()) return e.status();
        experiments[i] = std::move(e).value();
        if (!warm_start.empty()) NARROWS_RETURN_IF_ERROR(experiments[i]->SetWarmStart(warm_start));
        trained[i].clear();
        not_retimed[i] = adopted.message();
        run();
      }
    }
    const bool retimed = !trained[i].empty();
    const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options.keep_training && !retimed && experiments[i]->status().ok()) {
      NARROWS_RETURN_IF_ERROR(core::MakeDirs(entry_dir));
      NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(entry_dir + "/trained.json", experiments[i]->ExportPart() + "\n"));
    }
    auto r = experiments[i]->Finish(entry_dir);
    double seconds = r.ok() ? r->virtual_time_s : 0.0;
    if (!r.ok()) {  // what the links carried until the failure is kept, to diagnose it
      for (int w = 0; w < sc.workers.count; ++w) seconds = std::max(seconds, engine->clock_of(w));
    }
    const nlohmann::json links = LinksJson(engine->network(), seconds);
    if (!links.is_null()) {
      NARROWS_RETURN_IF_ERROR(core::MakeDirs(entry_dir));
      NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(entry_dir + "/links.json", links.dump() + "\n"));
      if (r.ok()) NARROWS_RETURN_IF_ERROR(AddNetworkToMetrics(entry_dir + "/metrics.jsonl", links));
    }
    if (!r.ok()) return r.status();
    char detail[128];
    std::snprintf(detail, sizeof detail, "val loss %.4f | %.1f s virtual | %.1f s on this host", r->final_val_loss,
                  r->virtual_time_s, host_s);
    progress.Finish(detail);
    results.push_back(EntryJson(*r, host_s));
    if (retimed) results.back()["retimed_from"] = options.retime_from;
    if (!not_retimed[i].empty()) results.back()["not_retimed"] = not_retimed[i];
    if (!links.is_null()) results.back()["network"] = NetworkSummary(links);
    // Rewritten after every entry, so a long comparison keeps what it finished.
    auto written = WriteSummary(sc, run_dir, results, "virtual", false);
    if (!written.ok()) return written.status();
    summary = *written;
  }
  NARROWS_RETURN_IF_ERROR(CheckFigures(summary, run_dir));
  return summary;
}

core::Status RunScenario(const core::Scenario& sc, const RunOptions& given) {
  RunOptions options = given;
  if (options.warm_start_dir.empty()) options.warm_start_dir = sc.output.dir + "/warm_start";
  const std::string run_dir = sc.output.dir + "/" + sc.name;
  auto use = ClaimResultFolder(run_dir, sc.resolved_yaml, options.existing, "run folder", {}, "virtual");
  if (!use.ok()) return use.status();
  const auto before = *use == FolderUse::kSame
                          ? FinishedSummary(run_dir, Entries(sc).size(), static_cast<size_t>(sc.seeds))
                          : std::nullopt;
  if (before) {
    std::printf("%s: finished before with this scenario (digest %s); its results, not run again (--force runs "
                "it again):\n",
                run_dir.c_str(), core::ResultDigest(sc.resolved_yaml).c_str());
    if (sc.seeds == 1) {
      PrintComparison(*before);
    } else {
      PrintSeeds(*before);
    }
  } else if (sc.seeds == 1) {
    auto summary = RunOneSeed(sc, options);
    if (!summary.ok()) return summary.status();
    PrintComparison(*summary);
  } else {
    auto summary = RunSeeds(sc, options);
    if (!summary.ok()) return summary.status();
    PrintSeeds(*summary);
  }
  std::printf("results: %s/summary.json\n", run_dir.c_str());
  if (!options.report) {
    std::printf("charts: narrows report %s (or run with --report)\n", run_dir.c_str());
    return core::Status::Ok();
  }
  auto path = WriteReport({run_dir}, "");
  if (!path.ok()) return path.status();
  std::printf("report: %s\n", path->c_str());
  return core::Status::Ok();
}

}  // namespace narrows::tools
