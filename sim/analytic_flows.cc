// AnalyticModel's flows (sim/analytic_model.h): which are transmitting, their lazily applied progress,
// the components of the flow-link graph whose shares must be recomputed, and the heap of due times.
#include <algorithm>
#include <limits>
#include <vector>

#include "sim/analytic_model.h"

namespace narrows::sim {
namespace {

constexpr double kEpsBits = 1e-6;  // as in analytic_model.cc

}  // namespace

void AnalyticModel::Sync(Flow& f) {
  const double dt = now_ - f.synced_s;
  f.synced_s = now_;
  if (!(dt > 0.0)) return;
  const double bits = f.rate_bps * dt;
  if (f.rate_bps > 0) f.moved_s = now_;
  f.remaining_bits -= bits;
  if (options_.slow_start) {
    Connection& c = connections_[f.pair];
    c.round_sent_bits += bits;
    c.stream_bits += bits;
    const double drained = std::min(c.burst_bits, bits);
    c.burst_bits -= drained;
    if (drained > 0.0) burst_queued_[static_cast<size_t>(c.bottleneck)] -= drained;
  }
  const double from = now_ - dt;
  for (int l : f.route) counters_.AddBits(static_cast<size_t>(l), from, now_, bits);
  for (int l : f.ack_route) counters_.AddBits(static_cast<size_t>(l), from, now_, options_.ack_share * bits);
}

void AnalyticModel::Insert(Flow f) {
  const int64_t seq = next_seq_++;
  f.synced_s = now_;
  transmitting_.insert(f.pair);
  for (int l : f.route) on_link_[static_cast<size_t>(l)].push_back(seq);
  for (int l : f.ack_route) on_link_[static_cast<size_t>(l)].push_back(seq);
  MarkDirty(f);
  flows_.emplace(seq, std::move(f));
}

void AnalyticModel::Remove(int64_t seq) {
  const auto it = flows_.find(seq);
  const Flow& f = it->second;
  auto drop = [&](int l) {
    auto& on = on_link_[static_cast<size_t>(l)];
    const auto at = std::find(on.begin(), on.end(), seq);
    if (at == on.end()) return;  // a link both of its routes cross: dropped once already
    *at = on.back();
    on.pop_back();
  };
  for (int l : f.route) drop(l);
  for (int l : f.ack_route) drop(l);
  MarkDirty(f);
  transmitting_.erase(f.pair);
  flows_.erase(it);
}

void AnalyticModel::MarkDirty(int link) {
  if (dirty_[static_cast<size_t>(link)]) return;
  dirty_[static_cast<size_t>(link)] = 1;
  dirty_links_.push_back(link);
}

void AnalyticModel::MarkDirty(const Flow& f) {
  for (int l : f.route) MarkDirty(l);
  for (int l : f.ack_route) MarkDirty(l);
}

void AnalyticModel::MarkAllDirty() {
  for (const auto& [seq, f] : flows_) MarkDirty(f);
}

void AnalyticModel::Reshare() {
  if (dirty_links_.empty()) return;
  // The component of the flow-link graph reached from the dirty links: their flows, those flows'
  // links, and so on. Its shares are independent of every other flow's.
  ++generation_;
  std::vector<int>& links = scratch_links_;
  std::vector<int>& frontier = scratch_frontier_;
  links.clear();
  frontier.clear();
  for (int l : dirty_links_) {
    dirty_[static_cast<size_t>(l)] = 0;
    if (seen_[static_cast<size_t>(l)] == generation_) continue;
    seen_[static_cast<size_t>(l)] = generation_;
    links.push_back(l);
    frontier.push_back(l);
  }
  dirty_links_.clear();
  std::vector<int64_t>& seqs = scratch_seqs_;
  seqs.clear();
  while (!frontier.empty()) {
    const int l = frontier.back();
    frontier.pop_back();
    for (int64_t seq : on_link_[static_cast<size_t>(l)]) {
      Flow& f = flows_.at(seq);
      if (f.reached == generation_) continue;
      f.reached = generation_;
      seqs.push_back(seq);
      for (const Links& route : {f.route, f.ack_route}) {
        for (int k : route) {
          if (seen_[static_cast<size_t>(k)] == generation_) continue;
          seen_[static_cast<size_t>(k)] = generation_;
          links.push_back(k);
          frontier.push_back(k);
        }
      }
    }
  }
  std::sort(seqs.begin(), seqs.end());  // the order they began, as a full recomputation takes them
  std::vector<Flow*>& flows = scratch_flows_;
  flows.clear();
  for (int64_t seq : seqs) flows.push_back(&flows_.at(seq));
  Fill(flows, links);
  for (size_t i = 0; i < flows.size(); ++i) {
    Flow& f = *flows[i];
    ++f.version;
    if (f.remaining_bits <= kEpsBits) {
      due_.push({now_, seqs[i], f.version});
    } else if (f.rate_bps > 0) {
      due_.push({now_ + f.remaining_bits / f.rate_bps, seqs[i], f.version});
    }
  }
}

double AnalyticModel::NextCompletion() const {
  while (!due_.empty()) {
    const Due& d = due_.top();
    const auto it = flows_.find(d.seq);
    if (it != flows_.end() && it->second.version == d.version) return d.time;
    due_.pop();  // stale: its flow ended or its rate changed since
  }
  return kNever;
}

std::vector<int64_t> AnalyticModel::Completed() {
  // Done when less than a nanosecond of transmission is left (absorbs rounding), or less than
  // the clock can resolve: late in a long run now_ + remaining / rate rounds to now_.
  const double resolution = std::max(1e-9, 4.0 * std::numeric_limits<double>::epsilon() * now_);
  std::vector<int64_t> done;
  std::vector<Due>& later = scratch_due_;
  later.clear();
  while (NextCompletion() < kNever) {
    const Due d = due_.top();
    Flow& f = flows_.at(d.seq);
    const double slack = resolution + (f.rate_bps > 0 ? kEpsBits / f.rate_bps : 0.0);
    if (d.time > now_ + slack) break;
    due_.pop();
    Sync(f);
    if (f.remaining_bits <= kEpsBits + f.rate_bps * resolution) {
      done.push_back(d.seq);
    } else if (f.rate_bps > 0) {  // rounding left a little: due again when it is sent
      later.push_back({now_ + f.remaining_bits / f.rate_bps, d.seq, d.version});
    }
  }
  for (const Due& d : later) due_.push(d);
  std::sort(done.begin(), done.end());
  return done;
}

}  // namespace narrows::sim
