#include "tools/cli/run_folders.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/result_record.h"
#include "tools/cli/build_version.h"

namespace narrows::tools {

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

Result<std::vector<json>> ReadJsonLines(const std::string& path, Missing missing) {
  std::ifstream in(path);
  if (!in) {
    if (missing == Missing::kError) return Status::NotFound(path + ": cannot be read");
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

namespace {

std::string BaseName(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const auto slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

}  // namespace

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
  // A run over several seeds keeps each seed's entries in seed-<seed>/; the curves shown are the
  // first seed's (the table has every seed's means).
  std::string entries_dir = dir;
  std::vector<std::string> seed_dirs;
  if (summary->contains("seeds") && (*summary)["seeds"].is_array() && !(*summary)["seeds"].empty()) {
    for (const auto& s : (*summary)["seeds"]) seed_dirs.push_back(dir + "/seed-" + s.dump());
    entries_dir = seed_dirs.front();
  }
  run.clock = summary->value("clock", "virtual");
  run.target_loss = Num(*summary, "target_loss");
  if (summary->contains("network_model")) run.network_model = (*summary)["network_model"];
  if (summary->contains("tuning")) run.tuning = (*summary)["tuning"];
  auto yaml = ReadText(dir + "/scenario.yaml");
  run.scenario_yaml = yaml.ok() ? *yaml : "";
  for (const auto& r : (*summary)["results"]) {
    if (!r.is_object() || !r.contains("name") || !r["name"].is_string()) {
      return Status::InvalidArgument(where + ": a result without a \"name\"");
    }
    Entry e;
    e.summary = r;
    const std::string entry_dir = entries_dir + "/" + r["name"].get<std::string>();
    auto metrics = ReadJsonLines(entry_dir + "/metrics.jsonl", Missing::kError);
    if (!metrics.ok()) return metrics.status();
    auto events = ReadJsonLines(entry_dir + "/events.jsonl", Missing::kEmpty);
    if (!events.ok()) return events.status();
    e.metrics = std::move(*metrics);
    e.events = std::move(*events);
    if (IsFile(entry_dir + "/links.json")) {
      auto links = ReadJson(entry_dir + "/links.json");
      if (!links.ok()) return links.status();
      e.links = std::move(*links);
    }
    for (size_t k = 0; k < seed_dirs.size() && seed_dirs.size() > 1; ++k) {
      auto m = ReadJsonLines(seed_dirs[k] + "/" + r["name"].get<std::string>() + "/metrics.jsonl", Missing::kError);
      if (!m.ok()) return m.status();
      e.seed_metrics.push_back(std::move(*m));
    }
    run.entries.push_back(std::move(e));
  }
  return run;
}

bool SameScenario(const std::string& dir, const std::string& resolved_yaml) {
  auto recorded = ReadText(dir + "/scenario.yaml");
  return recorded.ok() && core::ResultDigest(*recorded) == core::ResultDigest(resolved_yaml);
}

namespace {

std::map<std::string, std::string> KeysBut(const std::string& yaml, const std::vector<std::string>& top_level) {
  auto keys = core::ResultKeys(yaml);
  for (auto it = keys.begin(); it != keys.end();) {
    const bool skip = std::any_of(top_level.begin(), top_level.end(), [&it](const std::string& k) {
      return it->first == k || it->first.rfind(k + ".", 0) == 0;
    });
    it = skip ? keys.erase(it) : std::next(it);
  }
  return keys;
}

}  // namespace

Result<FolderUse> ClaimResultFolder(const std::string& dir, const std::string& resolved_yaml, OnOtherScenario other,
                                    const std::string& what, const std::vector<std::string>& entries_own,
                                    const std::string& clock) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return FolderUse::kNew;
  if (!fs::is_directory(dir, ec)) return Status::InvalidArgument(dir + ": exists and is not a folder; choose another with -o DIR");
  if (fs::is_empty(dir, ec)) return FolderUse::kNew;
  auto recorded = ReadText(dir + "/scenario.yaml");
  if (!recorded.ok()) {
    // What `narrows plan` (and a launch's key) leave in a run folder before anything ran there.
    static const std::set<std::string> kBeforeARun = {"plan.json", "decision.json", "decision.html", "cluster.key"};
    bool only_those = true;
    for (const auto& e : fs::directory_iterator(dir, ec)) only_those = only_those && kBeforeARun.count(e.path().filename().string());
    if (only_those && !ec) return FolderUse::kNew;
    return Status::InvalidArgument(dir + ": not empty, and no scenario.yaml says what produced it, so it is not a " + what +
                                   " of narrows; choose another with -o DIR");
  }
  const auto difference = core::FirstDifference(KeysBut(*recorded, entries_own), KeysBut(resolved_yaml, entries_own));
  if (other == OnOtherScenario::kReplace) {
    fs::remove_all(dir, ec);
    if (ec) return Status::IoError(dir + ": cannot be emptied for --force: " + ec.message());
    return FolderUse::kNew;
  }
  if (!difference) {
    // The same scenario, run on the other clock: the emulator's virtual time and a deployment's wall
    // time never share a folder (one table would compare them).
    auto summary = ReadText(dir + "/summary.json");
    if (!clock.empty() && summary.ok()) {
      const json j = json::parse(*summary, nullptr, false);
      const std::string there = j.is_object() ? j.value("clock", std::string()) : std::string();
      if (!there.empty() && there != clock) {
        return Status::InvalidArgument(
            dir + " holds " + (there == "wall" ? "a deployment's (narrows launch)" : "the emulator's (narrows run)") +
            " results of this scenario, in " + there + "-clock time; " +
            (clock == "wall" ? "a deployment's" : "the emulator's") +
            " do not go beside them. Nothing was run: -o DIR writes elsewhere, --force replaces them");
      }
    }
    // The same scenario, run by another build of narrows: its numbers may differ (a model or an
    // algorithm changed), so they are not taken as this build's.
    const json j = summary.ok() ? json::parse(*summary, nullptr, false) : json();
    const std::string build = j.is_object() ? j.value("narrows", std::string()) : std::string();
    if (summary.ok() && build != BuildVersion()) {
      return Status::InvalidArgument(dir + " holds results of this scenario made by " +
                                     (build.empty() ? std::string("an earlier build of narrows") : "narrows " + build) +
                                     ", and this is narrows " + BuildVersion() +
                                     ". Nothing was run: --force runs it again and replaces them, -o DIR writes "
                                     "elsewhere");
    }
    return FolderUse::kSame;
  }
  std::string more;
  if (difference->others > 0) {
    for (const auto& k : difference->other_keys) more += (more.empty() ? "" : ", ") + k;
    const size_t unnamed = difference->others - difference->other_keys.size();
    if (unnamed > 0) more += ", and " + std::to_string(unnamed) + " more";
    more = " (" + more + " differ" + (difference->others == 1 ? "s" : "") + " too)";
  }
  return Status::InvalidArgument(dir + " holds the results of another scenario: " + difference->key + " is " +
                                 difference->there + " there and " + difference->here + " here" + more +
                                 ". Nothing was run: --force runs this scenario and replaces them, -o DIR writes "
                                 "elsewhere");
}

double Num(const json& j, const char* key, double fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

namespace {

// The first item whose summary (`summary_of(item)`) says "baseline": true, else 0.
template <typename Items, typename SummaryOf>
size_t FirstBaseline(const Items& items, SummaryOf summary_of) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (summary_of(items[i]).value("baseline", false)) return i;
  }
  return 0;
}

}  // namespace

double WanBytes(const json& entry) {
  return entry.contains("network") && entry["network"].contains("wan_bytes") ? Num(entry["network"], "wan_bytes") : NAN;
}

int NameWidth(const json& results) {
  size_t width = 16;
  for (const auto& r : results) width = std::max(width, r.value("name", std::string()).size());
  return static_cast<int>(width);
}

size_t BaselineIndex(const json& results) {
  return FirstBaseline(results, [](const json& r) -> const json& { return r; });
}

size_t BaselineIndex(const Run& run) {
  return FirstBaseline(run.entries, [](const Entry& e) -> const json& { return e.summary; });
}

double EntryTime(const json& summary) {
  for (const char* key : {"time_s", "virtual_time_s", "wall_time_s"}) {
    const double t = Num(summary, key);
    if (!std::isnan(t)) return t;
  }
  return NAN;
}

double TimeOf(const json& line) {
  const double v = Num(line, "virtual_time_s");
  return std::isnan(v) ? Num(line, "wall_time_s") : v;
}

namespace {

// The points of sweep.json.
Status ReadLayout(const std::string& dir, Sweep* sweep) {
  auto layout = ReadJson(dir + "/sweep.json");
  if (!layout.ok()) return layout.status();
  try {
    sweep->label = layout->at("scenario").get<std::string>();
    for (const auto& a : layout->at("axes")) sweep->axes.push_back(a.at("key").get<std::string>());
    for (const auto& p : layout->at("points")) {
      SweepPoint point;
      point.name = p.at("name").get<std::string>();
      point.values = p.at("values").get<std::vector<std::string>>();
      sweep->points.push_back(std::move(point));
    }
  } catch (const json::exception& e) {
    return Status::InvalidArgument(dir + "/sweep.json: " + e.what());
  }
  return Status::Ok();
}

// A study: a folder of run (or tune) folders, each a point of no axis, in name order.
Status ReadStudy(const std::string& dir, Sweep* sweep) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_directory() && IsFile(e.path().string() + "/summary.json")) names.push_back(e.path().filename().string());
  }
  if (names.empty()) return Status::NotFound(dir + ": neither a sweep folder (sweep.json) nor a folder of run folders");
  std::sort(names.begin(), names.end());
  sweep->label = std::filesystem::path(dir).filename().string();
  for (const auto& n : names) sweep->points.push_back({n, {}, std::nullopt, std::nullopt});
  return Status::Ok();
}

}  // namespace

Result<Sweep> LoadSweep(const std::string& dir) {
  Sweep sweep;
  sweep.dir = dir;
  std::error_code ec;
  // A run folder is not a study (its seed folders are not points).
  const bool study = !IsFile(dir + "/sweep.json") && !IsFile(dir + "/summary.json") && std::filesystem::is_directory(dir, ec);
  NARROWS_RETURN_IF_ERROR(study ? ReadStudy(dir, &sweep) : ReadLayout(dir, &sweep));
  for (auto& point : sweep.points) {
    const std::string pdir = dir + "/" + point.name;
    if (!IsFile(pdir + "/summary.json")) continue;  // not run yet
    auto run = LoadRun(pdir);
    if (!run.ok()) return run.status();
    // LoadRun read scenario.yaml if it could; a point cannot do without it (its model, its entries).
    if (!IsFile(pdir + "/scenario.yaml")) return Status::NotFound(pdir + "/scenario.yaml: cannot be read");
    auto sc = core::ParseScenario(run->scenario_yaml, pdir + "/scenario.yaml");
    if (!sc.ok()) return sc.status();
    point.run = std::move(*run);
    point.scenario = std::move(*sc);
  }
  return sweep;
}

}  // namespace narrows::tools
