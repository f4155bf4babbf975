// The narrows command line: one CLI11 app with a subcommand per job.
//
// Exit status: 0 success, 2 bad input (scenario file, command line, data), 1 any other failure.
// Errors are one message on stderr, never a stack trace.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "core/scenario.h"
#include "deploy/zmq_transport.h"
#include "tools/deploy_command.h"
#include "tools/plan_command.h"
#include "tools/report_command.h"
#include "tools/sweep_command.h"
#include "tools/run_command.h"
#include "trainer/algorithms/plugin.h"
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

narrows::core::Result<narrows::core::Scenario> Load(const std::string& file,
                                                    const std::vector<std::string>& sets) {
  std::vector<narrows::core::Override> overrides;
  for (const auto& s : sets) {
    auto o = narrows::core::ParseOverride(s);
    if (!o.ok()) return o.status();
    overrides.push_back(*o);
  }
  return narrows::core::LoadScenario(file, overrides);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"narrows: a testbed for low-bandwidth training of language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "narrows 0.1.0");

  std::string scenario_file;
  std::vector<std::string> sets;
  bool quiet = false;
  bool print_resolved = false;

  auto add_scenario_args = [&](CLI::App* cmd) {
    cmd->add_option("scenario", scenario_file, "scenario YAML file")->required();
    cmd->add_option("--set", sets, "override a key, e.g. --set train.lr=3e-4 (repeatable)")
        ->type_name("KEY=VALUE");
  };

  CLI::App* train = app.add_subcommand("train", "train one replica and write a run folder");
  add_scenario_args(train);
  train->add_flag("-q,--quiet", quiet, "no progress line");

  CLI::App* run = app.add_subcommand(
      "run", "run every entry of the scenario's compare: list on emulated workers and compare them");
  add_scenario_args(run);
  run->add_flag("-q,--quiet", quiet, "no progress lines");
  bool write_report = false;
  run->add_flag("--report", write_report, "also write <run folder>/report.html");

  narrows::tools::WorkerOptions worker_options;
  CLI::App* worker = app.add_subcommand(
      "worker", "run one rank of the scenario over ZeroMQ (rank, world and rendezvous from flags or from "
                "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/_SIZE)");
  add_scenario_args(worker);
  worker->add_option("--rank", worker_options.rank, "this worker's rank")->check(CLI::NonNegativeNumber);
  worker->add_option("--world", worker_options.world, "number of workers")->check(CLI::PositiveNumber);
  worker->add_option("--master", worker_options.master, "rank 0's rendezvous address")->type_name("HOST:PORT");
  worker->add_option("--bind", worker_options.bind_host, "interface for this worker's sockets (default: all)");
  worker->add_option("--advertise", worker_options.advertise, "host the other workers reach this one at");
  worker->add_option("--key", worker_options.key_file, "CURVE key file (overrides deploy.key_file)");
  worker->add_option("--entry", worker_options.entry, "run only this entry of compare:");
  worker->add_flag("--rejoin", worker_options.rejoin, "restart this rank in a run in progress (with --entry)");
  worker->add_option("--resume", worker_options.resume, "continue from a checkpoint folder (…/ENTRY/checkpoints/step-N)");
  worker->add_option("--connect-timeout", worker_options.connect_timeout_s, "seconds to wait for every worker");
  worker->add_flag("-q,--quiet", quiet, "no progress line");

  narrows::tools::LaunchOptions launch_options;
  CLI::App* launch = app.add_subcommand("launch", "start the scenario's workers as processes and collect the results");
  add_scenario_args(launch);
  launch->add_option("--local", launch_options.local, "workers to start on this machine")->required()->check(CLI::PositiveNumber);
  launch->add_option("--entry", launch_options.entry, "run only this entry of compare:");
  launch->add_option("--resume", launch_options.resume, "continue from a checkpoint folder (…/ENTRY/checkpoints/step-N)");
  launch->add_flag("-q,--quiet", quiet, "no progress line");

  narrows::tools::PlanOptions plan_options;
  CLI::App* plan = app.add_subcommand(
      "plan", "predict time and compute utilisation without training; the bandwidth for 50-99% utilisation");
  add_scenario_args(plan);
  plan->add_option("--params", plan_options.params, "model size: a count (7e9) or 1B, 10B, 405B (default: the scenario's model)");
  plan->add_option("--tokens", plan_options.tokens, "tokens to train on, all workers (default: the scenario's, or 20 per parameter)");
  plan->add_option("--batch-tokens", plan_options.global_batch_tokens, "tokens per optimiser step, all workers");
  plan->add_option("--flops", plan_options.flops, "sustained FLOP/s of one worker (default: compute.device_flops)");
  plan->add_option("--fragments", plan_options.fragments, "add Streaming DiLoCo with this many fragments")->check(CLI::PositiveNumber);
  plan->add_option("--overlap", plan_options.overlap_steps, "Streaming DiLoCo: inner steps a fragment's sync hides behind");
  plan->add_option("--bits", plan_options.bits, "Streaming DiLoCo rows: outer gradients in 32 (fp32), 16 (bf16), 8 (int8), 4 (int4) or 1 (sign) bits");

  std::vector<std::string> grids;
  CLI::App* sweep = app.add_subcommand(
      "sweep", "run the scenario over the cross product of --grid axes; resumable; results.csv and speed-ups");
  add_scenario_args(sweep);
  sweep->add_option("--grid", grids, "an axis: key=value1,value2,... (repeatable)")->type_name("KEY=V1,V2")->required();
  sweep->add_flag("-q,--quiet", quiet, "no progress lines");
  sweep->add_flag("--report", write_report, "also write <sweep folder>/report.html (heat map, fits, every point)");

  std::vector<std::string> report_dirs;
  std::string report_output;
  CLI::App* report = app.add_subcommand(
      "report", "one self-contained HTML file (charts, timelines, tables) from run and sweep folders");
  report->add_option("folders", report_dirs, "run folders (with summary.json) and sweep folders (with sweep.json)")
      ->required();
  report->add_option("-o,--output", report_output, "where to write it (default: <first folder>/report.html)");
  std::vector<std::string> report_entries;
  report->add_option("--entry", report_entries, "only this entry of each run (repeatable)");

  std::string fit_dir;
  CLI::App* fit = app.add_subcommand(
      "fit", "fit final loss as a power law in model size and workers over a sweep's points (with uncertainties)");
  fit->add_option("sweep", fit_dir, "a sweep folder (<output.dir>/<name>-sweep)")->required();

  std::string key_file;
  CLI::App* algorithms = app.add_subcommand("algorithms", "list the registered algorithms and their one-word entries");
  CLI::App* keygen = app.add_subcommand("keygen", "write a new CURVE key pair for deploy.key_file");
  keygen->add_option("file", key_file, "where to write it (must not exist)")->required();

  CLI::App* validate = app.add_subcommand("validate", "check a scenario file without running it");
  add_scenario_args(validate);
  validate->add_flag("--print", print_resolved, "print the resolved scenario (defaults included)");

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

  if (*algorithms) {
    for (const auto* p : narrows::trainer::RegisteredAlgorithms()) {
      std::printf("%-18s %s\n%-18s   one-word entries: %s; planner: %s\n", p->parser.name.c_str(), p->summary.c_str(), "",
                  p->parser.shorthands.c_str(), p->plan ? "predicted" : "no prediction");
    }
    return 0;
  }
  if (*keygen) {
    const Status s = narrows::deploy::WriteNewKeyFile(key_file);
    if (!s.ok()) return Fail(s);
    std::printf("wrote %s: give it to every worker of the run (deploy.key_file or --key); keep it secret\n",
                key_file.c_str());
    return 0;
  }
  if (*report) {
    auto path = narrows::tools::WriteReport(report_dirs, report_output, report_entries);
    if (!path.ok()) return Fail(path.status());
    std::printf("report: %s\n", path->c_str());
    return 0;
  }
  if (*fit) {
    const Status s = narrows::tools::PrintFits(fit_dir);
    return s.ok() ? 0 : Fail(s);
  }
  if (*sweep) {
    narrows::tools::SweepOptions options;
    options.report = write_report;
    options.scenario_file = scenario_file;
    options.sets = sets;
    options.quiet = quiet;
    for (const auto& g : grids) {
      auto axis = narrows::tools::ParseAxis(g);
      if (!axis.ok()) return Fail(axis.status());
      options.axes.push_back(*axis);
    }
    const Status s = narrows::tools::RunSweep(options);
    return s.ok() ? 0 : Fail(s);
  }
  auto scenario = Load(scenario_file, sets);
  if (!scenario.ok()) return Fail(scenario.status());

  if (*validate) {
    if (print_resolved) {
      std::cout << scenario->resolved_yaml;
    } else {
      std::cout << scenario_file << ": ok (" << scenario->name << ")\n";
    }
    return 0;
  }
  if (*run) {
    narrows::tools::RunOptions options;
    options.progress = quiet ? nullptr : stderr;
    options.report = write_report;
    const Status s = narrows::tools::RunScenario(*scenario, options);
    return s.ok() ? 0 : Fail(s);
  }
  if (*worker) {
    worker_options.progress = quiet ? nullptr : stderr;
    const Status s = narrows::tools::RunWorkerProcess(*scenario, worker_options);
    return s.ok() ? 0 : Fail(s);
  }
  if (*plan) {
    const Status s = narrows::tools::PlanScenario(*scenario, plan_options);
    return s.ok() ? 0 : Fail(s);
  }
  if (*launch) {
    launch_options.scenario_file = scenario_file;
    launch_options.sets = sets;
    launch_options.quiet = quiet;
    const Status s = narrows::tools::LaunchLocal(*scenario, launch_options);
    return s.ok() ? 0 : Fail(s);
  }
  if (*train) {
    narrows::trainer::TrainOptions options;
    options.progress = quiet ? nullptr : stderr;
    auto summary = narrows::trainer::TrainSingle(*scenario, options);
    if (!summary.ok()) return Fail(summary.status());
    std::printf(
        "run %s: %lld steps, %lld tokens, final val loss %.4f nats/token%s, %.0f tokens/s "
        "(%.2f GFLOP/s on %d threads)\n",
        summary->run_dir.c_str(), static_cast<long long>(summary->steps),
        static_cast<long long>(summary->tokens), summary->final_val_loss,
        summary->final_val_bpb >= 0
            ? (" (" + std::to_string(summary->final_val_bpb).substr(0, 5) + " bits/byte)").c_str()
            : "",
        summary->tokens_per_s, summary->achieved_flops / 1e9, summary->threads);
    return 0;
  }
  return kExitFailure;
}
