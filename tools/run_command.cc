#include "tools/run_command.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>

#include "core/progress.h"
#include "core/run_writer.h"
#include "emu/engine.h"
#include "emu/network_from_scenario.h"
#include "tools/report_command.h"
#include "trainer/experiment.h"

namespace narrows::tools {
std::string Bytes(double b) {
  char buf[32];
  if (b >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  } else if (b >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f kB", b / 1e3);
  }
  return buf;
}

std::vector<core::AlgorithmSpec> Entries(const core::Scenario& sc) {
  std::vector<core::AlgorithmSpec> entries = sc.compare;
  if (entries.empty()) {
    core::AlgorithmSpec ddp;
    ddp.name = "ddp";
    entries.push_back(ddp);
  }
  return entries;
}

nlohmann::json EntryJson(const trainer::EntryResult& r, double host_s) {
  nlohmann::json j = {{"name", r.name},
                      {"algorithm", r.algorithm},
                      {"workers", r.workers},
                      {"final_val_loss", r.final_val_loss},
                      {"time_s", r.virtual_time_s},
                      {"virtual_time_s", r.virtual_time_s},
                      {"bytes_sent_per_worker", r.bytes_sent_per_worker},
                      {"peak_bytes_per_round", r.peak_bytes_per_round},
                      {"outer_syncs", r.outer_syncs},
                      {"steps", r.steps},
                      {"tokens", r.tokens},
                      {"compute_utilization", r.compute_utilization},
                      {"host_time_s", host_s},
                      {"host_compute_s", r.host_compute_s}};
  j["time_to_target_s"] = r.time_to_target_s >= 0 ? nlohmann::json(r.time_to_target_s) : nlohmann::json();
  return j;
}

core::Status WriteSummary(const core::Scenario& sc, const std::string& run_dir, const nlohmann::json& results,
                          const std::string& clock, bool keep_others) {
  nlohmann::json merged = nlohmann::json::array();
  std::ifstream in(run_dir + "/summary.json");
  if (keep_others && in) {
    try {
      const auto old = nlohmann::json::parse(in);
      for (const auto& e : old.at("results")) {
        bool repeated = false;
        for (const auto& n : results) repeated = repeated || n.at("name") == e.at("name");
        if (!repeated) merged.push_back(e);
      }
    } catch (const std::exception&) {
      // An unreadable earlier summary is replaced.
    }
  }
  for (const auto& r : results) {
    nlohmann::json e = r;
    if (clock == "wall") {
      e["wall_time_s"] = e["virtual_time_s"];
      e.erase("virtual_time_s");
    }
    merged.push_back(e);
  }
  const nlohmann::json summary = {{"scenario", sc.name}, {"clock", clock}, {"results", merged}};
  return core::WriteFileAtomic(run_dir + "/summary.json", summary.dump(2) + "\n");
}

void PrintComparison(const core::Scenario& sc, const std::vector<trainer::EntryResult>& done, const std::string& clock) {
  std::printf("%-16s %10s %12s %12s %14s %12s %8s %9s\n", "entry", "val loss", "time (s)",
              sc.target_loss > 0 ? "to target" : "", "sent/worker", "peak/round", "syncs", "compute");
  for (const auto& r : done) {
    char target[32] = "";
    if (sc.target_loss > 0) {
      if (r.time_to_target_s >= 0) {
        std::snprintf(target, sizeof target, "%.1f", r.time_to_target_s);
      } else {
        std::snprintf(target, sizeof target, "never");
      }
    }
    std::printf("%-16s %10.4f %12.1f %12s %14s %12s %8lld %8.0f%%\n", r.name.c_str(), r.final_val_loss,
                r.virtual_time_s, target, Bytes(r.bytes_sent_per_worker).c_str(),
                Bytes(r.peak_bytes_per_round).c_str(), static_cast<long long>(r.outer_syncs),
                100.0 * r.compute_utilization);
  }
  if (done.size() >= 2) {
    std::printf("%s wall-clock time relative to %s:", clock == "wall" ? "measured" : "virtual",
                done.front().name.c_str());
    for (size_t i = 1; i < done.size(); ++i) {
      std::printf(" %s %.2fx faster", done[i].name.c_str(), done.front().virtual_time_s / done[i].virtual_time_s);
    }
    std::printf("\n");
  }
}

core::Status RunScenario(const core::Scenario& sc, const RunOptions& options) {
  auto data = trainer::LoadDataset(sc, options.data_root);
  if (!data.ok()) return data.status();
  const std::vector<core::AlgorithmSpec> entries = Entries(sc);
  std::vector<std::unique_ptr<trainer::Experiment>> experiments;
  for (const auto& entry : entries) {
    auto e = trainer::Experiment::Create(sc, entry, *data);
    if (!e.ok()) return e.status();
    experiments.push_back(std::move(e).value());
  }
  // Inputs are valid: from here on the run folder is ours.
  const std::string run_dir = sc.output.dir + "/" + sc.name;
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(run_dir));
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/scenario.yaml", sc.resolved_yaml));

  nlohmann::json results = nlohmann::json::array();
  std::vector<trainer::EntryResult> done;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string label = "[" + std::to_string(i + 1) + "/" + std::to_string(entries.size()) + "] " +
                              entries[i].name + " step";
    core::Progress progress(label, sc.train.steps, options.progress,
                            options.progress && core::Progress::IsTerminal(options.progress));
    experiments[i]->SetProgress([&progress](int64_t steps, double virtual_s, double loss) {
      char detail[96];
      std::snprintf(detail, sizeof detail, "virtual %.1f s | loss %.3f", virtual_s, loss);
      progress.Update(steps, detail);
    });
    emu::Engine engine(sc.workers.count, emu::NetworkFromScenario(sc));
    const auto start = std::chrono::steady_clock::now();
    engine.Run([&](int rank) { experiments[i]->RunWorker(rank, engine.endpoint(rank)); });
    const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto r = experiments[i]->Finish(run_dir + "/" + entries[i].name);
    if (!r.ok()) return r.status();
    char detail[128];
    std::snprintf(detail, sizeof detail, "val loss %.4f | %.1f s virtual | %.1f s on this host", r->final_val_loss,
                  r->virtual_time_s, host_s);
    progress.Finish(detail);
    results.push_back(EntryJson(*r, host_s));
    done.push_back(*r);
    // Rewritten after every entry, so a long comparison keeps what it finished.
    NARROWS_RETURN_IF_ERROR(WriteSummary(sc, run_dir, results, "virtual", false));
  }
  PrintComparison(sc, done, "virtual");
  std::printf("results: %s/summary.json\n", run_dir.c_str());
  if (!options.report) {
    std::printf("charts: narrows report %s (or run with --report)\n", run_dir.c_str());
    return core::Status::Ok();
  }
  auto path = WriteReport({run_dir}, "");
  if (!path.ok()) return path.status();
  std::printf("report: %s\n", path->c_str());
  return core::Status::Ok();
}

}  // namespace narrows::tools
