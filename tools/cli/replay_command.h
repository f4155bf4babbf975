// `narrows replay`: a deployment's run (narrows launch, with or without --chaos) replayed in the
// emulator from its membership trace — who was in each outer step, who was welcomed back when, the
// order in which an asynchronous server took its pushes —
// and its losses compared with the run's, evaluation by evaluation. Equal bit for bit says that the
// deployment lost and double-counted nothing through its crashes, restarts and partitions: the
// same members, the same data and the same arithmetic give the same model.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "trainer/experiment.h"

namespace narrows::tools {

// The membership trace of an entry from its events: outer_sync's participants by step, and join's
// workers by step. An error names the line of a malformed event.
core::Result<trainer::MembershipTrace> ReadMembershipTrace(const std::vector<nlohmann::json>& events,
                                                           const std::string& path);
// The same for an algorithm that synchronises every step and records no outer steps (DDP): the
// group of each of `steps` steps from the crash and evicted events (their survivors, at the step
// of the collective that dropped them) and the join events.
core::Result<trainer::MembershipTrace> ReadStepMembershipTrace(const std::vector<nlohmann::json>& events,
                                                               const std::string& path, int workers, int64_t steps);

// async-diloco's: the pushes its server took, in order, from the arrival events (with DyLU's
// answered counts). A run with crash, join or evicted events is refused: its killed workers' partial
// work is not in the events.
core::Result<trainer::MembershipTrace> ReadArrivalTrace(const std::vector<nlohmann::json>& events,
                                                        const std::string& path, int workers);

struct ReplayOptions {
  std::FILE* progress = stderr;  // nullptr = quiet
  std::string data_root;         // "" = trainer::DefaultDataRoot()
  std::string output;            // the replay's run folder ("" = <run folder>-replay)
};

// One entry's agreement: the evaluations of the run (step, validation loss) against the replay's.
struct ReplayAgreement {
  std::string entry;
  int evaluations = 0, equal = 0;  // equal: bit for bit
  int64_t first_differing_step = -1;
  double max_abs_difference = 0.0;
  double final_live = 0.0, final_replay = 0.0;
  // The synchronisations the trace gave: outer steps (DiLoCo, Streaming DiLoCo), steps (DDP) or the
  // server's pushes (async DiLoCo).
  int syncs = 0;
  // The outer steps whose global parameters both runs recorded (outer_sync's digest: DiLoCo,
  // Streaming DiLoCo), how many of them are equal, and the first that is not (-1: none).
  int digests = 0, digests_equal = 0;
  int64_t first_differing_outer_step = -1;
  bool Equal() const {
    return evaluations > 0 && equal == evaluations && digests_equal == digests && final_live == final_replay;
  }
};

// Replays the run in `run_dir` and compares; writes <replay folder>/replay.json. An error if the run
// cannot be replayed (an entry whose algorithm's membership is not recorded, a malformed trace).
core::Result<std::vector<ReplayAgreement>> ReplayRun(const std::string& run_dir, const ReplayOptions& options);
// ReplayRun with a table on stdout; Aborted if any entry differs.
core::Status ReplayCommand(const std::string& run_dir, const ReplayOptions& options);

}  // namespace narrows::tools
