// `narrows launch --local N`: the workers started as processes of this program on this machine (on
// loopback, or each in a network namespace of the link emulator), waited for, and what they ended
// with; with --chaos, killed and started again along the way.
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "core/run_writer.h"
#include "deploy/zmq_transport.h"
#include "tools/cli/chaos.h"
#include "tools/cli/deploy_checks.h"
#include "tools/cli/deploy_command.h"
#include "tools/cli/format.h"
#include "tools/cli/linkemu_command.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/run_command.h"
#include "tools/cli/this_program.h"

extern char** environ;

namespace narrows::tools {

using core::Status;

namespace {

void SignalAll(const std::vector<pid_t>& pids, int signal) {
  for (pid_t p : pids) {
    if (p > 0) ::kill(p, signal);
  }
}

// Starts `narrows worker` for rank `r` (with `extra` arguments) on loopback, or in its namespace of
// `net`.
core::Result<pid_t> SpawnWorker(const LaunchOptions& lo, const std::string& self, const std::string& master,
                                const std::string& key, const EmulatedNetwork* net, int r,
                                const std::vector<std::string>& extra) {
  const std::string bind = net ? deploy::Ipv4Text(EmulatedNetwork::Address(r)) : "127.0.0.1";
  std::vector<std::string> args = {self, "worker", lo.scenario_file, "--rank", std::to_string(r), "--world",
                                    std::to_string(lo.local), "--master", master, "--bind", bind};
  for (const auto& s : lo.sets) args.insert(args.end(), {"--set", s});
  if (!key.empty()) args.insert(args.end(), {"--key", key});
  if (!lo.entry.empty()) args.insert(args.end(), {"--entry", lo.entry});
  if (!lo.resume.empty()) args.insert(args.end(), {"--resume", lo.resume});
  args.insert(args.end(), {"--network-carried", net ? "scenario" : "loopback"});
  args.insert(args.end(), extra.begin(), extra.end());
  if (r != 0 || lo.quiet) args.push_back("--quiet");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (net) {
    // Into the worker's namespace, then this program: only system calls between fork and exec.
    const int ns = net->namespaces[static_cast<size_t>(r)].fd();
    pid = ::fork();
    if (pid == 0) {
      if (::setns(ns, CLONE_NEWNET) != 0) ::_exit(127);
      ::execve(self.c_str(), argv.data(), environ);
      ::_exit(127);
    }
    if (pid < 0) return Status::IoError(std::string("cannot start worker ") + std::to_string(r) + ": " + std::strerror(errno));
  } else if (const int err = ::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ); err != 0) {
    return Status::IoError(std::string("cannot start worker ") + std::to_string(r) + ": " + std::strerror(err));
  }
  return pid;
}

// The rendezvous of a local launch: a free loopback port, or in fresh namespaces, where every port
// is free, rank 0's address.
std::string LocalMaster(const EmulatedNetwork* net) {
  return net ? deploy::Ipv4Text(EmulatedNetwork::Address(0)) + ":29500"
             : "127.0.0.1:" + std::to_string(deploy::FreeLoopbackPort());
}

// `narrows worker` for each rank; on a failure to start one, the started are stopped.
core::Result<std::vector<pid_t>> SpawnWorkers(const LaunchOptions& lo, const std::string& self, const std::string& master,
                                              const std::string& key, const EmulatedNetwork* net) {
  std::vector<pid_t> pids(static_cast<size_t>(lo.local), -1);
  for (int r = 0; r < lo.local; ++r) {
    auto pid = SpawnWorker(lo, self, master, key, net, r, {});
    if (!pid.ok()) {
      SignalAll(pids, SIGTERM);
      return pid.status();
    }
    pids[static_cast<size_t>(r)] = *pid;
  }
  return pids;
}

// What Reap has seen of the workers so far.
struct Reaping {
  int remaining = 0;  // processes not yet reaped (a restart by chaos adds one)
  int rank0_status = -1, failed_status = 0, failed_rank = -1;
  std::chrono::steady_clock::time_point rank0_done = std::chrono::steady_clock::time_point::max();
  std::vector<pid_t> restarted;  // chaos: every process it started again, up or not
  bool stopped_restarted = false;
};

// Chaos's part of each turn of Reap's loop: the processes it started again that are still up 10 s
// after rank 0 is done are stopped (once), then its kills and restarts that are due.
void TendChaos(Chaos& chaos, std::vector<pid_t>& pids, Reaping& st) {
  if (!st.stopped_restarted && std::chrono::steady_clock::now() - st.rank0_done > std::chrono::seconds(10)) {
    st.stopped_restarted = true;
    for (pid_t p : st.restarted) {
      if (std::find(pids.begin(), pids.end(), p) != pids.end()) ::kill(p, SIGTERM);
    }
  }
  chaos.Tick(pids, &st.remaining);
  for (pid_t p : pids) {
    if (p > 0 && chaos.Restarted(p) && std::find(st.restarted.begin(), st.restarted.end(), p) == st.restarted.end()) {
      st.restarted.push_back(p);
    }
  }
}

// Whether the end of rank `r`'s process `pid` (wait status `status`) is chaos's to handle: one it
// killed, one a partition cut off, or one it started again that failed. None of them is the run's
// failure.
bool LeftToChaos(Chaos& chaos, pid_t pid, int r, int status, const Reaping& st) {
  if (chaos.KilledByChaos(pid)) return true;  // its restart is scheduled
  if (chaos.CutOff(pid) && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
      st.rank0_done == std::chrono::steady_clock::time_point::max()) {
    // Cut off by a partition, it stopped (or was declared dead): it starts again like a killed one.
    chaos.Fenced(r, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return true;
  }
  if (chaos.Restarted(pid) && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    if (st.rank0_done == std::chrono::steady_clock::time_point::max()) {
      std::fprintf(stderr, "narrows launch: worker %d, started again, ended with status %d\n", r,
                   WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      chaos.NoteFailedRestart(r, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    return true;
  }
  return false;
}

// Notes how rank `r`'s process ended (wait status `status`): a removal, a signal, a failure (the
// first ends the run for all), and rank 0's end (which stops chaos).
void NoteEnd(const std::vector<pid_t>& pids, int r, int status, Chaos* chaos, Reaping& st) {
  if (r != 0 && WIFEXITED(status) && WEXITSTATUS(status) == kExitRemoved) {
    // Evicted (or declared dead) by its members: they go on without it (their events say why).
    std::fprintf(stderr, "narrows launch: worker %d was removed from the run; the others go on\n", r);
    return;
  }
  if (WIFSIGNALED(status)) {
    std::fprintf(stderr, "narrows launch: worker %d was killed by signal %d (%s)\n", r, WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
  } else if (WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "narrows launch: worker %d exited with status %d\n", r, WEXITSTATUS(status));
    if (st.failed_status == 0) {
      // A worker failed (bad input, an error it cannot recover from): the run is over for all.
      st.failed_status = WEXITSTATUS(status);
      st.failed_rank = r;
      SignalAll(pids, SIGTERM);
    }
  }
  if (r == 0) {
    st.rank0_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    st.rank0_done = std::chrono::steady_clock::now();
    if (chaos) chaos->Stop();
  }
}

// The run's status once every worker is reaped: the first failure's, else rank 0's.
Status ReapedStatus(const Reaping& st) {
  if (st.failed_status != 0) {
    const std::string why = "worker " + std::to_string(st.failed_rank) + " failed (its message is above)";
    return st.failed_status == 2 ? Status::InvalidArgument(why) : Status::Internal(why);
  }
  if (st.rank0_status == 0) return Status::Ok();
  const std::string why = "worker 0 " +
                          (st.rank0_status > 128 ? "was killed" : "exited with status " + std::to_string(st.rank0_status)) +
                          " (its message is above)";
  return st.rank0_status == 2 ? Status::InvalidArgument(why) : Status::Internal(why);
}

// Waits for every worker. The first that fails ends the run for all; workers outliving rank 0 by
// more than a minute have nobody to report to. The run's status is the first failure's, else rank 0's.
// With `chaos`, the workers it kills are no failures and the processes it starts again are waited
// for too; one of those that fails is noted, not fatal, and any still up 10 s after rank 0 is done
// (waiting for a welcome that cannot come, and not yet gone for want of rank 0's heartbeat) is
// stopped. Not at once: one that was welcomed back ends like the others once rank 0 acknowledges,
// and a signal in the middle of its exit would leave its spool behind.
Status Reap(std::vector<pid_t> pids, Chaos* chaos = nullptr) {
  Reaping st;
  st.remaining = static_cast<int>(pids.size());
  while (st.remaining > 0) {
    if (chaos) TendChaos(*chaos, pids, st);
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (std::chrono::steady_clock::now() - st.rank0_done > std::chrono::seconds(60)) SignalAll(pids, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) {
      // A process chaos killed whose restart came before its exit was reaped (a loaded machine can
      // take longer than restart_after_s to tear one down): the restart took its place in `pids`
      // and was counted as running beside it.
      if (chaos && chaos->KilledByChaos(pid)) --st.remaining;
      continue;
    }
    const int r = static_cast<int>(it - pids.begin());
    *it = -1;
    --st.remaining;
    if (chaos && LeftToChaos(*chaos, pid, r, status, st)) continue;
    NoteEnd(pids, r, status, chaos, st);
  }
  return ReapedStatus(st);
}

// Each entry's measured wall-clock time through the emulated network beside the planner's
// prediction for the same network in virtual time (compute as the scenario models it).
void PrintBesidePrediction(const core::Scenario& sc, const std::string& run_dir) {
  PlanOptions o;
  o.bandwidths = false;  // the times alone
  auto plan = MakePlan(sc, o);
  std::ifstream in(run_dir + "/summary.json");
  nlohmann::json summary;
  try {
    in >> summary;
  } catch (const std::exception&) {
    return;
  }
  if (!plan.ok() || !summary.contains("results")) return;
  std::printf("%-20s %14s %16s\n", "entry", "measured (s)", "predicted (s)");
  for (const auto& r : summary["results"]) {
    const std::string name = r.value("name", "");
    double predicted = -1;
    for (const auto& row : plan->rows) {
      if (row.name == name) predicted = row.time_s;
    }
    std::printf("%-20s %14.2f %16s\n", name.c_str(), r.value("time_s", 0.0),
                predicted < 0 ? "-" : Printf("%.2f", predicted).c_str());
  }
  std::printf("(predicted: narrows plan, the emulator's network model with compute as the scenario models it)\n");
}

// Chaos's kills and restarts: <run>/chaos.jsonl, appended to the entry's events.jsonl (when the run
// wrote one), and a line on stdout.
Status WriteChaosEvents(const Chaos& chaos, const std::string& run_dir, const std::string& entry, bool quiet) {
  std::string lines;
  for (const auto& e : chaos.events()) lines += e.dump() + "\n";
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/chaos.jsonl", lines));
  const std::string events = run_dir + "/" + entry + "/events.jsonl";
  if (std::filesystem::exists(events)) {
    std::ofstream out(events, std::ios::app);
    out << lines;
    if (!out) return Status::IoError(events + ": cannot append the chaos events");
  }
  if (!quiet) {
    std::printf("chaos: %d kills, %d restarts (%d of them failed); %s/chaos.jsonl\n", chaos.kills(), chaos.restarts(),
                chaos.failed_restarts(), run_dir.c_str());
  }
  return Status::Ok();
}

// The checks a local launch makes before it touches the run folder.
Status CheckLaunch(const core::Scenario& sc, const LaunchOptions& lo) {
  NARROWS_RETURN_IF_ERROR(OneSeed(sc));
  NARROWS_RETURN_IF_ERROR(HonouredByRealProcesses(sc));
  NARROWS_RETURN_IF_ERROR(CrashesSpareLaterEntries(sc, lo.entry.empty() && lo.resume.empty() ? Entries(sc).size() : 1,
                                                   !lo.chaos.empty()));
  const int n = lo.local;
  if (n != sc.workers.count) {
    return Status::InvalidArgument("launch --local " + std::to_string(n) + " but the scenario's workers.count is " +
                                   std::to_string(sc.workers.count) + " (pass --set workers.count=" +
                                   std::to_string(n) + ")");
  }
  if (lo.existing == OnOtherScenario::kReplace && !lo.resume.empty()) {
    return Status::InvalidArgument("--force empties the run folder, and --resume continues from a checkpoint in it: "
                                   "give one of them");
  }
  return Status::Ok();
}

// Claims `run_dir` for the launch, clears what earlier launches' processes left of the entries this
// one runs, and records the scenario in a new folder.
Status PrepareRunFolder(const core::Scenario& sc, const LaunchOptions& lo, const std::string& run_dir) {
  auto use = ClaimResultFolder(run_dir, sc.resolved_yaml, lo.existing, "run folder", {"compare", "deploy"}, "wall");
  if (!use.ok()) return use.status();
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(run_dir));
  if (lo.resume.empty()) {
    // What processes of an earlier launch killed here left of the entries this one runs is not this
    // launch's: their spools go (a resumed launch keeps them, the records before its checkpoint).
    for (const auto& e : Entries(sc)) {
      if (!lo.entry.empty() && e.name != lo.entry) continue;
      std::error_code ec;
      std::filesystem::remove_all(run_dir + "/" + e.name + "/spool", ec);
    }
  }
  // The record first, so a launch that fails early leaves a folder that says what it was for.
  if (*use == FolderUse::kNew) NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/scenario.yaml", sc.resolved_yaml));
  return Status::Ok();
}

// The workers' key file: deploy.key_file, or with CURVE and none given, one in the run folder.
core::Result<std::string> LocalKey(const core::Scenario& sc, const std::string& run_dir) {
  std::string key = sc.deploy.key_file;
  if (sc.deploy.security == core::Security::kCurve && key.empty()) {
    // Local workers share a key made for this run: encrypted even on loopback, nothing to set up.
    key = run_dir + "/cluster.key";
    if (!std::filesystem::exists(key)) NARROWS_RETURN_IF_ERROR(deploy::WriteNewKeyFile(key));
  }
  return key;
}

// --chaos as parsed, and the entry its restarted workers rejoin.
struct ChaosPlan {
  std::optional<ChaosSpec> spec;  // none: no --chaos
  std::string entry;
};

// Chaos: one entry (a restarted worker rejoins it by name); checked before anything starts.
core::Result<ChaosPlan> PlanChaos(const core::Scenario& sc, const LaunchOptions& lo) {
  ChaosPlan plan;
  if (lo.chaos.empty()) return plan;
  auto spec = ParseChaos(lo.chaos);
  if (!spec.ok()) return spec.status();
  plan.spec = *spec;
  const auto entries = Entries(sc);
  plan.entry = lo.entry;
  if (plan.entry.empty() && entries.size() == 1) plan.entry = entries.front().name;
  if (plan.entry.empty()) {
    return Status::InvalidArgument("--chaos restarts killed workers into one entry: pass --entry NAME (compare has " +
                                   std::to_string(entries.size()) + ")");
  }
  if (lo.local < 2) return Status::InvalidArgument("--chaos needs at least 2 workers (rank 0 is never killed)");
  if (plan.spec->partitions > 0 && !lo.emulated_network) {
    return Status::InvalidArgument("--chaos: partitions cut links in the link emulator: add --network PROFILE "
                                   "(network namespaces; needs root)");
  }
  return plan;
}

}  // namespace

Status LaunchLocal(const core::Scenario& sc, const LaunchOptions& lo) {
  NARROWS_RETURN_IF_ERROR(CheckLaunch(sc, lo));
  const std::string run_dir = sc.output.dir + "/" + sc.name;
  NARROWS_RETURN_IF_ERROR(PrepareRunFolder(sc, lo, run_dir));
  auto key = LocalKey(sc, run_dir);
  if (!key.ok()) return key.status();
  auto chaos_plan = PlanChaos(sc, lo);
  if (!chaos_plan.ok()) return chaos_plan.status();
  const std::string& chaos_entry = chaos_plan->entry;
  auto self = ThisProgram();
  if (!self.ok()) return self.status();
  std::unique_ptr<EmulatedNetwork> net;
  if (lo.emulated_network) {
    auto started = StartEmulatedNetwork(sc, "", lo.tcp, lo.packet_log ? run_dir + "/packets.csv" : "");
    if (!started.ok()) return started.status();
    net = std::move(started).value();
  }
  const std::string master = LocalMaster(net.get());
  std::unique_ptr<Chaos> chaos;
  if (chaos_plan->spec) {
    chaos = std::make_unique<Chaos>(*chaos_plan->spec, lo.local, [&lo, &self, &master, &key, &net, &chaos_entry](int r) {
      LaunchOptions again = lo;
      again.entry = chaos_entry;
      again.resume.clear();
      return SpawnWorker(again, *self, master, *key, net.get(), r, {"--rejoin"});
    }, [&net](int r, bool cut) {
      if (net) net->emulator->Partition(r, cut);
    });
  }
  ::setenv("NARROWS_LAUNCH_PID", std::to_string(::getpid()).c_str(), 1);  // the workers end with this process
  auto pids = SpawnWorkers(lo, *self, master, *key, net.get());
  if (!pids.ok()) return pids.status();
  const Status reaped = Reap(std::move(*pids), chaos.get());
  if (chaos) NARROWS_RETURN_IF_ERROR(WriteChaosEvents(*chaos, run_dir, chaos_entry, lo.quiet));
  if (!net) return reaped;
  const EmulatedNetwork::Report report = net->Stop();
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/links.json", report.Json().dump(1) + "\n"));
  if (!lo.quiet) std::printf("the emulated links (%s/links.json):\n%s", run_dir.c_str(), report.Table().c_str());
  NARROWS_RETURN_IF_ERROR(reaped);
  PrintBesidePrediction(sc, run_dir);
  return Status::Ok();
}

}  // namespace narrows::tools
