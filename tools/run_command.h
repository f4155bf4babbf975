// `narrows run`: every entry of a scenario's compare: list, trained by emulated workers under the
// scenario's network, on the same model, data, workers and faults; a table and a run folder.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include <vector>

#include "core/scenario.h"
#include "core/status.h"
#include "trainer/experiment.h"

namespace narrows::tools {

struct RunOptions {
  std::FILE* progress = stderr;  // nullptr = quiet
  std::string data_root;         // "" = trainer::DefaultDataRoot()
  bool report = false;           // write <run folder>/report.html at the end
};

core::Status RunScenario(const core::Scenario& scenario, const RunOptions& options);

// The entries `narrows run` and `narrows launch` compare: the scenario's compare: list, or DDP alone.
std::vector<core::AlgorithmSpec> Entries(const core::Scenario& sc);
// One entry of summary.json's results.
nlohmann::json EntryJson(const trainer::EntryResult& r, double host_s);
// Writes `run_dir`/summary.json with `results` and returns it; with `keep_others`, also the entries
// of an earlier summary that this run did not repeat (a resumed or single-entry run adds to what is
// there). The equal-quality figures (AddEqualQuality) are recomputed over all its entries.
core::Result<nlohmann::json> WriteSummary(const core::Scenario& sc, const std::string& run_dir,
                                          const nlohmann::json& results, const std::string& clock, bool keep_others);
// The comparison at equal quality, from the entries' metrics.jsonl under `run_dir`: `target_loss`
// (the scenario's, or else the worst final loss among the entries, which every entry reaches) and
// `target_source`, and `eval_every`; per entry `time_to_target_s` and `bytes_to_target` (per
// worker) where it first reaches the target, interpolated linearly between the evaluations that
// bracket it (null: never), `speedup_at_target` and `bytes_saved_at_target` relative to the first
// entry.
void AddEqualQuality(const core::Scenario& sc, const std::string& run_dir, nlohmann::json* summary);
// The comparison table of a summary on stdout: at equal steps and at equal loss.
void PrintComparison(const nlohmann::json& summary);

}  // namespace narrows::tools
