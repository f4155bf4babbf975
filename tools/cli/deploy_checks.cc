// The scenario checks every deployment makes before it starts (tools/cli/deploy_checks.h and
// HonouredByRealProcesses of tools/cli/deploy_command.h).
#include "tools/cli/deploy_checks.h"

#include <algorithm>
#include <string>
#include <vector>

#include "tools/cli/deploy_command.h"
#include "tools/cli/format.h"
#include "trainer/algorithms/plugin.h"

namespace narrows::tools {

using core::Status;

Status OneSeed(const core::Scenario& sc) {
  if (sc.seeds == 1) return Status::Ok();
  return Status::InvalidArgument("seeds: " + std::to_string(sc.seeds) +
                                 ": a deployment runs one seed at a time (pass --set seeds=1 --set seed=K per run)");
}

Status HonouredByRealProcesses(const core::Scenario& sc) {
  std::vector<int> crashed;  // workers whose process a crash fault ends
  for (size_t i = 0; i < sc.faults.size(); ++i) {
    const auto& f = sc.faults[i];
    const std::string at = "faults[" + std::to_string(i) + "]: ";
    if (f.kind == core::FaultKind::kLinkDown) {
      return Status::InvalidArgument(at + "a link_down fault is the emulator's (narrows run); real processes honour "
                                          "leave, join, crash, corrupt and repeat faults, and launch --network with "
                                          "--chaos cuts workers off: remove it (--set faults=[]) to launch");
    }
    if (f.kind == core::FaultKind::kCrash) crashed.push_back(f.worker);
    if (f.kind == core::FaultKind::kJoin && std::count(crashed.begin(), crashed.end(), f.worker) > 0) {
      return Status::InvalidArgument(at + "worker " + std::to_string(f.worker) + " joins after a crash fault ended its "
                                          "process, which real processes cannot do (a restarted process rejoins: launch "
                                          "--chaos); make it a leave to launch");
    }
    if (f.kind == core::FaultKind::kLeave || f.kind == core::FaultKind::kJoin) {
      for (const auto& e : sc.compare) {
        const trainer::AlgorithmPlugin* p = trainer::FindAlgorithm(e.algorithm);
        const std::string why = p != nullptr && p->scheduled_membership ? p->scheduled_membership(e) : "";
        if (!why.empty()) {
          return Status::InvalidArgument(at + "compare entry '" + e.name + "' (" + e.algorithm + "): " + why +
                                         "; launch it with --entry after removing the fault, or run it in the emulator");
        }
      }
    }
  }
  for (size_t r = 0; r < sc.workers.speed.size(); ++r) {
    if (sc.workers.speed[r] > 1.0) {
      return Status::InvalidArgument("workers.speed[" + std::to_string(r) + "]: " + Printf("%g", sc.workers.speed[r]) +
                                     " is faster than the host, which real processes cannot be (they honour factors "
                                     "up to 1 by pacing their computations); scale the factors so the fastest is 1");
    }
  }
  return Status::Ok();
}

Status CrashesSpareLaterEntries(const core::Scenario& sc, size_t entries, bool restarts_possible) {
  if (entries <= 1 || restarts_possible) return Status::Ok();
  for (size_t i = 0; i < sc.faults.size(); ++i) {
    if (sc.faults[i].kind != core::FaultKind::kCrash) continue;
    return Status::InvalidArgument(
        "faults[" + std::to_string(i) + "]: a crash ends worker " + std::to_string(sc.faults[i].worker) +
        "'s process, and the " + std::to_string(entries - 1) + " entries after the first would run without it: run one "
        "entry at a time (--entry NAME), or restart it (launch --chaos, torchrun --max_restarts)");
  }
  return Status::Ok();
}

}  // namespace narrows::tools
