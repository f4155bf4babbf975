// Chaos for a local deployment (`narrows launch --local N --chaos SPEC`): SIGKILLs worker
// processes at seeded random times — wherever each happens to be: an inner step, the outer
// all-reduce, a checkpoint being written, a worker joining — and starts each again after a delay
// with --rejoin, bounded in count and time. With the link emulator (`--network`), it also cuts
// workers off from all the others for a while and heals them (partitions): a worker cut off for
// longer than deploy.timeout_s stops (it cannot hear rank 0) or is declared dead by the others, and
// is started again like a killed one. Rank 0 is never killed or cut off (it hosts the rendezvous and
// writes the results). Every kill, cut, heal and restart goes to <run>/chaos.jsonl and, after the
// run, to the entry's events.jsonl (`chaos_kill`, `chaos_partition`, `chaos_heal`, `chaos_fenced`,
// `chaos_restart`, with `wall_s` since the launch).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace narrows::tools {

struct ChaosSpec {
  uint64_t seed = 0;
  int kills = 10;                // at most this many
  double mean_interval_s = 5.0;  // between kills: exponential with this mean
  double restart_after_s = 1.0;  // a killed worker starts again this long after
  double from_s = 2.0;           // no kill before this many seconds from the launch
  double until_s = 1e9;          // ... nor after
  int partitions = 0;                 // at most this many cuts (they need the link emulator)
  double partition_interval_s = 10.0; // between cuts: exponential with this mean
  double partition_s = 3.0;           // how long a worker stays cut off
};

// SPEC: a YAML mapping, `{seed: 1, kills: 20, mean_interval_s: 2, restart_after_s: 0.5,
// from_s: 2, until_s: 120, partitions: 5, partition_interval_s: 10, partition_s: 3}` (every key
// optional); an unknown key or a bad value is an error that names it.
core::Result<ChaosSpec> ParseChaos(const std::string& text);

class Chaos {
 public:
  // `restart(rank)` starts a new process for `rank` with --rejoin; `partition(rank, cut)` cuts or
  // heals its links (null: no link emulator, and a spec with partitions is refused by the caller).
  Chaos(ChaosSpec spec, int world, std::function<core::Result<pid_t>(int rank)> restart,
        std::function<void(int rank, bool cut)> partition = {});
  ~Chaos();

  // From the launcher's wait loop: kills and restarts what is due. `pids[r]`: rank r's process
  // (-1: none now); a restart puts its new pid there and adds one to `*running`.
  void Tick(std::vector<pid_t>& pids, int* running);
  // Whether the process `pid`, just reaped, was one this killed (its death is no failure).
  bool KilledByChaos(pid_t pid) const;
  // Whether `pid` is a process this started again.
  bool Restarted(pid_t pid) const;
  // Whether the process `pid` was cut off at some time of its life (an exit of its own is then the
  // partition's doing).
  bool CutOff(pid_t pid) const;
  // The process of `rank`, cut off, ended with `status`: it starts again after restart_after_s.
  void Fenced(int rank, int status);
  // Rank 0 has finished: no more kills, cuts or restarts; every cut is healed.
  void Stop();

  const std::vector<nlohmann::json>& events() const { return events_; }
  int kills() const { return kills_; }
  int restarts() const { return restarts_; }
  int failed_restarts() const { return failed_restarts_; }
  void NoteFailedRestart(int rank, int status);

 private:
  double Now() const;
  void ScheduleNextKill();
  void TickPartitions(const std::vector<pid_t>& pids, double now);

  ChaosSpec spec_;
  int world_;
  std::function<core::Result<pid_t>(int)> restart_;
  std::function<void(int, bool)> partition_;
  std::mt19937_64 rng_, cut_rng_;
  std::chrono::steady_clock::time_point start_;
  double next_kill_s_ = 0.0;
  std::vector<double> restart_at_;  // per rank: when to start it again (< 0: not waiting)
  std::vector<double> heal_at_;     // per rank: when its cut heals (< 0: not cut)
  double next_partition_s_ = 0.0;
  std::vector<pid_t> killed_, restarted_, cut_off_;
  std::vector<nlohmann::json> events_;
  int kills_ = 0, restarts_ = 0, failed_restarts_ = 0, partitions_ = 0;
  bool stopped_ = false;
};

}  // namespace narrows::tools
