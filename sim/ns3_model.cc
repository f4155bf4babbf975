// Ns3Model's surface (sim/ns3_model.h): building the model, starting flows and running ns-3 in
// virtual time; then its scenario block and registration. Its parts are in sim/ns3/.
#include "sim/ns3_model.h"

#include <algorithm>
#include <limits>
#include <memory>

#include <ns3/network-module.h>

#include "core/check.h"
#include "core/scenario.h"
#include "sim/network_registry.h"
#include "sim/ns3/ns3_model_impl.h"

namespace narrows::sim {
namespace {

bool g_model_alive = false;

}  // namespace

Ns3Model::Ns3Model(Topology topology, Ns3Options options)
    : topology_(std::move(topology)), impl_(std::make_unique<Impl>()) {
  NARROWS_CHECK(!g_model_alive) << "only one ns-3 model may exist at a time (ns-3's simulator is global)";
  NARROWS_CHECK(options.host_qdisc == "fq_codel" || options.host_qdisc == "drop_tail")
      << "unknown host queue discipline '" << options.host_qdisc << "'";
  g_model_alive = true;
  Impl& m = *impl_;
  m.options = options;
  m.topology = &topology_;
  m.num_workers = topology_.num_workers();
  ConfigureTcp(options);
  ns3::NodeContainer nodes = BuildNetwork(m, topology_);
  ConnectEveryPair(m, nodes);
  ApplyLinkStates(m, topology_);
}

Ns3Model::~Ns3Model() {
  ns3::Simulator::Destroy();
  impl_.reset();
  g_model_alive = false;
}

uint64_t Ns3Model::events() const { return ns3::Simulator::GetEventCount(); }

int64_t Ns3Model::jumps() const { return impl_->jumps; }

double Ns3Model::skipped_s() const { return static_cast<double>(impl_->skipped_ns) / 1e9; }

NetworkModel::Stalest Ns3Model::StalestFlow() const {
  const Impl& m = *impl_;
  Stalest s;
  for (int k : m.active) {
    const Impl::Connection& c = m.connections[static_cast<size_t>(k)];
    const double since = static_cast<double>(c.moved_ns) / 1e9;
    if (!c.messages.empty() && since < s.since) s = {c.messages.front().id, since};
  }
  return s;
}

const LinkCounters* Ns3Model::counters() const { return &impl_->counters; }

int64_t Ns3Model::StartFlow(int src, int dst, int64_t bytes, double now) {
  Impl& m = *impl_;
  NARROWS_CHECK(src != dst && src >= 0 && dst >= 0 && src < m.num_workers && dst < m.num_workers)
      << "flow " << src << " -> " << dst;
  const int64_t at = ToNs(now);
  NARROWS_CHECK(at >= m.now_ns) << "flow started at " << now << " before model time " << m.now_ns / 1e9;
  if (at > m.now_ns) {
    std::vector<Delivery> skipped;
    AdvanceTo(now, &skipped);
    NARROWS_CHECK(skipped.empty()) << "StartFlow skipped deliveries; advance the model first";
  }
  const int64_t id = m.next_id++;
  Impl::Connection& c = m.Conn(src, dst);
  if (c.messages.empty()) c.moved_ns = at;
  c.queued += std::max<int64_t>(0, bytes) + m.options.frame_header_bytes;
  c.messages.push_back({id, c.queued});
  m.active.insert(src * m.num_workers + dst);
  ++m.generation;
  ++m.outstanding;
  if (m.options.fast_forward) m.StartSampling();
  m.drained = false;
  m.ArmLossSwitches();
  ns3::Simulator::Schedule(ns3::NanoSeconds(m.offset_ns + at) - ns3::Simulator::Now(), [&m, &c] { m.Pump(c); });
  return id;
}

double Ns3Model::NextEventTime() const {
  const Impl& m = *impl_;
  if (m.outstanding == 0 || m.drained) return kNever;
  // Every event up to now_ns has run, except after a run that stopped at a delivery: more may
  // happen at that very nanosecond. (In whole nanoseconds, ns-3's resolution, so that advancing to
  // any limit at or past this time makes progress.)
  return static_cast<double>(m.stopped_early ? m.now_ns : m.now_ns + 1) / 1e9;
}

void Ns3Model::AdvanceTo(double t, std::vector<Delivery>* delivered) { Run(t, RunUntil::kLimit, delivered); }

void Ns3Model::AdvanceUntilDelivery(double limit, std::vector<Delivery>* delivered) {
  if (NextEventTime() > limit) return;
  Run(limit, RunUntil::kFirstDelivery, delivered);
}

void Ns3Model::Run(double limit, RunUntil until, std::vector<Delivery>* delivered) {
  const bool stop_at_delivery = until == RunUntil::kFirstDelivery;
  using namespace ns3;
  Impl& m = *impl_;
  const int64_t limit_ns = limit < kNever ? ToNs(limit) : std::numeric_limits<int64_t>::max();
  if (limit_ns < m.now_ns || (limit_ns == m.now_ns && !m.stopped_early)) return;
  m.sink = delivered;
  m.stop_at_delivery = stop_at_delivery;
  const size_t before = delivered->size();
  bool reached_limit = false;
  uint64_t stop = ~uint64_t{0};
  if (limit_ns != std::numeric_limits<int64_t>::max()) {
    stop = m.At(limit_ns, [&reached_limit] {
      reached_limit = true;
      Simulator::Stop();
    });
  }
  Simulator::Run();
  m.Cancel(stop);
  m.sink = nullptr;
  const bool delivered_some = delivered->size() > before;
  m.stopped_early = stop_at_delivery && delivered_some && !reached_limit;
  m.drained = !reached_limit && !m.stopped_early;  // the run ended because no events were left
  const int64_t reached = Simulator::Now().GetNanoSeconds() - m.offset_ns;
  if (m.stopped_early) {
    m.now_ns = reached;
  } else if (limit_ns != std::numeric_limits<int64_t>::max()) {
    m.now_ns = limit_ns;
  } else {
    m.now_ns = std::max(m.now_ns, reached);
  }
}

}  // namespace narrows::sim

namespace narrows::sim {
namespace {

const core::KeyBlock kNs3Keys("network.ns3", "ns-3's packet-level TCP (network.model: ns3; docs/explanation/network-models.md).");
const core::EnumKey<std::string> kTcp(kNs3Keys, "tcp", {{"cubic", "cubic"}, {"newreno", "newreno"}, {"bbr", "bbr"}}, "cubic",
                                      core::Doc("congestion control"));
const core::IntKey kQueuePackets(kNs3Keys, "queue_packets", 0, 0, 1'000'000,
                                 core::Doc("every switch port's drop-tail queue; 0: queue_ms where set, else one "
                                           "bandwidth-delay product of the longest path crossing it, at least 100",
                                           "packets"));
const core::BoolKey kFastForward(kNs3Keys, "fast_forward", true,
                                 core::Doc("skip whole loss cycles of transfers that cycle steadily; false runs every packet"));
const core::EnumKey<std::string> kHostQdisc(kNs3Keys, "host_qdisc", {{"fq_codel", "fq_codel"}, {"drop_tail", "drop_tail"}},
                                            "fq_codel",
                                            core::Doc("a worker's own egress: fq_codel over a 16-packet ring (Linux's), or "
                                                      "a drop-tail queue like a switch port's"));
const core::EnumKey<bool> kWindow(kNs3Keys, "window", {{"linux", true}, {"ns3", false}}, true,
                                  core::Doc("Linux's window rules around NewReno and CUBIC, or ns-3 3.37's own"));
const core::EnumKey<bool> kRto(kNs3Keys, "rto", {{"linux", true}, {"rfc6298", false}}, true,
                               core::Doc("linux: srtt + max(4 rttvar, 200 ms), delayed ACKs 40 ms; rfc6298: at least 1 s, "
                                         "delayed ACKs 200 ms"));

NetworkModelPlugin Ns3Plugin() {
  NetworkModelPlugin p;
  p.parser.name = "ns3";
  p.parser.parse = [](core::OptionReader& r, const core::Scenario&) {
    auto o = std::make_shared<Ns3ScenarioOptions>();
    o->tcp = r.Enum(kTcp);
    o->queue_packets = r.Int(kQueuePackets);
    o->fast_forward = r.Bool(kFastForward);
    o->host_qdisc = r.Enum(kHostQdisc);
    o->linux_window = r.Enum(kWindow);
    o->linux_rto = r.Enum(kRto);
    return std::shared_ptr<const core::PluginOptions>(std::move(o));
  };
  p.make = [](Topology topology, const core::Scenario& sc) -> std::unique_ptr<NetworkModel> {
    const auto& own = sc.network.ModelOptions<Ns3ScenarioOptions>();
    Ns3Options o;
    o.tcp = own.tcp;
    o.mtu = sc.network.mtu;
    o.queue_packets = own.queue_packets;
    o.queue_s = sc.network.queue_ms / 1000.0;
    o.fast_forward = own.fast_forward;
    o.host_qdisc = own.host_qdisc;
    o.linux_window = own.linux_window;
    o.linux_rto = own.linux_rto;
    o.nic_bps = sc.network.nic_bps;
    o.seed = static_cast<uint32_t>(sc.seed % 0xffffffffu) + 1;
    return std::make_unique<Ns3Model>(std::move(topology), o);
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_NETWORK_MODEL(ns3_model, Ns3Plugin());

}  // namespace narrows::sim
