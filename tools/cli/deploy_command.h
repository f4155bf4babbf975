// `narrows worker` and `narrows launch`: the scenario trained by real processes over ZeroMQ.
//
// A worker process runs one rank of every entry of the scenario's compare: list (or of one entry),
// with live membership (trainer::Membership::kLive) over deploy::ZmqTransport. Rank 0 hosts the
// rendezvous, gathers every rank's records after each entry and writes the same run folder as
// `narrows run`, with wall-clock instead of virtual time. `launch --local N` starts N workers on
// this machine and waits for them.
//
// Rank, world size and rendezvous come from flags, or from the launcher's conventions: torchrun
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Slurm (SLURM_PROCID, SLURM_NTASKS), Open MPI
// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE).
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/scenario.h"
#include "core/status.h"
#include "tools/cli/run_folders.h"

namespace narrows::tools {

struct WorkerOptions {
  int rank = -1;              // -1: from the environment
  int world = -1;             // -1: from the environment
  std::string master;         // host:port; "": MASTER_ADDR and MASTER_PORT (default 29500)
  std::string bind_host = "*";
  std::string advertise;      // host the peers reach this worker at ("": as rank 0 sees it)
  std::string key_file;       // overrides deploy.key_file
  std::string entry;          // run only this entry of compare: ("": all)
  bool rejoin = false;        // restart a rank of a run in progress (needs entry)
  std::string resume;         // a checkpoint folder, …/<entry>/checkpoints/step-N
  double connect_timeout_s = 120.0;
  std::FILE* progress = stderr;
  std::string data_root;
  // The network the processes' bytes cross, for the table: "scenario" (`launch --network`: the
  // link emulator carries the scenario's network:), "loopback" (`launch` without it), or "" (the
  // hosts' own network: `worker` started by hand, srun, torchrun, mpirun).
  std::string network;
};

// InvalidArgument naming the first scenario key that real processes do not honour (faults that are
// the emulator's: leave, join, link_down; a speed factor above 1, which no process can run at);
// Ok otherwise. Crash, corrupt and repeat faults are the fault layer's; speed factors below 1 are
// honoured by pacing each computation (core::Clock::Compute).
core::Status HonouredByRealProcesses(const core::Scenario& sc);

// Rank, world size and rendezvous address from `options`, else from `env` (the process
// environment's variables). InvalidArgument naming the flag or variable that is missing or wrong.
struct Placement {
  int rank = 0, world = 1;
  std::string master;
};
core::Result<Placement> ResolvePlacement(const WorkerOptions& options, const std::map<std::string, std::string>& env);
// The first host of a Slurm node list ("node[01-04],gpu7" -> node01), expanded by
// `scontrol show hostnames` where it holds a range.
core::Result<std::string> FirstSlurmHost(const std::string& nodelist);
std::map<std::string, std::string> ProcessEnvironment();

// `removed` (if given) is set when the run went on without this process: its members evicted it or
// declared it dead. Its error is then not the run's: `narrows worker` exits with kExitRemoved, which
// `narrows launch` takes as a departure, not a failure.
core::Status RunWorkerProcess(const core::Scenario& scenario, const WorkerOptions& options, bool* removed = nullptr);
constexpr int kExitRemoved = 3;

struct LaunchOptions {
  int local = 0;                       // workers to start on this machine
  std::string scenario_file;
  std::vector<std::string> sets;       // --set overrides, passed on
  std::string entry, resume;           // passed on
  bool quiet = false;
  // Through the link emulator (tools/cli/linkemu_command.h): each worker in a network namespace of
  // its own, the scenario's network: between them. Needs root.
  bool emulated_network = false;
  std::string tcp;  // with it: the namespaces' TCP congestion control ("": the host's)
  std::string chaos;  // kills and restarts (tools/cli/chaos.h ParseChaos); "": none
  bool packet_log = false;  // with it: every packet's fate on every link, in <run folder>/packets.csv
  // The run folder holding another scenario's results (everything but compare: and deploy:, which
  // entries launched one at a time may vary) is refused; kReplace (--force) empties it first.
  OnOtherScenario existing = OnOtherScenario::kRefuse;
};
// Starts the workers (this program, `worker`), waits for them and reports how each ended.
core::Status LaunchLocal(const core::Scenario& scenario, const LaunchOptions& options);

}  // namespace narrows::tools
