#include "tools/report_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/run_writer.h"
#include "core/scenario.h"
#include "tools/format.h"
#include "trainer/algorithms/outer.h"
#include "trainer/experiment.h"

namespace narrows::tools {

// Generated at build time from tools/report/ and Debian's Chart.js (tools/CMakeLists.txt).
extern const char kReportChartJs[];
extern const char kReportPageJs[];
extern const char kReportPageCss[];

namespace {

using core::Result;
using core::Status;
using json = nlohmann::json;

bool IsFile(const std::string& path) { return std::ifstream(path).good(); }

Result<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Result<json> ReadJson(const std::string& path) {
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  try {
    return json::parse(*text);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(path + ": not valid JSON: " + e.what());
  }
}

// One object per line; a missing file is an empty list when `required` is false.
Result<std::vector<json>> ReadJsonLines(const std::string& path, bool required) {
  std::ifstream in(path);
  if (!in) {
    if (required) return Status::NotFound(path + ": cannot be read");
    return std::vector<json>{};
  }
  std::vector<json> lines;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      lines.push_back(json::parse(line));
    } catch (const json::exception& e) {
      return Status::InvalidArgument(path + ":" + std::to_string(n) + ": not valid JSON: " + e.what());
    }
    if (!lines.back().is_object()) {
      return Status::InvalidArgument(path + ":" + std::to_string(n) + ": expected a JSON object");
    }
  }
  return lines;
}

struct Entry {
  json summary;
  std::vector<json> metrics;
  std::vector<json> events;
};

struct Run {
  std::string dir;
  std::string label;  // the run's name, or its folder's when the scenario is unnamed
  std::string clock;  // "virtual" or "wall"
  std::string scenario_yaml;
  std::vector<Entry> entries;
};

std::string BaseName(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const auto slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

// A run folder: summary.json, scenario.yaml and a folder per entry (metrics.jsonl, events.jsonl).
Result<Run> LoadRun(const std::string& dir) {
  Run run;
  run.dir = dir;
  auto summary = ReadJson(dir + "/summary.json");
  if (!summary.ok()) return summary.status();
  const std::string where = dir + "/summary.json";
  if (!summary->is_object() || !summary->contains("results") || !(*summary)["results"].is_array()) {
    return Status::InvalidArgument(where + ": expected an object with a \"results\" list");
  }
  run.label = summary->value("scenario", BaseName(dir));
  run.clock = summary->value("clock", "virtual");
  auto yaml = ReadText(dir + "/scenario.yaml");
  run.scenario_yaml = yaml.ok() ? *yaml : "";
  for (const auto& r : (*summary)["results"]) {
    if (!r.is_object() || !r.contains("name") || !r["name"].is_string()) {
      return Status::InvalidArgument(where + ": a result without a \"name\"");
    }
    Entry e;
    e.summary = r;
    const std::string entry_dir = dir + "/" + r["name"].get<std::string>();
    auto metrics = ReadJsonLines(entry_dir + "/metrics.jsonl", true);
    if (!metrics.ok()) return metrics.status();
    auto events = ReadJsonLines(entry_dir + "/events.jsonl", false);
    if (!events.ok()) return events.status();
    e.metrics = std::move(*metrics);
    e.events = std::move(*events);
    run.entries.push_back(std::move(e));
  }
  return run;
}

double Num(const json& j, const char* key, double fallback = NAN) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// An entry's time in summary.json: `time_s`, or in older files the clock's own key.
double EntryTime(const json& summary) {
  for (const char* key : {"time_s", "virtual_time_s", "wall_time_s"}) {
    const double t = Num(summary, key);
    if (!std::isnan(t)) return t;
  }
  return NAN;
}

// A metrics line's time: virtual in the emulator, measured in a deployment.
double TimeOf(const json& line) {
  const double v = Num(line, "virtual_time_s");
  return std::isnan(v) ? Num(line, "wall_time_s") : v;
}




json Axis(const std::string& label, bool log = false) { return {{"label", label}, {"log", log}}; }

json Series(const std::string& label, json points, const std::string& style = "line") {
  return {{"label", label}, {"points", std::move(points)}, {"style", style}};
}

json LineChart(const std::string& id, const std::string& title, json x, json y, json series) {
  return {{"type", "chart"}, {"kind", "line"}, {"id", id}, {"title", title},
          {"x", std::move(x)}, {"y", std::move(y)}, {"series", std::move(series)}};
}

json Table(const std::string& title, std::vector<std::string> columns, json rows) {
  return {{"type", "table"}, {"title", title}, {"columns", std::move(columns)}, {"rows", std::move(rows)}};
}

json Text(const std::string& text) { return {{"type", "text"}, {"text", text}}; }

std::string ClockLabel(const std::vector<Run>& runs) {
  std::set<std::string> clocks;
  for (const auto& r : runs) clocks.insert(r.clock);
  if (clocks.size() > 1) return "time (s; virtual for emulated runs, measured for deployments)";
  return *clocks.begin() == "wall" ? "measured wall-clock time (s)" : "virtual wall-clock time (s)";
}

// The charts that compare every entry of every run: losses, bytes and utilisation.
json ComparisonSection(const std::vector<Run>& runs) {
  const bool many = runs.size() > 1;
  json val_time = json::array(), val_tokens = json::array(), train_time = json::array();
  json bytes = json::array(), util = json::array(), batch = json::array();
  bool any_batch = false;
  json bar_labels = json::array(), bar_values = json::array();
  for (const auto& run : runs) {
    for (const auto& e : run.entries) {
      const std::string label = (many ? run.label + "/" : "") + e.summary["name"].get<std::string>();
      json vt = json::array(), vk = json::array(), tt = json::array(), b = json::array(), u = json::array();
      json gb = json::array();
      for (const auto& m : e.metrics) {
        if (const double g = Num(m, "global_batch"); !std::isnan(g)) gb.push_back({Num(m, "tokens"), g});
        const double t = TimeOf(m);
        if (std::isnan(t)) continue;
        const double val = Num(m, "val_loss");
        if (!std::isnan(val)) {
          vt.push_back({t, val});
          vk.push_back({Num(m, "tokens"), val});
        }
        const double train = Num(m, "train_loss");
        if (!std::isnan(train)) tt.push_back({t, train});
        b.push_back({t, Num(m, "bytes_sent", 0.0)});
        double sum = 0;
        int n = 0;
        for (const auto& w : m.value("workers", json::array())) {
          const double wt = Num(w, "time_s");
          if (wt > 0) {
            sum += Num(w, "compute_s", 0.0) / wt;
            ++n;
          }
        }
        if (n > 0) u.push_back({t, 100.0 * sum / n});
      }
      val_time.push_back(Series(label, vt));
      val_tokens.push_back(Series(label, vk));
      train_time.push_back(Series(label, tt));
      bytes.push_back(Series(label, b));
      util.push_back(Series(label, u));
      any_batch = any_batch || !gb.empty();
      batch.push_back(Series(label, gb));
      bar_labels.push_back(label);
      bar_values.push_back(100.0 * Num(e.summary, "compute_utilization", 0.0));
    }
  }
  const std::string clock = ClockLabel(runs);
  json blocks = json::array();
  blocks.push_back(LineChart("val-loss-time", "Validation loss against wall-clock time", Axis(clock),
                             Axis("validation loss (nats/token)"), val_time));
  blocks.push_back(LineChart("val-loss-tokens", "Validation loss against tokens (all workers)",
                             Axis("tokens"), Axis("validation loss (nats/token)"), val_tokens));
  blocks.push_back(LineChart("train-loss-time", "Training loss (mean over workers) against time", Axis(clock),
                             Axis("training loss (nats/token)"), train_time));
  blocks.push_back(LineChart("bytes-time", "Bytes sent per worker over time", Axis(clock),
                             Axis("bytes sent per worker (cumulative)", true), bytes));
  if (any_batch) {  // adaptive batch sizes: the schedule each entry took
    blocks.push_back(LineChart("batch-tokens", "Global batch (sequences per update, all workers) against tokens",
                               Axis("tokens"), Axis("sequences per update"), batch));
  }
  blocks.push_back(LineChart("utilization-time", "Compute utilisation so far (mean over workers)", Axis(clock),
                             Axis("compute time / wall-clock time (%)"), util));
  blocks.push_back({{"type", "chart"}, {"kind", "bar"}, {"id", "utilization"},
                    {"title", "Compute utilisation at the end"}, {"categories", bar_labels},
                    {"x", Axis("")}, {"y", Axis("compute time / wall-clock time (%)")},
                    {"series", json::array({{{"label", "compute utilisation"}, {"values", bar_values}}})}});
  return {{"title", many ? "All runs compared" : "Entries compared"}, {"blocks", blocks}};
}

json SummaryTable(const Run& run) {
  json rows = json::array();
  const double first = run.entries.empty() ? NAN : EntryTime(run.entries.front().summary);
  for (const auto& e : run.entries) {
    const json& s = e.summary;
    const double t = EntryTime(s);
    const double target = Num(s, "time_to_target_s");
    rows.push_back({s.value("name", ""), s.value("algorithm", ""), Printf("%.0f", Num(s, "workers")),
                    Printf("%.4f", Num(s, "final_val_loss")), Printf("%.1f", t),
                    std::isnan(target) ? std::string("-") : Printf("%.1f", target),
                    BytesOrDash(Num(s, "bytes_sent_per_worker")), BytesOrDash(Num(s, "bytes_to_target")),
                    BytesOrDash(Num(s, "peak_bytes_per_round")), Printf("%.0f", Num(s, "outer_syncs", 0.0)),
                    Printf("%.0f%%", 100.0 * Num(s, "compute_utilization", 0.0)), Printf("%.2fx", first / t),
                    std::isnan(Num(s, "speedup_at_target")) ? std::string("-")
                                                            : Printf("%.2fx", Num(s, "speedup_at_target"))});
  }
  return Table("Summary", {"entry", "algorithm", "workers", "final val loss", run.clock + " time (s)",
                           "to target (s)", "sent/worker", "sent to target", "peak/round", "outer syncs", "compute",
                           "speed-up vs first", "at equal loss"},
               rows);
}

// Per worker, what it did between consecutive metrics lines, from the cumulative compute,
// communication and absence times: compute, then communication, then absent, then idle (the rest),
// each interval laid out in that order; merged where a state continues. Events are markers.
json Timeline(const Run& run, const Entry& e, const std::string& id) {
  std::map<int, double> t_prev, c_prev, m_prev, a_prev;
  std::map<int, json> last;  // worker -> its last span, to merge
  json spans = json::array();
  auto add = [&](int w, double from, double to, const char* state) {
    if (!(to - from > 1e-9)) return;
    auto it = last.find(w);
    if (it != last.end() && it->second[3] == state && std::abs(it->second[2].get<double>() - from) < 1e-9) {
      it->second[2] = to;
      return;
    }
    if (it != last.end()) spans.push_back(it->second);
    last[w] = json::array({w, from, to, state});
  };
  int workers = 0;
  for (const auto& m : e.metrics) {
    for (const auto& wj : m.value("workers", json::array())) {
      const int w = wj.value("worker", 0);
      workers = std::max(workers, w + 1);
      const double t = Num(wj, "time_s", 0.0), c = Num(wj, "compute_s", 0.0), k = Num(wj, "comm_s", 0.0),
                   a = Num(wj, "idle_s", 0.0);
      double at = t_prev[w];
      const double dc = std::max(0.0, c - c_prev[w]), dk = std::max(0.0, k - m_prev[w]),
                   da = std::max(0.0, a - a_prev[w]);
      add(w, at, std::min(t, at + dc), "compute");
      at = std::min(t, at + dc);
      add(w, at, std::min(t, at + dk), "communication");
      at = std::min(t, at + dk);
      add(w, at, std::min(t, at + da), "absent");
      at = std::min(t, at + da);
      add(w, at, t, "idle");
      t_prev[w] = std::max(t_prev[w], t);
      c_prev[w] = c;
      m_prev[w] = k;
      a_prev[w] = a;
    }
  }
  for (auto& [w, s] : last) spans.push_back(s);
  std::map<int64_t, double> sync_time;
  json markers = json::array();
  for (const auto& ev : e.events) {
    const std::string type = ev.value("type", "");
    const double t = Num(ev, "time");
    if (type == "outer_sync") {
      sync_time[ev.value("step", int64_t{0})] = t;
      for (const auto& p : ev.value("participants", json::array())) markers.push_back({p, t, "outer sync"});
    } else if (type == "dropped_outer_gradient") {
      const auto it = sync_time.find(ev.value("step", int64_t{0}));
      if (it != sync_time.end()) markers.push_back({ev.value("worker", 0), it->second, "outer gradient dropped"});
    } else if (type == "join") {
      for (const auto& w : ev.value("workers", json::array())) markers.push_back({w, t, "join"});
    } else if ((type == "leave" || type == "crash" || type == "dropped") && !std::isnan(t)) {
      markers.push_back({ev.value("worker", 0), t, type});
    }
  }
  return {{"type", "chart"}, {"kind", "timeline"}, {"id", id},
          {"title", "Timeline of " + e.summary.value("name", std::string()) +
                        " per worker (resolution: one metrics line, output.log_every steps)"},
          {"workers", workers}, {"x", Axis(ClockLabel({run}))}, {"spans", spans}, {"markers", markers}};
}

json RunSection(const Run& run, int index) {
  json blocks = json::array();
  blocks.push_back(Text(run.dir + " — " + (run.clock == "wall" ? "deployment, measured time" : "emulated, virtual time")));
  blocks.push_back(SummaryTable(run));
  for (size_t i = 0; i < run.entries.size(); ++i) {
    blocks.push_back(Timeline(run, run.entries[i], "timeline-" + std::to_string(index) + "-" + std::to_string(i)));
  }
  if (!run.scenario_yaml.empty()) blocks.push_back({{"type", "pre"}, {"title", "Scenario (resolved)"}, {"text", run.scenario_yaml}});
  return {{"title", "Run " + run.label}, {"blocks", blocks}};
}

struct SweepPoint {
  std::string name;
  std::vector<std::string> values;
  std::optional<Run> run;
  std::optional<core::Scenario> scenario;
};

struct Sweep {
  std::string dir;
  std::string label;
  std::vector<std::string> axes;
  std::vector<SweepPoint> points;
};

Result<Sweep> LoadSweep(const std::string& dir) {
  auto layout = ReadJson(dir + "/sweep.json");
  if (!layout.ok()) return layout.status();
  Sweep sweep;
  sweep.dir = dir;
  try {
    sweep.label = layout->at("scenario").get<std::string>();
    for (const auto& a : layout->at("axes")) sweep.axes.push_back(a.at("key").get<std::string>());
    for (const auto& p : layout->at("points")) {
      SweepPoint point;
      point.name = p.at("name").get<std::string>();
      point.values = p.at("values").get<std::vector<std::string>>();
      sweep.points.push_back(std::move(point));
    }
  } catch (const json::exception& e) {
    return Status::InvalidArgument(dir + "/sweep.json: " + e.what());
  }
  for (auto& point : sweep.points) {
    const std::string pdir = dir + "/" + point.name;
    if (!IsFile(pdir + "/summary.json")) continue;  // not run yet
    auto run = LoadRun(pdir);
    if (!run.ok()) return run.status();
    auto text = ReadText(pdir + "/scenario.yaml");
    if (!text.ok()) return text.status();
    auto sc = core::ParseScenario(*text, pdir + "/scenario.yaml");
    if (!sc.ok()) return sc.status();
    point.run = std::move(*run);
    point.scenario = std::move(*sc);
  }
  return sweep;
}

const core::AlgorithmSpec* FindEntry(const core::Scenario& sc, const std::string& name) {
  for (const auto& a : sc.compare) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

double DdpTime(const Run& run) {
  for (const auto& e : run.entries) {
    if (e.summary.value("algorithm", "") == "ddp") return EntryTime(e.summary);
  }
  return NAN;
}

json SweepHeatMaps(const Sweep& sweep) {
  // Grouped by the axes that are neither the network nor the compare list (e.g. workers).
  struct Cell {
    double bandwidth;
    std::string entry;
    int64_t h;
    double speedup;
  };
  std::map<std::string, std::vector<Cell>> groups;
  for (const auto& p : sweep.points) {
    if (!p.run) continue;
    const double ddp = DdpTime(*p.run);
    if (std::isnan(ddp)) continue;
    std::string group;
    for (size_t a = 0; a < sweep.axes.size(); ++a) {
      if (sweep.axes[a].rfind("network.", 0) == 0 || sweep.axes[a] == "compare") continue;
      group += (group.empty() ? "" : ", ") + sweep.axes[a] + " = " + p.values[a];
    }
    for (const auto& e : p.run->entries) {
      if (e.summary.value("algorithm", "") != "diloco") continue;
      const auto* spec = FindEntry(*p.scenario, e.summary.value("name", ""));
      const auto* outer = spec ? dynamic_cast<const trainer::OuterOptions*>(spec->options.get()) : nullptr;
      groups[group].push_back({p.scenario->network.link.bandwidth_bps, e.summary.value("name", ""),
                               outer ? outer->inner_steps : 0, ddp / EntryTime(e.summary)});
    }
  }
  json blocks = json::array();
  for (const auto& [group, cells] : groups) {
    std::set<double, std::greater<>> bandwidths;
    std::vector<std::pair<int64_t, std::string>> columns;
    for (const auto& c : cells) {
      bandwidths.insert(c.bandwidth);
      if (std::find(columns.begin(), columns.end(), std::make_pair(c.h, c.entry)) == columns.end()) {
        columns.emplace_back(c.h, c.entry);
      }
    }
    std::sort(columns.begin(), columns.end());
    json rows = json::array(), column_labels = json::array(), values = json::array();
    for (const auto& [h, entry] : columns) column_labels.push_back(entry + " (H=" + std::to_string(h) + ")");
    for (double bw : bandwidths) {
      rows.push_back(Bandwidth(bw));
      json row = json::array();
      for (const auto& col : columns) {
        double v = NAN;
        for (const auto& c : cells) {
          if (c.bandwidth == bw && c.h == col.first && c.entry == col.second) v = c.speedup;
        }
        row.push_back(std::isnan(v) ? json() : json(v));
      }
      values.push_back(row);
    }
    blocks.push_back({{"type", "heatmap"},
                      {"title", "DiLoCo's wall-clock speed-up over DDP per (bandwidth, H)" +
                                    (group.empty() ? std::string() : " — " + group)},
                      {"row_label", "access-link bandwidth"}, {"column_label", "entry"},
                      {"rows", rows}, {"columns", column_labels}, {"values", values}});
  }
  return blocks;
}

json FitBlocks(const std::string& dir, int index) {
  json blocks = json::array();
  auto fits = FitSweep(dir);
  if (!fits.ok()) return blocks;
  json rows = json::array(), series = json::array();
  bool by_params = false;
  for (const auto& f : *fits) by_params = by_params || (f.skipped.empty() && f.fit.uses_params);
  for (const auto& f : *fits) {
    if (!f.skipped.empty()) {
      rows.push_back({f.entry, std::to_string(f.points.size()), "not fitted: " + f.skipped, "", "", "", ""});
      continue;
    }
    const auto& p = f.fit;
    rows.push_back({f.entry, std::to_string(p.points), Printf("%.4g", p.a) + " ± " + Printf("%.2g", p.a_err),
                    p.uses_params ? Printf("%.4f", p.alpha) + " ± " + Printf("%.4f", p.alpha_err) : "-",
                    p.uses_workers ? Printf("%.4f", p.beta) + " ± " + Printf("%.4f", p.beta_err) : "-",
                    Printf("%.3f", p.r2), Printf("%.2f%%", 100.0 * p.rms_rel_error)});
    // Points by the other variable; a fit line through each of its values.
    std::map<double, json> groups;
    double lo = INFINITY, hi = 0;
    for (const auto& pt : f.points) {
      const double x = by_params ? pt.params : pt.workers;
      groups[by_params ? pt.workers : pt.params].push_back({x, pt.loss});
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    for (const auto& [other, pts] : groups) {
      const std::string suffix = groups.size() > 1 ? (by_params ? " M=" : " N=") + Printf("%g", other) : "";
      series.push_back(Series(f.entry + suffix, pts, "points"));
      json line = json::array();
      for (int i = 0; i <= 20; ++i) {
        const double x = lo * std::pow(hi / lo, i / 20.0);
        line.push_back({x, by_params ? p.Predict(x, other) : p.Predict(other, x)});
      }
      series.push_back(Series(f.entry + suffix + " fit", line, "dashed"));
    }
  }
  blocks.push_back(Table("Scaling fit: L = A · N^α · M^β (least squares in log space, ± one standard error)",
                         {"entry", "points", "A", "α (model size N)", "β (workers M)", "R² (log L)", "rms error"},
                         rows));
  if (!series.empty()) {
    blocks.push_back(LineChart("fit-" + std::to_string(index), "Final validation loss and the fitted power law",
                               Axis(by_params ? "parameters N" : "workers M", true),
                               Axis("final validation loss (nats/token)", true), series));
  }
  return blocks;
}

// A sweep over a numeric axis with three or more values (a learning rate, a depth): the final
// validation loss against it, one line per value of the other axes (and entry), so that the best
// value of one axis can be seen moving, or not, with another. The last such axis is the x axis.
json SweepLossCurves(const Sweep& sweep, int index) {
  json blocks = json::array();
  int x_axis = -1;
  bool log = false;
  for (size_t a = 0; a < sweep.axes.size(); ++a) {
    std::set<double> values;
    bool numeric = true;
    for (const auto& p : sweep.points) {
      char* end = nullptr;
      const double v = std::strtod(p.values[a].c_str(), &end);
      numeric = numeric && end != p.values[a].c_str() && *end == '\0';
      values.insert(v);
    }
    if (numeric && values.size() >= 3) {
      x_axis = static_cast<int>(a);
      log = *values.begin() > 0 && *values.rbegin() / *values.begin() >= 8;
    }
  }
  if (x_axis < 0) return blocks;
  std::vector<std::pair<std::string, json>> lines;  // in the sweep's grid order
  auto line = [&](const std::string& label) -> json& {
    for (auto& l : lines) {
      if (l.first == label) return l.second;
    }
    lines.emplace_back(label, json::array());
    return lines.back().second;
  };
  for (const auto& p : sweep.points) {
    if (!p.run) continue;
    std::string group;
    for (size_t a = 0; a < sweep.axes.size(); ++a) {
      if (static_cast<int>(a) != x_axis) group += (group.empty() ? "" : ", ") + sweep.axes[a] + " = " + p.values[a];
    }
    const double x = std::strtod(p.values[static_cast<size_t>(x_axis)].c_str(), nullptr);
    for (const auto& e : p.run->entries) {
      const double loss = Num(e.summary, "final_val_loss");
      if (!std::isfinite(loss)) continue;
      std::string label = group;
      if (p.run->entries.size() > 1) label += (label.empty() ? "" : ", ") + e.summary.value("name", std::string());
      line(label.empty() ? "final loss" : label).push_back({x, loss});
    }
  }
  json series = json::array();
  for (auto& [label, pts] : lines) {
    std::sort(pts.begin(), pts.end());
    series.push_back(Series(label, pts, "line"));
  }
  const std::string& key = sweep.axes[static_cast<size_t>(x_axis)];
  blocks.push_back(LineChart("curves-" + std::to_string(index), "Final validation loss against " + key,
                             Axis(key, log), Axis("final validation loss (nats/token)"), series));
  return blocks;
}

json SweepSection(const Sweep& sweep, int index) {
  json blocks = json::array();
  json rows = json::array();
  size_t finished = 0;
  for (const auto& p : sweep.points) {
    if (!p.run) continue;
    ++finished;
    const double ddp = DdpTime(*p.run);
    for (const auto& e : p.run->entries) {
      json row = p.values;
      const json& s = e.summary;
      const double t = EntryTime(s);
      for (const std::string& cell :
           {s.value("name", std::string()), Printf("%.4f", Num(s, "final_val_loss")), Printf("%.1f", t),
            BytesOrDash(Num(s, "bytes_sent_per_worker")), Printf("%.0f%%", 100.0 * Num(s, "compute_utilization", 0.0)),
            Printf("%.0f", Num(s, "outer_syncs", 0.0)), std::isnan(ddp) ? std::string("-") : Printf("%.2fx", ddp / t)}) {
        row.push_back(cell);
      }
      rows.push_back(row);
    }
  }
  blocks.push_back(Text(sweep.dir + " — " + std::to_string(finished) + " of " + std::to_string(sweep.points.size()) +
                        " points finished"));
  for (auto& h : SweepHeatMaps(sweep)) blocks.push_back(h);
  for (auto& c : SweepLossCurves(sweep, index)) blocks.push_back(c);
  for (auto& f : FitBlocks(sweep.dir, index)) blocks.push_back(f);
  std::vector<std::string> columns = sweep.axes;
  for (const char* c : {"entry", "final val loss", "time (s)", "sent/worker", "compute", "outer syncs", "speed-up vs DDP"}) {
    columns.push_back(c);
  }
  blocks.push_back(Table("Every point", columns, rows));
  return {{"title", "Sweep " + sweep.label}, {"blocks", blocks}};
}

std::string EscapeHtml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// JSON inside <script>: "</" would end the element.
std::string ScriptSafe(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') out += "\\";
  }
  return out;
}

}  // namespace

Result<std::vector<EntryFit>> FitSweep(const std::string& sweep_dir) {
  auto sweep = LoadSweep(sweep_dir);
  if (!sweep.ok()) return sweep.status();
  std::map<std::string, EntryFit> by_entry;
  std::vector<std::string> order;
  for (const auto& p : sweep->points) {
    if (!p.run) continue;
    const double params = static_cast<double>(trainer::CostOf(p.scenario->model).params);
    for (const auto& e : p.run->entries) {
      const std::string name = e.summary.value("name", "");
      if (!by_entry.count(name)) order.push_back(name);
      by_entry[name].entry = name;
      by_entry[name].points.push_back({params, Num(e.summary, "workers"), Num(e.summary, "final_val_loss")});
    }
  }
  std::vector<EntryFit> fits;
  for (const auto& name : order) {
    EntryFit f = by_entry[name];
    auto fit = FitPowerLaw(f.points);
    if (fit.ok()) {
      f.fit = *fit;
    } else {
      f.skipped = fit.status().message().substr(5);  // without "fit: "
    }
    fits.push_back(f);
  }
  if (fits.empty()) return Status::InvalidArgument(sweep_dir + ": no finished points to fit");
  return fits;
}

Status PrintFits(const std::string& sweep_dir) {
  auto fits = FitSweep(sweep_dir);
  if (!fits.ok()) return fits.status();
  std::printf("L = A · N^α · M^β, least squares on log L; ± one standard error (N parameters, M workers)\n");
  std::printf("%-20s %6s %22s %20s %20s %7s %9s\n", "entry", "points", "A", "alpha", "beta", "R2", "rms err");
  for (const auto& f : *fits) {
    if (!f.skipped.empty()) {
      std::printf("%-20s %6zu   not fitted: %s\n", f.entry.c_str(), f.points.size(), f.skipped.c_str());
      continue;
    }
    const auto& p = f.fit;
    auto pm = [](bool used, double v, double e) {
      return used ? Printf("%.4f", v) + " ± " + Printf("%.4f", e) : std::string("-");
    };
    std::printf("%-20s %6d %22s %20s %20s %7.3f %8.2f%%\n", f.entry.c_str(), p.points,
                (Printf("%.4g", p.a) + " ± " + Printf("%.2g", p.a_err)).c_str(), pm(p.uses_params, p.alpha, p.alpha_err).c_str(),
                pm(p.uses_workers, p.beta, p.beta_err).c_str(), p.r2, 100.0 * p.rms_rel_error);
  }
  return Status::Ok();
}

Result<json> BuildReport(const std::vector<std::string>& dirs, const std::vector<std::string>& entries) {
  if (dirs.empty()) return Status::InvalidArgument("report: no run or sweep folder given");
  std::vector<Run> runs;
  std::vector<Sweep> sweeps;
  for (const auto& dir : dirs) {
    if (IsFile(dir + "/sweep.json")) {
      auto s = LoadSweep(dir);
      if (!s.ok()) return s.status();
      sweeps.push_back(std::move(*s));
    } else if (IsFile(dir + "/summary.json")) {
      auto r = LoadRun(dir);
      if (!r.ok()) return r.status();
      runs.push_back(std::move(*r));
    } else {
      return Status::NotFound(dir + ": not a run folder (no summary.json) nor a sweep folder (no sweep.json)");
    }
  }
  for (const auto& name : entries) {
    bool found = false;
    for (auto& run : runs) {
      for (const auto& e : run.entries) found = found || e.summary.value("name", "") == name;
    }
    if (!found) return Status::InvalidArgument("report: no run has an entry named '" + name + "'");
  }
  if (!entries.empty()) {
    for (auto& run : runs) {
      std::vector<Entry> kept;
      for (auto& e : run.entries) {
        if (std::find(entries.begin(), entries.end(), e.summary.value("name", "")) != entries.end()) {
          kept.push_back(std::move(e));
        }
      }
      run.entries = std::move(kept);
    }
  }
  json sections = json::array();
  std::string title;
  try {
    if (!runs.empty()) sections.push_back(ComparisonSection(runs));
    for (size_t i = 0; i < runs.size(); ++i) {
      sections.push_back(RunSection(runs[i], static_cast<int>(i)));
      title += (title.empty() ? "" : ", ") + runs[i].label;
    }
    for (size_t i = 0; i < sweeps.size(); ++i) {
      sections.push_back(SweepSection(sweeps[i], static_cast<int>(i)));
      title += (title.empty() ? "" : ", ") + sweeps[i].label + " (sweep)";
    }
  } catch (const json::exception& e) {
    // A field of the wrong type in a file that parsed.
    return Status::InvalidArgument("report: unexpected content in the run files: " + std::string(e.what()));
  }
  return json{{"title", "narrows report: " + title}, {"sections", sections}};
}

std::string RenderReport(const json& report) {
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>";
  html += EscapeHtml(report.value("title", "narrows report"));
  html += "</title>\n<style>\n";
  html += kReportPageCss;
  html += "</style>\n<script>\n";
  html += kReportChartJs;
  html += "\n</script>\n</head>\n<body>\n<div id=\"report\"></div>\n";
  html += "<script type=\"application/json\" id=\"report-data\">";
  html += ScriptSafe(report.dump());
  html += "</script>\n<script>\n";
  html += kReportPageJs;
  html += "\n</script>\n</body>\n</html>\n";
  return html;
}

Result<std::string> WriteReport(const std::vector<std::string>& dirs, const std::string& output,
                                const std::vector<std::string>& entries) {
  auto report = BuildReport(dirs, entries);
  if (!report.ok()) return report.status();
  std::string path = output;
  if (path.empty()) {
    std::string first = dirs.front();
    while (first.size() > 1 && first.back() == '/') first.pop_back();
    path = first + "/report.html";
  }
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(path, RenderReport(*report)));
  return path;
}

}  // namespace narrows::tools
