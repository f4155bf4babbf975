// AnalyticModel's rates (sim/analytic_model.h): each flow's cap under its route's loss, and the
// max-min fair shares of a set of links among the flows that cross them (Fill).
#include <algorithm>
#include <cmath>
#include <vector>

#include "sim/analytic_model.h"

namespace narrows::sim {

double AnalyticModel::LossCap(Links route, double latency_s) const {
  if (!lossy_) return kNever;
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

void AnalyticModel::Fill(const std::vector<Flow*>& flows, const std::vector<int>& links) {
  // Bursts move the loss; a flow whose round has spent its window waits for the round's end.
  for (Flow* f : flows) {
    Sync(*f);
    f->cap_bps = f->paused ? 0.0 : LossCap(f->route, f->latency_s);
    f->rate_bps = 0.0;
  }
  // Max-min fairness by progressive filling: raise all unfrozen flows' rates together until a link
  // saturates or a flow reaches its cap; freeze those flows; repeat. `links` are every link the
  // flows cross (their routes and their ACKs' routes), and no other flow crosses them.
  // A flow's ACKs take ack_share of its rate on each link of its reverse route: the filling raises
  // every unfrozen flow's rate by the same amount, each link's load by its weighted count of them.
  const double ack = options_.ack_share;
  for (int l : links) {
    capacity_[static_cast<size_t>(l)] = bandwidth_[static_cast<size_t>(l)];
    unfrozen_on_[static_cast<size_t>(l)] = 0.0;
  }
  auto load = [&](const Flow& f, double forward, std::vector<double>& per_link) {
    for (int l : f.route) per_link[static_cast<size_t>(l)] += forward;
    for (int l : f.ack_route) per_link[static_cast<size_t>(l)] += forward * ack;
  };
  for (const Flow* f : flows) load(*f, 1.0, unfrozen_on_);
  std::vector<char>& frozen = scratch_frozen_;
  frozen.assign(flows.size(), 0);
  size_t remaining = flows.size();
  while (remaining > 0) {
    double inc = kNever;
    for (int l : links) {
      const auto k = static_cast<size_t>(l);
      if (unfrozen_on_[k] > 1e-12) inc = std::min(inc, std::max(0.0, capacity_[k]) / unfrozen_on_[k]);
    }
    for (size_t i = 0; i < flows.size(); ++i) {
      if (!frozen[i]) inc = std::min(inc, flows[i]->cap_bps - flows[i]->rate_bps);
    }
    for (size_t i = 0; i < flows.size(); ++i) {
      if (frozen[i]) continue;
      flows[i]->rate_bps += inc;
      load(*flows[i], -inc, capacity_);
    }
    for (size_t i = 0; i < flows.size(); ++i) {
      if (frozen[i]) continue;
      const Flow& f = *flows[i];
      bool saturated = f.rate_bps >= f.cap_bps * (1 - 1e-12);
      for (int l : f.route) saturated = saturated || capacity_[l] <= bandwidth_[l] * 1e-12;
      for (int l : f.ack_route) saturated = saturated || capacity_[l] <= bandwidth_[l] * 1e-12;
      if (saturated) {
        frozen[i] = 1;
        --remaining;
        load(f, -1.0, unfrozen_on_);
      }
    }
  }
}

}  // namespace narrows::sim
