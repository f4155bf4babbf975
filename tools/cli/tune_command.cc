#include "tools/cli/tune_command.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>

#include "core/run_writer.h"
#include "tools/cli/report_command.h"
#include "tools/cli/run_command.h"

namespace narrows::tools {
namespace {

using core::Status;
using Json = nlohmann::json;

constexpr uint64_t kTuningSeedOffset = 1000;

// Whether axis `key` varies entry `e`: a key inside another entry (compare.K.…) does not.
bool Varies(const std::string& key, size_t e) {
  if (key.rfind("compare.", 0) != 0) return true;
  const std::string index = key.substr(8, key.find('.', 8) - 8);
  if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) return true;
  return std::stoul(index) == e;
}

// The point with the axes that do not vary entry `e` at their first value: points that differ
// only there are one run of the entry.
std::vector<size_t> Relevant(const std::vector<SweepAxis>& axes, std::vector<size_t> point, size_t e) {
  for (size_t a = 0; a < axes.size(); ++a) {
    if (!Varies(axes[a].key, e)) point[a] = 0;
  }
  return point;
}

// `entry` of `point` alone, with `seed`, into <dir>/<name>.
core::Scenario Alone(const core::Scenario& point, const core::AlgorithmSpec& entry, uint64_t seed, const std::string& dir,
                     const std::string& name) {
  core::Scenario sc = point;
  sc.compare = {entry};
  sc.seed = seed;
  sc.seeds = 1;
  sc.output.dir = dir;
  sc.name = name;
  return sc;
}

// The run's summary: as it finished before under the same scenario (its point's values; the
// folder's name holds the entry and the seed), or run now.
core::Result<Json> RunOrResume(const core::Scenario& sc, const RunOptions& run) {
  const std::string dir = sc.output.dir + "/" + sc.name;
  if (SameScenario(dir, sc.resolved_yaml)) {
    if (auto before = FinishedSummary(dir, 1, 1)) return *before;
  }
  return RunOneSeed(sc, run);
}

double Number(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::nan("");
}

// One entry's runs at one point of the grid over the tuning seeds.
struct Trial {
  size_t point = 0;
  std::vector<Json> results;                     // per tuning seed: the entry's line of summary.json
  std::vector<std::vector<Evaluation>> evals;    // per tuning seed
  std::vector<double> scores;                    // per tuning seed
  double score = std::numeric_limits<double>::infinity();  // their mean; infinity if any is not finite
};

Json Values(const std::vector<SweepAxis>& axes, const std::vector<size_t>& point, size_t e) {
  Json v = Json::object();
  for (size_t a = 0; a < axes.size(); ++a) {
    if (Varies(axes[a].key, e)) v[axes[a].key] = axes[a].values[point[a]];
  }
  return v;
}

// What tune refuses before loading anything: a --grid over the entries or the seeds, and fewer
// than one tuning seed.
Status CheckOptions(const TuneOptions& o) {
  for (const auto& axis : o.axes) {
    if (axis.key == "compare" || axis.key == "seed" || axis.key == "seeds") {
      return Status::InvalidArgument("--grid " + axis.key + ": tune varies values within the entries; the entries and "
                                     "seeds are the scenario's (--seeds for the final comparison)");
    }
  }
  if (o.tuning_seeds < 1) return Status::InvalidArgument("--tuning-seeds: at least 1");
  return Status::Ok();
}

// Every point of the grid with its scenario and its entries.
struct Grid {
  std::vector<std::vector<size_t>> points;
  std::vector<core::Scenario> scenarios;
  std::vector<std::vector<core::AlgorithmSpec>> point_entries;  // each point's entries, `auto` resolved once
};

// Every point loaded and checked (`entries`: how many the scenario has, as each point must).
core::Result<Grid> LoadGrid(const TuneOptions& o, size_t entries) {
  Grid grid;
  grid.points = CrossProduct(o.axes);
  for (const auto& p : grid.points) {
    std::vector<std::string> texts = o.sets;
    for (size_t a = 0; a < o.axes.size(); ++a) texts.push_back(o.axes[a].key + "=" + o.axes[a].values[p[a]]);
    auto overrides = core::ParseOverrides(texts);
    if (!overrides.ok()) return overrides.status();
    // The grid's values: errors about them name --grid.
    for (size_t a = 0; a < o.axes.size(); ++a) (*overrides)[o.sets.size() + a].flag = "--grid";
    auto sc = core::LoadScenario(o.scenario_file, *overrides);
    if (!sc.ok()) return Status::InvalidArgument("grid point " + Slug(o.axes, p) + ": " + sc.status().message());
    grid.point_entries.push_back(Entries(*sc));
    if (grid.point_entries.back().size() != entries) {
      return Status::InvalidArgument("grid point " + Slug(o.axes, p) + ": other entries");
    }
    grid.scenarios.push_back(*sc);
  }
  return grid;
}

// Per entry, its trials by the point's values that vary it (Relevant).
using Trials = std::vector<std::map<std::vector<size_t>, Trial>>;

// Tuning: every entry at every point that varies it, on the tuning seeds, under <dir>/tuning.
core::Result<Trials> RunTrials(const TuneOptions& o, const Grid& grid, const std::vector<core::AlgorithmSpec>& entries,
                               const std::vector<uint64_t>& tuning_seeds, const std::string& dir, const RunOptions& run) {
  Trials trials(entries.size());
  for (size_t e = 0; e < entries.size(); ++e) {
    for (size_t i = 0; i < grid.points.size(); ++i) {
      const std::vector<size_t> key = Relevant(o.axes, grid.points[i], e);
      if (trials[e].count(key)) continue;
      Trial& trial = trials[e][key];
      trial.point = i;
      for (uint64_t seed : tuning_seeds) {
        const std::string name = Slug(o.axes, key) + "-seed-" + std::to_string(seed);
        if (!o.quiet) std::fprintf(stderr, "tune: %s at %s\n", entries[e].name.c_str(), name.c_str());
        const core::Scenario sc =
            Alone(grid.scenarios[i], grid.point_entries[i][e], seed, dir + "/tuning/" + entries[e].name, name);
        auto summary = RunOrResume(sc, run);
        if (!summary.ok()) return summary.status();
        trial.results.push_back(summary->at("results").at(0));
        trial.evals.push_back(Evaluations(sc.output.dir + "/" + sc.name + "/" + entries[e].name + "/metrics.jsonl"));
      }
    }
  }
  return trials;
}

// Per tuning seed, the fastest run's finishing time over every entry and point (infinity: none).
std::vector<double> Horizons(const Trials& trials, size_t seeds) {
  std::vector<double> horizon(seeds, std::numeric_limits<double>::infinity());
  for (const auto& per_entry : trials) {
    for (const auto& [key, trial] : per_entry) {
      for (size_t k = 0; k < seeds; ++k) {
        const double t = Number(trial.results[k], "time_s");
        if (std::isfinite(t) && !trial.results[k].value("diverged", false)) horizon[k] = std::min(horizon[k], t);
      }
    }
  }
  return horizon;
}

// Scores every trial (the final loss, or the loss at the horizon of its seed) and chooses each
// entry's best point into `*chosen`; per entry its choice and every point's score.
Json Choose(const TuneOptions& o, const std::vector<core::AlgorithmSpec>& entries, size_t seeds,
            const std::vector<double>& horizon, Trials* trials, std::vector<std::vector<size_t>>* chosen) {
  Json tuned = Json::array();
  for (size_t e = 0; e < entries.size(); ++e) {
    const Trial* best = nullptr;
    Json scores = Json::array();
    for (auto& [key, trial] : (*trials)[e]) {
      double sum = 0.0;
      for (size_t k = 0; k < seeds; ++k) {
        const double s = o.by == TuneBy::kLoss ? Number(trial.results[k], "final_val_loss") : LossAt(trial.evals[k], horizon[k]);
        trial.scores.push_back(s);
        sum += s;
      }
      trial.score = std::isfinite(sum) ? sum / static_cast<double>(seeds) : std::numeric_limits<double>::infinity();
      scores.push_back({{"values", Values(o.axes, key, e)}, {"score", std::isfinite(trial.score) ? Json(trial.score) : Json()},
                        {"per_seed", trial.scores}});
      if (best == nullptr || trial.score < best->score) {
        best = &trial;
        (*chosen)[e] = key;
      }
    }
    tuned.push_back({{"name", entries[e].name}, {"chosen", Values(o.axes, (*chosen)[e], e)},
                     {"score", std::isfinite(best->score) ? Json(best->score) : Json()}, {"points", scores}});
  }
  return tuned;
}

// summary.json's `tuning`: how the points were scored, on which seeds, the grid and the choices.
Json TuningJson(const TuneOptions& o, const std::vector<uint64_t>& tuning_seeds, const Json& tuned,
                const std::vector<double>& horizon) {
  Json grid = Json::array();
  for (const auto& axis : o.axes) grid.push_back({{"key", axis.key}, {"values", axis.values}});
  Json horizon_json = Json::array();
  for (double h : horizon) horizon_json.push_back(std::isfinite(h) ? Json(h) : Json());
  return {{"by", o.by == TuneBy::kLoss ? "final loss" : "loss at the fastest run's finishing time"},
          {"tuning_seeds", tuning_seeds}, {"grid", grid}, {"entries", tuned},
          {"horizon_s", o.by == TuneBy::kTime ? horizon_json : Json()}};
}

// What the comparison needs of the tuning: the tune folder, the grid, and each entry's chosen point.
struct Chosen {
  const std::string& dir;
  const Grid& grid;
  const Trials& trials;
  const std::vector<std::vector<size_t>>& values;
};

// One seed of the comparison: every entry at its chosen values, gathered into one run folder
// (<dir>/seed-<seed>) with its summary.json, as `narrows run --seeds` writes it.
core::Result<Json> CompareAtSeed(const TuneOptions& o, const core::Scenario& base, const std::vector<core::AlgorithmSpec>& entries,
                                 const Chosen& chosen, uint64_t seed, const RunOptions& run) {
  const std::string seed_dir = chosen.dir + "/seed-" + std::to_string(seed);
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(seed_dir));
  Json results = Json::array();
  for (size_t e = 0; e < entries.size(); ++e) {
    if (!o.quiet) std::fprintf(stderr, "tune: %s, seed %llu, at its chosen values\n", entries[e].name.c_str(),
                               static_cast<unsigned long long>(seed));
    const size_t point = chosen.trials[e].at(chosen.values[e]).point;
    const core::Scenario sc = Alone(chosen.grid.scenarios[point], chosen.grid.point_entries[point][e], seed,
                                    chosen.dir + "/final/" + entries[e].name, "seed-" + std::to_string(seed));
    auto summary = RunOrResume(sc, run);
    if (!summary.ok()) return summary.status();
    results.push_back(summary->at("results").at(0));
    std::error_code ec;
    const std::string to = seed_dir + "/" + entries[e].name;
    std::filesystem::remove_all(to, ec);
    std::filesystem::copy(sc.output.dir + "/" + sc.name + "/" + entries[e].name, to,
                          std::filesystem::copy_options::recursive, ec);
    if (ec) return Status::Internal("tune: copying " + entries[e].name + " into " + seed_dir + ": " + ec.message());
  }
  core::Scenario all = base;
  all.seed = seed;
  all.seeds = 1;
  auto summary = WriteSummary(all, seed_dir, results, "virtual", false);
  if (!summary.ok()) return summary.status();
  (*summary)["settings"]["tuned"] = true;  // each entry at the values its tuning chose
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(seed_dir + "/summary.json", summary->dump(2) + "\n"));
  return summary;
}

// The choices, then the comparison's table (over its seeds where there are several).
void PrintTune(const std::vector<uint64_t>& tuning_seeds, const Json& tuning, const Json& tuned, const Json& aggregate,
               const std::vector<Json>& summaries) {
  std::printf("tuned on seeds %s by %s:\n", Json(tuning_seeds).dump().c_str(), tuning.at("by").get<std::string>().c_str());
  for (const auto& t : tuned) {
    std::printf("  %-16s %s (score %s over %zu points)\n", t.at("name").get<std::string>().c_str(), t.at("chosen").dump().c_str(),
                t.at("score").is_number() ? std::to_string(t.at("score").get<double>()).c_str() : "none",
                t.at("points").size());
  }
  if (summaries.size() > 1) {
    PrintSeeds(aggregate);
  } else {
    PrintComparison(summaries.front());
  }
}

}  // namespace

Status RunTune(const TuneOptions& o) {
  NARROWS_RETURN_IF_ERROR(CheckOptions(o));
  auto sets = core::ParseOverrides(o.sets);
  if (!sets.ok()) return sets.status();
  auto base = core::LoadScenario(o.scenario_file, *sets);
  if (!base.ok()) return base.status();
  const std::vector<core::AlgorithmSpec> entries = Entries(*base);
  // Every point checked before anything runs.
  auto grid = LoadGrid(o, entries.size());
  if (!grid.ok()) return grid.status();
  const std::string dir = o.output.empty() ? base->output.dir + "/" + base->name + "-tune" : o.output;
  auto use = ClaimResultFolder(dir, base->resolved_yaml, o.existing, "tune folder");
  if (!use.ok()) return use.status();
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(dir));
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(dir + "/scenario.yaml", base->resolved_yaml));
  RunOptions run;
  run.progress = o.quiet ? nullptr : stderr;
  run.data_root = o.data_root;
  run.warm_start_dir = dir + "/warm_start";  // one pre-training per seed and setting, whichever entry and point

  std::vector<uint64_t> tuning_seeds;
  for (int k = 0; k < o.tuning_seeds; ++k) tuning_seeds.push_back(base->seed + kTuningSeedOffset + static_cast<uint64_t>(k));
  auto trials = RunTrials(o, *grid, entries, tuning_seeds, dir, run);
  if (!trials.ok()) return trials.status();
  // Scores: the final loss, or the loss at the fastest run's finishing time (per tuning seed, over
  // every entry and point).
  const std::vector<double> horizon = Horizons(*trials, tuning_seeds.size());
  std::vector<std::vector<size_t>> chosen(entries.size());
  const Json tuned = Choose(o, entries, tuning_seeds.size(), horizon, &*trials, &chosen);
  const Json tuning = TuningJson(o, tuning_seeds, tuned, horizon);

  // The comparison: every entry at its chosen values on fresh seeds, one run folder per seed.
  std::vector<Json> summaries;
  std::vector<uint64_t> seeds;
  for (int64_t k = 0; k < base->seeds; ++k) {
    const uint64_t seed = base->seed + static_cast<uint64_t>(k);
    auto summary = CompareAtSeed(o, *base, entries, {dir, *grid, *trials, chosen}, seed, run);
    if (!summary.ok()) return summary.status();
    summaries.push_back(*summary);
    seeds.push_back(seed);
  }
  Json aggregate = AggregateSeeds(summaries, seeds);
  aggregate["scenario"] = base->name;
  aggregate["tuning"] = tuning;
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(dir + "/summary.json", aggregate.dump(2) + "\n"));

  PrintTune(tuning_seeds, tuning, tuned, aggregate, summaries);
  std::printf("results: %s/summary.json\n", dir.c_str());
  if (o.report) {
    auto path = WriteReport({dir}, "");
    if (!path.ok()) return path.status();
    std::printf("report: %s\n", path->c_str());
  }
  return Status::Ok();
}

}  // namespace narrows::tools
