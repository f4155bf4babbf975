#include "tools/sweep_command.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <sstream>

#include "core/progress.h"
#include "core/run_writer.h"
#include "tools/report_command.h"
#include "tools/run_command.h"

namespace narrows::tools {
namespace {

using core::Status;

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

Status RunSweep(const SweepOptions& o) {
  // Every point is checked before any runs: a typo in the last value fails now, not in an hour.
  std::vector<std::vector<size_t>> points(1);
  for (const auto& axis : o.axes) {
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
  auto base = [&]() -> core::Result<core::Scenario> {
    std::vector<core::Override> overrides;
    for (const auto& s : o.sets) {
      auto ov = core::ParseOverride(s);
      if (!ov.ok()) return ov.status();
      overrides.push_back(*ov);
    }
    return core::LoadScenario(o.scenario_file, overrides);
  }();
  if (!base.ok()) return base.status();
  const std::string sweep_dir = base->output.dir + "/" + base->name + "-sweep";
  std::vector<core::Scenario> scenarios;
  for (const auto& p : points) {
    std::vector<core::Override> overrides;
    for (const auto& s : o.sets) overrides.push_back(*core::ParseOverride(s));
    for (size_t a = 0; a < o.axes.size(); ++a) {
      auto ov = core::ParseOverride(o.axes[a].key + "=" + o.axes[a].values[p[a]]);
      if (!ov.ok()) return ov.status();
      overrides.push_back(*ov);
    }
    overrides.push_back(*core::ParseOverride("output.dir=" + sweep_dir));
    overrides.push_back(*core::ParseOverride("name=" + Slug(o.axes, p)));
    auto sc = core::LoadScenario(o.scenario_file, overrides);
    if (!sc.ok()) return Status::InvalidArgument("grid point " + Slug(o.axes, p) + ": " + sc.status().message());
    scenarios.push_back(*sc);
  }
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(sweep_dir));
  // sweep.json: the axes and each point's folder, for `narrows report` and `narrows fit`; written
  // first, so an unfinished sweep can be reported too.
  nlohmann::json layout = {{"scenario", base->name}, {"axes", nlohmann::json::array()}, {"points", nlohmann::json::array()}};
  for (const auto& axis : o.axes) layout["axes"].push_back({{"key", axis.key}, {"values", axis.values}});
  for (size_t i = 0; i < points.size(); ++i) {
    nlohmann::json values = nlohmann::json::array();
    for (size_t a = 0; a < o.axes.size(); ++a) values.push_back(o.axes[a].values[points[i][a]]);
    layout["points"].push_back({{"name", scenarios[i].name}, {"values", values}});
  }
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(sweep_dir + "/sweep.json", layout.dump(2) + "\n"));

  auto finished = [](const core::Scenario& sc) -> std::optional<nlohmann::json> {
    std::ifstream in(sc.output.dir + "/" + sc.name + "/summary.json");
    if (!in) return std::nullopt;
    try {
      auto j = nlohmann::json::parse(in);
      if (j.at("results").size() == Entries(sc).size()) return j;
    } catch (const std::exception&) {
    }
    return std::nullopt;
  };
  size_t done = 0;
  for (const auto& sc : scenarios) done += finished(sc) ? 1 : 0;
  std::fprintf(stderr, "sweep: %zu points, %zu finished before, %zu to run -> %s\n", points.size(), done,
               points.size() - done, sweep_dir.c_str());
  RunOptions run;
  run.progress = o.quiet ? nullptr : stderr;
  run.data_root = o.data_root;
  // Over the points to run: one plain line after each (the point's own runs redraw theirs).
  core::Progress points_done("sweep: points run", static_cast<int64_t>(points.size() - done), o.quiet ? nullptr : stderr,
                             core::Progress::Style::kPlainLines);
  int64_t ran = 0;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    if (finished(scenarios[i])) continue;
    if (!o.quiet) std::fprintf(stderr, "sweep: point %zu/%zu %s\n", i + 1, scenarios.size(), scenarios[i].name.c_str());
    // The table of each point goes to stdout as `narrows run` prints it.
    NARROWS_RETURN_IF_ERROR(RunScenario(scenarios[i], run));
    points_done.Update(++ran, scenarios[i].name + " done");
  }

  // results.csv: one row per point and entry; speed-up over the point's first DDP entry.
  std::ostringstream csv;
  csv.precision(10);
  for (const auto& axis : o.axes) csv << Csv(axis.key) << ",";
  csv << "entry,algorithm,final_val_loss,time_s,bytes_sent_per_worker,peak_bytes_per_round,compute_utilization,"
         "outer_syncs,target_loss,time_to_target_s,bytes_to_target,speedup_at_target,speedup_vs_ddp\n";
  std::map<std::string, std::map<std::string, double>> speedups;  // first axis value -> entry -> speed-up
  for (size_t i = 0; i < scenarios.size(); ++i) {
    const auto summary = finished(scenarios[i]);
    if (!summary) return Status::Internal("point " + scenarios[i].name + " has no complete summary.json");
    double ddp_time = 0;
    for (const auto& r : summary->at("results")) {
      if (r.at("algorithm") == "ddp" && ddp_time == 0) ddp_time = r.at("time_s");
    }
    for (const auto& r : summary->at("results")) {
      const double t = r.at("time_s");
      for (size_t a = 0; a < o.axes.size(); ++a) csv << Csv(o.axes[a].values[points[i][a]]) << ",";
      auto cell = [](const nlohmann::json& j, const char* key) {  // empty when absent or null (never reached)
        return j.contains(key) && j[key].is_number() ? j[key].dump() : std::string();
      };
      csv << Csv(r.at("name")) << "," << r.at("algorithm").get<std::string>() << "," << r.at("final_val_loss") << ","
          << t << "," << r.at("bytes_sent_per_worker") << "," << cell(r, "peak_bytes_per_round") << ","
          << r.at("compute_utilization") << "," << r.at("outer_syncs") << "," << cell(*summary, "target_loss") << ","
          << cell(r, "time_to_target_s") << "," << cell(r, "bytes_to_target") << "," << cell(r, "speedup_at_target")
          << ",";
      if (ddp_time > 0) csv << ddp_time / t;
      csv << "\n";
      if (r.at("algorithm") != "ddp" && ddp_time > 0) {
        std::string row;
        for (size_t a = 0; a < o.axes.size(); ++a) {
          if (o.axes[a].key != "compare") row += (row.empty() ? "" : " ") + o.axes[a].values[points[i][a]];
        }
        speedups[row.empty() ? "-" : row][r.at("name")] = ddp_time / t;
      }
    }
  }
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(sweep_dir + "/results.csv", csv.str()));
  if (!speedups.empty()) {
    std::printf("wall-clock speed-up over DDP (time of DDP / time of the entry):\n");
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
  std::printf("sweep results: %s/results.csv\n", sweep_dir.c_str());
  if (!o.report) {
    std::printf("charts: narrows report %s (or sweep with --report); fits: narrows fit %s\n", sweep_dir.c_str(),
                sweep_dir.c_str());
    return Status::Ok();
  }
  auto path = WriteReport({sweep_dir}, "");
  if (!path.ok()) return path.status();
  std::printf("report: %s\n", path->c_str());
  return Status::Ok();
}

}  // namespace narrows::tools
