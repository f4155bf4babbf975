// The link emulator for a scenario's workers (deploy/link_emulator.h wired to the scenario's
// network: section through the virtual-time emulator's topology), for `narrows linkemu` and
// `narrows launch --network`.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/scenario.h"
#include "deploy/link_emulator.h"
#include "deploy/netns.h"

namespace narrows::tools {

// One namespace and TUN device per worker (worker w at 10.77.0.(w + 1)), forwarded by a running
// link emulator with the scenario's topology, bandwidths, latencies, loss and outages.
struct EmulatedNetwork {
  std::vector<deploy::NetNamespace> namespaces;
  std::unique_ptr<deploy::LinkEmulator> emulator;
  std::vector<std::string> published;  // names under /run/netns, removed on destruction
  double started_s = 0.0;              // steady clock, for the statistics' span
  static uint32_t Address(int worker);
  ~EmulatedNetwork();

  // What the links did from the start until Stop, and the forwarding loop's CPU time.
  struct Report {
    std::vector<deploy::LinkStats> links;
    double seconds = 0.0, cpu_s = 0.0;
    // Each worker's namespace's kernel TCP counters (deploy::TcpCounters), those not zero; empty
    // where they could not be read.
    std::vector<std::map<std::string, int64_t>> tcp;
    std::string Table() const;   // printable, the busiest link first, then the CPU line
    nlohmann::json Json() const;  // links.json
    deploy::LinkStats Delivered() const;  // every link's deliveries and lateness together
  };
  Report Stop();
};

// Makes and starts it; with `publish_prefix`, each namespace is also PREFIX-W for `ip netns exec`;
// with `tcp` (cubic, reno, bbr), the namespaces' TCP congestion control (else the host's default,
// which new namespaces inherit). A clear error without the privileges.
// With `packet_log`, every packet's fate on every link goes to that file
// (deploy::LinkEmulatorOptions::packet_log).
core::Result<std::unique_ptr<EmulatedNetwork>> StartEmulatedNetwork(const core::Scenario& scenario,
                                                                    const std::string& publish_prefix = "",
                                                                    const std::string& tcp = "",
                                                                    const std::string& packet_log = "");

struct LinkEmuOptions {
  double seconds = 0.0;    // 0: until SIGINT or SIGTERM
  std::string stats_file;  // where to write the links' statistics as JSON ("": nowhere)
  std::string prefix = "narrows";
  std::string tcp;  // the namespaces' congestion control ("": the host's)
  std::string packet_log;  // where to log every packet's fate on every link as CSV ("": nowhere)
};
// `narrows linkemu`: the scenario's network between namespaces PREFIX-0 ... until stopped, then
// the links' statistics.
core::Status LinkEmuCommand(const core::Scenario& scenario, const LinkEmuOptions& options);

}  // namespace narrows::tools
