#include "emu/network_from_scenario.h"

#include <algorithm>

#include "core/check.h"
#include "sim/host_work.h"
#include "sim/network_registry.h"

namespace narrows::emu {
namespace {

sim::Link ToLink(const core::LinkSpec& spec) {
  sim::Link l;
  l.bandwidth_bps = spec.bandwidth_bps;
  l.latency_s = spec.latency_ms / 1e3;
  l.loss = spec.loss;
  l.burst = {spec.burst_good_s, spec.burst_bad_s, spec.burst_loss, 0};
  return l;
}

// Link indices named by "worker:N" (both directions) or "wan:K" (both directions).
std::vector<int> LinksNamed(const sim::Topology& t, const std::string& name) {
  const auto colon = name.find(':');
  const std::string kind = name.substr(0, colon), index = name.substr(colon + 1);
  std::vector<int> out;
  for (const std::string& prefix : kind == "worker" ? std::vector<std::string>{"up:", "down:"}
                                                    : std::vector<std::string>{"wan-up:", "wan-down:"}) {
    const int l = t.FindLink(prefix + index);
    if (l >= 0) out.push_back(l);
  }
  return out;
}

}  // namespace

sim::Topology TopologyFromScenario(const core::Scenario& sc) {
  const auto& net = sc.network;
  const int n = sc.workers.count;
  const bool islands = net.topology == core::TopologyKind::kIslands;
  std::vector<sim::Link> access(static_cast<size_t>(n), ToLink(islands ? net.intra : net.link));
  for (const auto& o : net.overrides) access[static_cast<size_t>(o.worker)] = ToLink(o.link);
  sim::Topology t = islands ? sim::Topology::Islands(access, net.islands,
                                                     std::vector<sim::Link>(net.islands.size(), ToLink(net.link)))
                            : sim::Topology::Star(access);
  auto& links = t.mutable_links();
  for (const auto& c : net.schedule) {
    for (int l : LinksNamed(t, c.link)) links[static_cast<size_t>(l)].schedule.push_back({c.at_s, c.bandwidth_bps});
  }
  for (const auto& f : sc.faults) {
    if (f.kind != core::FaultKind::kLinkDown) continue;
    for (int l : LinksNamed(t, f.link)) {
      // Restore the bandwidth in force just before the outage.
      auto& link = links[static_cast<size_t>(l)];
      double before = link.bandwidth_bps;
      for (const auto& ch : link.schedule) {
        if (ch.at_s <= f.from_s) before = ch.bandwidth_bps;
      }
      link.schedule.push_back({f.from_s, 0.0});
      link.schedule.push_back({f.to_s, before});
    }
  }
  // Each link's bursts from its own stream of the scenario's seed (the same in both models).
  for (size_t l = 0; l < links.size(); ++l) {
    links[l].burst.seed = (static_cast<uint64_t>(sc.seed) + 1) * 0x9e3779b97f4a7c15ULL ^ (l + 1) * 0xbf58476d1ce4e5b9ULL;
  }
  for (auto& link : links) {
    std::stable_sort(link.schedule.begin(), link.schedule.end(),
                     [](const auto& a, const auto& b) { return a.at_s < b.at_s; });
  }
  return t;
}

std::unique_ptr<sim::NetworkModel> NetworkFromScenario(const core::Scenario& sc) {
  const sim::NetworkModelPlugin* plugin = sim::FindNetworkModel(sc.network.model);
  NARROWS_CHECK(plugin != nullptr) << "network model '" << sc.network.model << "' is not registered";
  auto network = plugin->make(TopologyFromScenario(sc), sc);
  if (sc.compute.host_bytes_per_s > 0.0) {
    return std::make_unique<sim::HostWork>(std::move(network), sc.compute.host_bytes_per_s);
  }
  return network;
}

}  // namespace narrows::emu
