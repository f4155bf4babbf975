// The sweep folder's section of the report.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/scenario.h"
#include "tools/cli/fit_command.h"
#include "tools/cli/format.h"
#include "tools/cli/report_blocks.h"
#include "trainer/algorithms/outer.h"

namespace narrows::tools::page {

namespace {

const core::AlgorithmSpec* FindEntry(const core::Scenario& sc, const std::string& name) {
  for (const auto& a : sc.compare) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

// The point's baseline entry (baseline: true, or the first), the reference of its speed-ups (null
// where the point has no entry).
const Entry* BaselineEntry(const Run& run) {
  return run.entries.empty() ? nullptr : &run.entries[BaselineIndex(run)];
}

bool IsBaseline(const Run& run, const Entry& e) { return BaselineEntry(run) == &e; }

// "the baseline (NAME)" for titles, NAME the first point's baseline entry; "the baseline" where
// points differ.
std::string BaselineLabel(const Sweep& sweep) {
  std::string name;
  for (const auto& p : sweep.points) {
    const Entry* b = p.run ? BaselineEntry(*p.run) : nullptr;
    if (b == nullptr) continue;
    const std::string here = b->summary.value("name", std::string());
    if (!name.empty() && here != name) return "the baseline";
    name = here;
  }
  return name.empty() ? "the baseline" : name;
}

double BaselineTime(const Run& run) {
  const Entry* base = BaselineEntry(run);
  return base ? EntryTime(base->summary) : NAN;
}

// The two speed-ups of an entry over its point's baseline: at equal steps (the baseline's time over
// the entry's) and at equal loss (the baseline's time to the point's target loss over the entry's;
// NaN where either never reached it).
double SpeedupAtEqualSteps(const Run& run, const Entry& e) { return BaselineTime(run) / EntryTime(e.summary); }
double SpeedupAtEqualLoss(const Run& run, const Entry& e) {
  const Entry* baseline = BaselineEntry(run);
  if (baseline == nullptr) return NAN;
  const double base = Num(baseline->summary, "time_to_target_s"), mine = Num(e.summary, "time_to_target_s");
  return base > 0 && mine > 0 ? base / mine : NAN;
}

enum class Metric { kEqualLoss, kEqualSteps };

// What network.bandwidth_bps sets: each worker's access link, or on islands each island's WAN link.
std::string BandwidthLabel(const Sweep& sweep) {
  for (const auto& p : sweep.points) {
    if (p.scenario) return p.scenario->network.topology == core::TopologyKind::kIslands ? "WAN bandwidth" : "access-link bandwidth";
  }
  return "access-link bandwidth";
}

json SweepHeatMaps(const Sweep& sweep, Metric metric) {
  // Grouped by the axes that are neither the network nor the compare list (e.g. workers).
  struct Cell {
    double bandwidth;
    std::string entry;
    int64_t h;
    double speedup;
  };
  std::map<std::string, std::vector<Cell>> groups;
  for (const auto& p : sweep.points) {
    if (!p.run || BaselineEntry(*p.run) == nullptr) continue;
    std::string group;
    for (size_t a = 0; a < sweep.axes.size(); ++a) {
      if (sweep.axes[a].rfind("network.", 0) == 0 || sweep.axes[a] == "compare") continue;
      group += (group.empty() ? "" : ", ") + sweep.axes[a] + " = " + p.values[a];
    }
    for (const auto& e : p.run->entries) {
      if (IsBaseline(*p.run, e)) continue;
      const auto* spec = FindEntry(*p.scenario, e.summary.value("name", ""));
      const auto* outer = spec ? dynamic_cast<const trainer::OuterOptions*>(spec->options.get()) : nullptr;
      groups[group].push_back({p.scenario->network.link.bandwidth_bps, e.summary.value("name", ""),
                               outer ? outer->inner_steps : 0,
                               metric == Metric::kEqualLoss ? SpeedupAtEqualLoss(*p.run, e) : SpeedupAtEqualSteps(*p.run, e)});
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
    for (const auto& [h, entry] : columns) column_labels.push_back(h > 0 ? entry + " (H=" + std::to_string(h) + ")" : entry);
    for (double bw : bandwidths) {
      rows.push_back(Bandwidth(bw));
      json row = json::array();
      for (const auto& col : columns) {
        double v = NAN;
        for (const auto& c : cells) {
          if (c.bandwidth == bw && c.h == col.first && c.entry == col.second) v = c.speedup;
        }
        row.push_back(std::isfinite(v) ? json(v) : json());
      }
      values.push_back(row);
    }
    const std::string base = BaselineLabel(sweep);
    const std::string title =
        metric == Metric::kEqualLoss
            ? "Speed-up over " + base + " at equal loss: " + base +
                  "'s time to each point's target loss over the entry's (- : one never reached it)"
            : "Speed-up over " + base + " at equal steps: " + base + "'s wall-clock time over the entry's, whatever the losses";
    blocks.push_back({{"type", "heatmap"},
                      {"title", title + (group.empty() ? std::string() : " — " + group)},
                      {"row_label", BandwidthLabel(sweep)}, {"column_label", "entry"},
                      {"rows", rows}, {"columns", column_labels}, {"values", values}});
  }
  return blocks;
}

// Per entry, the speed-up over the baseline at equal loss against the access-link bandwidth (one line per
// entry and value of the other axes), and every point's final loss against its bytes.
json SweepCharts(const Sweep& sweep, int index) {
  std::map<std::string, json> speedups, losses;
  std::set<double> bandwidths;
  for (const auto& p : sweep.points) {
    if (!p.run) continue;
    std::string group;
    for (size_t a = 0; a < sweep.axes.size(); ++a) {
      if (sweep.axes[a].rfind("network.", 0) == 0 || sweep.axes[a] == "compare") continue;
      group += (group.empty() ? "" : ", ") + sweep.axes[a] + " = " + p.values[a];
    }
    const double bw = p.scenario->network.link.bandwidth_bps;
    bandwidths.insert(bw);
    for (const auto& e : p.run->entries) {
      const std::string label = e.summary.value("name", std::string()) + (group.empty() ? "" : " (" + group + ")");
      const double loss = Num(e.summary, "final_val_loss"), bytes = Num(e.summary, "bytes_sent_per_worker");
      if (std::isfinite(loss) && bytes > 0) losses[label].push_back({bytes, loss});
      if (IsBaseline(*p.run, e)) continue;
      const double s = SpeedupAtEqualLoss(*p.run, e);
      if (std::isfinite(s)) speedups[label].push_back({bw, s});
    }
  }
  json blocks = json::array();
  auto series_of = [](std::map<std::string, json>& by_label, const char* style) {
    json series = json::array();
    for (auto& [label, pts] : by_label) {
      std::sort(pts.begin(), pts.end());
      series.push_back(Series(label, pts, style));
    }
    return series;
  };
  if (bandwidths.size() >= 2 && !speedups.empty()) {
    blocks.push_back(LineChart("speedup-bw-" + std::to_string(index),
                               "Speed-up over " + BaselineLabel(sweep) + " at equal loss against the " + BandwidthLabel(sweep) +
                                   " (above 1: faster than " + BaselineLabel(sweep) + ")",
                               Axis(BandwidthLabel(sweep) + " (bit/s)", true),
                               Axis("speed-up over " + BaselineLabel(sweep) + " at equal loss", true),
                               series_of(speedups, "line")));
  }
  if (!losses.empty()) {
    blocks.push_back(LineChart("loss-bytes-" + std::to_string(index),
                               "Final validation loss against bytes sent per worker (every point)",
                               Axis("bytes sent per worker", true), Axis("final validation loss (nats/token)"),
                               series_of(losses, "points")));
  }
  return blocks;
}

json FitBlocks(const Sweep& sweep, int index) {
  json blocks = json::array();
  auto fits = FitSweep(sweep);
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

}  // namespace

json SweepSection(const Sweep& sweep, int index) {
  json blocks = json::array();
  json rows = json::array();
  size_t finished = 0;
  for (const auto& p : sweep.points) {
    if (!p.run) continue;
    ++finished;
    for (const auto& e : p.run->entries) {
      json row = p.values;
      const json& s = e.summary;
      const double steps = SpeedupAtEqualSteps(*p.run, e), loss = SpeedupAtEqualLoss(*p.run, e);
      const double to_target = Num(s, "time_to_target_s");
      for (const std::string& cell :
           {s.value("name", std::string()), Printf("%.4f", Num(s, "final_val_loss")), Seconds(EntryTime(s)),
            BytesOrDash(Num(s, "bytes_sent_per_worker")), Printf("%.0f%%", 100.0 * Num(s, "compute_utilization", 0.0)),
            Printf("%.0f", Num(s, "outer_syncs", 0.0)), std::isfinite(steps) ? Printf("%.2fx", steps) : std::string("-"),
            std::isfinite(p.run->target_loss) ? Printf("%.4f", p.run->target_loss) : std::string("-"),
            std::isfinite(to_target) ? Seconds(to_target) : std::string("never"),
            BytesOrDash(Num(s, "bytes_to_target")), std::isfinite(loss) ? Printf("%.2fx", loss) : std::string("-")}) {
        row.push_back(cell);
      }
      rows.push_back(row);
    }
  }
  blocks.push_back(Text(sweep.dir + " — " + std::to_string(finished) + " of " + std::to_string(sweep.points.size()) +
                        " points finished"));
  for (auto& h : SweepHeatMaps(sweep, Metric::kEqualLoss)) blocks.push_back(h);
  for (auto& h : SweepHeatMaps(sweep, Metric::kEqualSteps)) blocks.push_back(h);
  for (auto& c : SweepCharts(sweep, index)) blocks.push_back(c);
  for (auto& c : SweepLossCurves(sweep, index)) blocks.push_back(c);
  for (auto& f : FitBlocks(sweep, index)) blocks.push_back(f);
  std::vector<std::string> columns = sweep.axes;
  const std::string base = BaselineLabel(sweep);
  for (const std::string& c : {std::string("entry"), std::string("final val loss"), std::string("time (s)"),
                               std::string("sent/worker"), std::string("compute"), std::string("outer syncs"),
                               "speed-up vs " + base + " (equal steps)", std::string("target loss"),
                               std::string("time to target (s)"), std::string("sent to target"),
                               "speed-up vs " + base + " (equal loss)"}) {
    columns.push_back(c);
  }
  blocks.push_back(Table("Every point", columns, rows));
  return {{"title", "Sweep " + sweep.label}, {"blocks", blocks}};
}

}  // namespace narrows::tools::page
