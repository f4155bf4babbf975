// The deployment's fault layer (CrashLayer): a scenario's crash, corrupt and repeat faults acted out
// by a real worker process, for `narrows worker` (tools/cli/deploy_command.h).
//
// A crash fault ends this worker's process with SIGKILL before the step it names — a real crash,
// which the survivors find by their heartbeats — or, with `after_sends: K`, inside the step before
// it, just before the step's (K+1)-th message would leave (inside its collective: the peers that got
// its last messages and those that did not differ). With `stall_s` the process hangs that long
// first (its heartbeats go on), as one stuck and then killed would.
//
// Thread-safety: BeforeStep runs before each training step; BeforeSend on whichever thread sends
// (deploy::ZmqOptions::before_send), possibly beside it: the counts they share are atomic.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>

#include "core/scenario.h"
#include "deploy/zmq_transport.h"

namespace narrows::tools {

class CrashLayer {
 public:
  // The faults of `sc` that name worker `rank`; an empty scenario: none.
  CrashLayer(const core::Scenario& sc, int rank);
  // Before training step `step`: turns on the corrupt and repeat faults due, and ends the process at
  // a crash due now (or arms one due inside this step's sends).
  void BeforeStep(int64_t step);
  // How to send a message of `bytes`: 4 fewer once a corrupt fault is on, twice once a repeat is.
  deploy::ZmqOptions::SendPlan BeforeSend(size_t bytes);

 private:
  static void Die(const core::FaultSpec& f);
  std::map<int64_t, core::FaultSpec> crashes_;  // by at_step
  const core::FaultSpec* armed_ = nullptr;
  std::atomic<int64_t> sends_left_{-1};  // armed inside the step before a crash with after_sends
  int64_t corrupt_from_ = -1;             // a corrupt fault's first step (-1: none)
  std::atomic<bool> corrupting_{false};
  int64_t repeat_from_ = -1;              // a repeat fault's first step (-1: none)
  std::atomic<bool> repeating_{false};
};

}  // namespace narrows::tools
