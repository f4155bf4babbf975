// FaultPlan: who is alive at each step, from the scenario's leave/join/crash faults.
//
// Deterministic and known to every worker, so that all of them agree on the participants of each
// collective without a membership protocol (the emulator's case; over a real network membership
// comes from heartbeats instead). A worker whose first fault is a join starts absent. Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "core/scenario.h"

namespace narrows::trainer {

class FaultPlan {
 public:
  FaultPlan(const std::vector<core::FaultSpec>& faults, int num_workers);
  bool Alive(int worker, int64_t step) const;
  // Alive workers at `step`, ascending.
  std::vector<int> AliveSet(int64_t step) const;
  // True if `worker` crashes (loses its state) at exactly `step`.
  bool CrashesAt(int worker, int64_t step) const;

 private:
  struct Change {
    int64_t step;
    bool alive;
    bool crash;
  };
  std::vector<std::vector<Change>> changes_;  // per worker, by step
  std::vector<bool> initially_alive_;
};

}  // namespace narrows::trainer
