#include "tools/cli/invariants.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "tools/cli/format.h"
#include "tools/cli/run_folders.h"

namespace narrows::tools {
namespace {

using Json = nlohmann::json;

// printf into a string (the findings take several values).
template <typename... Args>
std::string Text(const char* fmt, Args... args) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, fmt, args...);
  return buffer;
}

// a <= b, allowing for float summation order (relative 1e-9) and printing's rounding (absolute).
bool AtMost(double a, double b, double absolute = 1e-9) { return a <= b + absolute + 1e-9 * std::fabs(b); }

class Findings {
 public:
  explicit Findings(std::string entry) : entry_(std::move(entry)) {}
  void Add(const std::string& what) { text_ += "\n  " + entry_ + ": " + what; }
  const std::string& text() const { return text_; }

 private:
  std::string entry_;
  std::string text_;
};

void CheckTotals(const Json& r, Findings* f) {
  const double time = EntryTime(r), to_time = Num(r, "time_to_target_s");
  const double bytes = Num(r, "bytes_sent_per_worker"), to_bytes = Num(r, "bytes_to_target");
  if (!std::isnan(to_time) && !AtMost(to_time, time, 1e-6)) {
    f->Add(Text("time to target %.6g s is above the run's time %.6g s", to_time, time));
  }
  if (!std::isnan(to_bytes) && !AtMost(to_bytes, bytes, 1.0)) {
    f->Add(Text("bytes to target %.6g are above the bytes sent per worker %.6g", to_bytes, bytes));
  }
  const double u = Num(r, "compute_utilization");
  if (!std::isnan(u) && (u < 0 || !AtMost(u, 1.0, 1e-6))) f->Add(Text("compute utilisation %.4f is outside [0, 1]", u));
}

void CheckMetrics(const Json& r, const std::vector<Json>& metrics, Findings* f) {
  double before = 0.0;
  for (const auto& line : metrics) {
    // Each worker's own utilisation: its compute so far within its time so far.
    if (line.contains("workers") && line["workers"].is_array()) {
      for (const auto& w : line["workers"]) {
        const double compute = Num(w, "compute_s"), time = Num(w, "time_s");
        // A deployment charges a computation its recent median host time (compute.statistic), which
        // may run a few percent above the time it took: 5% of slack.
        if (!std::isnan(compute) && !std::isnan(time) && !AtMost(compute, time, 1e-2 + 0.05 * time)) {
          f->Add(Text("worker %lld computed %.6g s within %.6g s at step %lld", static_cast<long long>(w.value("worker", int64_t{-1})),
                      compute, time, static_cast<long long>(line.value("step", int64_t{0}))));
          break;
        }
      }
    }
    const double sent = Num(line, "bytes_sent");
    if (std::isnan(sent)) continue;
    if (!AtMost(before, sent, 1.0)) {
      f->Add(Text("metrics.jsonl: bytes_sent falls from %.6g to %.6g at step %lld", before, sent,
                    static_cast<long long>(line.value("step", int64_t{0}))));
    }
    before = sent;
  }
  const double total = Num(r, "bytes_sent_per_worker");
  if (!std::isnan(total) && !AtMost(before, total, 1.0)) {
    f->Add(Text("metrics.jsonl ends at %.6g bytes per worker, above the summary's %.6g", before, total));
  }
}

void CheckLinks(const Json& links, Findings* f) {
  if (!links.is_object() || !links.contains("links")) return;
  for (const auto& l : links["links"]) {
    const double u = Num(l, "utilization");
    const std::string name = l.value("link", std::string("?"));
    if (!std::isnan(u) && (u < 0 || !AtMost(u, 1.0, 1e-6))) f->Add(Text("link %s: utilisation %.4f is outside [0, 1]", name.c_str(), u));
  }
}

void CheckEvents(const std::vector<Json>& events, const std::vector<Json>& metrics, double time, Findings* f) {
  // Each worker's step times, to place its leave.
  std::map<int64_t, std::map<int64_t, double>> steps;  // worker -> step -> time
  for (const auto& line : metrics) {
    if (!line.contains("workers") || !line["workers"].is_array()) continue;
    for (const auto& w : line["workers"]) {
      if (w.is_object() && w.contains("worker")) steps[w["worker"].get<int64_t>()][line.value("step", int64_t{0})] = Num(w, "time_s");
    }
  }
  for (const auto& e : events) {
    double t = Num(e, "time");
    if (std::isnan(t)) t = Num(e, "time_s");
    if (std::isnan(t)) continue;
    const std::string type = e.value("type", std::string("?"));
    if (t < -1e-9 || !AtMost(t, time, 1e-6)) f->Add(Text("event %s at %.6g s lies outside the run [0, %.6g s]", type.c_str(), t, time));
    if (type != "leave" || !e.contains("worker") || !e.contains("step")) continue;
    const auto mine = steps.find(e["worker"].get<int64_t>());
    if (mine == steps.end()) continue;
    const int64_t at = e["step"].get<int64_t>();
    for (const auto& [step, step_time] : mine->second) {
      if (step <= at && !std::isnan(step_time) && !AtMost(step_time, t, 1e-6)) {
        f->Add(Text("worker %lld leaves at %.6g s, before its step %lld ended at %.6g s",
                      static_cast<long long>(e["worker"].get<int64_t>()), t, static_cast<long long>(step), step_time));
        break;
      }
    }
  }
}

}  // namespace

core::Status CheckFigures(const Json& summary, const std::string& run_dir) {
  std::string all;
  if (!summary.contains("results") || !summary["results"].is_array()) return core::Status::Ok();
  for (const auto& r : summary["results"]) {
    const std::string name = r.value("name", std::string());
    Findings f(name);
    CheckTotals(r, &f);
    const std::string dir = run_dir + "/" + name;
    auto metrics = ReadJsonLines(dir + "/metrics.jsonl", Missing::kEmpty);
    auto events = ReadJsonLines(dir + "/events.jsonl", Missing::kEmpty);
    if (metrics.ok()) CheckMetrics(r, *metrics, &f);
    if (events.ok() && metrics.ok()) CheckEvents(*events, *metrics, EntryTime(r), &f);
    if (IsFile(dir + "/links.json")) {
      auto links = ReadJson(dir + "/links.json");
      if (links.ok()) CheckLinks(*links, &f);
    }
    all += f.text();
  }
  if (all.empty()) return core::Status::Ok();
  return core::Status::Internal(run_dir + ": figures that contradict each other (a bug of narrows; please report it "
                                "with this folder):" + all);
}

}  // namespace narrows::tools
