// `narrows worker`: one rank of a deployment — its placement, the entries it runs (all, one, or
// those a restart goes on with), its transport and fault layer — and each entry in turn.
#include "tools/cli/deploy_command.h"

#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/progress.h"
#include "core/result_record.h"
#include "core/run_writer.h"
#include "deploy/zmq_transport.h"
#include "tools/cli/crash_layer.h"
#include "tools/cli/deploy_checks.h"
#include "tools/cli/deploy_entry.h"
#include "tools/cli/invariants.h"
#include "tools/cli/run_command.h"
#include "tools/cli/worker_resume.h"
#include "trainer/experiment.h"
#include "trainer/warm_start.h"

namespace narrows::tools {
namespace {

using core::Status;

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

// summary.json's `network_carried`: what the measured times crossed, against the scenario's network.
nlohmann::json NetworkCarried(const core::Scenario& sc, const std::string& network) {
  const std::string scenario_net = sc.network.profile.empty() ? "custom" : sc.network.profile;
  if (network == "scenario") return {{"network", "scenario"}, {"profile", scenario_net}};
  return {{"network", network.empty() ? "hosts" : network}, {"profile", scenario_net}};
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

// Rank, world size and rendezvous of this process, checked against the scenario's workers.count;
// a scenario's modelled compute becomes measured (a deployment measures it).
core::Result<Placement> PlaceWorker(core::Scenario& sc, const WorkerOptions& o,
                                    const std::map<std::string, std::string>& env) {
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
  return place;
}

// Where a group started again as a whole goes on from (rank 0 says so on stderr); no entry: every
// entry has finished.
ResumePoint GroupResumePoint(const core::Scenario& sc, const std::string& run_dir, const Placement& place, int restarts) {
  const ResumePoint at = LatestResumePoint(sc, run_dir, place.world);
  if (at.entry.empty()) {
    if (place.rank == 0) std::fprintf(stderr, "narrows: every entry of %s has finished\n", run_dir.c_str());
    return at;
  }
  if (place.rank == 0) {
    const std::string why = restarts > 0 ? "started again by torchrun (restart " + std::to_string(restarts) + ")" : "--resume latest";
    std::fprintf(stderr, "narrows: %s: %zu entries finished before; %s %s\n", why.c_str(), at.finished.size(),
                 at.entry.c_str(),
                 at.checkpoint.empty() ? "starts again (no complete checkpoint: deploy.checkpoint_every writes them)"
                                       : ("goes on from " + at.checkpoint).c_str());
  }
  return at;
}

// The entries this process runs. A group started again (`again`) runs the entry in progress, `at`,
// from its checkpoint (which `opts` then resumes from), and those after it.
core::Result<EntrySelection> SelectWorkerEntries(const core::Scenario& sc, WorkerOptions& opts, bool again,
                                                 const ResumePoint& at) {
  if (again) opts.resume.clear();
  auto selection = SelectEntries(sc, opts);
  if (!selection.ok()) return selection.status();
  if (again) {  // the entry in progress, from its checkpoint, and those after it
    auto& list = selection->entries;
    const auto from = std::find_if(list.begin(), list.end(), [&](const auto& e) { return e.name == at.entry; });
    list.erase(list.begin(), from);
    opts.resume = at.checkpoint;
  }
  return selection;
}

// How RunEntries runs this rank's entries.
struct EntriesRun {
  std::string run_dir;
  int rank = 0;
  bool rejoin = false;       // joined a run in progress: no start signal comes
  bool keep_others = false;  // some entries only: summary.json keeps the results of the others
};

// The entries in turn on this rank; rank 0 rewrites summary.json after each, and at the end checks
// its figures and prints the comparison.
Status RunEntries(const core::Scenario& sc, const WorkerOptions& o, const std::vector<core::AlgorithmSpec>& entries,
                  Experiments& experiments, deploy::ZmqTransport& t, const EntriesRun& how, bool* removed) {
  const int rank = how.rank;
  const std::string& run_dir = how.run_dir;
  nlohmann::json results = nlohmann::json::array(), summary = {{"results", nlohmann::json::array()}};
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!how.rejoin) NARROWS_RETURN_IF_ERROR(StartTogether(t, i));
    t.ResetClock();
    const std::string label = "[" + std::to_string(i + 1) + "/" + std::to_string(entries.size()) + "] " + entries[i].name;
    core::Progress progress(label + " step", sc.train.steps, rank == 0 ? o.progress : nullptr);
    auto line = RunEntry(*experiments[i], t, run_dir + "/" + entries[i].name, progress);
    if (!line.ok()) {
      if (removed != nullptr) *removed = !t.Removed().empty();
      return line.status();
    }
    if (rank != 0) continue;
    results.push_back(*line);
    auto written = WriteSummary(sc, run_dir, results, "wall", how.keep_others);
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

}  // namespace

Status RunWorkerProcess(const core::Scenario& scenario, const WorkerOptions& o, bool* removed) {
  EndWithTheLaunch();
  NARROWS_RETURN_IF_ERROR(OneSeed(scenario));
  NARROWS_RETURN_IF_ERROR(HonouredByRealProcesses(scenario));
  core::Scenario sc = scenario;
  const auto env = ProcessEnvironment();
  auto place = PlaceWorker(sc, o, env);
  if (!place.ok()) return place.status();
  const int rank = place->rank;
  const std::string run_dir = sc.output.dir + "/" + sc.name;
  WorkerOptions opts = o;
  // The whole group started again (torchrun's elastic restart, or --resume latest): the entries
  // finished are kept, the one in progress goes on from its newest complete checkpoint.
  const int restarts = ElasticRestarts(env);
  const bool again = o.resume == "latest" || (o.resume.empty() && o.entry.empty() && !o.rejoin && restarts > 0);
  ResumePoint at;
  if (again) {
    if (!o.entry.empty()) return Status::InvalidArgument("--resume latest finds the entry in progress: drop --entry");
    at = GroupResumePoint(sc, run_dir, *place, restarts);
    if (at.entry.empty()) return Status::Ok();
  }
  auto selection = SelectWorkerEntries(sc, opts, again, at);
  if (!selection.ok()) return selection.status();
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
  return RunEntries(sc, o, entries, *experiments, t, {run_dir, rank, rejoin, !selection->only.empty() || again}, removed);
}

}  // namespace narrows::tools
