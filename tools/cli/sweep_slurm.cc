// `narrows sweep --slurm`: the grid's unfinished points as one Slurm job array, each task a
// `narrows sweep ... --point I` into the sweep folder; `--gather` (or the same command again) waits
// for them and writes the table. The sweep folder is the state: a point is finished when its run
// folder holds every entry's results, as on this machine; slurm.json lists the jobs submitted, so
// that a later command knows which of squeue's tasks are its own.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "core/run_writer.h"
#include "tools/cli/run_folders.h"
#include "tools/cli/subprocess.h"
#include "tools/cli/sweep_plan.h"
#include "tools/cli/this_program.h"

namespace narrows::tools {
namespace {

using core::Status;

// The grid as --grid texts, as slurm.json records it: its tasks name points by their index in it.
nlohmann::json GridTexts(const SweepOptions& o) {
  nlohmann::json grid = nlohmann::json::array();
  for (const auto& axis : o.axes) {
    std::string values;
    for (const auto& v : axis.values) values += (values.empty() ? "" : ",") + v;
    grid.push_back(axis.key + "=" + values);
  }
  return grid;
}

std::string StatePath(const SweepPlan& plan) { return plan.dir + "/slurm.json"; }

core::Result<nlohmann::json> ReadState(const SweepPlan& plan) {
  if (!IsFile(StatePath(plan))) return nlohmann::json{{"jobs", nlohmann::json::array()}};
  auto state = ReadJson(StatePath(plan));
  if (!state.ok()) return state.status();
  if (!state->contains("jobs") || !(*state)["jobs"].is_array()) {
    return Status::InvalidArgument(StatePath(plan) + ": no list of jobs");
  }
  return *state;
}

// The tasks of this sweep's jobs that Slurm still holds: point -> its state (PENDING, RUNNING, ...).
core::Result<std::map<size_t, std::string>> ActivePoints(const nlohmann::json& state) {
  std::map<std::string, nlohmann::json> jobs;  // job id -> its points, in array order
  for (const auto& job : state["jobs"]) jobs[job.at("id").get<std::string>()] = job.at("points");
  std::map<size_t, std::string> active;
  if (jobs.empty()) return active;
  // One line per array task, pending ones too (-r): "<array job id> <task id> <state>".
  auto out = RunCapturing({"squeue", "--noheader", "--array", "--format=%F %K %T"});
  if (!out.ok()) return Status::InvalidArgument("sweep --slurm: " + out.status().message());
  if (out->exit_code != 0) {
    return Status::Internal("cannot ask Slurm which of the sweep's points are still queued or running: squeue exits " +
                            std::to_string(out->exit_code) + ": " + out->output);
  }
  std::istringstream lines(out->output);
  std::string job, task, st;
  while (lines >> job >> task >> st) {
    const auto it = jobs.find(job);
    if (it == jobs.end()) continue;
    // A pending array's tasks may come as one line, "0-3" or "1,3%2": every index in it.
    const std::string list = task.substr(0, task.find('%'));
    std::istringstream parts(list);
    for (std::string part; std::getline(parts, part, ',');) {
      const auto dash = part.find('-');
      try {
        const size_t lo = std::stoul(part.substr(0, dash));
        const size_t hi = dash == std::string::npos ? lo : std::stoul(part.substr(dash + 1));
        for (size_t p = lo; p <= hi; ++p) active[p] = st;
      } catch (const std::exception&) {
        // "N/A": not an array task; not one of ours.
      }
    }
  }
  return active;
}

std::vector<size_t> Unfinished(const SweepPlan& plan) {
  std::vector<size_t> out;
  for (size_t i = 0; i < plan.scenarios.size(); ++i) {
    if (!FinishedPoint(plan.scenarios[i])) out.push_back(i);
  }
  return out;
}

// Waits until Slurm holds none of this sweep's tasks, saying how many run and wait as that changes.
Status WaitForSlurm(const SweepPlan& plan, const SweepOptions& o, const nlohmann::json& state) {
  std::string said;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    auto active = ActivePoints(state);
    if (!active.ok()) return active.status();
    if (active->empty()) return Status::Ok();
    size_t running = 0;
    for (const auto& [point, st] : *active) running += st == "RUNNING" || st == "COMPLETING" ? 1 : 0;
    const std::string line = "sweep: waiting for " + std::to_string(active->size()) + " of " +
                             std::to_string(plan.scenarios.size()) + " points in Slurm (" + std::to_string(running) +
                             " running, " + std::to_string(active->size() - running) + " waiting)";
    if (line != said && !o.quiet) std::fprintf(stderr, "%s\n", line.c_str());
    said = line;
    // Every second at first (short points end soon), then every poll_s.
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::this_thread::sleep_for(std::chrono::duration<double>(waited < 30 ? std::min(1.0, o.slurm.poll_s) : o.slurm.poll_s));
  }
}

// The command every task runs: this sweep again, its one point; no shell between, but the batch
// script is one, so each argument is quoted.
core::Result<std::string> TaskCommand(const SweepPlan& plan, const SweepOptions& o) {
  auto self = ThisProgram();
  if (!self.ok()) return self.status();
  std::vector<std::string> args = {*self, "sweep", o.scenario_file, "--quiet", "-o", plan.dir};
  for (const auto& set : o.sets) args.insert(args.end(), {"--set", set});
  for (const auto& grid : GridTexts(o)) args.insert(args.end(), {"--grid", grid.get<std::string>()});
  if (!o.data_root.empty()) args.insert(args.end(), {"--data-root", o.data_root});
  if (!o.retime) args.emplace_back("--no-retime");
  std::string command = "exec";
  for (const auto& a : args) command += " " + ShellQuote(a);
  return command;
}

// One job array over `points`, after `after` (a job id, "" for none); its id.
core::Result<std::string> SubmitArray(const SweepPlan& plan, const SweepOptions& o, const std::vector<size_t>& points,
                                      const std::string& after, int part) {
  auto command = TaskCommand(plan, o);
  if (!command.ok()) return command.status();
  const std::string slurm_dir = plan.dir + "/slurm";
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(slurm_dir));
  std::string names = "names=(";
  for (const auto& sc : plan.scenarios) names += " " + ShellQuote(sc.name);
  names += ")\n";
  const std::string script_path = slurm_dir + "/points-" + std::to_string(part) + ".sh";
  const std::string script =
      "#!/bin/bash\n"
      "# One point of the sweep " + plan.name + " per task of a Slurm job array (written by narrows sweep --slurm).\n" +
      names + "log=" + ShellQuote(plan.dir) + "/${names[$SLURM_ARRAY_TASK_ID]}.log\n" + *command +
      " --point \"$SLURM_ARRAY_TASK_ID\" > \"$log\" 2>&1\n";
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(script_path, script));
  std::string array;
  for (size_t p : points) array += (array.empty() ? "" : ",") + std::to_string(p);
  if (o.slurm.max_running > 0) array += "%" + std::to_string(o.slurm.max_running);
  std::vector<std::string> argv = {"sbatch", "--parsable", "--job-name=" + plan.name + "-sweep", "--array=" + array,
                                   "--chdir=" + std::filesystem::current_path().string(),
                                   "--output=" + slurm_dir + "/%A_%a.out"};
  if (!o.slurm.partition.empty()) argv.push_back("--partition=" + o.slurm.partition);
  if (!o.slurm.time.empty()) argv.push_back("--time=" + o.slurm.time);
  // Threads the scenario asks for: that many cores per point (with 0, the point takes those Slurm gives it).
  if (plan.scenarios.front().threads > 0) argv.push_back("--cpus-per-task=" + std::to_string(plan.scenarios.front().threads));
  if (!after.empty()) argv.push_back("--dependency=afterany:" + after);
  argv.insert(argv.end(), o.slurm.sbatch_args.begin(), o.slurm.sbatch_args.end());
  argv.push_back(script_path);
  auto out = RunCapturing(argv);
  if (!out.ok()) return Status::InvalidArgument("sweep --slurm: " + out.status().message());
  std::string id = out->output.substr(0, out->output.find_first_of(";\n"));
  if (out->exit_code != 0 || id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    std::string shown;
    for (const auto& a : argv) shown += " " + a;
    return Status::Internal("sbatch refused the sweep's points (exit " + std::to_string(out->exit_code) + "):" + shown +
                            "\n" + out->output);
  }
  return id;
}

std::string LastLines(const std::string& path, size_t lines) {
  auto text = ReadText(path);
  if (!text.ok() || text->empty()) return "";
  size_t at = text->size() - (text->back() == '\n' ? 1 : 0);
  for (size_t n = 0; n < lines && at != std::string::npos && at > 0; ++n) at = text->rfind('\n', at - 1);
  return text->substr(at == std::string::npos ? 0 : at + 1);
}

std::string Names(const SweepPlan& plan, const std::vector<size_t>& points) {
  std::string out;
  for (size_t p : points) out += (out.empty() ? "" : ", ") + plan.scenarios[p].name;
  return out;
}

}  // namespace

core::Status CheckSlurmGrid(const std::string& dir, const SweepOptions& o) {
  const std::string path = dir + "/slurm.json";
  if (!IsFile(path)) return core::Status::Ok();
  auto state = ReadJson(path);
  if (!state.ok()) return state.status();
  if (!state->contains("grid") || (*state)["grid"] == GridTexts(o)) return core::Status::Ok();
  std::string given, recorded;
  for (const auto& g : GridTexts(o)) given += " --grid " + g.get<std::string>();
  for (const auto& g : (*state)["grid"]) recorded += " --grid " + g.get<std::string>();
  return Status::InvalidArgument(dir + ": its points were submitted to Slurm with" + recorded + "; this command gives" +
                                 given + " (the tasks name points by their place in the grid): give the same grid, or "
                                 "another folder with -o DIR");
}

core::Result<bool> SweepOnSlurm(const SweepPlan& plan, const SweepOptions& o) {
  // Every point finished (its folder says so): Slurm has nothing to add.
  if (Unfinished(plan).empty()) return true;
  auto state = ReadState(plan);
  if (!state.ok()) return state.status();
  auto active = ActivePoints(*state);
  if (!active.ok()) return active.status();
  if (!active->empty() && o.existing == OnOtherScenario::kReplace) {
    return Status::InvalidArgument("sweep --force: " + std::to_string(active->size()) +
                                   " of this sweep's points are still in Slurm (squeue); wait for them or scancel them first");
  }
  if (!active->empty() || o.slurm.gather) NARROWS_RETURN_IF_ERROR(WaitForSlurm(plan, o, *state));
  const std::vector<size_t> unfinished = Unfinished(plan);
  const size_t total = plan.scenarios.size();
  if (unfinished.empty()) return true;
  const bool submitted_before = !(*state)["jobs"].empty();
  if (o.slurm.gather) {
    std::string detail;
    for (size_t p : unfinished) {
      const std::string log = plan.dir + "/" + plan.scenarios[p].name + ".log";
      std::string tail = LastLines(log, 3), from = log;
      if (tail.empty()) {  // never ran, or ended before narrows wrote a line: what Slurm said of its task
        for (const auto& job : (*state)["jobs"]) {
          const std::string out = plan.dir + "/slurm/" + job.at("id").get<std::string>() + "_" + std::to_string(p) + ".out";
          if (const std::string said = LastLines(out, 2); !said.empty()) tail = said, from = out;
        }
      }
      detail += "\n  " + plan.scenarios[p].name + ": " +
                (!tail.empty() ? from + ":\n" + tail
                 : submitted_before ? "nothing written (" + log + " is empty or absent): its task never started"
                                    : "never submitted");
    }
    return Status::Internal(std::to_string(unfinished.size()) + " of " + std::to_string(total) + " points " +
                            (submitted_before ? "did not finish in Slurm" : "were never submitted") + ":" + detail +
                            (submitted_before ? "\nthe same sweep with --slurm submits them again" : "\nthe same sweep with --slurm submits them"));
  }
  // The points that train first; those timed with another point's losses after them.
  std::vector<size_t> trains, timed;
  for (size_t p : unfinished) (plan.retime_from[p] >= 0 ? timed : trains).push_back(p);
  const int part = static_cast<int>((*state)["jobs"].size());
  std::string first, second;
  if (!trains.empty()) {
    auto id = SubmitArray(plan, o, trains, "", part);
    if (!id.ok()) return id.status();
    first = *id;
    (*state)["jobs"].push_back({{"id", first}, {"points", trains}});
  }
  if (!timed.empty()) {
    auto id = SubmitArray(plan, o, timed, first, part + (first.empty() ? 0 : 1));
    if (!id.ok()) return id.status();
    second = *id;
    (*state)["jobs"].push_back({{"id", second}, {"points", timed}});
  }
  (*state)["grid"] = GridTexts(o);
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(StatePath(plan), state->dump(2) + "\n"));
  const std::string jobs = first.empty() ? second : second.empty() ? first : first + " and " + second + " (after " + first + ")";
  std::printf("sweep: %zu points, %zu finished, %zu %s to Slurm as job %s: %s\n", total, total - unfinished.size(),
              unfinished.size(), submitted_before ? "submitted again" : "submitted", jobs.c_str(),
              Names(plan, unfinished).c_str());
  if (plan.scenarios.front().compute.mode == core::ComputeMode::kMeasured) {
    std::printf("sweep: compute.mode is measured: each point's times are those of the node and cores its task "
                "gets, beside whatever else runs there; compute.mode: modelled gives times that do not depend on "
                "where a point runs\n");
  }
  std::printf("sweep: each point's output in %s/<point>.log; the same command with --gather (or again with --slurm) "
              "waits for them and writes the table\n",
              plan.dir.c_str());
  return false;
}

}  // namespace narrows::tools
