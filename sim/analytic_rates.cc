// AnalyticModel's rates (sim/analytic_model.h): each flow's cap under its route's loss, and the
// max-min fair shares of the links among the flows.
#include <algorithm>
#include <cmath>
#include <vector>

#include "sim/analytic_model.h"

namespace narrows::sim {

double AnalyticModel::LossCap(const std::vector<int>& route, double latency_s) const {
  double keep = 1.0;
  for (int l : route) keep *= 1.0 - loss_[static_cast<size_t>(l)].loss();
  const double loss = 1.0 - keep;
  if (!(loss > 0.0)) return kNever;
  if (loss >= 1.0) return 0.0;
  const double rtt = std::max(2.0 * latency_s, 1e-4);
  // Padhye et al.'s TCP throughput under random loss, in segments per second, with one segment
  // acknowledged per ACK: the congestion-avoidance term RTT sqrt(2p/3) (Mathis's) plus the
  // timeouts' T0 min(1, 3 sqrt(3p/8)) p (1 + 32p^2). The cap is on goodput; flows count wire bits.
  const double t0 = std::max(options_.min_rto_s, 4.0 * rtt);
  const double per_segment = rtt * std::sqrt(2.0 * loss / 3.0) +
                             t0 * std::min(1.0, 3.0 * std::sqrt(3.0 * loss / 8.0)) * loss * (1.0 + 32.0 * loss * loss);
  return options_.mss_bytes * 8.0 / per_segment * options_.wire_bytes_per_byte;
}

void AnalyticModel::Recompute() {
  // Bursts move the loss; a flow whose round has spent its window waits for the round's end.
  for (auto& f : flows_) f.cap_bps = f.paused ? 0.0 : LossCap(f.route, f.latency_s);
  // Max-min fairness by progressive filling: raise all unfrozen flows' rates together until a link
  // saturates or a flow reaches its cap; freeze those flows; repeat.
  // A flow's ACKs take ack_share of its rate on each link of its reverse route: the filling raises
  // every unfrozen flow's rate by the same amount, each link's load by its weighted count of them.
  const double ack = options_.ack_share;
  std::vector<double> capacity = bandwidth_;
  std::vector<double> unfrozen_on(capacity.size(), 0.0);
  std::vector<bool> frozen(flows_.size(), false);
  auto load = [&](const Flow& f, double forward, std::vector<double>& per_link) {
    for (int l : f.route) per_link[l] += forward;
    for (int l : f.ack_route) per_link[l] += forward * ack;
  };
  for (auto& f : flows_) {
    f.rate_bps = 0.0;
    load(f, 1.0, unfrozen_on);
  }
  size_t remaining = flows_.size();
  while (remaining > 0) {
    double inc = kNever;
    for (size_t l = 0; l < capacity.size(); ++l) {
      if (unfrozen_on[l] > 1e-12) inc = std::min(inc, std::max(0.0, capacity[l]) / unfrozen_on[l]);
    }
    for (size_t i = 0; i < flows_.size(); ++i) {
      if (!frozen[i]) inc = std::min(inc, flows_[i].cap_bps - flows_[i].rate_bps);
    }
    for (size_t i = 0; i < flows_.size(); ++i) {
      if (frozen[i]) continue;
      flows_[i].rate_bps += inc;
      load(flows_[i], -inc, capacity);
    }
    for (size_t i = 0; i < flows_.size(); ++i) {
      if (frozen[i]) continue;
      bool saturated = flows_[i].rate_bps >= flows_[i].cap_bps * (1 - 1e-12);
      for (int l : flows_[i].route) saturated = saturated || capacity[l] <= bandwidth_[l] * 1e-12;
      for (int l : flows_[i].ack_route) saturated = saturated || capacity[l] <= bandwidth_[l] * 1e-12;
      if (saturated) {
        frozen[i] = true;
        --remaining;
        load(flows_[i], -1.0, unfrozen_on);
      }
    }
  }
}

}  // namespace narrows::sim
