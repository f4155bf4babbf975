// `narrows run`: every entry of a scenario's compare: list, trained by emulated workers under the
// scenario's network, on the same model, data, workers and faults; a table and a run folder.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <vector>

#include "core/scenario.h"
#include "core/status.h"
#include "sim/network_model.h"
#include "tools/cli/run_folders.h"
#include "trainer/experiment.h"

namespace narrows::tools {

// An entry's evaluations from its metrics.jsonl: (time, validation loss, bytes sent per worker).
struct Evaluation {
  double time_s, val_loss, bytes;
};
std::vector<Evaluation> Evaluations(const std::string& metrics_path);
// The validation loss at `time_s`, linearly interpolated between the evaluations around it: the
// first evaluation's before it, the last's after it; NaN without evaluations.
double LossAt(const std::vector<Evaluation>& evals, double time_s);

struct RunOptions {
  std::FILE* progress = stderr;  // nullptr = quiet
  bool tables = true;            // the run's table and folder lines on stdout (a quiet sweep's points: none)
  std::string data_root;         // "" = trainer::DefaultDataRoot()
  bool report = false;           // write <run folder>/report.html at the end
  // Where warm starts are cached (trainer::PrepareWarmStart); "" = <output.dir>/warm_start of the
  // scenario given to RunScenario, shared by its seeds (and a sweep's points, a tune's runs).
  std::string warm_start_dir;
  // Replays deployments' membership (trainer::Membership::kReplay): a trace per entry name; every
  // entry must have one. Empty: the scenario's faults, scripted.
  std::map<std::string, std::shared_ptr<const trainer::MembershipTrace>> replay;
  // A run folder holding another scenario's results (or this one's, finished) is refused (or
  // reused); kReplace (--force) empties it and runs again.
  OnOtherScenario existing = OnOtherScenario::kRefuse;
  // Train once, time again (a sweep whose points differ only in network keys): `keep_training`
  // writes each entry's training record, <entry>/trained.json; `retime_from` names the run folder of
  // this seed at another point. An entry that can be re-timed from there (WhyNotRetimed) is timed,
  // not trained (trainer::ExperimentOptions::timing_only) and takes that training's losses; its
  // summary says so (`retimed_from`). One whose timed run did other work than the training trains.
  bool keep_training = false;
  std::string retime_from;
};

// Why `entry` of `scenario` cannot be re-timed from the run folder `from` ("" if it can, and then
// `*trained` holds its training record): compute must be modelled, the entry's algorithm able to
// be re-timed (trainer::AlgorithmPlugin::retime), the scenario there differ from this one in
// network keys alone, and the entry's trained.json be there.
std::string WhyNotRetimed(const core::Scenario& scenario, const core::AlgorithmSpec& entry, const std::string& from,
                          std::string* trained);

// Every entry, once per seed (scenario.seeds): one seed writes the run folder and prints the table;
// several write a run folder per seed (<run folder>/seed-<seed>) and the aggregate in
// <run folder>/summary.json, and print means with intervals and the paired comparisons.
// The run folder is claimed first (ClaimResultFolder): another scenario's results there are an
// InvalidArgument unless options.existing is kReplace; this scenario's finished results are printed
// again, not recomputed; a seed finished before is taken as it is.
core::Status RunScenario(const core::Scenario& scenario, const RunOptions& options);
// Every entry of `scenario` (its seed alone) into its run folder; its summary.json.
core::Result<nlohmann::json> RunOneSeed(const core::Scenario& scenario, const RunOptions& options);
// `run_dir`/summary.json if the run there is finished: it holds `entries` results over `seeds`
// seeds (an aggregate is rewritten after each seed); nullopt otherwise, or if it cannot be read.
std::optional<nlohmann::json> FinishedSummary(const std::string& run_dir, size_t entries, size_t seeds);
// The seeds' runs (tools/cli/run_seeds.cc): RunOneSeed per seed and their aggregate, written as it grows.
core::Result<nlohmann::json> RunSeeds(const core::Scenario& scenario, const RunOptions& options);
// The aggregate of one summary per seed: per entry the mean of each quantity with `<key>_ci95` and
// `<key>_sd` (null where a seed has none), `per_seed`, and `versus_first`: the paired loss gap and
// speed-ups against the first entry with their intervals and verdicts (tools/cli/stats.h).
nlohmann::json AggregateSeeds(const std::vector<nlohmann::json>& summaries, const std::vector<uint64_t>& seeds);
// The aggregate's table on stdout.
void PrintSeeds(const nlohmann::json& summary);

// The entries `narrows run` and `narrows launch` compare: the scenario's compare: list, or DDP alone.
std::vector<core::AlgorithmSpec> Entries(const core::Scenario& sc);
// links.json of an emulated entry: per link of the network model its bandwidth, bytes, packets,
// mean rate and utilisation over `seconds`, drops by loss and by full queues, and the bits it
// carried per bin of bin_s seconds; null where the model keeps no counters. The names and units are
// those of `narrows linkemu`'s links.json.
nlohmann::json LinksJson(const sim::NetworkModel& network, double seconds);
// summary.json's `network` block of an entry, from its links.json: bytes over all links, drops by
// loss and by full queues, and the five busiest links (by utilisation) with their figures.
nlohmann::json NetworkSummary(const nlohmann::json& links);
// Adds to each line of an entry's metrics.jsonl the network between it and the line before, from
// links.json's histograms: `network: {link_bytes, mean_utilization, busiest_link,
// busiest_utilization}` (utilisation per link over that span, against its nominal bandwidth).
// Rewrites the file atomically; torn lines stay as they were.
core::Status AddNetworkToMetrics(const std::string& metrics_path, const nlohmann::json& links);
// One entry of summary.json's results.
nlohmann::json EntryJson(const trainer::EntryResult& r, double host_s);
// Writes `run_dir`/summary.json with `results` and returns it; with `keep_others`, also the entries
// of an earlier summary that this run did not repeat (a resumed or single-entry run adds to what is
// there). The equal-quality figures (AddEqualQuality) are recomputed over all its entries.
core::Result<nlohmann::json> WriteSummary(const core::Scenario& sc, const std::string& run_dir,
                                          const nlohmann::json& results, const std::string& clock, bool keep_others);
// Beyond these an entry's curve is flagged beside its row: a rise of the validation loss between two
// evaluations by more than kRiseFraction, or a stall (kStallEvaluations intervals in a row that each
// gain less than kStallFraction) that a later fall of more than kStallRecovery shows was no
// convergence. Either says the entry's settings (learning rate, warm-up) are not right for it.
constexpr double kRiseFraction = 0.02;
constexpr double kStallFraction = 0.005;
constexpr int kStallEvaluations = 2;
constexpr double kStallRecovery = 0.02;

// The comparison at equal quality, from the entries' metrics.jsonl under `run_dir`: `target_loss`
// (the scenario's, or else the worst final loss among the entries, which every entry reaches) and
// `target_source`, and `eval_every`; per entry `time_to_target_s` and `bytes_to_target` (per
// worker) where it first reaches the target, interpolated linearly between the evaluations that
// bracket it (null: never), `speedup_at_target` and `bytes_saved_at_target` relative to the
// baseline entry.
void AddEqualQuality(const core::Scenario& sc, const std::string& run_dir, nlohmann::json* summary);
// Below a table: the entries timed with another run's training (`retimed_from`), and where it is.
void PrintRetimed(const nlohmann::json& summary);
// The comparison table of a summary on stdout: at equal steps and at equal loss.
void PrintComparison(const nlohmann::json& summary);
// The line on the emulator's network model and its measured error against real runs (summary.json
// network_model; the table's footer and the report's), or "" where the summary has none.
std::string NetworkModelLine(const nlohmann::json& summary);
// The summary's `host` block (AddHost): this host's measured step and, with modelled compute, the
// planner's speed-ups at this host's rate and at the modelled one; nothing without the block.
void PrintHost(const nlohmann::json& summary);

}  // namespace narrows::tools
