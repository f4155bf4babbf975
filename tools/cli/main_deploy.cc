// The command line of real processes: `narrows worker` (one rank), `narrows launch` (a local
// deployment), `narrows keygen` and `narrows linkemu`. Built with the deployment alone.
#include "tools/cli/main_args.h"

#ifdef NARROWS_WITH_DEPLOY
#include <memory>
#include <string>

#include "deploy/zmq_transport.h"
#include "tools/cli/deploy_command.h"
#include "tools/cli/linkemu_command.h"
#include "tools/cli/report_command.h"

namespace narrows::cli {

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

}  // namespace narrows::cli

#endif  // NARROWS_WITH_DEPLOY
