// The command line of the studies: `narrows plan` (predictions), `narrows sweep` (grids),
// `narrows tune` (values chosen per entry) and `narrows fit` (scaling laws).
#include "tools/cli/main_args.h"

#include <memory>
#include <string>
#include <vector>

#include "tools/cli/fit_command.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/sweep_command.h"
#include "tools/cli/tune_command.h"

namespace narrows::cli {

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
  cmd->add_option("-o,--output", o->output, "the folder plan.json goes to (default: <output.dir>/<name>)")
      ->type_name("DIR");
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
  args->AddWithQuiet(cmd, "no progress lines, nor each point's table (the sweep's own tables, and which points were re-timed, stay)");
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

}  // namespace narrows::cli
