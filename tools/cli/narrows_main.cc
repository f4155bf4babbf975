// The narrows command line: one CLI11 app with a subcommand per job. The subcommands that train or
// read a run folder are here; the others are in main_studies.cc, main_list.cc and main_deploy.cc,
// and what they share (exit statuses, scenario arguments) in main_args.h.
//
// Exit status: 0 success, 2 bad input (scenario file, command line, data), 1 any other failure;
// `narrows worker` 3 when its members removed it from the run (evicted, or declared dead), which
// `narrows launch` takes as a departure.
// Errors are one message on stderr, never a stack trace.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/did_you_mean.h"
#include "core/scenario.h"
#include "tools/cli/build_version.h"
#include "tools/cli/format.h"
#include "tools/cli/main_args.h"
#include "tools/cli/replay_command.h"
#include "tools/cli/report_command.h"
#include "tools/cli/run_command.h"
#include "tools/cli/sizes_only.h"
#include "trainer/train.h"

namespace narrows::cli {
namespace {

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
                "(ddp, diloco, sparta and demo entries; thousands of workers)");
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
}  // namespace narrows::cli

int main(int argc, char** argv) {
  using namespace narrows::cli;  // the subcommands and the exit statuses
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
