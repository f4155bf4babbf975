#include "tools/cli/sweep_command.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <sstream>

#include "core/cores.h"
#include "core/progress.h"
#include "core/run_writer.h"
#include "tools/cli/report_command.h"
#include "tools/cli/run_command.h"
#include "tools/cli/run_folders.h"
#include "tools/cli/sweep_plan.h"
#include "tools/cli/this_program.h"

extern char** environ;

namespace narrows::tools {
namespace {

using core::Status;

}  // namespace

// A point's folder name: its values, made file-name safe.
std::string Slug(const std::vector<SweepAxis>& axes, const std::vector<size_t>& at) {
  std::string s;
  for (size_t a = 0; a < axes.size(); ++a) {
    std::string key = axes[a].key.substr(axes[a].key.rfind('.') + 1);
    s += (s.empty() ? "" : "_") + key + "-" + axes[a].values[at[a]];
  }
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '+';
  }
  return s;
}

namespace {

std::string Csv(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

core::Result<SweepAxis> ParseAxis(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument("--grid " + text + ": expected key=value1,value2,...");
  }
  SweepAxis axis;
  axis.key = text.substr(0, eq);
  std::string current;
  int depth = 0;
  for (char c : text.substr(eq + 1)) {
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) {
      axis.values.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  axis.values.push_back(current);
  for (const auto& v : axis.values) {
    if (v.empty()) return Status::InvalidArgument("--grid " + text + ": an empty value");
  }
  return axis;
}

// Every point of the cross product, as one value index per axis.
std::vector<std::vector<size_t>> CrossProduct(const std::vector<SweepAxis>& axes) {
  std::vector<std::vector<size_t>> points(1);
  for (const auto& axis : axes) {
    std::vector<std::vector<size_t>> next;
    for (const auto& p : points) {
      for (size_t i = 0; i < axis.values.size(); ++i) {
        auto q = p;
        q.push_back(i);
        next.push_back(q);
      }
    }
    points = next;
  }
  return points;
}

core::Result<SweepPlan> ResolveSweep(const SweepOptions& o) {
  auto sets = core::ParseOverrides(o.sets);
  if (!sets.ok()) return sets.status();
  auto base = core::LoadScenario(o.scenario_file, *sets);
  if (!base.ok()) return base.status();
  SweepPlan plan;
  plan.name = base->name;
  plan.dir = o.output.empty() ? base->output.dir + "/" + base->name + "-sweep" : o.output;
  plan.points = CrossProduct(o.axes);
  for (const auto& p : plan.points) {
    std::vector<std::string> texts = o.sets;
    for (size_t a = 0; a < o.axes.size(); ++a) texts.push_back(o.axes[a].key + "=" + o.axes[a].values[p[a]]);
    texts.push_back("output.dir=" + plan.dir);
    texts.push_back("name=" + Slug(o.axes, p));
    auto overrides = core::ParseOverrides(texts);
    if (!overrides.ok()) return overrides.status();
    // The grid's values: errors about them name --grid.
    for (size_t a = 0; a < o.axes.size(); ++a) (*overrides)[o.sets.size() + a].flag = "--grid";
    auto sc = core::LoadScenario(o.scenario_file, *overrides);
    if (!sc.ok()) return Status::InvalidArgument("grid point " + Slug(o.axes, p) + ": " + sc.status().message());
    plan.scenarios.push_back(*sc);
    plan.sets.push_back(texts);
  }
  // Points that differ in network keys alone train the same models to the same losses: the first of
  // them trains, the others are timed with its losses.
  plan.retime_from.assign(plan.points.size(), -1);
  plan.keep_training.assign(plan.points.size(), false);
  if (o.retime && base->compute.mode == core::ComputeMode::kModelled) {
    std::map<std::vector<size_t>, int> first;  // the values of the other axes -> the point that trains
    for (size_t i = 0; i < plan.points.size(); ++i) {
      std::vector<size_t> others;
      for (size_t a = 0; a < o.axes.size(); ++a) {
        if (o.axes[a].key.rfind("network.", 0) != 0) others.push_back(plan.points[i][a]);
      }
      const auto [it, inserted] = first.emplace(others, static_cast<int>(i));
      if (!inserted) {
        plan.retime_from[i] = it->second;
        plan.keep_training[static_cast<size_t>(it->second)] = true;
      }
    }
  }
  return plan;
}

std::string PointDir(const core::Scenario& sc) { return sc.output.dir + "/" + sc.name; }

std::optional<nlohmann::json> FinishedPoint(const core::Scenario& sc) {
  const std::string dir = PointDir(sc);
  if (!SameScenario(dir, sc.resolved_yaml)) return std::nullopt;
  return FinishedSummary(dir, Entries(sc).size(), static_cast<size_t>(sc.seeds));
}

Status RunPoint(const SweepPlan& plan, const SweepOptions& o, size_t i) {
  RunOptions run;
  run.progress = o.quiet ? nullptr : stderr;
  run.tables = !o.quiet;
  run.data_root = o.data_root;
  run.keep_training = plan.keep_training[i];
  if (plan.retime_from[i] >= 0) run.retime_from = PointDir(plan.scenarios[static_cast<size_t>(plan.retime_from[i])]);
  // The table of each point goes to stdout as `narrows run` prints it (not with --quiet).
  return RunScenario(plan.scenarios[i], run);
}

namespace {

std::string ValueAt(const std::vector<SweepAxis>& axes, const std::vector<size_t>& point, size_t a) {
  return axes[a].values[point[a]];
}

// sweep.json: the axes and each point's folder, for `narrows report` and `narrows fit`; written
// first, so an unfinished sweep can be reported too.
Status WriteLayout(const SweepPlan& plan, const std::vector<SweepAxis>& axes) {
  nlohmann::json layout = {{"scenario", plan.name}, {"axes", nlohmann::json::array()}, {"points", nlohmann::json::array()}};
  for (const auto& axis : axes) layout["axes"].push_back({{"key", axis.key}, {"values", axis.values}});
  for (size_t i = 0; i < plan.points.size(); ++i) {
    nlohmann::json values = nlohmann::json::array();
    for (size_t a = 0; a < axes.size(); ++a) values.push_back(ValueAt(axes, plan.points[i], a));
    layout["points"].push_back({{"name", plan.scenarios[i].name}, {"values", values}});
  }
  return core::WriteFileAtomic(plan.dir + "/sweep.json", layout.dump(2) + "\n");
}


// The points `todo`, o.jobs at a time, each `narrows run` in a process of its own writing its table
// to <sweep folder>/<point>.log; the first point that fails stops the sweep (the others finish).
Status RunInProcesses(const SweepPlan& plan, const SweepOptions& o, const std::vector<size_t>& todo, core::Progress* done,
                      int64_t* finished) {
  auto program = ThisProgram();
  if (!program.ok()) return Status::IoError("sweep --jobs: " + program.status().message());
  const char* self = program->c_str();
  const unsigned cores = static_cast<unsigned>(core::UsableCores());
  std::map<pid_t, size_t> running;
  Status first_failure = Status::Ok();
  size_t next = 0;
  while (next < todo.size() || !running.empty()) {
    while (first_failure.ok() && next < todo.size() && running.size() < static_cast<size_t>(o.jobs)) {
      const size_t i = todo[next++];
      const core::Scenario& sc = plan.scenarios[i];
      std::vector<std::string> args = {self, "run", o.scenario_file, "--quiet"};
      for (const auto& set : plan.sets[i]) args.insert(args.end(), {"--set", set});
      if (plan.keep_training[i]) args.emplace_back("--keep-training");
      if (plan.retime_from[i] >= 0) {
        args.insert(args.end(), {"--retime-from", PointDir(plan.scenarios[static_cast<size_t>(plan.retime_from[i])])});
      }
      if (sc.threads == 0) args.insert(args.end(), {"--set", "threads=" + std::to_string(std::max(1u, cores / static_cast<unsigned>(o.jobs)))});
      const std::string log = plan.dir + "/" + sc.name + ".log";
      posix_spawn_file_actions_t files;
      posix_spawn_file_actions_init(&files);
      posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      pid_t pid = -1;
      const int err = ::posix_spawn(&pid, self, &files, nullptr, argv.data(), environ);
      posix_spawn_file_actions_destroy(&files);
      if (err != 0) {
        first_failure = Status::IoError("sweep --jobs: cannot start point " + sc.name + ": " + std::strerror(err));
        break;
      }
      if (!o.quiet) std::fprintf(stderr, "sweep: point %zu/%zu %s started (%s)\n", i + 1, plan.scenarios.size(), sc.name.c_str(), log.c_str());
      running[pid] = i;
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) return Status::IoError(std::string("sweep --jobs: waitpid: ") + std::strerror(errno));
    const auto it = running.find(pid);
    if (it == running.end()) continue;
    const std::string name = plan.scenarios[it->second].name;
    running.erase(it);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && first_failure.ok()) {
      auto log = ReadText(plan.dir + "/" + name + ".log");
      const std::string tail = log.ok() ? log->substr(log->size() > 2000 ? log->size() - 2000 : 0) : "";
      first_failure = WIFEXITED(status) && WEXITSTATUS(status) == 2
                          ? Status::InvalidArgument("grid point " + name + " failed:\n" + tail)
                          : Status::Internal("grid point " + name + " failed (" + plan.dir + "/" + name + ".log):\n" + tail);
    }
    if (ok) done->Update(++*finished, name + " done");
  }
  return first_failure;
}

// Every point's folder is checked before any point runs; with --force every point runs again.
Status ClaimPoints(const SweepPlan& plan, const SweepOptions& o) {
  for (const auto& sc : plan.scenarios) {
    auto use = ClaimResultFolder(PointDir(sc), sc.resolved_yaml, o.existing, "sweep point's folder");
    if (!use.ok()) return Status::InvalidArgument("grid point " + sc.name + ": " + use.status().message());
  }
  return Status::Ok();
}

Status RunUnfinished(const SweepPlan& plan, const SweepOptions& o) {
  NARROWS_RETURN_IF_ERROR(ClaimPoints(plan, o));
  size_t done = 0;
  for (const auto& sc : plan.scenarios) done += FinishedPoint(sc) ? 1 : 0;
  const size_t total = plan.scenarios.size();
  std::fprintf(stderr, "sweep: %zu points, %zu finished before, %zu to run -> %s\n", total, done, total - done,
               plan.dir.c_str());
  const size_t trains = static_cast<size_t>(std::count(plan.retime_from.begin(), plan.retime_from.end(), -1));
  if (trains < total) {
    std::fprintf(stderr, "sweep: compute is modelled and %zu of %zu points differ from an earlier one in network keys "
                         "alone: they are timed with its losses where an entry allows it, not trained again "
                         "(--no-retime trains every point)\n",
                 total - trains, total);
  }
  // Over the points to run: one plain line after each (the point's own runs redraw theirs).
  core::Progress points_done("sweep: points run", static_cast<int64_t>(total - done), o.quiet ? nullptr : stderr,
                             core::Progress::Style::kPlainLines);
  int64_t ran = 0;
  // The points that train first, then those that take their training.
  for (const bool timed : {false, true}) {
    std::vector<size_t> todo;
    for (size_t i = 0; i < total; ++i) {
      if ((plan.retime_from[i] >= 0) == timed && !FinishedPoint(plan.scenarios[i])) todo.push_back(i);
    }
    if (o.jobs > 1) {
      NARROWS_RETURN_IF_ERROR(RunInProcesses(plan, o, todo, &points_done, &ran));
      continue;
    }
    for (size_t i : todo) {
      const core::Scenario& sc = plan.scenarios[i];
      if (!o.quiet) std::fprintf(stderr, "sweep: point %zu/%zu %s\n", i + 1, total, sc.name.c_str());
      NARROWS_RETURN_IF_ERROR(RunPoint(plan, o, i));
      points_done.Update(++ran, sc.name + " done");
    }
  }
  return Status::Ok();
}

// Point (its values but the compare axis) -> entry -> wall-clock speed-up over the point's DDP.
// In the grid's order (the points' order), not the rows' names'.
struct Speedups : std::vector<std::pair<std::string, std::map<std::string, double>>> {
  std::map<std::string, double>& operator[](const std::string& row) {
    for (auto& [name, by_entry] : *this) {
      if (name == row) return by_entry;
    }
    emplace_back(row, std::map<std::string, double>());
    return back().second;
  }
};
// At equal steps (the baseline's time over the entry's) and at equal loss (the baseline's time to the
// point's target loss over the entry's; absent where either never reached it). `baseline`: the
// baseline entry's name (the first point's; "" if points differ).
struct SpeedupTables {
  Speedups steps, loss;
  std::string baseline;
};

// results.csv: one row per point and entry; speed-up over the point's baseline entry.
core::Result<SpeedupTables> WriteResults(const SweepPlan& plan, const std::vector<SweepAxis>& axes) {
  std::ostringstream csv;
  csv.precision(10);
  for (const auto& axis : axes) csv << Csv(axis.key) << ",";
  csv << "entry,algorithm,final_val_loss,time_s,bytes_sent_per_worker,peak_bytes_per_round,compute_utilization,"
         "outer_syncs,target_loss,time_to_target_s,bytes_to_target,speedup_at_target,speedup_vs_baseline,baseline,seeds,"
         "final_val_loss_ci95,time_s_ci95\n";
  auto cell = [](const nlohmann::json& j, const char* key) {  // empty when absent or null (never reached)
    return j.contains(key) && j[key].is_number() ? j[key].dump() : std::string();
  };
  SpeedupTables speedups;
  for (size_t i = 0; i < plan.scenarios.size(); ++i) {
    const auto summary = FinishedPoint(plan.scenarios[i]);
    if (!summary) return Status::Internal("point " + plan.scenarios[i].name + " has no complete summary.json");
    const auto& results = summary->at("results");
    const nlohmann::json& base = results.at(BaselineIndex(results));
    const double base_time = base.at("time_s");
    const double base_to_target =
        base.contains("time_to_target_s") && base["time_to_target_s"].is_number() ? base["time_to_target_s"].get<double>() : 0;
    const std::string base_name = base.at("name");
    if (i == 0) speedups.baseline = base_name;
    if (speedups.baseline != base_name) speedups.baseline.clear();
    std::string row;
    for (size_t a = 0; a < axes.size(); ++a) {
      if (axes[a].key != "compare") row += (row.empty() ? "" : " ") + ValueAt(axes, plan.points[i], a);
    }
    for (const auto& r : summary->at("results")) {
      const double t = r.at("time_s");
      for (size_t a = 0; a < axes.size(); ++a) csv << Csv(ValueAt(axes, plan.points[i], a)) << ",";
      csv << Csv(r.at("name")) << "," << r.at("algorithm").get<std::string>() << "," << r.at("final_val_loss") << ","
          << t << "," << r.at("bytes_sent_per_worker") << "," << cell(r, "peak_bytes_per_round") << ","
          << r.at("compute_utilization") << "," << r.at("outer_syncs") << "," << cell(*summary, "target_loss") << ","
          << cell(r, "time_to_target_s") << "," << cell(r, "bytes_to_target") << "," << cell(r, "speedup_at_target")
          << ",";
      if (base_time > 0) csv << base_time / t;
      const bool is_base = r.at("name") == base_name;
      csv << "," << (is_base ? "true" : "false");
      // Over several seeds the figures above are means; their 95% half-widths follow.
      const size_t seeds = summary->contains("seeds") ? summary->at("seeds").size() : 1;
      csv << "," << seeds << "," << cell(r, "final_val_loss_ci95") << "," << cell(r, "time_s_ci95") << "\n";
      if (!is_base && base_time > 0) speedups.steps[row.empty() ? "-" : row][r.at("name")] = base_time / t;
      const double to_target = r.contains("time_to_target_s") && r["time_to_target_s"].is_number() ? r["time_to_target_s"].get<double>() : 0;
      if (!is_base && base_to_target > 0 && to_target > 0) {
        speedups.loss[row.empty() ? "-" : row][r.at("name")] = base_to_target / to_target;
      }
    }
  }
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(plan.dir + "/results.csv", csv.str()));
  return speedups;
}

void PrintSpeedups(const Speedups& speedups, const char* title) {
  if (speedups.empty()) return;
  std::printf("%s\n", title);
  std::vector<std::string> columns;
  for (const auto& [row, by_entry] : speedups) {
    for (const auto& [entry, s] : by_entry) {
      if (std::find(columns.begin(), columns.end(), entry) == columns.end()) columns.push_back(entry);
    }
  }
  std::printf("%-32s", "point");
  for (const auto& c : columns) std::printf(" %14s", c.c_str());
  std::printf("\n");
  for (const auto& [row, by_entry] : speedups) {
    std::printf("%-32s", row.c_str());
    for (const auto& c : columns) {
      const auto it = by_entry.find(c);
      if (it == by_entry.end()) {
        std::printf(" %14s", "-");
      } else {
        std::printf(" %13.2fx", it->second);
      }
    }
    std::printf("\n");
  }
}

}  // namespace

Status RunSweep(const SweepOptions& o) {
  auto plan = ResolveSweep(o);
  if (!plan.ok()) return plan.status();
  if (o.point >= 0) {
    if (static_cast<size_t>(o.point) >= plan->scenarios.size()) {
      return Status::InvalidArgument("--point " + std::to_string(o.point) + ": the grid has " +
                                     std::to_string(plan->scenarios.size()) + " points (0 to " +
                                     std::to_string(plan->scenarios.size() - 1) + ")");
    }
    const core::Scenario& sc = plan->scenarios[static_cast<size_t>(o.point)];
    auto use = ClaimResultFolder(PointDir(sc), sc.resolved_yaml, OnOtherScenario::kRefuse, "sweep point's folder");
    if (!use.ok()) return use.status();
    return RunPoint(*plan, o, static_cast<size_t>(o.point));
  }
  if (o.slurm.submit || o.slurm.gather) NARROWS_RETURN_IF_ERROR(CheckSlurmGrid(plan->dir, o));
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(plan->dir));
  NARROWS_RETURN_IF_ERROR(WriteLayout(*plan, o.axes));
  if (o.slurm.submit || o.slurm.gather) {
    if (o.slurm.submit) NARROWS_RETURN_IF_ERROR(ClaimPoints(*plan, o));
    auto finished = SweepOnSlurm(*plan, o);
    if (!finished.ok()) return finished.status();
    if (!*finished) return Status::Ok();
  } else {
    NARROWS_RETURN_IF_ERROR(RunUnfinished(*plan, o));
  }
  auto speedups = WriteResults(*plan, o.axes);
  if (!speedups.ok()) return speedups.status();
  const std::string base = speedups->baseline.empty() ? "the baseline" : speedups->baseline;
  PrintSpeedups(speedups->loss, ("speed-up over " + base + " at equal loss (" + base +
                                 "'s time to the point's target loss / the entry's; '-': one never reached it):").c_str());
  PrintSpeedups(speedups->steps, ("speed-up over " + base + " at equal steps (" + base +
                                  "'s wall-clock time / the entry's, whatever the losses):").c_str());
  std::printf("sweep results: %s/results.csv\n", plan->dir.c_str());
  if (!o.report) {
    std::printf("charts: narrows report %s (or sweep with --report); fits: narrows fit %s\n", plan->dir.c_str(),
                plan->dir.c_str());
    return Status::Ok();
  }
  auto path = WriteReport({plan->dir}, "");
  if (!path.ok()) return path.status();
  std::printf("report: %s\n", path->c_str());
  return Status::Ok();
}

}  // namespace narrows::tools
