#include "sim/host_work.h"

#include <algorithm>

#include "core/check.h"

namespace narrows::sim {

HostWork::HostWork(std::unique_ptr<NetworkModel> network, double bytes_per_s)
    : network_(std::move(network)), bytes_per_s_(bytes_per_s) {
  NARROWS_CHECK(bytes_per_s_ > 0.0) << "host work at " << bytes_per_s_ << " bytes/s";
  const auto workers = static_cast<size_t>(network_->topology().num_workers());
  send_free_.assign(workers, 0.0);
  receive_free_.assign(workers, 0.0);
}

int64_t HostWork::StartFlow(int src, int dst, int64_t bytes, double now) {
  const int64_t id = next_id_++;
  double& free = send_free_[static_cast<size_t>(src)];
  free = std::max(free, now) + Seconds(bytes);
  messages_.emplace(id, Message{src, dst, bytes});
  leaving_.emplace(free, id);
  return id;
}

double HostWork::NextEventTime() const {
  double t = network_->NextEventTime();
  if (!leaving_.empty()) t = std::min(t, leaving_.begin()->first);
  if (!arriving_.empty()) t = std::min(t, arriving_.begin()->first);
  return t;
}

bool HostWork::Step(double limit, std::vector<Delivery>* delivered) {
  const double leave = leaving_.empty() ? kNever : leaving_.begin()->first;
  const double arrive = arriving_.empty() ? kNever : arriving_.begin()->first;
  const double target = std::max(now_, std::min({leave, arrive, limit}));
  // The network's own stepping (ns-3 runs its packets' events in one go): stepping it event by
  // event from here costs a call per packet. What it delivers comes in time order, so it queues at
  // its receivers' hosts in that order, never taken in before the time reached.
  std::vector<Delivery> from_network;
  network_->AdvanceUntilDelivery(target, &from_network);
  // Nothing delivered: the network's next event lies past the target; its clock moves there, so
  // that what enters it now starts then.
  if (from_network.empty()) network_->AdvanceTo(target, &from_network);
  double reached = target;
  for (const auto& d : from_network) {
    const auto it = by_flow_.find(d.flow);
    NARROWS_CHECK(it != by_flow_.end()) << "unknown flow " << d.flow;
    const Message& m = messages_.at(it->second);
    double& free = receive_free_[static_cast<size_t>(m.dst)];
    free = std::max(free, d.time) + Seconds(m.bytes);
    arriving_.emplace(free, it->second);
    by_flow_.erase(it);
    reached = d.time;  // the network stopped at its delivery, short of the target
  }
  now_ = std::max(now_, reached);
  bool moved = false;
  while (!leaving_.empty() && leaving_.begin()->first <= now_) {
    const int64_t id = leaving_.begin()->second;
    leaving_.erase(leaving_.begin());
    Message& m = messages_.at(id);
    m.flow = network_->StartFlow(m.src, m.dst, m.bytes, now_);
    by_flow_.emplace(m.flow, id);
    moved = true;
  }
  while (!arriving_.empty() && arriving_.begin()->first <= now_) {
    delivered->push_back({arriving_.begin()->second, arriving_.begin()->first});
    messages_.erase(arriving_.begin()->second);
    arriving_.erase(arriving_.begin());
    moved = true;
  }
  return moved;
}

void HostWork::AdvanceTo(double t, std::vector<Delivery>* delivered) {
  while (true) {
    const bool moved = Step(t, delivered);
    if (now_ >= t && !moved && NextEventTime() > t) return;
  }
}

void HostWork::AdvanceUntilDelivery(double limit, std::vector<Delivery>* delivered) {
  const size_t before = delivered->size();
  while (delivered->size() == before && NextEventTime() <= limit && NextEventTime() < kNever) Step(limit, delivered);
}

NetworkModel::Stalest HostWork::StalestFlow() const {
  Stalest s = network_->StalestFlow();
  if (s.flow >= 0) s.flow = by_flow_.at(s.flow);
  return s;
}

}  // namespace narrows::sim
