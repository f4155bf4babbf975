#include "tools/cli/report_command.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/run_writer.h"
#include "tools/cli/format.h"
#include "tools/cli/report_blocks.h"
#include "tools/cli/run_command.h"
#include "tools/cli/stats.h"

namespace narrows::tools {

using core::Result;
using core::Status;
using json = nlohmann::json;

namespace page {

namespace {

std::string ClockLabel(const std::vector<Run>& runs) {
  std::set<std::string> clocks;
  for (const auto& r : runs) clocks.insert(r.clock);
  if (clocks.size() > 1) return "time (s; virtual for emulated runs, measured for deployments)";
  return *clocks.begin() == "wall" ? "measured wall-clock time (s)" : "virtual wall-clock time (s)";
}

}  // namespace

namespace {

// Over several seeds: the mean validation curve against time and against tokens, evaluation by
// evaluation (the steps every seed evaluated), and the 95% t-interval of the loss as a band.
struct MeanCurves {
  json time = json::array(), tokens = json::array(), band_time = json::array(), band_tokens = json::array();
};
MeanCurves SeedMeans(const Entry& e) {
  std::map<int64_t, std::vector<std::array<double, 3>>> at;  // step -> (time, tokens, loss) per seed
  for (const auto& metrics : e.seed_metrics) {
    for (const auto& m : metrics) {
      const double val = Num(m, "val_loss"), t = TimeOf(m);
      if (!std::isnan(val) && !std::isnan(t)) at[m.value("step", int64_t{0})].push_back({t, Num(m, "tokens"), val});
    }
  }
  MeanCurves out;
  for (const auto& [step, seeds] : at) {
    if (seeds.size() != e.seed_metrics.size()) continue;
    std::vector<double> loss;
    double t = 0, tokens = 0;
    for (const auto& s : seeds) {
      t += s[0] / static_cast<double>(seeds.size());
      tokens += s[1] / static_cast<double>(seeds.size());
      loss.push_back(s[2]);
    }
    const Interval i = MeanInterval(loss);
    out.time.push_back({t, i.mean});
    out.tokens.push_back({tokens, i.mean});
    out.band_time.push_back({t, i.lo(), i.hi()});
    out.band_tokens.push_back({tokens, i.lo(), i.hi()});
  }
  return out;
}

}  // namespace

// The charts that compare every entry of every run: losses, bytes and utilisation. A run over
// several seeds draws each entry's mean validation curve with its 95% band, and the first seed's
// other curves.
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
      if (e.seed_metrics.size() > 1) {
        const MeanCurves mean = SeedMeans(e);
        const std::string seeds = " (mean of " + std::to_string(e.seed_metrics.size()) + " seeds)";
        val_time.push_back(Series(label + seeds, mean.time));
        val_time.push_back(Series(label + seeds + " (95% band)", mean.band_time, "band"));
        val_tokens.push_back(Series(label + seeds, mean.tokens));
        val_tokens.push_back(Series(label + seeds + " (95% band)", mean.band_tokens, "band"));
      } else {
        val_time.push_back(Series(label, vt));
        val_tokens.push_back(Series(label, vk));
      }
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

namespace {

json SummaryTable(const Run& run) {
  json rows = json::array();
  const double first = run.entries.empty() ? NAN : EntryTime(run.entries[BaselineIndex(run)].summary);
  bool islands = false;  // a column of the bytes across islands, where the table's bytes count the islands' own links too
  for (const auto& e : run.entries) islands = islands || !std::isnan(WanBytes(e.summary));
  for (const auto& e : run.entries) {
    const json& s = e.summary;
    const double t = EntryTime(s);
    const double target = Num(s, "time_to_target_s");
    json row = {s.value("name", ""), s.value("algorithm", ""), Printf("%.0f", Num(s, "workers")),
                Printf("%.4f", Num(s, "final_val_loss")), Seconds(t),
                std::isnan(target) ? std::string("-") : Seconds(target),
                BytesOrDash(Num(s, "bytes_sent_per_worker")), BytesOrDash(Num(s, "bytes_to_target")),
                BytesOrDash(Num(s, "peak_bytes_per_round")), Printf("%.0f", Num(s, "outer_syncs", 0.0)),
                Printf("%.0f%%", 100.0 * Num(s, "compute_utilization", 0.0)), Printf("%.2fx", first / t),
                std::isnan(Num(s, "speedup_at_target")) ? std::string("-") : Printf("%.2fx", Num(s, "speedup_at_target"))};
    if (islands) row.insert(row.begin() + 8, BytesOrDash(WanBytes(s)));
    rows.push_back(row);
  }
  std::vector<std::string> columns = {"entry", "algorithm", "workers", "final val loss", run.clock + " time (s)",
                                      "to target (s)", "sent/worker", "sent to target", "peak/round", "outer syncs",
                                      "compute", "speed-up vs baseline", "at equal loss"};
  if (islands) columns.insert(columns.begin() + 8, "across islands (all WAN links, whole run)");
  return Table("Summary", columns, rows);
}

// Each entry's final validation loss per domain of a multi-domain corpus (null where there is none).
json DomainTable(const Run& run) {
  std::vector<std::string> domains;
  for (const auto& e : run.entries) {
    const json by = e.summary.value("final_val_loss_by_domain", json::object());
    for (const auto& [name, loss] : by.items()) {
      if (std::find(domains.begin(), domains.end(), name) == domains.end()) domains.push_back(name);
    }
  }
  if (domains.empty()) return nullptr;
  json rows = json::array();
  for (const auto& e : run.entries) {
    const json by = e.summary.value("final_val_loss_by_domain", json::object());
    json row = json::array({e.summary.value("name", ""), Printf("%.4f", Num(e.summary, "final_val_loss"))});
    for (const auto& d : domains) row.push_back(by.contains(d) && by[d].is_number() ? Printf("%.4f", by[d].get<double>()) : "-");
    rows.push_back(row);
  }
  std::vector<std::string> columns = {"entry", "overall (mean over domains)"};
  columns.insert(columns.end(), domains.begin(), domains.end());
  return Table("Final validation loss per domain (nats per token; every domain scored on an equal share of the "
               "validation windows)",
               columns, rows);
}

// DiPaCo's routing against the corpus's domains: per domain, the share of its training tokens and
// of its validation windows that went to each path (null without a routing event by domain).
json RoutingTable(const Entry& e) {
  for (const auto& ev : e.events) {
    if (ev.value("type", "") != "routing" || !ev.contains("by_domain")) continue;
    const json& by = ev["by_domain"];
    const auto paths = ev.value("paths", 0);
    json rows = json::array();
    auto add = [&](const json& names, const json& counts, const std::string& what) {
      for (size_t d = 0; d < names.size() && d < counts.size(); ++d) {
        double total = 0.0;
        for (const auto& c : counts[d]) total += c.get<double>();
        json row = json::array({names[d], what});
        for (const auto& c : counts[d]) row.push_back(total > 0 ? Printf("%.0f%%", 100.0 * c.get<double>() / total) : "-");
        rows.push_back(row);
      }
    };
    add(by.value("domains", json::array()), by.value("train_tokens", json::array()), "training tokens");
    add(by.value("val_domains", json::array()), by.value("val_windows", json::array()), "validation windows");
    std::vector<std::string> columns = {"domain", "share of its"};
    for (int p = 0; p < paths; ++p) columns.push_back("path " + std::to_string(p));
    return Table("Routing of " + e.summary.value("name", std::string()) + " by domain (each row sums to 100%)", columns,
                 rows);
  }
  return nullptr;
}

// The links an entry loaded most (links.json): a table of the busiest, and a heat map of their
// utilisation over virtual time (at most 24 columns; each the bits carried over the column's span
// and the link's bandwidth). Empty without links.json.
json LinkBlocks(const Entry& e, const std::string& id) {
  json blocks = json::array();
  if (!e.links.is_object() || !e.links.contains("links")) return blocks;
  // The busiest by utilisation (a fast link carrying many bytes can be idle), bytes breaking ties;
  // the ten busiest, and every WAN link beside them (the links a low-bandwidth study is about).
  std::vector<json> links(e.links["links"].begin(), e.links["links"].end());
  std::stable_sort(links.begin(), links.end(), [](const json& a, const json& b) {
    const double ua = Num(a, "utilization", 0), ub = Num(b, "utilization", 0);
    return ua != ub ? ua > ub : Num(a, "bytes", 0) > Num(b, "bytes", 0);
  });
  constexpr size_t kBusiest = 10;
  std::vector<json> shown;
  for (size_t i = 0; i < links.size(); ++i) {
    if (i < kBusiest || links[i].value("link", std::string()).rfind("wan", 0) == 0) shown.push_back(links[i]);
  }
  links = std::move(shown);
  const std::string name = e.summary.value("name", std::string());
  json rows = json::array();
  for (const auto& l : links) {
    rows.push_back({l.value("link", ""), Bytes(Num(l, "bytes", 0)), Printf("%.1f Mbit/s", Num(l, "mean_bps", 0) / 1e6),
                    Printf("%.1f%%", 100 * Num(l, "utilization", 0)), Printf("%.0f", Num(l, "dropped_loss", 0)),
                    Printf("%.0f", Num(l, "dropped_queue", 0))});
  }
  blocks.push_back(Table("Busiest links of " + name + " by utilisation (virtual time; links.json)",
                         {"link", "bytes", "mean rate", "utilisation", "lost", "queue drops"}, rows));
  const double bin = Num(e.links, "bin_s", 0), seconds = Num(e.links, "seconds", 0);
  if (!(bin > 0) || !(seconds > 0)) return blocks;
  const auto bins = static_cast<size_t>(std::ceil(seconds / bin));
  const size_t per = std::max<size_t>(1, (bins + 23) / 24), columns = (bins + per - 1) / per;
  json names = json::array(), values = json::array(), labels = json::array();
  for (size_t c = 0; c < columns; ++c) labels.push_back(Printf("%.3g s", static_cast<double>(c * per) * bin));
  for (const auto& l : links) {
    names.push_back(l.value("link", ""));
    const json series = l.value("bits_per_bin", json::array());
    json row = json::array();
    for (size_t c = 0; c < columns; ++c) {
      double bits = 0;
      for (size_t i = c * per; i < (c + 1) * per && i < series.size(); ++i) bits += series[i].get<double>();
      const double span = std::min(seconds, static_cast<double>((c + 1) * per) * bin) - static_cast<double>(c * per) * bin;
      row.push_back(span > 0 ? bits / span / Num(l, "bandwidth_bps", 1) : 0.0);
    }
    values.push_back(row);
  }
  blocks.push_back({{"type", "heatmap"}, {"unit", "share"}, {"id", id},
                    {"title", "Link utilisation of " + name + " over virtual time (each column from its start)"},
                    {"row_label", "link"}, {"column_label", "time"}, {"rows", names}, {"columns", labels},
                    {"values", values}});
  return blocks;
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

}  // namespace

// `narrows tune`: every entry's score at every point of its grid, the chosen one marked.
json TuningTable(const json& tuning) {
  json rows = json::array();
  for (const auto& e : tuning.value("entries", json::array())) {
    const json chosen = e.value("chosen", json::object());
    for (const auto& p : e.value("points", json::array())) {
      const json values = p.value("values", json::object());
      rows.push_back({e.value("name", ""), values.dump(), p.at("score").is_number() ? Printf("%.4f", p["score"].get<double>()) : "-",
                      values == chosen ? "chosen" : ""});
    }
  }
  return Table("Tuning (by " + tuning.value("by", std::string()) + ", on seeds " +
                   tuning.value("tuning_seeds", json::array()).dump() + ")",
               {"entry", "values", "score (mean over the tuning seeds)", ""}, rows);
}

json RunSection(const Run& run, int index) {
  json blocks = json::array();
  blocks.push_back(Text(run.dir + " — " + (run.clock == "wall" ? "deployment, measured time" : "emulated, virtual time")));
  blocks.push_back(SummaryTable(run));
  if (!run.network_model.is_null()) blocks.push_back(Text(NetworkModelLine({{"network_model", run.network_model}})));
  if (run.tuning.is_object()) blocks.push_back(TuningTable(run.tuning));
  if (json t = DomainTable(run); !t.is_null()) blocks.push_back(std::move(t));
  for (const auto& e : run.entries) {
    if (json t = RoutingTable(e); !t.is_null()) blocks.push_back(std::move(t));
  }
  for (size_t i = 0; i < run.entries.size(); ++i) {
    blocks.push_back(Timeline(run, run.entries[i], "timeline-" + std::to_string(index) + "-" + std::to_string(i)));
    for (auto& b : LinkBlocks(run.entries[i], "links-" + std::to_string(index) + "-" + std::to_string(i))) {
      blocks.push_back(std::move(b));
    }
  }
  if (!run.scenario_yaml.empty()) blocks.push_back({{"type", "pre"}, {"title", "Scenario (resolved)"}, {"text", run.scenario_yaml}});
  return {{"title", "Run " + run.label}, {"blocks", blocks}};
}

}  // namespace page

using page::ComparisonSection;
using page::RunSection;
using page::SweepSection;

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
