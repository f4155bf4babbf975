// The packet-level model's network: the topology's nodes found from its routes, then ns-3's nodes,
// internet stacks, point-to-point links with their queues and error models, and routes.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

#include <ns3/core-module.h>
#include <ns3/internet-module.h>
#include <ns3/network-module.h>
#include <ns3/point-to-point-module.h>
#include <ns3/traffic-control-module.h>

#include "core/check.h"
#include "sim/ns3/ns3_model_impl.h"

namespace narrows::sim {
namespace {

constexpr int64_t kMinQueuePackets = 100;
constexpr uint32_t kHostRingPackets = 16;  // device queue under a host's queue discipline
constexpr uint32_t kNicQueuePackets = 10000;  // a NIC's transmit queue without one

// Nodes of a Topology found from its routes: a link's two ends are variables; consecutive links on
// a route share a node, a route starts at its source worker and ends at its destination.
struct Graph {
  std::vector<int> from, to;  // node of each link's ends
  int num_nodes = 0;
};

Graph NodesOf(const Topology& t) {
  const int n = t.num_workers(), links = static_cast<int>(t.links().size());
  // Variables: workers 0..n-1, then link l's start n+2l and end n+2l+1.
  std::vector<int> parent(static_cast<size_t>(n + 2 * links));
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  auto join = [&](int a, int b) {
    a = find(a), b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);  // workers stay their own roots
  };
  for (int l = 0; l + 1 < links; l += 2) {  // links 2k and 2k+1 are the two directions of one cable
    join(n + 2 * l, n + 2 * (l + 1) + 1);
    join(n + 2 * l + 1, n + 2 * (l + 1));
  }
  std::vector<bool> used(static_cast<size_t>(links), false);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const Path r = t.Route(i, j);
      NARROWS_CHECK(!r.empty()) << "no route from " << i << " to " << j;
      join(i, n + 2 * r.front());
      join(j, n + 2 * r.back() + 1);
      for (size_t k = 0; k + 1 < r.size(); ++k) join(n + 2 * r[k] + 1, n + 2 * r[k + 1]);
      for (int l : r) used[l] = true;
    }
  }
  Graph g;
  std::map<int, int> node_of_root;
  for (int i = 0; i < n; ++i) node_of_root[find(i)] = i;
  g.num_nodes = n;
  auto node = [&](int var) {
    auto [it, inserted] = node_of_root.emplace(find(var), g.num_nodes);
    if (inserted) ++g.num_nodes;
    return it->second;
  };
  for (int l = 0; l < links; ++l) {
    const bool cable_used = used[l] || used[l ^ 1];
    g.from.push_back(cable_used ? node(n + 2 * l) : -1);
    g.to.push_back(cable_used ? node(n + 2 * l + 1) : -1);
  }
  return g;
}

// Each link's queue defaults to one bandwidth-delay product of the longest path crossing it.
std::vector<double> LinkRtts(const Topology& topology) {
  const auto& links = topology.links();
  const int n = topology.num_workers();
  std::vector<double> link_rtt(links.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const double rtt = topology.PathLatency(i, j) + topology.PathLatency(j, i);
      for (int l : topology.Route(i, j)) link_rtt[l] = std::max(link_rtt[l], rtt);
    }
  }
  return link_rtt;
}

double PeakBandwidth(const Link& l) {
  double b = l.bandwidth_bps;
  for (const auto& c : l.schedule) b = std::max(b, c.bandwidth_bps);
  return b;
}

// A worker's own egress: Linux's default fq_codel over a short device ring, so the ACKs of its
// incoming flows do not wait behind (or drop behind) its outgoing data.
void InstallHostFqCodel(ns3::Ptr<ns3::PointToPointNetDevice> tx) {
  using namespace ns3;
  TrafficControlHelper fq;
  fq.SetRootQueueDisc("ns3::FqCoDelQueueDisc");
  fq.Install(NetDeviceContainer(tx));
  tx->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, kHostRingPackets));
}

// A drop-tail queue (a switch port's, or a host's without fq_codel): queue_s at the link's
// bandwidth where set, else queue_packets, else one bandwidth-delay product of the longest path
// crossing the link (`rtt_s`), at least kMinQueuePackets.
void SizeDropTailQueue(ns3::Ptr<ns3::PointToPointNetDevice> tx, const Link& link, double rtt_s, const Ns3Options& options) {
  using namespace ns3;
  if (options.queue_packets <= 0 && options.queue_s > 0.0) {
    // queue_s at the link's bandwidth in bytes, as the link emulator's queues hold them: an
    // ACK takes its 52 bytes of the queue, not a full packet's place. Counted in packets of
    // the MTU, a port carrying one flow's data and another's ACKs (every worker's uplink in
    // a ring) was full at about two thirds of its bytes and dropped data the link emulator
    // holds: rounds of a 3.4 MB ring all-reduce among 4 workers over 100 Mbit/s and 1 ms took
    // 1.08 and 0.92 s in ns-3, then 0.61 s falling to 0.53 by the 20th as the windows regrew,
    // where the link emulator's Linux took 0.45 s and dropped nothing; 0.44 s in bytes.
    const int64_t bytes = std::max<int64_t>(64 << 10, std::llround(PeakBandwidth(link) / 8 * options.queue_s));
    tx->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::BYTES, static_cast<uint32_t>(bytes)));
  } else {
    const int64_t bdp_packets = std::llround(std::ceil(PeakBandwidth(link) / 8 * rtt_s / options.mtu));
    const int64_t queue = options.queue_packets > 0 ? options.queue_packets : std::max(kMinQueuePackets, bdp_packets);
    tx->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, static_cast<uint32_t>(queue)));
  }
}

// The receiving device's error model, which carries the direction's loss (LinkLoss), drawing from
// a random stream of the direction's own.
ns3::Ptr<ns3::RateErrorModel> AttachErrorModel(ns3::Ptr<ns3::PointToPointNetDevice> rx, size_t dir) {
  using namespace ns3;
  auto errors = CreateObject<RateErrorModel>();
  errors->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
  errors->SetRate(0.0);  // no loss while connecting; the link's own state applies from time 0
  errors->AssignStreams(static_cast<int64_t>(dir));
  rx->SetReceiveErrorModel(errors);
  return errors;
}

// Joins worker w to the node of its interface (`nic_node`) at the NIC's rate, with no delay;
// returns the worker's address.
uint32_t ConnectNic(ns3::NodeContainer& nodes, int w, int nic_node, const Ns3Options& options,
                    ns3::Ipv4AddressHelper& addresses, ns3::TrafficControlHelper& tc) {
  using namespace ns3;
  PointToPointHelper p2p;
  p2p.SetChannelAttribute("Delay", TimeValue(Seconds(0)));
  p2p.SetDeviceAttribute("Mtu", UintegerValue(static_cast<uint16_t>(options.mtu)));
  p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(options.nic_bps))));
  NetDeviceContainer devices = p2p.Install(nodes.Get(static_cast<uint32_t>(w)), nodes.Get(static_cast<uint32_t>(nic_node)));
  Ipv4InterfaceContainer ifaces = addresses.Assign(devices);
  addresses.NewNetwork();
  tc.Uninstall(devices);
  for (uint32_t k = 0; k < 2; ++k) {
    auto tx = DynamicCast<PointToPointNetDevice>(devices.Get(k));
    if (k == 0 && options.host_qdisc == "fq_codel") {
      InstallHostFqCodel(tx);
    } else {
      // As a Linux interface's transmit queue (the link emulator's TUN devices: 10,000 packets).
      tx->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, kNicQueuePackets));
    }
  }
  return ifaces.GetAddress(0).Get();
}

}  // namespace

// The nodes (workers, then switches), their internet stacks, the point-to-point links with their
// queues and error models, and the routes.
ns3::NodeContainer Ns3Model::BuildNetwork(Impl& m, const Topology& topology) {
  using namespace ns3;
  const Ns3Options& options = m.options;
  const int n = m.num_workers;
  const Graph g = NodesOf(topology);
  const auto& links = topology.links();
  const std::vector<double> link_rtt = LinkRtts(topology);
  Ipv4AddressGenerator::Reset();  // addresses are global too; a previous model's would collide
  // With a NIC rate, each worker reaches its links through a node of its own (its interface),
  // joined to it at that rate: a worker's packets reach its access link's queue at the NIC's pace,
  // not all at once. Nodes: workers, switches, then the NICs.
  const bool nic = options.nic_bps > 0.0;
  const int nic_base = g.num_nodes;
  auto end_node = [&](int node) { return nic && node >= 0 && node < n ? nic_base + node : node; };
  NodeContainer nodes;
  nodes.Create(static_cast<uint32_t>(g.num_nodes + (nic ? n : 0)));
  InternetStackHelper internet;
  internet.Install(nodes);
  Ipv4AddressHelper addresses;
  addresses.SetBase("10.0.0.0", "255.255.255.252");
  TrafficControlHelper tc;
  for (int w = 0; nic && w < n; ++w) {
    const uint32_t address = ConnectNic(nodes, w, nic_base + w, options, addresses, tc);
    m.worker_of_address[address] = w;
  }
  m.directions.resize(links.size());
  for (size_t l = 0; l + 1 < links.size(); l += 2) {
    const size_t r = l + 1;  // the reverse direction
    if (g.from[l] < 0 && g.from[r] < 0) continue;  // a cable no route crosses
    NARROWS_CHECK(std::abs(links[l].latency_s - links[r].latency_s) < 1e-12)
        << "links " << links[l].name << " and " << links[r].name << " differ in latency";
    PointToPointHelper p2p;
    p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(ToNs(links[l].latency_s))));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(static_cast<uint16_t>(options.mtu)));
    NetDeviceContainer devices = p2p.Install(nodes.Get(static_cast<uint32_t>(end_node(g.from[l]))),
                                             nodes.Get(static_cast<uint32_t>(end_node(g.to[l]))));
    Ipv4InterfaceContainer ifaces = addresses.Assign(devices);
    addresses.NewNetwork();
    tc.Uninstall(devices);  // no default queue discipline; hosts get theirs below
    for (auto [dir, k] : {std::pair{l, 0u}, std::pair{r, 1u}}) {
      const Link& link = links[dir];
      auto tx = DynamicCast<PointToPointNetDevice>(devices.Get(k));
      auto rx = DynamicCast<PointToPointNetDevice>(devices.Get(1 - k));
      tx->SetDataRate(DataRate(static_cast<uint64_t>(std::max(1.0, PeakBandwidth(link)))));
      const bool host = !nic && (k == 0 ? g.from[l] : g.to[l]) < n;
      if (host && options.host_qdisc == "fq_codel") {
        InstallHostFqCodel(tx);
      } else {
        SizeDropTailQueue(tx, link, link_rtt[dir], options);
      }
      Ptr<RateErrorModel> errors = AttachErrorModel(rx, dir);
      m.directions[dir] = {tx, errors, rx};
    }
    for (uint32_t k = 0; k < 2 && !nic; ++k) {
      const int node = k == 0 ? g.from[l] : g.to[l];
      if (node < n) m.worker_of_address[ifaces.GetAddress(k).Get()] = node;
    }
  }
  Ipv4GlobalRoutingHelper::PopulateRoutingTables();

  return nodes;
}

}  // namespace narrows::sim
