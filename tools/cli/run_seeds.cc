// `narrows run` over several seeds: one run folder per seed, and their aggregate (means with
// t-intervals, paired comparisons against the first entry, verdicts).
#include <algorithm>
#include <cmath>

#include "core/result_record.h"
#include "core/run_writer.h"
#include "tools/cli/format.h"
#include "tools/cli/run_folders.h"
#include "tools/cli/run_command.h"
#include "tools/cli/stats.h"

namespace narrows::tools {
namespace {

using Json = nlohmann::json;

// The quantities of an entry that are averaged over seeds.
constexpr const char* kAveraged[] = {"final_val_loss",   "time_s",          "bytes_sent_per_worker",
                                     "compute_utilization", "time_to_target_s", "bytes_to_target",
                                     "outer_syncs",      "tokens",          "final_val_loss_se"};

// A number, or null where it is not finite (one seed has no spread).
Json Finite(double v) { return std::isfinite(v) ? Json(v) : Json(); }

Json IntervalJson(const Interval& i) {
  return {{"n", i.n}, {"mean", i.mean}, {"sd", Finite(i.sd)}, {"ci95", Finite(i.half_width)}, {"lo", Finite(i.lo())},
          {"hi", Finite(i.hi())}};
}

// `key` of entry `e` in every seed's summary (NaN where a seed has none).
std::vector<double> PerSeed(const std::vector<Json>& summaries, size_t e, const char* key) {
  std::vector<double> out;
  for (const auto& s : summaries) out.push_back(Num(s.at("results").at(e), key));
  return out;
}

bool AllFinite(const std::vector<double>& v) {
  for (double x : v) {
    if (!std::isfinite(x)) return false;
  }
  return !v.empty();
}

// Entry `e` against the baseline (entry `b`), seed by seed.
Json Paired(const std::vector<Json>& summaries, size_t e, size_t b) {
  Json out = Json::object();
  const auto loss = PerSeed(summaries, e, "final_val_loss"), base_loss = PerSeed(summaries, b, "final_val_loss");
  if (AllFinite(loss) && AllFinite(base_loss)) {
    const Interval gap = PairedDifference(loss, base_loss);
    out["loss_gap"] = IntervalJson(gap);
    // The evaluations' own standard error (the larger of the two entries' means over the seeds).
    double se = 0.0;
    for (const size_t k : {e, b}) {
      const auto v = PerSeed(summaries, k, "final_val_loss_se");
      if (AllFinite(v)) se = std::max(se, MeanInterval(v).mean);
    }
    const bool resolved = Resolved(gap.mean, se);
    out["loss_gap"]["lower_loss"] = VerdictName(resolved ? Judge(gap.lo(), gap.hi(), gap.n, -1) : Verdict::kInconclusive);
    if (!resolved) out["loss_gap"]["below_resolution"] = 2.0 * se;
    out["loss_gap"]["margin"] = kDefaultLossMargin;
    out["loss_gap"]["costs_little"] = VerdictName(JudgeCostsLittle(gap.lo(), gap.hi(), gap.n, kDefaultLossMargin));
    out["loss_gap"]["matches"] = VerdictName(JudgeMatches(gap.lo(), gap.hi(), gap.n, kDefaultLossMargin));
  }
  auto ratio = [&](const char* key, const char* name) {
    const auto t = PerSeed(summaries, e, key), base = PerSeed(summaries, b, key);
    if (!AllFinite(t) || !AllFinite(base)) return;  // a seed never reached the target
    const Ratio r = PairedRatio(base, t);
    out[name] = {{"n", r.n}, {"ratio", r.ratio}, {"lo", Finite(r.lo)}, {"hi", Finite(r.hi)},
                 {"faster", VerdictName(Judge(std::log(r.lo), std::log(r.hi), r.n, +1))}};
  };
  ratio("time_s", "speedup");
  ratio("time_to_target_s", "speedup_at_target");
  return out;
}

}  // namespace

// The folder above a seed's folder (…/POINT/seed-N -> …/POINT).
std::string Parent(const std::string& dir) {
  const auto slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(0, slash);
}

Json AggregateSeeds(const std::vector<Json>& summaries, const std::vector<uint64_t>& seeds) {
  NARROWS_CHECK(!summaries.empty() && summaries.size() == seeds.size());
  const Json& first = summaries.front();
  Json out = {{"scenario", first.value("scenario", std::string())}, {"clock", first.value("clock", std::string())},
              {"narrows", first.value("narrows", std::string())},
              {"seeds", seeds}, {"eval_every", first.value("eval_every", int64_t{0})}, {"results", Json::array()}};
  Json targets = Json::array();
  for (const auto& s : summaries) targets.push_back(s.value("target_loss", 0.0));
  out["target_losses"] = targets;
  if (first.contains("host")) out["host"] = first["host"];  // this host's step, as measured in the first seed
  const size_t b = BaselineIndex(first.at("results"));
  for (size_t e = 0; e < first.at("results").size(); ++e) {
    const Json& r0 = first.at("results").at(e);
    Json r = {{"name", r0.value("name", std::string())}, {"algorithm", r0.value("algorithm", std::string())},
              {"collective", r0.value("collective", std::string())},
              {"workers", r0.value("workers", 0)}, {"steps", r0.value("steps", 0)}};
    for (const char* key : kAveraged) {
      const auto v = PerSeed(summaries, e, key);
      if (!AllFinite(v)) {
        r[key] = Json();  // some seed has none (never reached the target)
        continue;
      }
      const Interval i = MeanInterval(v);
      r[key] = i.mean;
      r[std::string(key) + "_ci95"] = Finite(i.half_width);
      r[std::string(key) + "_sd"] = Finite(i.sd);
    }
    // The loss per domain of a multi-domain corpus: each domain's mean and interval over the seeds.
    if (r0.contains("final_val_loss_by_domain")) {
      Json mean = Json::object(), hw = Json::object();
      for (const auto& [domain, ignored] : r0.at("final_val_loss_by_domain").items()) {
        std::vector<double> v;
        for (const auto& s : summaries) {
          v.push_back(s.at("results").at(e).value("final_val_loss_by_domain", Json::object()).value(domain, NAN));
        }
        if (!AllFinite(v)) continue;
        const Interval i = MeanInterval(v);
        mean[domain] = i.mean;
        hw[domain] = Finite(i.half_width);
      }
      r["final_val_loss_by_domain"] = mean;
      r["final_val_loss_by_domain_ci95"] = hw;
    }
    Json per_seed = Json::array();
    for (size_t k = 0; k < summaries.size(); ++k) {
      Json one = summaries[k].at("results").at(e);
      one["seed"] = seeds[k];
      per_seed.push_back(std::move(one));
    }
    r["per_seed"] = std::move(per_seed);
    // Re-timed in every seed: from the same point's training (each seed from its own seed there).
    bool retimed = true;
    for (const auto& s : summaries) retimed = retimed && s.at("results").at(e).contains("retimed_from");
    if (retimed) r["retimed_from"] = Parent(r0.at("retimed_from").get<std::string>());
    r["baseline"] = e == b;
    if (e != b) {
      r["versus_baseline"] = Paired(summaries, e, b);
      // Where readers of a one-seed summary look (sweeps' results.csv): the paired geometric mean.
      if (r["versus_baseline"].contains("speedup_at_target")) {
        r["speedup_at_target"] = r["versus_baseline"]["speedup_at_target"]["ratio"];
      }
    }
    out["results"].push_back(std::move(r));
  }
  return out;
}

core::Result<Json> RunSeeds(const core::Scenario& sc, const RunOptions& options) {
  const std::string run_dir = sc.output.dir + "/" + sc.name;
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(run_dir));
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/scenario.yaml", sc.resolved_yaml));
  std::vector<Json> summaries;
  std::vector<uint64_t> seeds;
  for (int64_t k = 0; k < sc.seeds; ++k) {
    const uint64_t seed = sc.seed + static_cast<uint64_t>(k);
    // The same scenario with this seed, one run folder of its own: <run folder>/seed-<seed>.
    auto one = core::ParseScenario(sc.resolved_yaml, sc.source,
                                   {{"seed", std::to_string(seed), "seed"}, {"seeds", "1", "seeds"},
                                    {"output.dir", run_dir, "output.dir"}, {"name", "seed-" + std::to_string(seed), "name"}});
    if (!one.ok()) return one.status();
    // A seed whose run finished before (every entry in its summary.json) is taken as it is, so
    // that an interrupted run over many seeds resumes where it stopped.
    const std::string seed_dir = run_dir + "/seed-" + std::to_string(seed);
    auto use = ClaimResultFolder(seed_dir, one->resolved_yaml, options.existing);
    if (!use.ok()) return use.status();
    auto before = *use == FolderUse::kSame ? FinishedSummary(seed_dir, Entries(*one).size(), 1) : std::nullopt;
    if (before) {
      if (options.progress) std::fprintf(options.progress, "seed %llu: finished before\n", static_cast<unsigned long long>(seed));
      summaries.push_back(std::move(*before));
    } else {
      if (options.progress) std::fprintf(options.progress, "seed %llu (%lld of %lld)\n", static_cast<unsigned long long>(seed),
                                         static_cast<long long>(k + 1), static_cast<long long>(sc.seeds));
      RunOptions seed_options = options;  // a re-timed seed takes the training of the same seed
      if (!options.retime_from.empty()) seed_options.retime_from = options.retime_from + "/seed-" + std::to_string(seed);
      auto summary = RunOneSeed(*one, seed_options);
      if (!summary.ok()) return summary.status();
      summaries.push_back(std::move(*summary));
    }
    seeds.push_back(seed);
    // Rewritten after every seed, so a long run keeps what it finished.
    Json aggregate = AggregateSeeds(summaries, seeds);
    aggregate["scenario"] = sc.name;  // each seed's own run is named seed-<seed>
    aggregate["scenario_digest"] = core::ResultDigest(sc.resolved_yaml);
    NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/summary.json", aggregate.dump(2) + "\n"));
    if (k + 1 == sc.seeds) return aggregate;
  }
  return Json();  // not reached: seeds >= 1
}

void PrintSeeds(const Json& summary) {
  const auto& results = summary.at("results");
  const size_t n = summary.at("seeds").size();
  auto pm = [](const Json& r, const char* key, const char* format) {
    const double mean = Num(r, key), hw = Num(r, (std::string(key) + "_ci95").c_str());
    if (std::isnan(mean)) return std::string("never");
    // Times as the one-seed table writes them (three significant digits for short ones).
    auto one = [format](double v) { return format == nullptr ? Seconds(v) : Printf(format, v); };
    return one(mean) + (std::isnan(hw) ? "" : " ± " + one(hw));
  };
  std::printf("%zu seeds (%s); mean ± 95%% t-interval half-width\n", n, summary.at("seeds").dump().c_str());
  const int w = NameWidth(results);
  std::printf("%-*s %19s %15s %15s %12s %8s %-10s\n", w, "entry", "val loss", "time (s)", "to target (s)", "sent/worker",
              "compute", "collective");
  for (const auto& r : results) {
    std::printf("%-*s %19s %15s %15s %12s %7.0f%% %-10s\n", w, r.value("name", std::string()).c_str(),
                pm(r, "final_val_loss", "%.4f").c_str(), pm(r, "time_s", nullptr).c_str(),
                pm(r, "time_to_target_s", nullptr).c_str(), Bytes(Num(r, "bytes_sent_per_worker")).c_str(),
                100.0 * Num(r, "compute_utilization"), r.value("collective", std::string("-")).c_str());
  }
  PrintRetimed(summary);
  if (results.size() < 2) {
    PrintHost(summary);
    return;
  }
  const size_t b = BaselineIndex(results);
  std::printf("paired against %s, seed by seed (95%% t-interval; lower and faster: it excludes zero; costs little and "
              "matches: it lies within the margin, nats):\n",
              results[b].value("name", std::string()).c_str());
  for (size_t i = 0; i < results.size(); ++i) {
    if (i == b) continue;
    const Json& v = results[i].at("versus_baseline");
    std::printf("  %-*s", w, results[i].value("name", std::string()).c_str());
    if (v.contains("loss_gap")) {
      const Json& g = v["loss_gap"];
      std::printf(" loss %+.4f [%+.4f, %+.4f] (lower: %s%s; within %.3g: costs little %s, matches %s)", g.value("mean", 0.0),
                  Num(g, "lo"), Num(g, "hi"), g.value("lower_loss", std::string()).c_str(),
                  g.contains("below_resolution") ? ", below the evaluation's resolution" : "", Num(g, "margin"),
                  g.value("costs_little", std::string("-")).c_str(), g.value("matches", std::string("-")).c_str());
    }
    for (const char* key : {"speedup", "speedup_at_target"}) {
      if (!v.contains(key)) continue;
      const Json& s = v[key];
      std::printf("; %s %.2fx [%.2f, %.2f] (faster: %s)", std::string(key) == "speedup" ? "time" : "to target",
                  s.value("ratio", 0.0), Num(s, "lo"), Num(s, "hi"), s.value("faster", std::string()).c_str());
    }
    std::printf("\n");
  }
  PrintHost(summary);
}

}  // namespace narrows::tools
