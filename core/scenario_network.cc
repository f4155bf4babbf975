// The scenario's network section: the model, its topology, the links (profiles and explicit
// values) and their schedule. Part of ParseScenario (core/scenario.cc); and a scenario moved to
// another network model (WithNetworkModel).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/block_plugins.h"
#include "core/scenario.h"
#include "core/section.h"

namespace narrows::core::internal {
namespace {

struct Profile {
  const char* name;
  double bandwidth_bps, latency_ms;
};
// The network archetypes of "Scaling Laws for DiLoCo" (arXiv 2503.09799, App. A), plus internet and home.
constexpr Profile kProfiles[] = {
    {"dc-400g", 400e9, 0.1}, {"dc-100g", 100e9, 1.0},    {"region-10g", 10e9, 10.0},
    {"internet-1g", 1e9, 50.0}, {"home-100m", 100e6, 30.0},
};

// A link: `profile` gives bandwidth and latency, explicit keys override it.
LinkSpec ReadLink(Section& s, const std::string& default_profile, const LinkSpec* inherit = nullptr,
                  std::string* profile_out = nullptr) {
  std::vector<std::pair<std::string, std::string>> names;
  for (const auto& p : kProfiles) names.emplace_back(p.name, p.name);
  names.emplace_back("custom", "custom");
  LinkSpec base;
  std::string profile = default_profile;
  if (inherit) {
    base = *inherit;
  }
  if (!inherit || s.Has("profile")) {
    profile = s.Enum<std::string>("profile", default_profile, names);
    for (const auto& p : kProfiles) {
      if (profile == p.name) {
        base.bandwidth_bps = p.bandwidth_bps;
        base.latency_ms = p.latency_ms;
      }
    }
  }
  if (profile_out) *profile_out = profile;
  LinkSpec link;
  link.bandwidth_bps = s.Double("bandwidth_bps", base.bandwidth_bps, 1e3, 1e13);
  link.latency_ms = s.Double("latency_ms", base.latency_ms, 0.0, 1e5);
  link.loss = s.Double("loss", base.loss, 0.0, 0.5);
  link.burst_good_s = base.burst_good_s;
  link.burst_bad_s = base.burst_bad_s;
  link.burst_loss = base.burst_loss;
  if (s.Has("burst")) {
    Section b = s.Sub("burst");
    link.burst_good_s = b.Double("mean_good_s", base.burst_good_s > 0 ? base.burst_good_s : 10.0, 0.0, 1e9,
                                 Bound::kExclusive);
    link.burst_bad_s = b.Double("mean_bad_s", base.burst_bad_s > 0 ? base.burst_bad_s : 1.0, 0.0, 1e9, Bound::kExclusive);
    link.burst_loss = b.Double("loss", base.burst_loss > 0 ? base.burst_loss : 0.05, 0.0, 0.5, Bound::kExclusive);
    b.Finish();
  }
  return link;
}

// network: the model of the network, its topology, links and their schedule.
}  // namespace

bool ValidLinkName(const std::string& name, int workers, int islands) {
  auto index = [&](const std::string& prefix, int limit) {
    if (name.rfind(prefix, 0) != 0) return false;
    try {
      size_t used = 0;
      const int i = std::stoi(name.substr(prefix.size()), &used);
      return used == name.size() - prefix.size() && i >= 0 && i < limit;
    } catch (...) {
      return false;
    }
  };
  return index("worker:", workers) || index("wan:", islands);
}

void ReadNetwork(Section n, Scenario& sc) {
  NetworkSpec& net = sc.network;
  net.model = n.String("model", "analytic");
  net.mtu = static_cast<int>(n.Int("mtu", 1500, 576, 9216));
  net.stall_timeout_s = n.Double("stall_timeout_s", 600.0, 0.0, 1e12);
  net.queue_ms = n.Double("queue_ms", 0.0, 0.0, 60'000.0);
  net.nic_bps = n.Double("nic_bps", 0.0, 0.0, 1e13);
  net.model_options = ReadBlockPlugin(n, BlockSlot::kNetworkModel, "model", net.model, sc);
  net.topology = n.Enum<TopologyKind>("topology", TopologyKind::kStar,
                                      {{"star", TopologyKind::kStar}, {"islands", TopologyKind::kIslands}});
  net.link = ReadLink(n, "home-100m", nullptr, &net.profile);
  net.islands = n.IntLists("islands");
  {
    Section intra = n.Sub("intra");
    net.intra = ReadLink(intra, "dc-100g");
    intra.Finish();
  }
  if (net.topology == TopologyKind::kIslands) {
    std::vector<int> seen(static_cast<size_t>(sc.workers.count), 0);
    for (const auto& island : net.islands) {
      for (int w : island) {
        if (w < 0 || w >= sc.workers.count) {
          n.Error(n.node(), "network.islands", "worker " + std::to_string(w) + " does not exist (workers.count is " +
                                                   std::to_string(sc.workers.count) + ")");
        } else {
          ++seen[static_cast<size_t>(w)];
        }
      }
    }
    for (int w = 0; w < sc.workers.count; ++w) {
      if (seen[static_cast<size_t>(w)] != 1) {
        n.Error(n.node(), "network.islands",
                "worker " + std::to_string(w) + " must be in exactly one island");
        break;
      }
    }
  } else if (!net.islands.empty()) {
    n.Error(n.node(), "network.islands", "islands are only used with topology: islands");
  }
  n.Items("workers", [&](Section& item, const YAML::Node& node, size_t) {
    NetworkSpec::Override o;
    o.worker = static_cast<int>(item.Int("worker", 0, 0, sc.workers.count - 1));
    o.link = ReadLink(item, "custom", &net.link);
    if (node.IsDefined() && !node.IsMap()) item.Error(node, item.path(), "expected a mapping");
    net.overrides.push_back(o);
  });
  const int num_islands = static_cast<int>(net.islands.size());
  n.Items("schedule", [&](Section& item, const YAML::Node& node, size_t) {
    NetworkSpec::Change c;
    c.link = item.String("link", "worker:0");
    c.at_s = item.Double("at_s", 0.0, 0.0, 1e12);
    c.bandwidth_bps = item.Double("bandwidth_bps", 0.0, 0.0, 1e13);
    if (!ValidLinkName(c.link, sc.workers.count, num_islands)) {
      item.Error(node, item.path() + ".link", "expected worker:N or wan:K naming an existing link, got '" + c.link + "'");
    }
    net.schedule.push_back(c);
  });
  n.Finish();
}

}  // namespace narrows::core::internal

namespace narrows::core {

std::vector<NetworkProfile> NetworkProfiles() {
  std::vector<NetworkProfile> out;
  for (const auto& p : internal::kProfiles) out.push_back({p.name, p.bandwidth_bps, p.latency_ms});
  return out;
}

Scenario WithNetworkModel(Scenario sc, const std::string& name) {
  using internal::Origin;
  using internal::Section;
  const BlockParser* parser = FindBlockParser(BlockSlot::kNetworkModel, name);
  NARROWS_CHECK(parser != nullptr) << "no network model '" << name << "'";
  YAML::Node block;
  if (!sc.resolved_yaml.empty()) {
    try {
      const YAML::Node root = YAML::Load(sc.resolved_yaml);
      const YAML::Node network = root.IsMap() ? root["network"] : YAML::Node();
      const YAML::Node own = network.IsDefined() && network.IsMap() ? network[name] : YAML::Node();
      if (own.IsDefined() && own.IsMap()) block = own;
    } catch (const YAML::Exception&) {
      // A resolved scenario is narrows' own text; unreadable, the model's defaults stand.
    }
  }
  Origin origin{"(the resolved scenario)", {}, {}};
  std::vector<std::string> errors;
  Section section(block, "network." + name, &origin, &errors, YAML::Node(YAML::NodeType::Map));
  OptionReader reader(&section);
  auto options = parser->parse(reader, sc);
  NARROWS_CHECK(errors.empty()) << "network." << name << " was checked when read: " << errors.front();
  sc.network.model = name;
  sc.network.model_options = std::move(options);
  return sc;
}

}  // namespace narrows::core
