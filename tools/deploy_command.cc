#include "tools/deploy_command.h"

#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "core/progress.h"
#include "core/result_record.h"
#include "core/run_writer.h"
#include "core/tags.h"
#include "deploy/zmq_transport.h"
#include "tools/chaos.h"
#include "tools/format.h"
#include "tools/invariants.h"
#include "tools/this_program.h"
#include "tools/linkemu_command.h"
#include "tools/plan_command.h"
#include "tools/run_command.h"
#include "tools/worker_resume.h"
#include "trainer/algorithms/plugin.h"
#include "trainer/experiment.h"
#include "trainer/warm_start.h"

extern char** environ;

namespace narrows::tools {
namespace {

// The deployment's fault layer: a scenario's crash fault ends this worker's process with SIGKILL
// before the step it names — a real crash, which the survivors find by their heartbeats — or, with
// `after_sends: K`, inside the step before it, just before the step's (K+1)-th message would leave
// (inside its collective: the peers that got its last messages and those that did not differ).
// With `stall_s` the process hangs that long first (its heartbeats go on), as one stuck and then
// killed would.
class CrashLayer {
 public:
  CrashLayer(const core::Scenario& sc, int rank) {
    auto earliest = [](int64_t& from, int64_t step) { from = from < 0 ? step : std::min(from, step); };
    for (const auto& f : sc.faults) {
      if (f.worker != rank) continue;
      if (f.kind == core::FaultKind::kCrash) crashes_[f.at_step] = f;
      if (f.kind == core::FaultKind::kCorrupt) earliest(corrupt_from_, f.at_step);
      if (f.kind == core::FaultKind::kRepeat) earliest(repeat_from_, f.at_step);
    }
  }
  void BeforeStep(int64_t step) {
    if (corrupt_from_ >= 0 && step >= corrupt_from_) corrupting_.store(true);
    if (repeat_from_ >= 0 && step >= repeat_from_) repeating_.store(true);
    if (const auto now = crashes_.find(step); now != crashes_.end()) Die(now->second);
    const auto next = crashes_.find(step + 1);
    armed_ = next != crashes_.end() && next->second.after_sends >= 0 ? &next->second : nullptr;
    sends_left_.store(armed_ != nullptr ? armed_->after_sends : -1);
  }
  // How to send a message of `bytes`: 4 fewer once a corrupt fault is on, twice once a repeat is.
  deploy::ZmqOptions::SendPlan BeforeSend(size_t bytes) {
    if (sends_left_.load() >= 0 && sends_left_.fetch_sub(1) == 0) Die(*armed_);
    return {corrupting_.load() && bytes >= 8 ? bytes - 4 : bytes, repeating_.load()};
  }

 private:
  static void Die(const core::FaultSpec& f) {
    if (f.stall_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(f.stall_s));
    ::raise(SIGKILL);
  }
  std::map<int64_t, core::FaultSpec> crashes_;  // by at_step
  const core::FaultSpec* armed_ = nullptr;
  std::atomic<int64_t> sends_left_{-1};  // armed inside the step before a crash with after_sends
  int64_t corrupt_from_ = -1;             // a corrupt fault's first step (-1: none)
  std::atomic<bool> corrupting_{false};
  int64_t repeat_from_ = -1;              // a repeat fault's first step (-1: none)
  std::atomic<bool> repeating_{false};
};

using core::Status;

// Tags of the run's own messages, above every tag an experiment can make (core/tags.h: below
// kLiveEnd, the live roster's folded tags included; asserted there).
constexpr int kTagStart = core::tags::kDeployStart;
constexpr int kTagPartSize = core::tags::kDeployPartSize;
constexpr int kTagPart = core::tags::kDeployPart;
constexpr int kTagAck = core::tags::kDeployAck;

// Sends this process's part of the entry to rank 0; rank 0 merges every live rank's.
Status Gather(deploy::ZmqTransport& t, trainer::Experiment& e, std::vector<int>* missing) {
  if (t.rank() != 0) {
    const std::string part = e.ExportPart();
    const uint64_t size = part.size();
    NARROWS_RETURN_IF_ERROR(t.Send(0, kTagPartSize, &size, sizeof size));
    return t.Send(0, kTagPart, part.data(), part.size());
  }
  for (int r = 1; r < t.world_size(); ++r) {
    uint64_t size = 0;
    Status s = t.Recv(r, kTagPartSize, &size, sizeof size);
    if (s.code() == core::StatusCode::kPeerUnavailable) {
      missing->push_back(r);  // died: its records died with it
      continue;
    }
    NARROWS_RETURN_IF_ERROR(s);
    if (size > (uint64_t{1} << 34)) return Status::InvalidArgument("rank " + std::to_string(r) + " sent an absurd part size");
    std::string part(size, '\0');
    NARROWS_RETURN_IF_ERROR(t.Recv(r, kTagPart, part.data(), part.size()));
    NARROWS_RETURN_IF_ERROR(e.MergePart(part));
  }
  e.GatherLeftoverSpools();  // what killed processes on this machine recorded before they died
  return Status::Ok();
}


}  // namespace

namespace {

// The entries this process runs: all, or the one --entry or --resume names.
struct EntrySelection {
  std::string only;  // "" = every entry
  std::vector<core::AlgorithmSpec> entries;
};

// The entry a checkpoint folder (…/ENTRY/checkpoints/step-N) belongs to.
std::string CheckpointEntry(const std::string& checkpoint) {
  std::filesystem::path p = std::filesystem::path(checkpoint).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // a trailing slash
  return p.parent_path().parent_path().filename();
}

core::Result<EntrySelection> SelectEntries(const core::Scenario& sc, const WorkerOptions& o) {
  EntrySelection sel;
  sel.only = o.entry;
  if (!o.resume.empty()) {
    const std::string from_path = CheckpointEntry(o.resume);
    if (!sel.only.empty() && sel.only != from_path) {
      return Status::InvalidArgument("--resume " + o.resume + " belongs to entry '" + from_path + "', not '" + sel.only + "'");
    }
    sel.only = from_path;
  }
  if (o.rejoin && sel.only.empty()) return Status::InvalidArgument("--rejoin needs --entry: the entry in progress");
  for (const auto& e : Entries(sc)) {
    if (sel.only.empty() || e.name == sel.only) sel.entries.push_back(e);
  }
  if (sel.entries.empty()) return Status::InvalidArgument("the scenario has no entry named '" + sel.only + "'");
  return sel;
}

core::Result<deploy::ZmqOptions> NodeOptions(const core::Scenario& sc, const Placement& place, const WorkerOptions& o) {
  deploy::ZmqOptions z;
  z.rank = place.rank;
  z.world_size = place.world;
  z.master = place.master;
  z.bind_host = o.bind_host;
  z.advertise = o.advertise;
  z.restarted = o.rejoin;
  z.heartbeat_s = sc.deploy.heartbeat_s;
  z.timeout_s = sc.deploy.timeout_s;
  z.connect_timeout_s = o.connect_timeout_s;
  z.run_digest = core::RunDigest(sc);
  if (!sc.model.torchscript.empty()) {
    // The same path may hold another module on another host: the resolved scenario records the
    // file's digest (so the run's digest differs), and the parameter count joins it, so that rank 0
    // refuses a process whose module differs, naming both.
    z.run_digest += " (model " + sc.model.torchscript + ": " + std::to_string(trainer::CostOf(sc.model).params) +
                    " parameters, file " + core::FileDigest(sc.model.torchscript) + ")";
  }
  z.bulk_streams = static_cast<int>(sc.deploy.bulk_streams == core::DeploySpec::kAutoBulkStreams
                                        ? deploy::BulkStreamsFor(sc.network.link.bandwidth_bps, 2e-3 * sc.network.link.latency_ms)
                                        : sc.deploy.bulk_streams);
  if (sc.deploy.max_queued_mb == core::DeploySpec::kAutoMaxQueued) {
    int64_t params = 0;  // the largest model among the entries
    for (const auto& e : Entries(sc)) {
      core::ModelSpec spec = sc.model;
      if (e.n_layers > 0) spec.n_layers = e.n_layers;
      params = std::max(params, trainer::CostOf(spec).params);
    }
    z.max_queued_bytes = (uint64_t{1} << 30) + 16 * static_cast<uint64_t>(params);
  } else {
    z.max_queued_bytes = static_cast<uint64_t>(sc.deploy.max_queued_mb) << 20;
  }
  if (sc.deploy.security != core::Security::kCurve) return z;
  const std::string key = o.key_file.empty() ? sc.deploy.key_file : o.key_file;
  if (key.empty()) {
    return Status::InvalidArgument("deploy.security is curve: give deploy.key_file or --key (`narrows keygen FILE` "
                                   "writes one), or set deploy.security: plain for unencrypted TCP");
  }
  auto keys = deploy::ReadKeyFile(key);
  if (!keys.ok()) return keys.status();
  z.curve = true;
  z.keys = *keys;
  return z;
}

using Experiments = std::vector<std::unique_ptr<trainer::Experiment>>;

core::Result<Experiments> CreateExperiments(const core::Scenario& sc, const std::vector<core::AlgorithmSpec>& entries,
                                            const WorkerOptions& o, const std::string& run_dir,
                                            const std::shared_ptr<CrashLayer>& crashes) {
  auto data = trainer::LoadDataset(sc, o.data_root);
  if (!data.ok()) return data.status();
  Experiments experiments;
  for (const auto& entry : entries) {
    trainer::ExperimentOptions eo;
    eo.membership = trainer::Membership::kLive;
    eo.rejoin = o.rejoin;
    eo.checkpoint_dir = run_dir + "/" + entry.name + "/checkpoints";
    eo.spool_dir = run_dir + "/" + entry.name + "/spool";
    // A resume names one entry's checkpoint; the entries after it start from the beginning.
    if (!o.resume.empty() && CheckpointEntry(o.resume) == entry.name) eo.resume_from = o.resume;
    if (!o.rejoin) eo.before_step = [crashes](int, int64_t step) { crashes->BeforeStep(step); };
    auto e = trainer::Experiment::Create(sc, entry, *data, eo);
    if (!e.ok()) return e.status();
    experiments.push_back(std::move(e).value());
  }
  if (sc.warm_start.enabled()) {
    // Every process pre-trains the same weights (deterministic) unless the cache already has them.
    auto path = trainer::PrepareWarmStart(sc, **data, run_dir + "/warm_start", o.progress);
    if (!path.ok()) return path.status();
    for (auto& e : experiments) NARROWS_RETURN_IF_ERROR(e->SetWarmStart(*path));
  }
  return experiments;
}

// Every entry starts together: rank 0 says when.
Status StartTogether(deploy::ZmqTransport& t, size_t entry) {
  int32_t index = static_cast<int32_t>(entry);
  if (t.rank() != 0) return t.Recv(0, kTagStart, &index, sizeof index);
  for (int r : t.Members()) {
    if (r != 0) NARROWS_RETURN_IF_ERROR(t.Send(r, kTagStart, &index, sizeof index));
  }
  return Status::Ok();
}

// One entry on this rank. Rank 0 gathers every part, writes the entry's records and returns its
// line of summary.json; the other ranks return null once rank 0 acknowledges.
core::Result<nlohmann::json> RunEntry(trainer::Experiment& e, deploy::ZmqTransport& t, const std::string& entry_dir,
                                      core::Progress& progress) {
  e.SetProgress([&progress](int64_t steps, double wall_s, double loss) {
    char detail[96];
    std::snprintf(detail, sizeof detail, "wall %.1f s | loss %.3f", wall_s, loss);
    progress.Update(steps, detail);
  });
  const auto start = std::chrono::steady_clock::now();
  e.RunWorker(t.rank(), t);
  // A worker that failed (not one the others dropped) ends its process: the others see it leave.
  // Rank 0 first writes what the workers it can still reach recorded (Finish returns the error).
  if (t.rank() != 0) NARROWS_RETURN_IF_ERROR(e.status());
  std::vector<int> missing;
  NARROWS_RETURN_IF_ERROR(Gather(t, e, &missing));
  int32_t ack = 0;
  if (t.rank() != 0) {
    NARROWS_RETURN_IF_ERROR(t.Recv(0, kTagAck, &ack, sizeof ack));
    return nlohmann::json();
  }
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto r = e.Finish(entry_dir);
  for (int m : t.Members()) {
    if (m != 0) (void)t.Send(m, kTagAck, &ack, sizeof ack);
  }
  if (!r.ok()) return r.status();
  char detail[160];
  std::snprintf(detail, sizeof detail, "val loss %.4f | %.1f s wall%s", r->final_val_loss, r->virtual_time_s,
                missing.empty() ? "" : (" | " + std::to_string(missing.size()) + " worker(s) lost").c_str());
  progress.Finish(detail);
  return EntryJson(*r, host_s);
}

}  // namespace

// A deployment runs one seed; a scenario with several is refused rather than run in part.
Status OneSeed(const core::Scenario& sc) {
  if (sc.seeds == 1) return Status::Ok();
  return Status::InvalidArgument("seeds: " + std::to_string(sc.seeds) +
                                 ": a deployment runs one seed at a time (pass --set seeds=1 --set seed=K per run)");
}

// summary.json's `network_carried`: what the measured times crossed, against the scenario's network.
nlohmann::json NetworkCarried(const core::Scenario& sc, const std::string& network) {
  const std::string scenario_net = sc.network.profile.empty() ? "custom" : sc.network.profile;
  if (network == "scenario") return {{"network", "scenario"}, {"profile", scenario_net}};
  return {{"network", network.empty() ? "hosts" : network}, {"profile", scenario_net}};
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

// A crash fault ends its worker's process; nothing starts it again but a restart (--rejoin,
// --chaos, torchrun's agent), so the entries after the one it happens in would run without that
// worker, compared as equals with those before. Refused where no restart can come.
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

// A worker that `narrows launch` started ends with it: if the launch is killed alone (not its
// process group, as a terminal's Ctrl-C would), its workers do not train on as orphans. The
// launch names itself in NARROWS_LAUNCH_PID; a worker whose parent is already gone ends now.
void EndWithTheLaunch() {
  const char* launch = std::getenv("NARROWS_LAUNCH_PID");
  if (launch == nullptr) return;
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (std::to_string(::getppid()) != launch) ::raise(SIGTERM);
}

Status RunWorkerProcess(const core::Scenario& scenario, const WorkerOptions& o, bool* removed) {
  EndWithTheLaunch();
  NARROWS_RETURN_IF_ERROR(OneSeed(scenario));
  NARROWS_RETURN_IF_ERROR(HonouredByRealProcesses(scenario));
  core::Scenario sc = scenario;
  const auto env = ProcessEnvironment();
  auto place = ResolvePlacement(o, env);
  if (!place.ok()) return place.status();
  const int rank = place->rank;
  if (place->world != sc.workers.count) {
    return Status::InvalidArgument("the world has " + std::to_string(place->world) + " workers but the scenario's workers.count is " +
                                   std::to_string(sc.workers.count) + " (pass --set workers.count=" +
                                   std::to_string(place->world) + ", or write workers.count: auto to take the launcher's)");
  }
  if (sc.compute.mode == core::ComputeMode::kModelled) {
    if (rank == 0) std::fprintf(stderr, "narrows: compute.mode modelled is the emulator's; a deployment measures\n");
    sc.compute.mode = core::ComputeMode::kMeasured;
  }
  const std::string run_dir = sc.output.dir + "/" + sc.name;
  WorkerOptions opts = o;
  // The whole group started again (torchrun's elastic restart, or --resume latest): the entries
  // finished are kept, the one in progress goes on from its newest complete checkpoint.
  const int restarts = ElasticRestarts(env);
  const bool again = o.resume == "latest" || (o.resume.empty() && o.entry.empty() && !o.rejoin && restarts > 0);
  std::string resumed_entry, resumed_checkpoint;
  if (again) {
    if (!o.entry.empty()) return Status::InvalidArgument("--resume latest finds the entry in progress: drop --entry");
    const ResumePoint at = LatestResumePoint(sc, run_dir, place->world);
    if (at.entry.empty()) {
      if (rank == 0) std::fprintf(stderr, "narrows: every entry of %s has finished\n", run_dir.c_str());
      return Status::Ok();
    }
    resumed_entry = at.entry;
    resumed_checkpoint = at.checkpoint;
    if (rank == 0) {
      const std::string why = restarts > 0 ? "started again by torchrun (restart " + std::to_string(restarts) + ")" : "--resume latest";
      std::fprintf(stderr, "narrows: %s: %zu entries finished before; %s %s\n", why.c_str(), at.finished.size(),
                   at.entry.c_str(),
                   at.checkpoint.empty() ? "starts again (no complete checkpoint: deploy.checkpoint_every writes them)"
                                         : ("goes on from " + at.checkpoint).c_str());
    }
  }
  if (again) opts.resume.clear();
  auto selection = SelectEntries(sc, opts);
  if (!selection.ok()) return selection.status();
  if (again) {  // the entry in progress, from its checkpoint, and those after it
    auto& list = selection->entries;
    const auto from = std::find_if(list.begin(), list.end(), [&](const auto& e) { return e.name == resumed_entry; });
    list.erase(list.begin(), from);
    opts.resume = resumed_checkpoint;
  }
  const auto& entries = selection->entries;
  if (!o.rejoin && !again) {
    NARROWS_RETURN_IF_ERROR(CrashesSpareLaterEntries(sc, entries.size(), ElasticMaxRestarts(env) > 0));
  }
  // Rank 0 writes the run folder: one holding another scenario's results is refused before anything
  // runs (as launch refuses it); entries run one at a time may differ in compare: and deploy:. A
  // folder without a record may hold what the other ranks, started first, began to write (spools).
  if (rank == 0 && IsFile(run_dir + "/scenario.yaml")) {
    auto use = ClaimResultFolder(run_dir, sc.resolved_yaml, OnOtherScenario::kRefuse, "run folder", {"compare", "deploy"},
                                 "wall");
    if (!use.ok()) return use.status();
  }
  auto z = NodeOptions(sc, *place, opts);
  if (!z.ok()) return z.status();
  // A restarted process, or group, does not crash again.
  auto crashes = std::make_shared<CrashLayer>(o.rejoin || again ? core::Scenario{} : sc, rank);
  z->before_send = [crashes](int, int, size_t bytes) { return crashes->BeforeSend(bytes); };
  auto experiments = CreateExperiments(sc, entries, opts, run_dir, crashes);
  if (!experiments.ok()) return experiments.status();
  auto transport = deploy::ZmqTransport::Connect(*z);
  if (!transport.ok()) return transport.status();
  deploy::ZmqTransport& t = **transport;
  // A process started again before its predecessor registered (a kill while the ranks were still
  // starting) is no joiner: the run had not begun, and the others count it among its first members.
  const bool rejoin = o.rejoin && !t.AtStart();
  if (o.rejoin && !rejoin) {
    std::fprintf(stderr, "narrows[rank %d]: started again before the run began: it starts with the others\n", rank);
    for (auto& e : *experiments) e->StartWithTheOthers();
  }
  if (rank == 0) {
    NARROWS_RETURN_IF_ERROR(core::MakeDirs(run_dir));
    NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/scenario.yaml", sc.resolved_yaml));
  }
  nlohmann::json results = nlohmann::json::array(), summary = {{"results", nlohmann::json::array()}};
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!rejoin) NARROWS_RETURN_IF_ERROR(StartTogether(t, i));
    t.ResetClock();
    const std::string label = "[" + std::to_string(i + 1) + "/" + std::to_string(entries.size()) + "] " + entries[i].name;
    core::Progress progress(label + " step", sc.train.steps, rank == 0 ? o.progress : nullptr);
    auto line = RunEntry(*(*experiments)[i], t, run_dir + "/" + entries[i].name, progress);
    if (!line.ok()) {
      if (removed != nullptr) *removed = !t.Removed().empty();
      return line.status();
    }
    if (rank != 0) continue;
    results.push_back(*line);
    auto written = WriteSummary(sc, run_dir, results, "wall", !selection->only.empty() || again);
    if (!written.ok()) return written.status();
    summary = *written;
    summary["network_carried"] = NetworkCarried(sc, o.network);
    NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/summary.json", summary.dump(2) + "\n"));
  }
  if (rank == 0) {
    NARROWS_RETURN_IF_ERROR(CheckFigures(summary, run_dir));
    PrintComparison(summary);
    std::printf("results: %s/summary.json\n", run_dir.c_str());
  }
  return Status::Ok();
}

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

// Waits for every worker. The first that fails ends the run for all; workers outliving rank 0 by
// more than a minute have nobody to report to. The run's status is the first failure's, else rank 0's.
// With `chaos`, the workers it kills are no failures and the processes it starts again are waited
// for too; one of those that fails is noted, not fatal, and any still up 10 s after rank 0 is done
// (waiting for a welcome that cannot come, and not yet gone for want of rank 0's heartbeat) is
// stopped. Not at once: one that was welcomed back ends like the others once rank 0 acknowledges,
// and a signal in the middle of its exit would leave its spool behind.
Status Reap(std::vector<pid_t> pids, Chaos* chaos = nullptr) {
  int remaining = static_cast<int>(pids.size()), rank0_status = -1, failed_status = 0, failed_rank = -1;
  auto rank0_done = std::chrono::steady_clock::time_point::max();
  std::vector<pid_t> restarted;  // chaos: every process it started again, up or not
  bool stopped_restarted = false;
  while (remaining > 0) {
    if (chaos && !stopped_restarted && std::chrono::steady_clock::now() - rank0_done > std::chrono::seconds(10)) {
      stopped_restarted = true;
      for (pid_t p : restarted) {
        if (std::find(pids.begin(), pids.end(), p) != pids.end()) ::kill(p, SIGTERM);
      }
    }
    if (chaos) {
      chaos->Tick(pids, &remaining);
      for (pid_t p : pids) {
        if (p > 0 && chaos->Restarted(p) && std::find(restarted.begin(), restarted.end(), p) == restarted.end()) {
          restarted.push_back(p);
        }
      }
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (std::chrono::steady_clock::now() - rank0_done > std::chrono::seconds(60)) SignalAll(pids, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) {
      // A process chaos killed whose restart came before its exit was reaped (a loaded machine can
      // take longer than restart_after_s to tear one down): the restart took its place in `pids`
      // and was counted as running beside it.
      if (chaos && chaos->KilledByChaos(pid)) --remaining;
      continue;
    }
    const int r = static_cast<int>(it - pids.begin());
    *it = -1;
    --remaining;
    if (chaos && chaos->KilledByChaos(pid)) continue;  // its restart is scheduled
    if (chaos && chaos->CutOff(pid) && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
        rank0_done == std::chrono::steady_clock::time_point::max()) {
      // Cut off by a partition, it stopped (or was declared dead): it starts again like a killed one.
      chaos->Fenced(r, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      continue;
    }
    if (chaos && chaos->Restarted(pid) && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      if (rank0_done == std::chrono::steady_clock::time_point::max()) {
        std::fprintf(stderr, "narrows launch: worker %d, started again, ended with status %d\n", r,
                     WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        chaos->NoteFailedRestart(r, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      }
      continue;
    }
    if (r != 0 && WIFEXITED(status) && WEXITSTATUS(status) == kExitRemoved) {
      // Evicted (or declared dead) by its members: they go on without it (their events say why).
      std::fprintf(stderr, "narrows launch: worker %d was removed from the run; the others go on\n", r);
      continue;
    }
    if (WIFSIGNALED(status)) {
      std::fprintf(stderr, "narrows launch: worker %d was killed by signal %d (%s)\n", r, WTERMSIG(status),
                   strsignal(WTERMSIG(status)));
    } else if (WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "narrows launch: worker %d exited with status %d\n", r, WEXITSTATUS(status));
      if (failed_status == 0) {
        // A worker failed (bad input, an error it cannot recover from): the run is over for all.
        failed_status = WEXITSTATUS(status);
        failed_rank = r;
        SignalAll(pids, SIGTERM);
      }
    }
    if (r == 0) {
      rank0_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      rank0_done = std::chrono::steady_clock::now();
      if (chaos) chaos->Stop();
    }
  }
  if (failed_status != 0) {
    const std::string why = "worker " + std::to_string(failed_rank) + " failed (its message is above)";
    return failed_status == 2 ? Status::InvalidArgument(why) : Status::Internal(why);
  }
  if (rank0_status == 0) return Status::Ok();
  const std::string why = "worker 0 " + (rank0_status > 128 ? "was killed" : "exited with status " + std::to_string(rank0_status)) +
                          " (its message is above)";
  return rank0_status == 2 ? Status::InvalidArgument(why) : Status::Internal(why);
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

}  // namespace

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

Status LaunchLocal(const core::Scenario& sc, const LaunchOptions& lo) {
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
  const std::string run_dir = sc.output.dir + "/" + sc.name;
  if (lo.existing == OnOtherScenario::kReplace && !lo.resume.empty()) {
    return Status::InvalidArgument("--force empties the run folder, and --resume continues from a checkpoint in it: "
                                   "give one of them");
  }
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
  std::string key = sc.deploy.key_file;
  if (sc.deploy.security == core::Security::kCurve && key.empty()) {
    // Local workers share a key made for this run: encrypted even on loopback, nothing to set up.
    key = run_dir + "/cluster.key";
    if (!std::filesystem::exists(key)) NARROWS_RETURN_IF_ERROR(deploy::WriteNewKeyFile(key));
  }
  // Chaos: one entry (a restarted worker rejoins it by name); checked before anything starts.
  std::optional<ChaosSpec> chaos_spec;
  std::string chaos_entry;
  if (!lo.chaos.empty()) {
    auto spec = ParseChaos(lo.chaos);
    if (!spec.ok()) return spec.status();
    chaos_spec = *spec;
    const auto entries = Entries(sc);
    chaos_entry = lo.entry;
    if (chaos_entry.empty() && entries.size() == 1) chaos_entry = entries.front().name;
    if (chaos_entry.empty()) {
      return Status::InvalidArgument("--chaos restarts killed workers into one entry: pass --entry NAME (compare has " +
                                     std::to_string(entries.size()) + ")");
    }
    if (n < 2) return Status::InvalidArgument("--chaos needs at least 2 workers (rank 0 is never killed)");
    if (chaos_spec->partitions > 0 && !lo.emulated_network) {
      return Status::InvalidArgument("--chaos: partitions cut links in the link emulator: add --network PROFILE "
                                     "(network namespaces; needs root)");
    }
  }
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
  if (chaos_spec) {
    chaos = std::make_unique<Chaos>(*chaos_spec, n, [&lo, &self, &master, &key, &net, &chaos_entry](int r) {
      LaunchOptions again = lo;
      again.entry = chaos_entry;
      again.resume.clear();
      return SpawnWorker(again, *self, master, key, net.get(), r, {"--rejoin"});
    }, [&net](int r, bool cut) {
      if (net) net->emulator->Partition(r, cut);
    });
  }
  ::setenv("NARROWS_LAUNCH_PID", std::to_string(::getpid()).c_str(), 1);  // the workers end with this process
  auto pids = SpawnWorkers(lo, *self, master, key, net.get());
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
