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

// The declared keys of the network section (core/keys.h).
const KeyBlock kNetwork("network", "The network model, the topology and the links; the link keys (below) give the access links.");
const ChoiceKey kModelChoice(kNetwork, "model", {}, "analytic",
                             Doc("the network model, a registered plug-in that reads its own block network.<model>"),
                             "a registered network model (analytic, ns3)");
const IntKey kMtu(kNetwork, "mtu", 1500, 576, 9216, Doc("IP packet size; 52 bytes of TCP/IP headers each", "bytes"));
const NumberKey kStallTimeoutS(kNetwork, "stall_timeout_s", 600.0, 0.0, 1e12,
                               Doc("the run fails when a message in transit moves no byte for this long; 0: never", "s"));
const NumberKey kQueueMs(kNetwork, "queue_ms", 0.0, 0.0, 60'000.0,
                         Doc("every link's drop-tail queue, in time at its bandwidth (at least 64 KiB); 0: the model's default",
                             "ms"));
const NumberKey kNicBps(kNetwork, "nic_bps", 0.0, 0.0, 1e13,
                        Doc("each worker's interface rate, the pace its packets reach its access link's queue; 0: at once",
                            "bit/s"));
const EnumKey<TopologyKind> kTopology(kNetwork, "topology", {{"star", TopologyKind::kStar}, {"islands", TopologyKind::kIslands}},
                                      TopologyKind::kStar,
                                      Doc("star: each worker's own link to one switch; islands: fast links inside groups, "
                                          "joined by WAN links"));
const StructureKey kIslands(kNetwork, "islands", KeyType::kIndexLists,
                            Doc("islands: the workers of each island, e.g. [[0, 1], [2, 3]]; every worker in exactly one"));
const StructureKey kIntra(kNetwork, "intra", KeyType::kMapping,
                          Doc("islands: the access links inside an island (the link keys; profile dc-100g)"), "a link");
const StructureKey kLinkOverrides(kNetwork, "workers", KeyType::kList,
                                  Doc("per-worker link overrides; unset keys inherit"), "network.workers[]");
const StructureKey kSchedule(kNetwork, "schedule", KeyType::kList, Doc("bandwidth changes in virtual time"),
                             "network.schedule[]");

const KeyBlock kLink("a link", "A link's bandwidth, latency and loss: a profile, and explicit keys over it.",
                     "network (each worker's access link, or each island's WAN link), network.intra, network.workers[]");
const ChoiceKey kProfile(kLink, "profile", {}, "home-100m",
                         Doc("dc-400g (400 Gbit/s, 0.1 ms), dc-100g (100 Gbit/s, 1 ms), region-10g (10 Gbit/s, 10 ms), "
                             "internet-1g (1 Gbit/s, 50 ms), home-100m (100 Mbit/s, 30 ms), or custom",
                             "", "home-100m (network), dc-100g (intra)"),
                         "dc-400g, dc-100g, region-10g, internet-1g, home-100m, custom");
const NumberKey kBandwidthBps(kLink, "bandwidth_bps", 100e6, 1e3, 1e13, Doc("the link's rate", "bit/s", "from the profile"));
const NumberKey kLatencyMs(kLink, "latency_ms", 30.0, 0.0, 1e5, Doc("one-way latency, end to end", "ms", "from the profile"));
const NumberKey kLoss(kLink, "loss", 0.0, 0.0, 0.5, Doc("packet-loss probability"));
const StructureKey kBurst(kLink, "burst", KeyType::kMapping,
                          Doc("bursty loss (Gilbert-Elliott in time) on the same links; {} turns it on with its defaults",
                              "", "none"),
                          "a link's burst");

const KeyBlock kBurstBlock("a link's burst", "Good and bad stays, each exponential with its mean, from a seeded stream per link.",
                           "network.burst, network.intra.burst, network.workers[].burst");
const NumberKey kMeanGoodS(kBurstBlock, "mean_good_s", 10.0, 0.0, 1e9, Doc("mean good stay (loss: the link's)", "s"),
                           Bound::kExclusive);
const NumberKey kMeanBadS(kBurstBlock, "mean_bad_s", 1.0, 0.0, 1e9, Doc("mean bad stay", "s"), Bound::kExclusive);
const NumberKey kBurstLoss(kBurstBlock, "loss", 0.05, 0.0, 0.5, Doc("loss probability in a bad stay"), Bound::kExclusive);

const KeyBlock kOverride("network.workers[]", "One worker's own link: its index, and the link keys that differ.");
const IntKey kOverrideWorker(kOverride, "worker", 0, 0, kNoMax, Doc("the worker; below workers.count"));

const KeyBlock kChange("network.schedule[]", "A bandwidth change: from a time on, a link runs at another rate.");
const TextKey kChangeLink(kChange, "link", "worker:0", Doc("worker:N (both directions of its access link) or wan:K"));
const NumberKey kAtS(kChange, "at_s", 0.0, 0.0, 1e12, Doc("when, in virtual time", "s"));
const NumberKey kChangeBandwidth(kChange, "bandwidth_bps", 1e3, 1e3, 1e13, Doc("the rate from then on", "bit/s"));

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
  std::vector<std::string> names;
  for (const auto& p : kProfiles) names.emplace_back(p.name);
  names.emplace_back("custom");
  LinkSpec base;
  std::string profile = default_profile;
  if (inherit) {
    base = *inherit;
  }
  if (!inherit || s.Has("profile")) {
    profile = s.Choose(kProfile, default_profile, names);
    for (const auto& p : kProfiles) {
      if (profile == p.name) {
        base.bandwidth_bps = p.bandwidth_bps;
        base.latency_ms = p.latency_ms;
      }
    }
  }
  if (profile_out) *profile_out = profile;
  if (profile == "custom" && inherit == nullptr && (!s.Has("bandwidth_bps") || !s.Has("latency_ms"))) {
    s.ErrorAt("profile", "custom needs bandwidth_bps and latency_ms (a profile gives both)");
  }
  LinkSpec link;
  link.bandwidth_bps = s.Double(kBandwidthBps, base.bandwidth_bps);
  link.latency_ms = s.Double(kLatencyMs, base.latency_ms);
  link.loss = s.Double(kLoss, base.loss);
  link.burst_good_s = base.burst_good_s;
  link.burst_bad_s = base.burst_bad_s;
  link.burst_loss = base.burst_loss;
  if (s.Has("burst")) {
    Section b = s.Sub(kBurst);
    link.burst_good_s = b.Double(kMeanGoodS, base.burst_good_s > 0 ? base.burst_good_s : 10.0);
    link.burst_bad_s = b.Double(kMeanBadS, base.burst_bad_s > 0 ? base.burst_bad_s : 1.0);
    link.burst_loss = b.Double(kBurstLoss, base.burst_loss > 0 ? base.burst_loss : 0.05);
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
  net.model = n.String(kModelChoice.info.name, kModelChoice.fallback);
  net.mtu = static_cast<int>(n.Int(kMtu));
  net.stall_timeout_s = n.Double(kStallTimeoutS);
  net.queue_ms = n.Double(kQueueMs);
  net.nic_bps = n.Double(kNicBps);
  net.model_options = ReadBlockPlugin(n, BlockSlot::kNetworkModel, "model", net.model, sc);
  net.topology = n.Enum(kTopology);
  net.link = ReadLink(n, "home-100m", nullptr, &net.profile);
  net.islands = n.IntLists(kIslands);
  {
    Section intra = n.Sub(kIntra);
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
  n.Items(kLinkOverrides, [&](Section& item, const YAML::Node& node, size_t) {
    NetworkSpec::Override o;
    item.Require({"worker"}, "a worker's link");
    o.worker = static_cast<int>(item.Int(kOverrideWorker, 0, 0, sc.workers.count - 1));
    o.link = ReadLink(item, "custom", &net.link);
    if (node.IsDefined() && !node.IsMap()) item.Error(node, item.path(), "expected a mapping");
    net.overrides.push_back(o);
  });
  const int num_islands = static_cast<int>(net.islands.size());
  n.Items(kSchedule, [&](Section& item, const YAML::Node& node, size_t) {
    NetworkSpec::Change c;
    item.Require({"link", "at_s", "bandwidth_bps"}, "a bandwidth change");
    c.link = item.String(kChangeLink);
    c.at_s = item.Double(kAtS);
    c.bandwidth_bps = item.Double(kChangeBandwidth);
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
