#include "tools/cli/worker_resume.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "tools/cli/run_command.h"
#include "tools/cli/run_folders.h"

namespace narrows::tools {

namespace fs = std::filesystem;

ResumePoint LatestResumePoint(const core::Scenario& sc, const std::string& run_dir, int world) {
  ResumePoint point;
  std::set<std::string> done;
  if (auto summary = ReadJson(run_dir + "/summary.json"); summary.ok() && summary->contains("results")) {
    for (const auto& r : (*summary)["results"]) {
      if (r.contains("name") && r["name"].is_string()) done.insert(r["name"].get<std::string>());
    }
  }
  for (const auto& e : Entries(sc)) {
    if (done.count(e.name) > 0) {
      point.finished.push_back(e.name);
      continue;
    }
    point.entry = e.name;
    break;
  }
  if (point.entry.empty()) return point;
  const fs::path dir = fs::path(run_dir) / point.entry / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return point;
  std::map<int64_t, fs::path> steps;  // step -> folder
  bool per_rank = false;              // some checkpoint holds another rank's file than rank 0's
  for (const auto& d : fs::directory_iterator(dir, ec)) {
    const std::string name = d.path().filename().string();
    if (!d.is_directory() || name.rfind("step-", 0) != 0) continue;
    try {
      steps[std::stoll(name.substr(5))] = d.path();
    } catch (const std::exception&) {
      continue;
    }
    per_rank = per_rank || fs::exists(d.path() / "rank-1.ckpt", ec);
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    bool complete = fs::exists(it->second / "rank-0.ckpt", ec);
    for (int r = 1; complete && per_rank && r < world; ++r) {
      complete = fs::exists(it->second / ("rank-" + std::to_string(r) + ".ckpt"), ec);
    }
    if (complete) {
      point.checkpoint = it->second.string();
      break;
    }
  }
  return point;
}

namespace {

int NonNegative(const std::map<std::string, std::string>& env, const char* name) {
  const auto it = env.find(name);
  if (it == env.end()) return 0;
  try {
    return std::max(0, std::stoi(it->second));
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

int ElasticRestarts(const std::map<std::string, std::string>& env) { return NonNegative(env, "TORCHELASTIC_RESTART_COUNT"); }

int ElasticMaxRestarts(const std::map<std::string, std::string>& env) { return NonNegative(env, "TORCHELASTIC_MAX_RESTARTS"); }

}  // namespace narrows::tools
