// The packet-level model's links over virtual time: each direction's bandwidth, loss and schedule,
// and the counters of what it carried, dropped and queued (sim/ns3_model.h, counters()).
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include <ns3/core-module.h>
#include <ns3/internet-module.h>
#include <ns3/network-module.h>
#include <ns3/point-to-point-module.h>
#include <ns3/traffic-control-module.h>

#include "sim/ns3/ns3_model_impl.h"

namespace narrows::sim {

// From virtual time 0: each link's bandwidth and loss, then its schedule (a bandwidth of 0 is a
// link that is down: every packet is lost, and TCP backs off as it would).
void Ns3Model::ApplyLinkStates(Impl& m, const Topology& topology) {
  using namespace ns3;
  const auto& links = topology.links();
  m.link_loss.resize(links.size());
  m.counters = LinkCounters(links.size());
  for (size_t l = 0; l < links.size(); ++l) {
    const Impl::Direction d = m.directions[l];
    if (!d.tx_device) continue;
    m.link_loss[l] = std::make_unique<Impl::LinkLoss>(Impl::LinkLoss{d, LossStates(links[l]), true, false});
    Impl::LinkLoss* ll = m.link_loss[l].get();
    auto set = [ll](double bps) {
      if (bps > 0) ll->d.tx_device->SetDataRate(DataRate(static_cast<uint64_t>(bps)));
      ll->up = bps > 0;
      ll->Apply();
    };
    set(links[l].bandwidth_bps);
    // Counted from virtual time 0 on (the connections' handshakes before it are not traffic).
    auto now_s = [&m] { return static_cast<double>(Simulator::Now().GetNanoSeconds() - m.offset_ns) / 1e9; };
    d.tx_device->TraceConnectWithoutContext("PhyTxEnd", Callback<void, Ptr<const Packet>>([&m, l, now_s](Ptr<const Packet> p) {
      m.counters.AddBits(l, now_s(), now_s(), 8.0 * p->GetSize());
      ++m.counters.at(l).packets;
    }));
    d.rx_device->TraceConnectWithoutContext("PhyRxDrop", Callback<void, Ptr<const Packet>>([&m, l](Ptr<const Packet>) {
      ++m.counters.at(l).dropped_loss;
    }));
    d.tx_device->GetQueue()->TraceConnectWithoutContext("Drop", Callback<void, Ptr<const Packet>>([&m, l](Ptr<const Packet>) {
      ++m.counters.at(l).dropped_queue;
    }));
    // The device queue is first in, first out (a tail drop never enters it): each dequeue is the
    // oldest enqueue.
    auto waiting = std::make_shared<std::deque<double>>();
    d.tx_device->GetQueue()->TraceConnectWithoutContext("Enqueue", Callback<void, Ptr<const Packet>>([waiting](Ptr<const Packet>) {
      waiting->push_back(static_cast<double>(Simulator::Now().GetNanoSeconds()) / 1e9);  // ns-3's time: jumps move virtual time
    }));
    d.tx_device->GetQueue()->TraceConnectWithoutContext("Dequeue", Callback<void, Ptr<const Packet>>([&m, l, waiting](Ptr<const Packet>) {
      if (waiting->empty()) return;
      const double delay = static_cast<double>(Simulator::Now().GetNanoSeconds()) / 1e9 - waiting->front();
      waiting->pop_front();
      auto& c = m.counters.at(l);
      ++c.queued;
      c.queue_delay_sum_s += delay;
      c.queue_delay_max_s = std::max(c.queue_delay_max_s, delay);
    }));
    for (const auto& c : links[l].schedule) {
      m.At(std::max<int64_t>(0, ToNs(c.at_s)), [&m, set, bps = c.bandwidth_bps] {
        set(bps);
        ++m.generation;
      });
    }
  }
  CountQueueDrops(m);
}

// The drops that a device's own queue never sees. A device is flow-controlled: while its queue is
// full ns-3's traffic-control layer holds back what IP hands it, and with no queue discipline on
// the device it drops it, with no trace in ns-3 3.37 (its TrafficControlLayer has no Drop source):
// a switch port's overflow, or a drop-tail host's, went uncounted. Such a packet is one that IP
// hands to a device whose queue is stopped at that moment (the same check, in the same call). A
// device with a queue discipline (a host's fq_codel) drops in it instead: its Drop trace.
void Ns3Model::CountQueueDrops(Impl& m) {
  using namespace ns3;
  std::map<Ptr<NetDevice>, size_t> link_of;
  for (size_t l = 0; l < m.directions.size(); ++l) {
    if (m.directions[l].tx_device) link_of[m.directions[l].tx_device] = l;
  }
  std::set<Ptr<Node>> nodes;
  for (const auto& [device, l] : link_of) nodes.insert(device->GetNode());
  for (const Ptr<Node>& node : nodes) {
    Ptr<Ipv4L3Protocol> ip = node->GetObject<Ipv4L3Protocol>();
    Ptr<TrafficControlLayer> tc = node->GetObject<TrafficControlLayer>();
    // Per interface of this node: the link its device sends on and the device's queue state, or
    // no queue where the device has a queue discipline (whose drops are traced) or carries no link.
    std::vector<std::pair<size_t, Ptr<NetDeviceQueue>>> watched(ip->GetNInterfaces());
    for (uint32_t i = 0; i < ip->GetNInterfaces(); ++i) {
      Ptr<NetDevice> device = ip->GetNetDevice(i);
      auto it = link_of.find(device);
      if (it == link_of.end()) continue;
      const size_t l = it->second;
      if (Ptr<QueueDisc> qdisc = tc->GetRootQueueDiscOnDevice(device)) {
        qdisc->TraceConnectWithoutContext("Drop", Callback<void, Ptr<const QueueDiscItem>>(
                                                      [&m, l](Ptr<const QueueDiscItem>) { ++m.counters.at(l).dropped_queue; }));
        continue;
      }
      Ptr<NetDeviceQueueInterface> queues = device->GetObject<NetDeviceQueueInterface>();
      if (!queues) continue;  // not flow-controlled: an overflow is the device queue's own Drop
      watched[i] = {l, queues->GetTxQueue(0)};
    }
    ip->TraceConnectWithoutContext("Tx", Callback<void, Ptr<const Packet>, Ptr<Ipv4>, uint32_t>(
                                             [&m, watched](Ptr<const Packet>, Ptr<Ipv4>, uint32_t i) {
                                               if (i < watched.size() && watched[i].second && watched[i].second->IsStopped()) {
                                                 ++m.counters.at(watched[i].first).dropped_queue;
                                               }
                                             }));
  }
}

void Ns3Model::Impl::ArmLossSwitches() {
  const double now_s = static_cast<double>(ns3::Simulator::Now().GetNanoSeconds() - offset_ns) / 1e9;
  for (auto& ll : link_loss) {
    if (!ll || ll->armed || ll->states.next_switch() == kNever) continue;
    ll->states.WalkTo(now_s);
    ll->Apply();
    ll->armed = true;
    LinkLoss* raw = ll.get();
    At(std::llround(raw->states.next_switch() * 1e9), [this, raw] {
      raw->armed = false;
      raw->states.Switch();
      raw->Apply();
      ++generation;
      if (outstanding > 0) ArmLossSwitches();
    });
  }
}

}  // namespace narrows::sim
