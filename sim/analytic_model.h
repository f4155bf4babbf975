// AnalyticModel: flow-level network model. A message is a flow that crosses the links of its route;
// concurrent flows share each link max-min fairly (progressive filling), recomputed whenever a flow
// starts or ends or a link's bandwidth changes; a lone flow of S bytes takes S*8/B to transmit.
// It is delivered one path latency after its last byte leaves, so a message costs
// alpha + S/B alone (S counts protocol headers when options say so). Loss is a goodput penalty:
// each flow is capped at Padhye et al.'s (1998) TCP throughput, whose first term is Mathis et al.'s
// MSS/RTT * 1.22/sqrt(p) (RTT twice the path latency) and whose second is the time spent in
// retransmission timeouts, which dominates from a few percent of loss. Messages between one pair of
// workers share one connection, as over TCP: they are transmitted one after another, in the order
// sent, so they also arrive in that order. Deterministic.
#pragma once

#include <map>

#include "sim/network_model.h"

namespace narrows::sim {

struct AnalyticOptions {
  double wire_bytes_per_byte = 1.0;  // link bytes per payload byte (protocol headers)
  double mss_bytes = 1460.0;         // TCP segment payload, for the loss cap
  // The loss cap's retransmission timeout: RFC 6298's minimum of 1 s, which ns-3 keeps (Linux's is
  // 0.2 s); the timeout used is the larger of it and four round trips.
  double min_rto_s = 1.0;
  // TCP over IPv4 with the timestamp option: 52 header bytes in every MTU-sized packet.
  static AnalyticOptions ForMtu(int mtu);
};

class AnalyticModel : public NetworkModel {
 public:
  explicit AnalyticModel(Topology topology, AnalyticOptions options = {});
  int64_t StartFlow(int src, int dst, int64_t bytes, double now) override;
  double NextEventTime() const override;
  void AdvanceTo(double t, std::vector<Delivery>* delivered) override;
  const Topology& topology() const override { return topology_; }
  // Bits per link over time and drops are zero: the model has no packets and no queues (loss is a
  // rate cap), so only the bits are counted.
  const LinkCounters* counters() const override { return &counters_; }
  Stalest StalestFlow() const override;

 private:
  struct Flow {
    int64_t id;
    int pair;  // src * workers + dst: flows of one pair transmit in order
    std::vector<int> route;
    double remaining_bits;
    double rate_bps = 0.0;
    double cap_bps;  // Padhye's on the route's current loss (Recompute)
    double latency_s;
    double moved_s;  // the last time any of its bits moved (its start until then)
  };
  double LossCap(const std::vector<int>& route, double latency_s) const;
  void Recompute();
  void Progress(double dt);
  double NextCompletion() const;
  // The next bandwidth change, and with `with_loss_switches` the next loss switch too.
  double NextScheduleChange(bool with_loss_switches = true) const;

  Topology topology_;
  AnalyticOptions options_;
  std::vector<double> bandwidth_;       // current bandwidth per link
  std::vector<size_t> next_change_;     // index into each link's schedule
  std::vector<LossStates> loss_;        // each link's loss now (bursts switch it)
  std::vector<Flow> flows_;             // transmitting
  std::map<int, std::vector<Flow>> queued_;  // per pair, waiting for the pair's current flow
  std::multimap<double, int64_t> in_flight_;  // transmitted, delivered at key
  double now_ = 0.0;
  int64_t next_id_ = 0;
  LinkCounters counters_;
};

}  // namespace narrows::sim
