#include "tools/cli/fit_command.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "tools/cli/format.h"
#include "tools/cli/run_folders.h"
#include "tools/cli/stats.h"
#include "trainer/experiment.h"

namespace narrows::tools {

using core::Result;
using core::Status;

namespace {

// Each entry of `by_entry`, in `order`, with its law fitted (or why not); InvalidArgument `none`
// when there is no entry.
Result<std::vector<EntryFit>> FitEntries(std::map<std::string, EntryFit> by_entry, const std::vector<std::string>& order,
                                         const std::string& none) {
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
  if (fits.empty()) return Status::InvalidArgument(none);
  return fits;
}

// The fields of one CSV line (RFC 4180: quoted fields may hold commas and doubled quotes).
std::vector<std::string> CsvFields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

Result<std::vector<EntryFit>> FitCsv(const std::string& path) {
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  std::istringstream in(*text);
  std::string line;
  if (!std::getline(in, line)) return Status::InvalidArgument(path + ": empty");
  const std::vector<std::string> header = CsvFields(line);
  std::map<std::string, size_t> column;
  for (size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  for (const char* needed : {"params", "workers", "entry", "final_val_loss"}) {
    if (!column.count(needed)) return Status::InvalidArgument(path + ":1: no column '" + needed + "'");
  }
  struct Row {
    std::string folder, entry;
    ScalingPoint point;
  };
  std::vector<Row> rows;
  std::set<std::string> folders;
  for (int n = 2; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::vector<std::string> f = CsvFields(line);
    if (f.size() != header.size()) {
      return Status::InvalidArgument(path + ":" + std::to_string(n) + ": " + std::to_string(f.size()) + " fields, the header has " +
                                     std::to_string(header.size()));
    }
    Row r;
    r.folder = column.count("folder") ? f[column["folder"]] : "";
    r.entry = f[column["entry"]];
    double* into[] = {&r.point.params, &r.point.workers, &r.point.loss};
    const char* names[] = {"params", "workers", "final_val_loss"};
    for (int k = 0; k < 3; ++k) {
      const std::string& v = f[column[names[k]]];
      char* end = nullptr;
      *into[k] = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !std::isfinite(*into[k]) || *into[k] <= 0) {
        return Status::InvalidArgument(path + ":" + std::to_string(n) + ": " + names[k] + " '" + v + "' is not a positive number");
      }
    }
    folders.insert(r.folder);
    rows.push_back(r);
  }
  std::map<std::string, EntryFit> by_entry;
  std::map<std::string, std::map<std::pair<double, double>, int>> seeds;  // per entry, per point: rows
  std::vector<std::string> order;
  for (const Row& r : rows) {
    const std::string name = folders.size() > 1 ? r.folder + "/" + r.entry : r.entry;
    if (!by_entry.count(name)) order.push_back(name);
    by_entry[name].entry = name;
    by_entry[name].points.push_back(r.point);
    ++seeds[name][{r.point.params, r.point.workers}];
  }
  for (const auto& name : order) {
    for (const auto& [point, count] : seeds[name]) by_entry[name].seeds = std::max(by_entry[name].seeds, count);
  }
  return FitEntries(by_entry, order, path + ": no points to fit");
}

}  // namespace

Result<std::vector<EntryFit>> FitSweep(const std::string& sweep_dir) {
  if (sweep_dir.size() > 4 && sweep_dir.compare(sweep_dir.size() - 4, 4, ".csv") == 0) return FitCsv(sweep_dir);
  auto sweep = LoadSweep(sweep_dir);
  if (!sweep.ok()) return sweep.status();
  return FitSweep(*sweep);
}

Result<std::vector<EntryFit>> FitSweep(const Sweep& sweep) {
  const std::string& sweep_dir = sweep.dir;
  std::map<std::string, EntryFit> by_entry;
  std::vector<std::string> order;
  for (const auto& p : sweep.points) {
    if (!p.run) continue;
    const double params = static_cast<double>(trainer::CostOf(p.scenario->model).params);
    for (const auto& e : p.run->entries) {
      const std::string name = e.summary.value("name", "");
      if (!by_entry.count(name)) order.push_back(name);
      by_entry[name].entry = name;
      // A point run over several seeds gives one observation per seed, not its mean alone.
      const auto seeds = e.summary.find("per_seed");
      if (seeds != e.summary.end() && seeds->is_array() && !seeds->empty()) {
        for (const auto& one : *seeds) {
          by_entry[name].points.push_back({params, Num(e.summary, "workers"), Num(one, "final_val_loss")});
        }
        by_entry[name].seeds = static_cast<int>(seeds->size());
      } else {
        by_entry[name].points.push_back({params, Num(e.summary, "workers"), Num(e.summary, "final_val_loss")});
      }
    }
  }
  return FitEntries(by_entry, order, sweep_dir + ": no finished points to fit");
}

Result<std::vector<HeldOut>> HoldOutLargest(const std::string& sweep_dir) {
  auto fits = FitSweep(sweep_dir);
  if (!fits.ok()) return fits.status();
  std::vector<HeldOut> out;
  for (const auto& f : *fits) {
    double largest = 0;
    for (const auto& p : f.points) largest = std::max(largest, p.params);
    std::vector<ScalingPoint> train;
    std::map<int, std::vector<double>> held;  // M -> the largest size's losses
    for (const auto& p : f.points) {
      if (p.params < largest) {
        train.push_back(p);
      } else {
        held[static_cast<int>(p.workers)].push_back(p.loss);
      }
    }
    auto fit = FitPowerLaw(train);
    if (!fit.ok() || !fit->uses_params) continue;  // fewer than two smaller sizes: nothing to hold out
    for (const auto& [m, losses] : held) {
      if (!fit->uses_workers && std::abs(fit->workers_min - m) > 0.5) continue;
      HeldOut h;
      h.entry = f.entry;
      h.params = largest;
      h.workers = m;
      h.predicted = fit->Predict(largest, m);
      const auto iv = fit->PredictionInterval(largest, m);
      h.predicted_lo = iv.lo;
      h.predicted_hi = iv.hi;
      const Interval measured = MeanInterval(losses);
      h.measured = measured.mean;
      h.measured_half_width = measured.half_width;
      h.seeds = measured.n;
      h.error = h.predicted / h.measured - 1;
      out.push_back(h);
    }
  }
  if (out.empty()) {
    return Status::InvalidArgument(sweep_dir + ": no entry has two smaller model sizes to fit and a larger one to predict");
  }
  return out;
}

Status PrintHoldOut(const std::string& sweep_dir) {
  auto held = HoldOutLargest(sweep_dir);
  if (!held.ok()) return held.status();
  std::printf("L(N, M) fitted below the largest model size, predicted at it (95%% prediction interval) against the "
              "measured mean (95%% t-interval over seeds)\n");
  int w = 20;
  for (const auto& h : *held) w = std::max(w, static_cast<int>(h.entry.size()));
  std::printf("%-*s %10s %7s %9s %19s %19s %8s\n", w, "entry", "N", "workers", "predicted", "95% interval", "measured",
              "error");
  for (const auto& h : *held) {
    const std::string measured =
        Printf("%.4f", h.measured) + (std::isnan(h.measured_half_width) ? "" : " ± " + Printf("%.4f", h.measured_half_width));
    std::printf("%-*s %10.0f %7d %9.4f %19s %19s %+7.2f%%\n", w, h.entry.c_str(), h.params, h.workers, h.predicted,
                (Printf("%.4f-", h.predicted_lo) + Printf("%.4f", h.predicted_hi)).c_str(), measured.c_str(), 100 * h.error);
  }
  return Status::Ok();
}

Status PrintFits(const std::string& sweep_dir) {
  auto fits = FitSweep(sweep_dir);
  if (!fits.ok()) return fits.status();
  int seeds = 1;
  for (const auto& f : *fits) seeds = std::max(seeds, f.seeds);
  std::printf("L = A · N^α · M^β, least squares on log L; ± one standard error (N parameters, M workers)%s\n",
              seeds > 1 ? Printf("; every seed's final loss a point (%.0f seeds per point)", seeds).c_str() : "");
  int w = 20;
  for (const auto& f : *fits) w = std::max(w, static_cast<int>(f.entry.size()));
  std::printf("%-*s %6s %22s %20s %20s %7s %9s\n", w, "entry", "points", "A", "alpha", "beta", "R2", "rms err");
  for (const auto& f : *fits) {
    if (!f.skipped.empty()) {
      std::printf("%-*s %6zu   not fitted: %s\n", w, f.entry.c_str(), f.points.size(), f.skipped.c_str());
      continue;
    }
    const auto& p = f.fit;
    auto pm = [](bool used, double v, double e) {
      return used ? Printf("%.4f", v) + " ± " + Printf("%.4f", e) : std::string("-");
    };
    std::printf("%-*s %6d %22s %20s %20s %7.3f %8.2f%%\n", w, f.entry.c_str(), p.points,
                (Printf("%.4g", p.a) + " ± " + Printf("%.2g", p.a_err)).c_str(), pm(p.uses_params, p.alpha, p.alpha_err).c_str(),
                pm(p.uses_workers, p.beta, p.beta_err).c_str(), p.r2, 100.0 * p.rms_rel_error);
  }
  return Status::Ok();
}

}  // namespace narrows::tools
