// The pieces every subcommand of the narrows command line shares (CLI11; the program's own, not the
// command library's): how a Status becomes the exit status, the scenario arguments of the scenario
// commands, and the subcommands that narrows_main.cc registers, each defined in a main_*.cc by
// what it is for.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/scenario.h"
#include "core/status.h"
#include "tools/cli/run_folders.h"

namespace narrows::cli {

using narrows::core::Status;
using narrows::core::StatusCode;

// The exit statuses (narrows_main.cc's opening comment says which is which).
constexpr int kExitBadInput = 2;
constexpr int kExitFailure = 1;

// `status`'s message on stderr; kExitBadInput for InvalidArgument and NotFound, else kExitFailure.
int Fail(const Status& status);
// 0 where `s` is ok, else Fail(s).
int Done(const Status& s);

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
  std::vector<std::string> RunFolderSets() const;

  // The scenario file with every override (--set, --seeds, -o, and the launcher's world size); a
  // model of the user's is loaded and tried once now.
  narrows::core::Result<narrows::core::Scenario> Load() const;
  int launcher_world = 0;  // `narrows worker`: the world size its launcher gave, for workers.count: auto
};

// A subcommand: its CLI11 node, and what it does once the command line parsed.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// Loads the scenario, then runs `body` on it.
template <typename Body>
std::function<int()> WithScenario(std::shared_ptr<ScenarioArgs> args, Body body) {
  return [args, body] {
    auto scenario = args->Load();
    if (!scenario.ok()) return Fail(scenario.status());
    return body(*scenario, *args);
  };
}

// The studies (tools/cli/main_studies.cc): predictions, grids, tuning and fits.
Command AddPlan(CLI::App& app);
Command AddSweep(CLI::App& app);
Command AddTune(CLI::App& app);
Command AddFit(CLI::App& app);

// The listings (tools/cli/main_list.cc): the built-in names and the key reference.
Command AddAlgorithms(CLI::App& app);
Command AddList(CLI::App& app);
Command AddReference(CLI::App& app);

#ifdef NARROWS_WITH_DEPLOY
// Real processes (tools/cli/main_deploy.cc): a worker, a local launch, keys, the link emulator.
Command AddWorker(CLI::App& app);
Command AddLaunch(CLI::App& app);
Command AddKeygen(CLI::App& app);
Command AddLinkEmu(CLI::App& app);
#endif

}  // namespace narrows::cli
