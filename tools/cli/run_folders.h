// The files of a run folder (summary.json, scenario.yaml, per entry metrics.jsonl and events.jsonl)
// and of a sweep folder (sweep.json and a run folder per finished point), read back for
// `narrows report` and `narrows fit`. Every error names the file (and line, for JSON lines).
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/scenario.h"
#include "core/status.h"

namespace narrows::tools {

bool IsFile(const std::string& path);
core::Result<std::string> ReadText(const std::string& path);
core::Result<nlohmann::json> ReadJson(const std::string& path);
// Whether a file must be there (NotFound without it) or may be missing (read as empty).
enum class Missing { kError, kEmpty };
// One object per line.
core::Result<std::vector<nlohmann::json>> ReadJsonLines(const std::string& path, Missing missing);

struct Entry {
  nlohmann::json summary;
  std::vector<nlohmann::json> metrics;  // the first seed's, in a run over several
  std::vector<nlohmann::json> events;
  nlohmann::json links;  // links.json (the first seed's), null where there is none
  std::vector<std::vector<nlohmann::json>> seed_metrics;  // every seed's, in a run over several
};

struct Run {
  std::string dir;
  std::string label;  // the run's name, or its folder's when the scenario is unnamed
  std::string clock;  // "virtual" or "wall"
  std::string scenario_yaml;
  std::vector<Entry> entries;
  nlohmann::json tuning;  // `narrows tune`: the grid, each entry's scores and chosen values (null otherwise)
  double target_loss = NAN;  // the loss its entries were compared at (summary.json target_loss)
  nlohmann::json network_model;  // summary.json network_model: the emulator's model and its measured error
};

// A run folder: summary.json, scenario.yaml and a folder per entry (metrics.jsonl, events.jsonl).
core::Result<Run> LoadRun(const std::string& dir);

struct SweepPoint {
  std::string name;
  std::vector<std::string> values;  // one per axis
  std::optional<Run> run;           // absent until the point has run
  std::optional<core::Scenario> scenario;
};

struct Sweep {
  std::string dir;
  std::string label;
  std::vector<std::string> axes;
  std::vector<SweepPoint> points;
};

// A sweep folder (sweep.json), or a study: a folder of run or tune folders (each with summary.json
// and scenario.yaml), each a point of no axis, for `narrows fit` and `plan --fit`.
core::Result<Sweep> LoadSweep(const std::string& dir);

// Whether a result folder may take the results of a scenario, from the record it keeps
// (<dir>/scenario.yaml; core/result_record.h).
enum class FolderUse {
  kNew,   // absent or empty, or emptied by --force: run
  kSame,  // holds this scenario's results (finished or not): reuse what is finished
};
enum class OnOtherScenario { kRefuse, kReplace };  // kReplace: --force
// kNew or kSame; with kReplace, a folder of another scenario (or of this one) is emptied first.
// InvalidArgument, changing nothing, where the folder holds another scenario's results (naming the
// first key that differs and both values) and `other` is kRefuse, or where it is not empty and not a
// result folder (no scenario.yaml). `what` names the folder's kind in messages ("run folder").
// `entries_own` lists top-level keys left to the caller: `narrows launch` gathers entries launched one at
// a time (--entry, or one compare: list after another) into one folder, so their `compare` and
// `deploy` may differ while everything they share must not.
// `clock` ("virtual" for the emulator, "wall" for a deployment; "" either): a folder of the same
// scenario whose summary.json is on the other clock is refused too.
core::Result<FolderUse> ClaimResultFolder(const std::string& dir, const std::string& resolved_yaml,
                                          OnOtherScenario other, const std::string& what = "run folder",
                                          const std::vector<std::string>& entries_own = {},
                                          const std::string& clock = "");
// Whether `dir` (which exists) holds the results of `resolved_yaml`'s scenario; an unreadable
// record is another scenario's.
bool SameScenario(const std::string& dir, const std::string& resolved_yaml);

// A number from a JSON object, `fallback` when absent or not a number.
double Num(const nlohmann::json& j, const char* key, double fallback = NAN);
// An entry's time in summary.json: `time_s`, or in older files the clock's own key.
double EntryTime(const nlohmann::json& summary);
// The index of the baseline in summary.json's `results` (the entry with "baseline": true; in files
// without the field, the first).
size_t BaselineIndex(const nlohmann::json& results);
// The same among a loaded run's entries (0 for a run without entries).
size_t BaselineIndex(const Run& run);
// An entry's bytes across islands (its summary line's network.wan_bytes), NaN without islands.
double WanBytes(const nlohmann::json& entry);
// The width of a table's entry column: its longest name, at least 16.
int NameWidth(const nlohmann::json& results);
// A metrics line's time: virtual in the emulator, measured in a deployment.
double TimeOf(const nlohmann::json& line);

}  // namespace narrows::tools
