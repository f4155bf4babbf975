// The narrows command line: one CLI11 app with a subcommand per job.
//
// Exit status: 0 success, 2 bad input (scenario file, command line, data), 1 any other failure;
// `narrows worker` 3 when its members removed it from the run (evicted, or declared dead), which
// `narrows launch` takes as a departure.
// Errors are one message on stderr, never a stack trace.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>

#include "core/codec.h"
#include "core/did_you_mean.h"
#include "core/scenario.h"
#include "tools/build_version.h"
#include "tools/fit_command.h"
#include "tools/format.h"
#include "tools/plan_command.h"
#include "tools/reference_command.h"
#include "tools/replay_command.h"
#include "tools/report_command.h"
#include "tools/sweep_command.h"
#include "trainer/script_model.h"
#include "tools/tune_command.h"
#include "tools/run_command.h"
#include "tools/sizes_only.h"
#ifdef NARROWS_WITH_DEPLOY
#include "deploy/zmq_transport.h"
#include "tools/deploy_command.h"
#include "tools/linkemu_command.h"
#endif
#include "trainer/algorithms/plugin.h"
#include "trainer/inner_optimizer.h"
#include "trainer/train.h"

namespace {

using narrows::core::Status;
using narrows::core::StatusCode;

constexpr int kExitBadInput = 2;
constexpr int kExitFailure = 1;

int Fail(const Status& status) {
  std::fprintf(stderr, "narrows: %s\n", status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument || status.code() == StatusCode::kNotFound
             ? kExitBadInput
             : kExitFailure;
}

// The scenario arguments every scenario command takes, and the flags several share.
struct ScenarioArgs {
  std::string file;
  std::vector<std::string> sets;
  bool quiet = false;
  int seeds = 0;  // --seeds (0: the scenario's)
  std::string output;  // -o/--output: the result folder (run, train, launch: <output.dir>/<name> by default)
  bool force = false;  // --force: replace a result folder of another scenario (or rerun this one's)

  void AddTo(CLI::App* cmd) {
    cmd->add_option("scenario", file, "scenario YAML file")->required();
    cmd->add_option("--set", sets, "override a key, e.g. --set train.lr=3e-4 (repeatable)")->type_name("KEY=VALUE");
  }
  // The commands that train also take --quiet.
  void AddWithQuiet(CLI::App* cmd, const char* quiet_help = "no progress line") {
    AddTo(cmd);
    cmd->add_flag("-q,--quiet", quiet, quiet_help);
  }
  FILE* progress() const { return quiet ? nullptr : stderr; }
  // The commands that write a result folder also take -o/--output and --force.
  void AddOutput(CLI::App* cmd, const char* default_folder) {
    cmd->add_option("-o,--output", output, std::string("the result folder (default: ") + default_folder + ")")
        ->type_name("DIR");
    cmd->add_flag("--force", force,
                  "run again even where the folder holds results: this scenario's (reused otherwise) or another's "
                  "(refused otherwise); what is there is replaced");
  }
  narrows::tools::OnOtherScenario existing() const {
    return force ? narrows::tools::OnOtherScenario::kReplace : narrows::tools::OnOtherScenario::kRefuse;
  }
  // The commands that compare entries also take --seeds.
  void AddSeeds(CLI::App* cmd) {
    cmd->add_option("--seeds", seeds, "run every entry once per seed (seed, seed + 1, ...); the same as --set seeds=N")
        ->check(CLI::Range(1, 1000));
  }

  // -o DIR for a run folder: the scenario's output.dir and name that make <output.dir>/<name> = DIR.
  std::vector<std::string> RunFolderSets() const {
    if (output.empty()) return {};
    std::string dir = output;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const auto slash = dir.rfind('/');
    const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
    return {"output.dir=" + parent, "name=" + (slash == std::string::npos ? dir : dir.substr(slash + 1))};
  }

  narrows::core::Result<narrows::core::Scenario> Load() const {
    std::vector<std::string> all = sets;
    if (seeds > 0) all.push_back("seeds=" + std::to_string(seeds));
    for (auto& s : RunFolderSets()) all.push_back(std::move(s));
    auto overrides = narrows::core::ParseOverrides(all);
    if (!overrides.ok()) return overrides.status();
    if (launcher_world > 0) {
      narrows::core::Override world{"workers.count", std::to_string(launcher_world),
                                    "workers.count=" + std::to_string(launcher_world), "the launcher's world size"};
      world.only_where_auto = true;
      overrides->push_back(world);
    }
    auto scenario = narrows::core::LoadScenario(file, *overrides);
    // A model of the user's is loaded and tried once now: a bad file fails before anything runs.
    if (scenario.ok() && !scenario->model.torchscript.empty()) {
      NARROWS_RETURN_IF_ERROR(narrows::trainer::CheckScriptModel(scenario->model, scenario->train.precision));
      static bool noted = false;  // once a process, however many times the scenario is read
      if (const std::string note = noted ? "" : narrows::trainer::ScriptModelNote(scenario->model); !note.empty()) {
        std::fprintf(stderr, "note: %s\n", note.c_str());
      }
      noted = true;
    }
    return scenario;
  }
  int launcher_world = 0;  // `narrows worker`: the world size its launcher gave, for workers.count: auto
};

// A subcommand: its CLI11 node, and what it does once the command line parsed.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

int Done(const Status& s) { return s.ok() ? 0 : Fail(s); }

// Loads the scenario, then runs `body` on it.
template <typename Body>
std::function<int()> WithScenario(std::shared_ptr<ScenarioArgs> args, Body body) {
  return [args, body] {
    auto scenario = args->Load();
    if (!scenario.ok()) return Fail(scenario.status());
    return body(*scenario, *args);
  };
}

Command AddTrain(CLI::App& app) {
  auto args = std::make_shared<ScenarioArgs>();
  CLI::App* cmd = app.add_subcommand("train", "train one replica and write a run folder");
  args->AddWithQuiet(cmd);
  args->AddOutput(cmd, "<output.dir>/<name>");
  return {cmd, WithScenario(args, [](const narrows::core::Scenario& scenario, const ScenarioArgs& a) {
            auto use = narrows::tools::ClaimResultFolder(scenario.output.dir + "/" + scenario.name,
                                                         scenario.resolved_yaml, a.existing());
            if (!use.ok()) return Fail(use.status());
            narrows::trainer::TrainOptions options;
            options.progress = a.progress();
            auto summary = narrows::trainer::TrainSingle(scenario, options);
            if (!summary.ok()) return Fail(summary.status());
            const std::string bpb = summary->final_val_bpb >= 0
                                        ? narrows::tools::Printf(" (%.3f bits/byte)", summary->final_val_bpb)
                                        : "";
            std::printf("run %s: %lld steps, %lld tokens, final val loss %.4f nats/token%s, %.0f tokens/s "
                        "(%.2f GFLOP/s on %d threads)\n",
                        summary->run_dir.c_str(), static_cast<long long>(summary->steps),
                        static_cast<long long>(summary->tokens), summary->final_val_loss, bpb.c_str(),
                        summary->tokens_per_s, summary->achieved_flops / 1e9, summary->threads);
            return 0;
          })};
}

Command AddRun(CLI::App& app) {
  auto args = std::make_shared<ScenarioArgs>();
  auto report = std::make_shared<bool>(false);
  auto sizes_only = std::make_shared<bool>(false);
  auto retime = std::make_shared<std::pair<bool, std::string>>();  // keep training records; re-time from
  CLI::App* cmd = app.add_subcommand(
      "run", "run every entry of the scenario's compare: list on emulated workers and compare them");
  args->AddWithQuiet(cmd, "no progress lines");
  args->AddSeeds(cmd);
  args->AddOutput(cmd, "<output.dir>/<name>");
  cmd->add_flag("--report", *report, "also write <run folder>/report.html");
  cmd->add_flag("--sizes-only", *sizes_only,
                "communication alone at the model's size: modelled compute, size-only messages, no training "
                "(ddp and diloco entries; thousands of workers)");
  cmd->add_flag("--keep-training", retime->first,
                "also write each entry's training record (<entry>/trained.json), for runs that --retime-from this one");
  cmd->add_option("--retime-from", retime->second,
                  "time, not train, the entries that another run folder of this scenario, differing in network keys "
                  "alone, trained with --keep-training, and take their losses from there (what sweep does)")
      ->type_name("DIR");
  return {cmd, WithScenario(args, [report, sizes_only, retime](const narrows::core::Scenario& scenario, const ScenarioArgs& a) {
            narrows::tools::RunOptions options;
            options.progress = a.progress();
            options.report = *report;
            options.existing = a.existing();
            options.keep_training = retime->first;
            options.retime_from = retime->second;
            if (*sizes_only) {
              if (*report) return Done(narrows::core::Status::InvalidArgument("--report: a sizes-only run has no losses to chart"));
              return Done(narrows::tools::RunSizesOnly(scenario, options).status());
            }
            return Done(narrows::tools::RunScenario(scenario, options));
          })};
}

#ifdef NARROWS_WITH_DEPLOY
Command AddWorker(CLI::App& app) {
  auto args = std::make_shared<ScenarioArgs>();
  auto o = std::make_shared<narrows::tools::WorkerOptions>();
  CLI::App* cmd = app.add_subcommand(
      "worker", "run one rank of the scenario over ZeroMQ (rank, world and rendezvous from flags or from "
                "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, SLURM_PROCID/SLURM_NTASKS/SLURM_STEP_NODELIST, "
                "OMPI_COMM_WORLD_RANK/_SIZE)");
  args->AddWithQuiet(cmd);
  cmd->add_option("--rank", o->rank, "this worker's rank")->check(CLI::NonNegativeNumber);
  cmd->add_option("--world", o->world, "number of workers")->check(CLI::PositiveNumber);
  cmd->add_option("--master", o->master, "rank 0's rendezvous address")->type_name("HOST:PORT");
  cmd->add_option("--bind", o->bind_host, "interface for this worker's sockets (default: all)");
  cmd->add_option("--advertise", o->advertise, "host the other workers reach this one at");
  cmd->add_option("--key", o->key_file, "CURVE key file (overrides deploy.key_file)");
  cmd->add_option("--entry", o->entry, "run only this entry of compare:");
  cmd->add_flag("--rejoin", o->rejoin, "restart this rank in a run in progress (with --entry)");
  cmd->add_option("--resume", o->resume,
                  "continue from a checkpoint folder (…/ENTRY/checkpoints/step-N), or 'latest': keep the entries "
                  "finished and continue the one in progress from its newest complete checkpoint (what a worker "
                  "started again by torchrun's elastic agent does by itself)");
  cmd->add_option("--connect-timeout", o->connect_timeout_s, "seconds to wait for every worker");
  cmd->add_option("--network-carried", o->network,
                  "what the workers' bytes cross, for the table: scenario (narrows launch --network), loopback "
                  "(narrows launch), or the hosts' own network (default)")
      ->check(CLI::IsMember({"scenario", "loopback"}));
  return {cmd, [args, o] {
            // workers.count: auto takes the world size from the flags or the launcher's environment.
            auto place = narrows::tools::ResolvePlacement(*o, narrows::tools::ProcessEnvironment());
            if (!place.ok()) return Fail(place.status());
            args->launcher_world = place->world;
            return WithScenario(args, [o](const narrows::core::Scenario& scenario, const ScenarioArgs& a) {
            o->progress = a.progress();
            bool removed = false;
            const Status s = narrows::tools::RunWorkerProcess(scenario, *o, &removed);
            if (!s.ok() && removed) {
              std::fprintf(stderr, "narrows: %s\n", s.message().c_str());
              return narrows::tools::kExitRemoved;  // the run goes on without this process
            }
            return Done(s);
          })();
          }};
}

Command AddLaunch(CLI::App& app) {
  auto args = std::make_shared<ScenarioArgs>();
  auto o = std::make_shared<narrows::tools::LaunchOptions>();
  CLI::App* cmd = app.add_subcommand("launch", "start the scenario's workers as processes and collect the results");
  args->AddWithQuiet(cmd);
  args->AddOutput(cmd, "<output.dir>/<name>");
  cmd->add_option("--local", o->local, "workers to start on this machine (default: the scenario's workers.count)")
      ->check(CLI::PositiveNumber);
  auto report = std::make_shared<bool>(false);
  cmd->add_flag("--report", *report, "also write <run folder>/report.html");
  cmd->add_option("--entry", o->entry, "run only this entry of compare:");
  cmd->add_option("--resume", o->resume, "continue from a checkpoint folder (…/ENTRY/checkpoints/step-N)");
  auto network = std::make_shared<std::string>();
  cmd->add_option("--network", *network,
                  "through the link emulator, each worker in a network namespace: PROFILE (sets network.profile), "
                  "or 'scenario' for the scenario's network: section (needs root)");
  cmd->add_option("--tcp", o->tcp, "with --network: the workers' TCP congestion control (cubic, reno, bbr; "
                                   "default: the host's)");
  cmd->add_flag("--packet-log", o->packet_log,
               "with --network: log every packet's fate on every link to <run folder>/packets.csv");
  cmd->add_option("--chaos", o->chaos,
                  "SIGKILL workers at seeded random times and start them again with --rejoin: "
                  "{seed: 1, kills: 10, mean_interval_s: 5, restart_after_s: 1, from_s: 2, until_s: 1e9}");
  return {cmd, [args, o, network, report] {
            if (!network->empty() && *network != "scenario") args->sets.push_back("network.profile=" + *network);
            auto scenario = args->Load();
            if (!scenario.ok()) return Fail(scenario.status());
            if (o->local == 0) o->local = scenario->workers.count;
            o->scenario_file = args->file;
            o->sets = args->sets;
            for (auto& set : args->RunFolderSets()) o->sets.push_back(std::move(set));  // the workers write there too
            o->quiet = args->quiet;
            o->existing = args->existing();
            o->emulated_network = !network->empty();
            if (o->packet_log && !o->emulated_network) {
              return Fail(Status::InvalidArgument("--packet-log logs the link emulator's packets: add --network PROFILE"));
            }
            const Status launched = narrows::tools::LaunchLocal(*scenario, *o);
            if (!launched.ok() || !*report) return Done(launched);
            auto path = narrows::tools::WriteReport({scenario->output.dir + "/" + scenario->name}, "");
            if (!path.ok()) return Fail(path.status());
            std::printf("report: %s\n", path->c_str());
            return 0;
          }};
}

Command AddLinkEmu(CLI::App& app) {
  auto args = std::make_shared<ScenarioArgs>();
  auto o = std::make_shared<narrows::tools::LinkEmuOptions>();
  CLI::App* cmd = app.add_subcommand(
      "linkemu", "the scenario's network between network namespaces, packet by packet (bandwidth, latency, loss, "
                 "outages); run commands inside with ip netns exec (needs root)");
  args->AddTo(cmd);
  cmd->add_option("--seconds", o->seconds, "stop after this long (default: at Ctrl-C)")->check(CLI::PositiveNumber);
  cmd->add_option("--stats", o->stats_file, "also write the links' statistics as JSON to this file");
  cmd->add_option("--prefix", o->prefix, "the namespaces are PREFIX-0, PREFIX-1, ... (default: narrows)");
  cmd->add_option("--tcp", o->tcp, "the namespaces' TCP congestion control (cubic, reno, bbr; default: the host's)");
  cmd->add_option("--packet-log", o->packet_log, "log every packet's fate on every link to this CSV file");
  return {cmd, WithScenario(args, [o](const narrows::core::Scenario& scenario, const ScenarioArgs&) {
            return Done(narrows::tools::LinkEmuCommand(scenario, *o));
          })};
}

#endif  // NARROWS_WITH_DEPLOY

Command AddPlan(CLI::App& app) {
  auto args = std::make_shared<ScenarioArgs>();
  auto o = std::make_shared<narrows::tools::PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "predict time and compute utilisation without training; the bandwidth for 50-99% utilisation");
  args->AddTo(cmd);
  cmd->add_option("--params", o->params, "model size: a count (7e9) or 1B, 10B, 405B (default: the scenario's model)");
  cmd->add_option("--tokens", o->tokens, "tokens to train on, all workers (default: the scenario's, or 20 per parameter)");
  cmd->add_option("--batch-tokens", o->global_batch_tokens, "tokens per optimiser step, all workers");
  cmd->add_option("--flops", o->flops, "sustained FLOP/s of one worker (default: compute.device_flops)");
  cmd->add_option("--entry", o->entries,
                  "plan this entry too, written as a compare: item (repeatable): diloco-h100, or "
                  "'{algorithm: streaming-diloco, inner_steps: 100, fragments: 4, outer_gradient: int4}'");
  auto fit = std::make_shared<std::string>();
  auto workers = std::make_shared<std::vector<int>>();
  cmd->add_option("--fit", *fit,
                  "a scaling sweep folder: decide from its fitted laws (loss and time of every entry at each number of "
                  "workers, the frontier, the break-even bandwidth)");
  cmd->add_option("--workers", *workers, "with --fit: the numbers of workers to compare (default: the sweep's)")
      ->delimiter(',');
  return {cmd, WithScenario(args, [o, fit, workers](const narrows::core::Scenario& scenario, const ScenarioArgs&) {
            if (!fit->empty()) {
              narrows::tools::DecideOptions d;
              d.params = o->params;
              d.tokens = o->tokens;
              d.flops = o->flops;
              d.workers = *workers;
              return Done(narrows::tools::DecideScenario(scenario, *fit, d));
            }
            return Done(narrows::tools::PlanScenario(scenario, *o));
          })};
}

Command AddSweep(CLI::App& app) {
  auto args = std::make_shared<ScenarioArgs>();
  auto grids = std::make_shared<std::vector<std::string>>();
  auto report = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "sweep", "run the scenario over the cross product of --grid axes; resumable; results.csv and speed-ups");
  args->AddWithQuiet(cmd, "no progress lines");
  args->AddOutput(cmd, "<output.dir>/<name>-sweep");
  args->AddSeeds(cmd);
  auto jobs = std::make_shared<int>(1);
  cmd->add_option("--jobs,-j", *jobs, "points run at once, each in a process of its own (its table in <point>.log)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--grid", *grids, "an axis: key=value1,value2,... (repeatable)")->type_name("KEY=V1,V2")->required();
  cmd->add_flag("--report", *report, "also write <sweep folder>/report.html (heat map, fits, every point)");
  auto no_retime = std::make_shared<bool>(false);
  cmd->add_flag("--no-retime", *no_retime,
                "train every point (by default, where only network keys vary and compute is modelled, the first point "
                "trains and the others are timed with its losses)");
  auto slurm = std::make_shared<narrows::tools::SweepOptions::Slurm>();
  auto point = std::make_shared<int>(-1);
  cmd->add_flag("--slurm", slurm->submit,
                "submit the unfinished points to Slurm as one job array (sbatch --array; --jobs caps how many run at "
                "once) and return; again, it waits for them and writes the table, and submits again the points that "
                "did not finish");
  cmd->add_flag("--gather", slurm->gather,
                "wait for the points submitted with --slurm and write the table; names the points that did not finish")
      ->excludes("--jobs");
  cmd->add_option("--partition", slurm->partition, "with --slurm: the partition (sbatch --partition)");
  cmd->add_option("--time", slurm->time, "with --slurm: each point's time limit (sbatch --time, as MM, HH:MM:SS or D-HH)");
  cmd->add_option("--sbatch-arg", slurm->sbatch_args,
                  "with --slurm: one more option for sbatch, as it is (repeatable: --sbatch-arg=--account=A)")
      ->allow_extra_args(false);
  cmd->add_option("--point", *point, "run only this point of the grid (0-based, in the grid's order), in this process: "
                                     "what each task of the Slurm job array does")
      ->check(CLI::NonNegativeNumber)
      ->excludes("--slurm")
      ->excludes("--gather");
  return {cmd, [cmd, args, grids, report, jobs, no_retime, slurm, point] {
            narrows::tools::SweepOptions options;
            options.slurm = *slurm;
            options.point = *point;
            if (!slurm->submit && (!slurm->partition.empty() || !slurm->time.empty() || !slurm->sbatch_args.empty())) {
              return Fail(narrows::core::Status::InvalidArgument("--partition, --time and --sbatch-arg go with --slurm"));
            }
            if (slurm->submit && slurm->gather) {
              return Fail(narrows::core::Status::InvalidArgument("--slurm submits and --gather waits: give one"));
            }
            if (slurm->submit && cmd->count("--jobs") > 0) options.slurm.max_running = *jobs;
            options.report = *report;
            options.retime = !*no_retime;
            options.scenario_file = args->file;
            options.sets = args->sets;
            if (args->seeds > 0) options.sets.push_back("seeds=" + std::to_string(args->seeds));
            options.jobs = slurm->submit ? 1 : *jobs;
            options.quiet = args->quiet;
            options.output = args->output;
            options.existing = args->existing();
            for (const auto& g : *grids) {
              auto axis = narrows::tools::ParseAxis(g);
              if (!axis.ok()) return Fail(axis.status());
              options.axes.push_back(*axis);
            }
            return Done(narrows::tools::RunSweep(options));
          }};
}

Command AddTune(CLI::App& app) {
  auto args = std::make_shared<ScenarioArgs>();
  auto grids = std::make_shared<std::vector<std::string>>();
  auto options = std::make_shared<narrows::tools::TuneOptions>();
  auto by = std::make_shared<std::string>("loss");
  CLI::App* cmd = app.add_subcommand(
      "tune", "choose each entry's values over --grid axes on tuning seeds, then compare the entries at them on fresh seeds");
  args->AddWithQuiet(cmd, "no progress lines");
  args->AddSeeds(cmd);
  args->AddOutput(cmd, "<output.dir>/<name>-tune");
  cmd->add_option("--grid", *grids, "an axis: key=value1,value2,...; compare.N.key varies entry N alone (repeatable)")
      ->type_name("KEY=V1,V2")
      ->required();
  cmd->add_option("--tuning-seeds", options->tuning_seeds, "seeds per grid point (seed + 1000, + 1001, ...)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--by", *by, "choose by the final loss (loss) or the loss at the fastest run's finishing time (time)")
      ->check(CLI::IsMember({"loss", "time"}));
  cmd->add_flag("--report", options->report, "also write <tune folder>/report.html");
  return {cmd, [args, grids, options, by] {
            narrows::tools::TuneOptions o = *options;
            o.scenario_file = args->file;
            o.sets = args->sets;
            if (args->seeds > 0) o.sets.push_back("seeds=" + std::to_string(args->seeds));
            o.quiet = args->quiet;
            o.output = args->output;
            o.existing = args->existing();
            o.by = *by == "time" ? narrows::tools::TuneBy::kTime : narrows::tools::TuneBy::kLoss;
            for (const auto& g : *grids) {
              auto axis = narrows::tools::ParseAxis(g);
              if (!axis.ok()) return Fail(axis.status());
              o.axes.push_back(*axis);
            }
            return Done(narrows::tools::RunTune(o));
          }};
}

Command AddReplay(CLI::App& app) {
  struct Args {
    std::string dir;
    narrows::tools::ReplayOptions options;
    bool quiet = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "replay a deployment's run (narrows launch, --chaos too) in the emulator from its membership and "
                "compare the losses, evaluation by evaluation; exit 1 unless equal bit for bit");
  cmd->add_option("run", a->dir, "the deployment's run folder (<output.dir>/<name>)")->required();
  cmd->add_option("-o,--output", a->options.output, "the replay's run folder (default: <run>-replay)");
  cmd->add_flag("-q,--quiet", a->quiet, "no progress lines");
  return {cmd, [a] {
            a->options.progress = a->quiet ? nullptr : stderr;
            return Done(narrows::tools::ReplayCommand(a->dir, a->options));
          }};
}

Command AddReport(CLI::App& app) {
  struct Args {
    std::vector<std::string> dirs, entries;
    std::string output;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("report", "one self-contained HTML file (charts, timelines, tables) from run and sweep folders");
  cmd->add_option("folders", a->dirs, "run folders (with summary.json) and sweep folders (with sweep.json)")->required();
  cmd->add_option("-o,--output", a->output, "where to write it (default: <first folder>/report.html)");
  cmd->add_option("--entry", a->entries, "only this entry of each run (repeatable)");
  return {cmd, [a] {
            auto path = narrows::tools::WriteReport(a->dirs, a->output, a->entries);
            if (!path.ok()) return Fail(path.status());
            std::printf("report: %s\n", path->c_str());
            return 0;
          }};
}

Command AddFit(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "fit", "fit final loss as a power law in model size and workers over a sweep's points (with uncertainties)");
  auto hold_out = std::make_shared<bool>(false);
  cmd->add_option("sweep", *dir,
                  "a sweep folder (<output.dir>/<name>-sweep), a folder of run or tune folders, or a CSV of points "
                  "(docs/scaling/points.csv: params, workers, entry, final_val_loss; folder)")
      ->required();
  cmd->add_flag("--hold-out", *hold_out,
                "fit below the largest model size and compare the prediction at it with what was measured");
  return {cmd, [dir, hold_out] {
            return Done(*hold_out ? narrows::tools::PrintHoldOut(*dir) : narrows::tools::PrintFits(*dir));
          }};
}

// The registered algorithms (with their one-word entries), inner optimisers and codecs.
int ListAlgorithms() {
  for (const auto* p : narrows::trainer::RegisteredAlgorithms()) {
    std::printf("%-18s %s\n%-18s   one-word entries: %s; planner: %s\n", p->parser.name.c_str(), p->summary.c_str(), "",
                p->parser.shorthands.c_str(), p->plan ? "predicted" : "no prediction");
  }
  std::printf("\ninner optimisers (train.optimizer:)\n");
  for (const auto* o : narrows::trainer::RegisteredInnerOptimizers()) {
    std::printf("%-18s %s\n", o->parser.name.c_str(), o->summary.c_str());
  }
  std::printf("\nouter-gradient codecs (outer_gradient:)\n");
  for (const auto* c : narrows::core::RegisteredCodecs()) std::printf("%-18s %s\n", c->name.c_str(), c->summary.c_str());
  return 0;
}

Command AddReference(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "reference", "print every scenario key (type, default, range, unit, meaning) as Markdown, from the keys' declarations");
  return {cmd, [] {
            std::cout << narrows::tools::KeyReference();
            return 0;
          }};
}

Command AddAlgorithms(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "algorithms", "list the registered algorithms (with their one-word entries), inner optimisers and outer-gradient codecs");
  return {cmd, [] { return ListAlgorithms(); }};
}

Command AddList(CLI::App& app) {
  auto what = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("list", "list the built-in names a scenario can use: profiles, presets, algorithms");
  cmd->add_option("what", *what, "profiles (network.profile), presets (model.preset) or algorithms (compare:)")
      ->required()
      ->check(CLI::IsMember({"profiles", "presets", "algorithms"}));
  return {cmd, [what] {
            if (*what == "profiles") {
              std::printf("%-14s %14s %12s\n", "profile", "bandwidth", "latency");
              for (const auto& p : narrows::core::NetworkProfiles()) {
                std::printf("%-14s %14s %9.1f ms\n", p.name.c_str(), narrows::tools::Si(p.bandwidth_bps, "bit/s").c_str(),
                            p.latency_ms);
              }
              std::printf("custom: give network.bandwidth_bps and network.latency_ms yourself\n");
              return 0;
            }
            if (*what == "presets") {
              std::printf("%-12s %8s %8s %8s %8s %8s %12s\n", "preset", "d_model", "layers", "heads", "seq_len", "vocab",
                          "parameters");
              for (const auto& [name, m] : narrows::core::ModelPresets()) {
                std::printf("%-12s %8lld %8lld %8lld %8lld %8lld %12s\n", name.c_str(), static_cast<long long>(m.d_model),
                            static_cast<long long>(m.n_layers), static_cast<long long>(m.n_heads),
                            static_cast<long long>(m.seq_len), static_cast<long long>(m.vocab_size),
                            narrows::tools::Si(static_cast<double>(narrows::trainer::CostOf(m).params), "").c_str());
              }
              std::printf("vocab: the preset's own; a scenario's comes from its data (256 for text, data.vocab_size for "
                          "token shards)\n");
              return 0;
            }
            return ListAlgorithms();
          }};
}

#ifdef NARROWS_WITH_DEPLOY
Command AddKeygen(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("keygen", "write a new CURVE key pair for deploy.key_file");
  cmd->add_option("file", *file, "where to write it (must not exist)")->required();
  return {cmd, [file] {
            const Status s = narrows::deploy::WriteNewKeyFile(*file);
            if (!s.ok()) return Fail(s);
            std::printf("wrote %s: give it to every worker of the run (deploy.key_file or --key); keep it secret\n",
                        file->c_str());
            return 0;
          }};
}

#endif  // NARROWS_WITH_DEPLOY

Command AddValidate(CLI::App& app) {
  auto args = std::make_shared<ScenarioArgs>();
  auto print = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("validate", "check a scenario file without running it");
  args->AddTo(cmd);
  cmd->add_flag("--print", *print, "print the resolved scenario (defaults included)");
  return {cmd, WithScenario(args, [print](const narrows::core::Scenario& scenario, const ScenarioArgs& a) {
            if (*print) {
              std::cout << scenario.resolved_yaml;
            } else {
              std::cout << a.file << ": ok (" << scenario.name << ")\n";
            }
            return 0;
          })};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"narrows: a testbed for low-bandwidth training of language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("narrows 0.1.0 (") + narrows::tools::BuildVersion() + ")");
  std::vector<Command> commands = {AddTrain(app), AddRun(app),    AddPlan(app),       AddSweep(app),
                                   AddTune(app),  AddReport(app), AddFit(app),        AddAlgorithms(app),
                                   AddValidate(app), AddReplay(app), AddList(app), AddReference(app)};
#ifdef NARROWS_WITH_DEPLOY
  for (auto add : {AddWorker, AddLaunch, AddKeygen, AddLinkEmu}) commands.push_back(add(app));
#endif
  // A first word that names no command: say which, and the nearest (CLI11 would only say that an
  // argument was not expected).
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
      std::fprintf(stderr, "narrows: unknown command '%s'%s; the commands: %s (narrows --help)\n", argv[1],
                   narrows::core::DidYouMean(argv[1], names).c_str(), all.c_str());
      return kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }
  for (const auto& c : commands) {
    if (*c.app) return c.run();
  }
  return kExitFailure;
}
