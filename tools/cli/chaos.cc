#include "tools/cli/chaos.h"

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
  const std::set<std::string> known = {"seed", "kills", "mean_interval_s", "restart_after_s", "from_s", "until_s",
                                       "partitions", "partition_interval_s", "partition_s"};
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (known.count(key) == 0) {
      return core::Status::InvalidArgument("--chaos: unknown key '" + key +
                                           "' (seed, kills, mean_interval_s, restart_after_s, from_s, until_s, "
                                           "partitions, partition_interval_s, partition_s)");
    }
    try {
      if (key == "seed") {
        spec.seed = kv.second.as<uint64_t>();
      } else if (key == "kills" || key == "partitions") {
        (key == "kills" ? spec.kills : spec.partitions) = kv.second.as<int>();
        if (spec.kills < 0 || spec.partitions < 0) throw YAML::Exception(YAML::Mark(), "negative");
      } else {
        const double v = kv.second.as<double>();
        const bool positive = key == "mean_interval_s" || key == "partition_interval_s" || key == "partition_s";
        if (!std::isfinite(v) || v < 0 || (positive && v <= 0)) throw YAML::Exception(YAML::Mark(), "range");
        if (key == "partition_interval_s") spec.partition_interval_s = v;
        if (key == "partition_s") spec.partition_s = v;
        if (key == "mean_interval_s") spec.mean_interval_s = v;
        if (key == "restart_after_s") spec.restart_after_s = v;
        if (key == "from_s") spec.from_s = v;
        if (key == "until_s") spec.until_s = v;
      }
    } catch (const YAML::Exception&) {
      return core::Status::InvalidArgument("--chaos: " + key + ": expected " +
                                           (key == "seed" || key == "kills" || key == "partitions"
                                                ? std::string("a non-negative integer")
                                                : std::string(key == "mean_interval_s" || key == "partition_interval_s" ||
                                                                      key == "partition_s"
                                                                  ? "a positive"
                                                                  : "a non-negative") +
                                                      " number of seconds") +
                                           ", got '" + YAML::Dump(kv.second) + "'");
    }
  }
  if (spec.until_s <= spec.from_s) return core::Status::InvalidArgument("--chaos: until_s must be after from_s");
  return spec;
}

Chaos::Chaos(ChaosSpec spec, int world, std::function<core::Result<pid_t>(int)> restart,
             std::function<void(int, bool)> partition)
    : spec_(spec), world_(world), restart_(std::move(restart)), partition_(std::move(partition)), rng_(spec.seed),
      // Cuts draw from a generator of their own, so that adding them leaves a spec's kills where they were.
      cut_rng_(spec.seed ^ 0x5bd1e995u), start_(std::chrono::steady_clock::now()),
      restart_at_(static_cast<size_t>(world), -1.0), heal_at_(static_cast<size_t>(world), -1.0) {
  next_kill_s_ = spec_.from_s;
  ScheduleNextKill();
  next_partition_s_ = spec_.from_s + std::exponential_distribution<double>(1.0 / spec_.partition_interval_s)(cut_rng_);
}

Chaos::~Chaos() { Stop(); }

void Chaos::Stop() {
  stopped_ = true;
  for (int r = 1; r < world_; ++r) {
    if (heal_at_[static_cast<size_t>(r)] < 0) continue;
    heal_at_[static_cast<size_t>(r)] = -1.0;
    if (partition_) partition_(r, false);
  }
}

void Chaos::TickPartitions(const std::vector<pid_t>& pids, double now) {
  for (int r = 1; r < world_; ++r) {
    double& at = heal_at_[static_cast<size_t>(r)];
    if (at < 0 || now < at) continue;
    at = -1.0;
    partition_(r, false);
    events_.push_back({{"type", "chaos_heal"}, {"wall_s", now}, {"worker", r}});
  }
  if (!partition_ || partitions_ >= spec_.partitions || now < next_partition_s_ || now > spec_.until_s) return;
  next_partition_s_ += std::exponential_distribution<double>(1.0 / spec_.partition_interval_s)(cut_rng_);
  std::vector<int> up;  // a rank whose process is up, not waiting for a restart, not cut already
  for (int r = 1; r < world_; ++r) {
    const size_t i = static_cast<size_t>(r);
    if (pids[i] > 0 && restart_at_[i] < 0 && heal_at_[i] < 0) up.push_back(r);
  }
  if (up.empty()) return;
  const int victim = up[std::uniform_int_distribution<size_t>(0, up.size() - 1)(cut_rng_)];
  partition_(victim, true);
  heal_at_[static_cast<size_t>(victim)] = now + spec_.partition_s;
  cut_off_.push_back(pids[static_cast<size_t>(victim)]);
  ++partitions_;
  events_.push_back({{"type", "chaos_partition"}, {"wall_s", now}, {"worker", victim}, {"for_s", spec_.partition_s}});
}

bool Chaos::CutOff(pid_t pid) const { return std::find(cut_off_.begin(), cut_off_.end(), pid) != cut_off_.end(); }

void Chaos::Fenced(int rank, int status) {
  const double now = Now();
  restart_at_[static_cast<size_t>(rank)] = now + spec_.restart_after_s;
  events_.push_back({{"type", "chaos_fenced"}, {"wall_s", now}, {"worker", rank}, {"status", status}});
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
      if (heal_at_[static_cast<size_t>(r)] >= 0) cut_off_.push_back(*pid);  // started into a cut
      ++*running;
      ++restarts_;
    } else {
      e["error"] = pid.status().ToString();
      ++failed_restarts_;
    }
    events_.push_back(e);
  }
  TickPartitions(pids, now);
  if (kills_ >= spec_.kills || now < next_kill_s_ || now > spec_.until_s) return;
  ScheduleNextKill();
  // A rank whose process is up, not already waiting for a restart, and not cut off.
  std::vector<int> up;
  for (int r = 1; r < world_; ++r) {
    const size_t i = static_cast<size_t>(r);
    if (pids[i] > 0 && restart_at_[i] < 0 && heal_at_[i] < 0) up.push_back(r);
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
