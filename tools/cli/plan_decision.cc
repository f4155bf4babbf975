// `narrows plan SCENARIO --fit SWEEP` (tools/cli/plan_command.h): the decision between entries from
// the laws fitted on a sweep and the planner's times: its rows and frontier, the break-even
// bandwidths, and their table, decision.json and decision.html.
#include "tools/cli/plan_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include "core/run_writer.h"
#include "tools/cli/format.h"
#include "tools/cli/plan_predict.h"
#include "tools/cli/report_blocks.h"
#include "tools/cli/report_command.h"
#include "tools/cli/run_command.h"
#include "tools/cli/run_folders.h"
#include "trainer/experiment.h"

namespace narrows::tools {
namespace {

using core::Status;
using trainer::Workload;

// The scenario's network and settings with `m` workers of speed 1 (per-worker links beyond them
// dropped).
core::Scenario WithWorkers(core::Scenario sc, int m) {
  sc.workers.count = m;
  sc.workers.speed.assign(static_cast<size_t>(m), 1.0);
  auto& o = sc.network.overrides;
  o.erase(std::remove_if(o.begin(), o.end(), [m](const core::NetworkSpec::Override& v) { return v.worker >= m; }), o.end());
  return sc;
}

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

// A law that does not vary with M holds at its one M alone.
bool LawHolds(const EntryFit& f, int m) { return f.fit.uses_workers || std::abs(f.fit.workers_min - m) < 0.5; }

// What the decision's steps share: the scenario, the sweep's fits and their entries by name, and a
// worker's FLOP/s.
struct DecisionInputs {
  const core::Scenario& sc;
  const std::vector<EntryFit>& fits;
  std::map<std::string, core::AlgorithmSpec> spec_of;
  double flops = 0;
};

// N: the scenario's model (byte-level vocabulary) or --params.
core::Result<double> DecisionParams(const core::Scenario& sc, const DecideOptions& o) {
  if (o.params.empty()) {
    core::ModelSpec spec = sc.model;
    spec.vocab_size = 256;
    return static_cast<double>(trainer::CostOf(spec).params);
  }
  return ParamCount(o.params);
}

// A row per fitted entry and number of workers where its law holds: the law's loss with its
// interval, and the planner's time (no row where the entry's algorithm has no cost model).
Status AddRows(const DecisionInputs& in, const std::vector<int>& workers, Decision* out) {
  for (int m : workers) {
    if (m < 1) return Status::InvalidArgument("plan --fit: --workers: expected counts of at least 1, got " + std::to_string(m));
    const core::Scenario at_m = WithWorkers(in.sc, m);
    for (const auto& f : in.fits) {
      if (!f.skipped.empty() || !in.spec_of.count(f.entry) || !LawHolds(f, m)) continue;
      const core::AlgorithmSpec& a = in.spec_of.at(f.entry);
      DecisionRow r;
      r.entry = f.entry;
      r.algorithm = a.algorithm;
      r.workers = m;
      r.loss = f.fit.Predict(out->params, m);
      const auto iv = f.fit.PredictionInterval(out->params, m);
      r.loss_lo = iv.lo;
      r.loss_hi = iv.hi;
      r.extrapolated = !f.fit.Covers(out->params, m);
      const trainer::PlanRow t = TimeOf(at_m, a, SizedWorkload(in.sc, out->params, out->tokens, m), in.flops);
      r.time_s = t.time_s;
      r.compute_s = t.compute_s;
      r.bytes_per_worker = t.bytes_per_worker;
      if (std::isnan(r.time_s)) continue;  // no cost model
      out->rows.push_back(r);
    }
  }
  return Status::Ok();
}

// The frontier: the rows no other row beats in both time and loss.
void MarkFrontier(std::vector<DecisionRow>* rows) {
  for (auto& r : *rows) {
    r.frontier = std::none_of(rows->begin(), rows->end(), [&](const DecisionRow& q) {
      return q.time_s <= r.time_s && q.loss <= r.loss && (q.time_s < r.time_s || q.loss < r.loss);
    });
  }
}

// `b`'s curve and break-even bandwidth: `gap(k)` gives the baseline's time and the entry's at the
// bandwidth times k; the entry is sooner below the bandwidth where the baseline stops being slower.
void ScanBandwidths(const std::function<std::array<double, 2>(double)>& gap, double base, BreakEven* b) {
  // From 1/1000 to 1000 times the scenario's bandwidth, 10 points a decade.
  double crossing = NAN;
  bool ahead_low = false, ahead_everywhere = true;
  double prev_k = 0, prev_gap = 0;
  for (int i = -30; i <= 30; ++i) {
    const double k = std::pow(10.0, i / 10.0);
    const auto t = gap(k);
    b->curve.push_back({base * k, t[0], t[1]});
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
  b->bandwidth_bps = ahead_everywhere ? INFINITY : (ahead_low && !std::isnan(crossing) ? crossing : 0.0);
}

// At `m` workers, the entry with the highest break-even bandwidth against the baseline `ddp`, each
// entry at the size N' its law needs for the baseline's loss (bandwidth -1: no entry's law reaches it).
BreakEven BestBreakEven(const DecisionInputs& in, const EntryFit& ddp, int m, const Decision& d) {
  const double ratio = d.tokens / d.params;
  const core::Scenario at_m = WithWorkers(in.sc, m);
  const double target = ddp.fit.Predict(d.params, m);
  const Workload ddp_w = SizedWorkload(in.sc, d.params, d.tokens, m);
  BreakEven best;
  best.workers = m;
  best.bandwidth_bps = -1;
  for (const auto& f : in.fits) {
    if (&f == &ddp || !f.skipped.empty() || !in.spec_of.count(f.entry) || !LawHolds(f, m)) continue;
    if (!f.fit.uses_params || !(f.fit.alpha < 0)) continue;  // no size reaches another loss
    const double scale = f.fit.a * (f.fit.uses_workers ? std::pow(m, f.fit.beta) : 1.0);
    const double n_equal = std::pow(target / scale, 1.0 / f.fit.alpha);
    const Workload w = SizedWorkload(in.sc, n_equal, ratio * n_equal, m);
    const core::AlgorithmSpec& a = in.spec_of.at(f.entry);
    auto gap = [&](double k) {  // DDP's time minus the entry's at equal loss, bandwidth times k
      const core::Scenario s = ScaledBandwidth(at_m, k);
      return std::array<double, 2>{TimeOf(s, in.spec_of.at(ddp.entry), ddp_w, in.flops).time_s,
                                   TimeOf(s, a, w, in.flops).time_s};
    };
    BreakEven b;
    b.workers = m;
    b.entry = f.entry;
    b.equal_loss_params = n_equal;
    ScanBandwidths(gap, at_m.network.link.bandwidth_bps, &b);
    if (b.bandwidth_bps > best.bandwidth_bps) best = b;
  }
  return best;
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
  auto params = DecisionParams(sc, o);
  if (!params.ok()) return params.status();
  out.params = *params;
  out.tokens_per_param = tokens_per_param;
  out.tokens = o.tokens > 0 ? o.tokens : tokens_per_param * out.params;
  const double ratio = out.tokens / out.params;
  if (std::abs(ratio / tokens_per_param - 1) > 0.1) {
    out.notes.push_back(Printf("the laws were fitted at %.3g tokens per parameter and hold there; at ", tokens_per_param) +
                        Printf("%.3g their losses are extrapolations in data", ratio));
  }
  DecisionInputs in{sc, fits, {}, o.flops > 0 ? o.flops : sc.compute.device_flops};
  for (const auto& e : entries) in.spec_of[e.name] = e;
  const EntryFit* ddp = nullptr;
  std::set<int> fitted_workers;
  for (const auto& f : fits) {
    if (!f.skipped.empty() || !in.spec_of.count(f.entry)) continue;
    if (in.spec_of[f.entry].baseline && ddp == nullptr) ddp = &f;
    for (const auto& p : f.points) fitted_workers.insert(static_cast<int>(p.workers));
  }
  std::vector<int> workers = o.workers;
  if (workers.empty()) workers.assign(fitted_workers.begin(), fitted_workers.end());
  NARROWS_RETURN_IF_ERROR(AddRows(in, workers, &out));
  MarkFrontier(&out.rows);
  if (ddp == nullptr) {
    out.notes.push_back("no fit for the baseline entry (baseline: true, by default the first): no break-even bandwidth");
    return out;
  }
  out.baseline = ddp->entry;
  for (int m : workers) {
    if (!LawHolds(*ddp, m)) continue;
    const BreakEven best = BestBreakEven(in, *ddp, m, out);
    if (best.bandwidth_bps >= 0) out.break_even.push_back(best);
  }
  return out;
}

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
