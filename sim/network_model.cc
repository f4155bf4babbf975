#include "sim/network_model.h"

#include <algorithm>
#include <map>

namespace narrows::sim {

void LinkCounters::AddBits(size_t link, double from_s, double to_s, double bits) {
  if (!(bits > 0) || link >= links_.size()) return;
  Counts& c = links_[link];
  c.bits += bits;
  to_s = std::max(to_s, from_s);
  while (to_s / bin_s_ >= static_cast<double>(kMaxBins)) Coarsen();
  const auto first = static_cast<size_t>(from_s / bin_s_), last = static_cast<size_t>(to_s / bin_s_);
  if (c.bins.size() <= last) c.bins.resize(last + 1, 0.0);
  if (first == last || to_s <= from_s) {
    c.bins[first] += bits;
    return;
  }
  const double rate = bits / (to_s - from_s);
  for (size_t i = first; i <= last; ++i) {
    const double lo = std::max(from_s, static_cast<double>(i) * bin_s_);
    const double hi = std::min(to_s, static_cast<double>(i + 1) * bin_s_);
    if (hi > lo) c.bins[i] += rate * (hi - lo);
  }
}

void LinkCounters::Coarsen() {
  bin_s_ *= 2;
  for (auto& c : links_) {
    std::vector<double> merged((c.bins.size() + 1) / 2, 0.0);
    for (size_t i = 0; i < c.bins.size(); ++i) merged[i / 2] += c.bins[i];
    c.bins = std::move(merged);
  }
}

std::vector<Link> UniformLinks(int n, double bandwidth_bps, double latency_s, double loss) {
  std::vector<Link> links(static_cast<size_t>(n));
  for (auto& l : links) {
    l.bandwidth_bps = bandwidth_bps;
    l.latency_s = latency_s;
    l.loss = loss;
  }
  return links;
}

int Topology::FindLink(const std::string& name) const {
  for (size_t i = 0; i < links_.size(); ++i) {
    if (links_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

double Topology::PathLatency(int src, int dst) const {
  double latency = 0.0;
  for (int l : Route(src, dst)) latency += links_[l].latency_s;
  return latency;
}

Topology Topology::Star(const std::vector<Link>& access) {
  return Islands(access, {}, {});
}

Topology Topology::Islands(const std::vector<Link>& access, const std::vector<std::vector<int>>& islands,
                           const std::vector<Link>& wan) {
  Topology t;
  const int n = static_cast<int>(access.size());
  t.num_workers_ = n;
  // Both directions of a link, each with half of its one-way end-to-end latency.
  auto add_pair = [&](const Link& spec, const std::string& up_name, const std::string& down_name) {
    Link up = spec, down = spec;
    up.name = up_name;
    down.name = down_name;
    up.latency_s = down.latency_s = spec.latency_s / 2;
    t.links_.push_back(up);
    t.links_.push_back(down);
  };
  for (int i = 0; i < n; ++i) add_pair(access[i], "up:" + std::to_string(i), "down:" + std::to_string(i));
  std::vector<int> island_of(n, -1);
  for (size_t k = 0; k < islands.size(); ++k) {
    for (int w : islands[k]) island_of[w] = static_cast<int>(k);
    add_pair(wan[k], "wan-up:" + std::to_string(k), "wan-down:" + std::to_string(k));
  }
  const int wan_base = 2 * n;
  const auto pairs = static_cast<size_t>(n) * static_cast<size_t>(n);
  t.route_start_.reserve(pairs + 1);
  t.route_start_.push_back(0);
  std::vector<int>& r = t.route_links_;
  r.reserve(pairs * (islands.empty() ? 2 : 4));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j) {
        r.push_back(2 * i);
        if (island_of[i] != island_of[j]) {
          r.push_back(wan_base + 2 * island_of[i]);
          r.push_back(wan_base + 2 * island_of[j] + 1);
        }
        r.push_back(2 * j + 1);
      }
      t.route_start_.push_back(static_cast<int64_t>(r.size()));
    }
  }
  return t;
}

std::vector<double> SimulateMessages(NetworkModel& model, const std::vector<Message>& messages) {
  std::vector<size_t> order(messages.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return messages[a].send_time < messages[b].send_time; });
  std::vector<double> out(messages.size(), kNever);
  std::map<int64_t, size_t> index;
  std::vector<Delivery> delivered;
  for (size_t i : order) {
    model.AdvanceTo(messages[i].send_time, &delivered);
    index[model.StartFlow(messages[i].src, messages[i].dst, messages[i].bytes, messages[i].send_time)] = i;
  }
  while (model.NextEventTime() < kNever) model.AdvanceUntilDelivery(kNever, &delivered);
  for (const auto& d : delivered) out[index.at(d.flow)] = d.time;
  return out;
}

void NetworkModel::AdvanceUntilDelivery(double limit, std::vector<Delivery>* delivered) {
  const size_t before = delivered->size();
  for (double t = NextEventTime(); t <= limit && t < kNever; t = NextEventTime()) {
    AdvanceTo(t, delivered);
    if (delivered->size() > before) return;
  }
}

}  // namespace narrows::sim

namespace narrows::sim {

std::vector<DownLink> LinksDownAt(const Topology& topology, double t) {
  std::vector<DownLink> out;
  for (const Link& l : topology.links()) {
    double bandwidth = l.bandwidth_bps, since = 0.0;
    for (const auto& c : l.schedule) {
      if (c.at_s > t) break;
      if ((c.bandwidth_bps <= 0.0) != (bandwidth <= 0.0)) since = c.at_s;
      bandwidth = c.bandwidth_bps;
    }
    if (bandwidth <= 0.0) out.push_back({l.name, since});
  }
  return out;
}

}  // namespace narrows::sim
