// Where a worker process stands in its run (tools/cli/deploy_command.h): rank, world size and rendezvous
// from flags or the launchers' variables (torchrun, Slurm, Open MPI), and Slurm's node list.
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tools/cli/deploy_command.h"
#include "tools/cli/subprocess.h"

extern char** environ;

namespace narrows::tools {

using core::Status;

namespace {

core::Result<int> ParseInt(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < 0 || v > 1'000'000) {
    return Status::InvalidArgument(what + "=" + text + " is not a non-negative integer");
  }
  return static_cast<int>(v);
}

// The first of `names` set in `env`, parsed; -1 if none is.
core::Result<int> FromEnv(const std::map<std::string, std::string>& env, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    const auto it = env.find(n);
    if (it != env.end()) return ParseInt(it->second, n);
  }
  return -1;
}

}  // namespace

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  return env;
}

core::Result<Placement> ResolvePlacement(const WorkerOptions& o, const std::map<std::string, std::string>& env) {
  // A flag, else the first of the launchers' variables that is set.
  auto resolve = [&](int flag, const std::vector<std::string>& names, const std::string& what) -> core::Result<int> {
    if (flag >= 0) return flag;
    auto v = FromEnv(env, names);
    if (!v.ok()) return v.status();
    if (*v < 0) return Status::InvalidArgument("no " + what);
    return *v;
  };
  Placement p;
  auto rank = resolve(o.rank, {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"},
                      "rank: pass --rank, or set RANK (torchrun), SLURM_PROCID or OMPI_COMM_WORLD_RANK");
  if (!rank.ok()) return rank.status();
  auto world = resolve(o.world, {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"},
                       "world size: pass --world, or set WORLD_SIZE, SLURM_NTASKS or OMPI_COMM_WORLD_SIZE");
  if (!world.ok()) return world.status();
  p.rank = *rank;
  p.world = *world;
  if (p.world < 1 || p.rank >= p.world) {
    return Status::InvalidArgument("rank " + std::to_string(p.rank) + " is not in a world of " + std::to_string(p.world));
  }
  p.master = o.master;
  if (p.master.empty()) {
    std::string host;
    if (const auto addr = env.find("MASTER_ADDR"); addr != env.end()) {
      host = addr->second;
    } else {
      // Under Slurm, rank 0 runs on the first node of the step, as torchrun users expect.
      for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
        const auto list = env.find(name);
        if (list == env.end() || list->second.empty()) continue;
        auto first = FirstSlurmHost(list->second);
        if (!first.ok()) return first.status();
        host = *first;
        break;
      }
    }
    if (host.empty()) {
      return Status::InvalidArgument(
          "no rendezvous: pass --master HOST:PORT, or set MASTER_ADDR (and MASTER_PORT), or run under Slurm");
    }
    const auto port = env.find("MASTER_PORT");
    std::string port_text = port == env.end() ? "29500" : port->second;
    auto n = ParseInt(port_text, "MASTER_PORT");
    if (!n.ok()) return n.status();
    p.master = host + ":" + port_text;
  }
  return p;
}

core::Result<std::string> FirstSlurmHost(const std::string& nodelist) {
  // A plain list (node1,node2) needs no expansion; a range (node[01-04]) is Slurm's to expand.
  if (nodelist.find('[') == std::string::npos) return nodelist.substr(0, nodelist.find(','));
  auto out = RunCapturing({"scontrol", "show", "hostnames", nodelist});
  if (out.ok() && out->exit_code == 0 && !out->output.empty()) return out->output.substr(0, out->output.find('\n'));
  const std::string said = out.ok() ? out->output.substr(0, out->output.find('\n')) : out.status().message();
  return Status::InvalidArgument("the Slurm node list '" + nodelist + "' could not be expanded (scontrol show hostnames: " +
                                 said + "); set MASTER_ADDR");
}

}  // namespace narrows::tools
