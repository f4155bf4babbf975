#include "tools/chaos.h"

#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace narrows::tools {

core::Result<ChaosSpec> ParseChaos(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return core::Status::InvalidArgument("--chaos: not valid YAML: " + e.msg);
  }
  if (!root.IsMap()) return core::Status::InvalidArgument("--chaos: expected a mapping like {seed: 1, kills: 20}, got '" + text + "'");
  ChaosSpec spec;
  const std::set<std::string> known = {"seed", "kills", "mean_interval_s", "restart_after_s", "from_s", "until_s"};
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (known.count(key) == 0) {
      return core::Status::InvalidArgument("--chaos: unknown key '" + key +
                                           "' (seed, kills, mean_interval_s, restart_after_s, from_s, until_s)");
    }
    try {
      if (key == "seed") {
        spec.seed = kv.second.as<uint64_t>();
      } else if (key == "kills") {
        spec.kills = kv.second.as<int>();
        if (spec.kills < 0) throw YAML::Exception(YAML::Mark(), "negative");
      } else {
        const double v = kv.second.as<double>();
        if (!std::isfinite(v) || v < 0 || (key == "mean_interval_s" && v <= 0)) throw YAML::Exception(YAML::Mark(), "range");
        if (key == "mean_interval_s") spec.mean_interval_s = v;
        if (key == "restart_after_s") spec.restart_after_s = v;
        if (key == "from_s") spec.from_s = v;
        if (key == "until_s") spec.until_s = v;
      }
    } catch (const YAML::Exception&) {
      return core::Status::InvalidArgument("--chaos: " + key + ": expected " +
                                           (key == "seed" || key == "kills" ? std::string("a non-negative integer")
                                                                            : std::string(key == "mean_interval_s" ? "a positive" : "a non-negative") +
                                                                                  " number of seconds") +
                                           ", got '" + YAML::Dump(kv.second) + "'");
    }
  }
  if (spec.until_s <= spec.from_s) return core::Status::InvalidArgument("--chaos: until_s must be after from_s");
  return spec;
}

Chaos::Chaos(ChaosSpec spec, int world, std::function<core::Result<pid_t>(int)> restart)
    : spec_(spec), world_(world), restart_(std::move(restart)), rng_(spec.seed), start_(std::chrono::steady_clock::now()),
      restart_at_(static_cast<size_t>(world), -1.0) {
  next_kill_s_ = spec_.from_s;
  ScheduleNextKill();
}

double Chaos::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Chaos::ScheduleNextKill() {
  std::exponential_distribution<double> gap(1.0 / spec_.mean_interval_s);
  next_kill_s_ += gap(rng_);
}

void Chaos::Tick(std::vector<pid_t>& pids, int* running) {
  if (stopped_) return;
  const double now = Now();
  for (int r = 1; r < world_; ++r) {
    double& at = restart_at_[static_cast<size_t>(r)];
    if (at < 0 || now < at) continue;
    at = -1.0;
    auto pid = restart_(r);
    nlohmann::json e = {{"type", "chaos_restart"}, {"wall_s", now}, {"worker", r}};
    if (pid.ok()) {
      pids[static_cast<size_t>(r)] = *pid;
      restarted_.push_back(*pid);
      ++*running;
      ++restarts_;
    } else {
      e["error"] = pid.status().ToString();
      ++failed_restarts_;
    }
    events_.push_back(e);
  }
  if (kills_ >= spec_.kills || now < next_kill_s_ || now > spec_.until_s) return;
  ScheduleNextKill();
  // A rank whose process is up and not already waiting for a restart.
  std::vector<int> up;
  for (int r = 1; r < world_; ++r) {
    if (pids[static_cast<size_t>(r)] > 0 && restart_at_[static_cast<size_t>(r)] < 0) up.push_back(r);
  }
  if (up.empty()) return;
  const int victim = up[std::uniform_int_distribution<size_t>(0, up.size() - 1)(rng_)];
  const pid_t pid = pids[static_cast<size_t>(victim)];
  if (::kill(pid, SIGKILL) != 0) return;  // gone already: its own exit is reaped as usual
  killed_.push_back(pid);
  restart_at_[static_cast<size_t>(victim)] = now + spec_.restart_after_s;
  ++kills_;
  events_.push_back({{"type", "chaos_kill"}, {"wall_s", now}, {"worker", victim}});
}

bool Chaos::KilledByChaos(pid_t pid) const { return std::find(killed_.begin(), killed_.end(), pid) != killed_.end(); }
bool Chaos::Restarted(pid_t pid) const { return std::find(restarted_.begin(), restarted_.end(), pid) != restarted_.end(); }

void Chaos::NoteFailedRestart(int rank, int status) {
  ++failed_restarts_;
  events_.push_back({{"type", "chaos_restart_failed"}, {"wall_s", Now()}, {"worker", rank}, {"status", status}});
}

}  // namespace narrows::tools
