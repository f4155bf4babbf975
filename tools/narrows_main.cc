// The narrows command line: one CLI11 app with a subcommand per job.
//
// Exit status: 0 success, 2 bad input (scenario file, command line, data), 1 any other failure.
// Errors are one message on stderr, never a stack trace.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "core/scenario.h"
#include "tools/run_command.h"
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
    const Status s = narrows::tools::RunScenario(*scenario, options);
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
