#include "sim/analytic_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/scenario.h"
#include "sim/network_registry.h"

namespace narrows::sim {
namespace {

constexpr double kEpsBits = 1e-6;

}  // namespace

AnalyticOptions AnalyticOptions::ForMtu(int mtu) {
  constexpr double kHeaderBytes = 52.0;  // IPv4 20 + TCP 20 + timestamp option 12
  AnalyticOptions o;
  o.mss_bytes = mtu - kHeaderBytes;
  o.wire_bytes_per_byte = mtu / o.mss_bytes;
  return o;
}

double AnalyticOptions::DelayedAckShare(int mtu) {
  constexpr double kAckBytes = 52.0;  // IPv4 20 + TCP 20 + timestamp option 12, no payload
  return kAckBytes / (2.0 * mtu);
}

AnalyticModel::AnalyticModel(Topology topology, AnalyticOptions options)
    : topology_(std::move(topology)), options_(options), counters_(topology_.links().size()) {
  for (const auto& l : topology_.links()) {
    bandwidth_.push_back(l.bandwidth_bps);
    next_change_.push_back(0);
    loss_.emplace_back(l);
    if (l.loss > 0.0 || loss_.back().next_switch() < kNever) lossy_ = true;
    constexpr double kMinQueueBits = 64.0 * 1024.0 * 8.0;
    queue_bits_.push_back(options_.queue_s > 0.0 ? std::max(kMinQueueBits, options_.queue_s * l.bandwidth_bps) : kNever);
    burst_queued_.push_back(0.0);
    if (!l.schedule.empty() || loss_.back().next_switch() < kNever) dynamic_links_.push_back(static_cast<int>(bandwidth_.size()) - 1);
  }
  const size_t n = bandwidth_.size();
  on_link_.resize(n);
  dirty_.assign(n, 0);
  seen_.assign(n, 0);
  capacity_.assign(n, 0.0);
  unfrozen_on_.assign(n, 0.0);
  // Changes at time 0 (or before) apply from the start.
  for (size_t l = 0; l < bandwidth_.size(); ++l) {
    const auto& s = topology_.links()[l].schedule;
    while (next_change_[l] < s.size() && s[next_change_[l]].at_s <= 0.0) {
      bandwidth_[l] = s[next_change_[l]++].bandwidth_bps;
    }
  }
}

int64_t AnalyticModel::StartFlow(int src, int dst, int64_t bytes, double now) {
  NARROWS_CHECK(now + 1e-12 >= now_) << "flow started at " << now << " before model time " << now_;
  std::vector<Delivery> ignored;
  if (now > now_) AdvanceTo(now, &ignored);
  NARROWS_CHECK(ignored.empty()) << "StartFlow skipped deliveries; advance the model first";
  const int64_t id = next_id_++;
  const Path route = topology_.Route(src, dst);
  const double latency = topology_.PathLatency(src, dst);
  const double cap = LossCap(route, latency);
  const int pair = src * topology_.num_workers() + dst;
  const Links ack_route = options_.ack_share > 0.0 ? topology_.Route(dst, src) : Links();
  const Links reverse_route = options_.slow_start && options_.queue_s > 0.0 ? topology_.Route(dst, src) : Links();
  const double bits = std::max(0.0, static_cast<double>(bytes) * 8.0 * options_.wire_bytes_per_byte);
  Flow flow{id, pair, route, ack_route, reverse_route, bits, 0.0, cap, latency, now};
  const auto waiting = queued_.find(pair);
  const bool busy = (waiting != queued_.end() && !waiting->second.empty()) || transmitting_.count(pair) > 0;
  if (busy) {
    // Written behind its predecessor: what the round's window has room for leaves at once.
    if (options_.slow_start) {
      Connection& c = connections_[pair];
      const double room = c.round_end == kNever ? kNever : c.window_bits - c.round_released_bits;
      if (c.round_end >= 0.0) Burst(c, flow, std::min(std::max(0.0, room), bits));
    }
    queued_[pair].push_back(std::move(flow));
  } else {
    flow.synced_s = now_;
    Begin(flow, Start::kWritten);
    Insert(std::move(flow));
    Reshare();
  }
  return id;
}

void AnalyticModel::Begin(Flow& f, Start start) {
  if (!options_.slow_start) return;
  const double initial = options_.initial_window_segments * SegmentBits();
  auto [it, fresh] = connections_.try_emplace(f.pair);
  Connection& c = it->second;
  if (fresh) c.window_bits = initial;
  // The round its predecessor left open has ended since: what it sent was acknowledged.
  if (c.round_end >= 0.0 && c.round_end <= now_) EndRound(c, f, Then::kIdle);
  const double rtt = Rtt(f);
  if (c.idle_since >= 0.0) {
    // Linux's tcp_cwnd_restart: idle for longer than an RTO, the window is halved once for each
    // further RTO of idleness, down to the initial window.
    const double rto = (c.srtt_s > 0.0 ? c.srtt_s : rtt) + options_.min_rto_s;
    double idle = now_ - c.idle_since;
    if (idle > rto) {
      // The threshold keeps 3/4 of the window (tcp_current_ssthresh), so slow start climbs back.
      c.ssthresh_bits = std::max(c.ssthresh_bits, 0.75 * c.window_bits);
      for (idle -= rto; idle > 0.0 && c.window_bits > initial; idle -= rto) c.window_bits /= 2.0;
      c.window_bits = std::max(c.window_bits, initial);
      if (c.round_end == kNever) c.round_end = -1.0;  // small enough to limit again
    }
  }
  if (c.round_end < 0.0) {
    c.last_round_sent_bits = 0.0;
    c.round_sent_bits = 0.0;
    c.round_released_bits = 0.0;
    c.round_end = now_ + Trip(c, f);
  }
  if (start == Start::kWritten) {
    const double room = c.round_end == kNever ? kNever : c.window_bits - c.round_released_bits;
    Burst(c, f, std::min(std::max(0.0, room), f.remaining_bits));
  }
  f.paused = Spent(c);
}

double AnalyticModel::RoundTrip(const Flow& f) const {
  double queued_s = 0.0;
  auto c = connections_.find(f.pair);
  if (c != connections_.end() && c->second.bottleneck >= 0) {
    const auto l = static_cast<size_t>(c->second.bottleneck);
    queued_s += std::max(0.0, burst_queued_[l] - c->second.burst_bits) / bandwidth_[l];
  }
  double reverse_s = 0.0;
  for (int l : f.reverse_route) {
    reverse_s = std::max(reverse_s, burst_queued_[static_cast<size_t>(l)] / bandwidth_[static_cast<size_t>(l)]);
  }
  return Rtt(f) + queued_s + reverse_s;
}

double AnalyticModel::Trip(Connection& c, const Flow& f) const {
  const double trip = RoundTrip(f);
  c.srtt_s = c.srtt_s < 0.0 ? trip : 0.875 * c.srtt_s + 0.125 * trip;
  return trip;
}

double AnalyticModel::Backlog(const Flow& f) const {
  double bits = f.remaining_bits;
  auto q = queued_.find(f.pair);
  if (q != queued_.end()) {
    for (const auto& waiting : q->second) bits += waiting.remaining_bits;
  }
  return bits;
}

void AnalyticModel::Burst(Connection& c, const Flow& f, double bits) {
  if (!(bits > 0.0)) return;
  c.round_released_bits += bits;
  // Released bits that left already were released by an unlimited window, as they were written.
  c.released_bits = std::max(c.released_bits, c.stream_bits) + bits;
  c.last_burst_s = now_;
  c.burst_end_at = c.released_bits;
  // Behind a loss: sent after it is resent.
  if (c.hold_at < kNever) return;
  if (c.bottleneck < 0) {
    c.bottleneck = f.route.front();
    for (int l : f.route) {
      if (bandwidth_[static_cast<size_t>(l)] < bandwidth_[static_cast<size_t>(c.bottleneck)]) c.bottleneck = l;
    }
  }
  const auto l = static_cast<size_t>(c.bottleneck);
  const double room = std::max(0.0, queue_bits_[l] - burst_queued_[l]);
  // Through an interface of nic_bps the burst arrives while the link drains it: the share of it
  // that waits at its peak (all of it, arriving at once, without one).
  const double share =
      options_.nic_bps > 0.0 ? std::max(0.0, 1.0 - bandwidth_[l] / options_.nic_bps) : 1.0;
  if (bits * share <= room) {
    c.burst_bits += bits * share;
    burst_queued_[l] += bits * share;
    return;
  }
  // What found the queue full is lost: the stream stops before it until it is resent. The queue
  // filled when room / share of the burst had arrived; of the rest, the queue drops the share
  // that it cannot drain as it arrives (what a drop-tail queue counts).
  const double fitted = room / share;
  c.burst_bits += room;
  burst_queued_[l] += room;
  c.hold_at = c.released_bits - (bits - fitted);
  c.recover_at = kNever;
  counters_.at(l).dropped_queue += static_cast<int64_t>(std::ceil((bits - fitted) * share / SegmentBits()));
}

bool AnalyticModel::StepRecovery(Connection& c, const Flow& f) {
  if (c.hold_at == kNever) return false;
  const double resolution = std::max(1e-12, 4.0 * std::numeric_limits<double>::epsilon() * now_);
  if (c.recover_at == kNever) {
    if (c.stream_bits < c.hold_at - kEpsBits - f.rate_bps * resolution) return false;
    // The bits before the loss are out. The burst reached the queue faster than the link drains it
    // but not infinitely faster, so packets that got in follow the lost ones: their SACKs show the
    // loss, and the retransmission follows the queued bits a round trip later (fast recovery).
    c.stream_bits = c.hold_at;
    c.recover_at = now_ + Rtt(f);
    return true;
  }
  if (c.recover_at > now_ + resolution) return false;
  // Resent: Reno halves the window and continues from the threshold in congestion avoidance.
  c.window_bits = std::max(2.0 * SegmentBits(), c.window_bits / 2.0);
  c.ssthresh_bits = c.window_bits;
  c.hold_at = kNever;
  c.recover_at = kNever;
  burst_queued_[static_cast<size_t>(c.bottleneck)] -= c.burst_bits;
  c.burst_bits = 0.0;
  c.last_round_sent_bits = 0.0;
  c.round_sent_bits = 0.0;
  c.round_end = now_ + Trip(c, f);
  c.round_released_bits = std::min(c.window_bits, Backlog(f));
  c.released_bits = c.stream_bits + c.round_released_bits;
  return true;
}

void AnalyticModel::End(const Flow& f) {
  if (!options_.slow_start) return;
  // Idle since the host sent its last bits (Linux's lsndtime): when the link sent them, unless
  // they left in a burst, which the host sent at once and the queue then held.
  Connection& c = connections_[f.pair];
  c.idle_since = c.stream_bits <= c.burst_end_at + kEpsBits ? c.last_burst_s : now_;
}

bool AnalyticModel::Spent(const Connection& c, double slack_bits) const {
  if (c.hold_at < kNever && c.stream_bits >= c.hold_at - kEpsBits - slack_bits) return true;
  return c.round_end < kNever && c.round_sent_bits >= c.window_bits * (1.0 - 1e-12) - kEpsBits - slack_bits;
}

void AnalyticModel::EndRound(Connection& c, const Flow& f, Then then) {
  const bool next = then == Then::kNextRound;
  // Growth while the window is used: the bits in flight (this round's, or the last round's still
  // being acknowledged early in this one) reached half of it; not while a loss is outstanding (the
  // burst that lost it did not fill the window, and fast recovery does not grow it).
  if (c.hold_at == kNever &&
      std::max(c.round_sent_bits, c.last_round_sent_bits) >= 0.5 * c.window_bits * (1.0 - 1e-9)) {
    if (c.window_bits < c.ssthresh_bits) {
      c.window_bits = std::min(c.window_bits + c.round_sent_bits, c.ssthresh_bits);
    } else {  // congestion avoidance: a segment per window acknowledged
      c.window_bits += SegmentBits() * c.round_sent_bits / c.window_bits;
    }
  }
  c.last_round_sent_bits = c.round_sent_bits;
  c.round_sent_bits = 0.0;
  double slowest = kNever;
  for (int l : f.route) slowest = std::min(slowest, bandwidth_[static_cast<size_t>(l)]);
  if (c.window_bits > 2.0 * slowest * Rtt(f)) {
    c.round_end = kNever;
  } else {
    c.round_end = next ? now_ + Trip(c, f) : -1.0;
  }
  // The next round releases at the ACKs' rate: no burst.
  c.round_released_bits = next ? std::min(c.window_bits, Backlog(f)) : 0.0;
  c.released_bits = std::max(c.released_bits, c.stream_bits + c.round_released_bits);
}

double AnalyticModel::NextWindowEvent() const {
  double t = kNever;
  if (!options_.slow_start) return t;
  for (const auto& [seq, f] : flows_) {
    auto it = connections_.find(f.pair);
    if (it == connections_.end()) continue;
    const Connection& c = it->second;
    if (c.hold_at < kNever) {
      t = std::min(t, c.recover_at);
      if (!f.paused && f.rate_bps > 0.0) t = std::min(t, now_ + (c.hold_at - c.stream_bits) / f.rate_bps);
    }
    if (c.round_end == kNever) continue;
    t = std::min(t, c.round_end);
    if (!f.paused && f.rate_bps > 0.0) t = std::min(t, now_ + (c.window_bits - c.round_sent_bits) / f.rate_bps);
  }
  return t;
}

bool AnalyticModel::StepRounds() {
  bool changed = false;
  for (auto& [seq, f] : flows_) {
    auto it = connections_.find(f.pair);
    if (it == connections_.end()) continue;
    Connection& c = it->second;
    // Within what the clock can resolve of its end, a round has ended and a window is spent (absorbs
    // rounding: late in a long run a time step rounds to a multiple of now_'s last bit).
    const double resolution = std::max(1e-12, 4.0 * std::numeric_limits<double>::epsilon() * now_);
    if (c.round_end < kNever && c.round_end <= now_ + resolution) EndRound(c, f, Then::kNextRound);
    if (StepRecovery(c, f)) changed = true;
    const bool paused = Spent(c, f.rate_bps * resolution);
    if (paused != f.paused) changed = true;
    f.paused = paused;
  }
  return changed;
}

double AnalyticModel::NextScheduleChange(bool with_loss_switches) const {
  double t = kNever;
  for (int k : dynamic_links_) {
    const auto l = static_cast<size_t>(k);
    const auto& s = topology_.links()[l].schedule;
    if (next_change_[l] < s.size()) t = std::min(t, s[next_change_[l]].at_s);
    if (with_loss_switches) t = std::min(t, loss_[l].next_switch());
  }
  return t;
}

double AnalyticModel::NextEventTime() const {
  // Loss switches go on for ever; they are events only while something is being sent (AdvanceTo
  // walks those it passes).
  double t = std::min({NextCompletion(), NextScheduleChange(!flows_.empty()), NextWindowEvent()});
  if (!in_flight_.empty()) t = std::min(t, in_flight_.begin()->first);
  return t;
}

void AnalyticModel::AdvanceTo(double t, std::vector<Delivery>* delivered) {
  while (true) {
    const double deliver = in_flight_.empty() ? kNever : in_flight_.begin()->first;
    const double step_to = std::max(now_, std::min({NextCompletion(), NextScheduleChange(), NextWindowEvent(), deliver, t}));
    now_ = step_to;
    // The window model's rounds read every connection's counts: every flow's progress up to now.
    if (options_.slow_start) {
      for (auto& [seq, f] : flows_) Sync(f);
    }
    for (int64_t seq : Completed()) {
      Flow& f = flows_.at(seq);
      in_flight_.emplace(now_ + f.latency_s, f.id);
      const int pair = f.pair;
      End(f);
      Remove(seq);
      auto q = queued_.find(pair);
      if (q != queued_.end() && !q->second.empty()) {  // the pair's next message starts now
        Flow next = std::move(q->second.front());
        q->second.pop_front();
        next.moved_s = now_;  // it waited behind its predecessor until now
        next.synced_s = now_;
        Begin(next, Start::kBehind);
        Insert(std::move(next));
      }
    }
    for (int k : dynamic_links_) {
      const auto l = static_cast<size_t>(k);
      const auto& s = topology_.links()[l].schedule;
      while (next_change_[l] < s.size() && s[next_change_[l]].at_s <= now_) {
        bandwidth_[l] = s[next_change_[l]++].bandwidth_bps;
        MarkDirty(k);
      }
      while (loss_[l].next_switch() <= now_) {
        loss_[l].Switch();
        MarkDirty(k);
      }
    }
    if (options_.slow_start && StepRounds()) MarkAllDirty();
    Reshare();
    while (!in_flight_.empty() && in_flight_.begin()->first <= now_) {
      delivered->push_back({in_flight_.begin()->second, in_flight_.begin()->first});
      in_flight_.erase(in_flight_.begin());
    }
    if (now_ >= t && NextEventTime() > t) return;
  }
}

NetworkModel::Stalest AnalyticModel::StalestFlow() const {
  Stalest s;
  for (const auto& [seq, f] : flows_) {
    // One transmitting now has moved bits up to now (its progress is applied lazily).
    const double moved = f.rate_bps > 0 ? now_ : f.moved_s;
    if (moved < s.since) s = {f.id, moved};
  }
  return s;
}

}  // namespace narrows::sim

namespace narrows::sim {
namespace {

// network.analytic: the loss cap's minimum retransmission timeout, the window model, and whether
// ACKs load the reverse path. The MTU sets the header overhead and an ACK's share.
struct AnalyticScenarioOptions : core::PluginOptions {
  double min_rto_s = 1.0;
  bool slow_start = false;
  int initial_window_segments = 10;
  bool acks = false;
};

const core::KeyBlock kAnalyticKeys("network.analytic", "The flow-level model (network.model: analytic; docs/explanation/network-models.md).");
const core::NumberKey kMinRtoS(kAnalyticKeys, "min_rto_s", 1.0, 0.001, 60.0,
                               core::Doc("the minimum retransmission timeout (1 s: RFC 6298; Linux hosts use 0.2)", "s"));
const core::BoolKey kSlowStart(kAnalyticKeys, "slow_start", false,
                               core::Doc("a congestion window per connection: slow start, and a restart after an idle RTO"));
const core::IntKey kInitialWindow(kAnalyticKeys, "initial_window_segments", 10, 1, 1000,
                                  core::Doc("slow_start: the initial and restart window", "segments"));
const core::BoolKey kAcks(kAnalyticKeys, "acks", false,
                          core::Doc("ACKs load the reverse path, one 52-byte ACK per two segments"));

NetworkModelPlugin AnalyticPlugin() {
  NetworkModelPlugin p;
  p.parser.name = "analytic";
  p.parser.parse = [](core::OptionReader& r, const core::Scenario&) {
    auto o = std::make_shared<AnalyticScenarioOptions>();
    o->min_rto_s = r.Double(kMinRtoS);
    o->slow_start = r.Bool(kSlowStart);
    o->initial_window_segments = static_cast<int>(r.Int(kInitialWindow));
    o->acks = r.Bool(kAcks);
    return std::shared_ptr<const core::PluginOptions>(std::move(o));
  };
  p.make = [](Topology topology, const core::Scenario& sc) -> std::unique_ptr<NetworkModel> {
    AnalyticOptions o = AnalyticOptions::ForMtu(sc.network.mtu);
    o.nic_bps = sc.network.nic_bps;
    // A scenario built in code rather than parsed has no block: the defaults.
    if (const auto* own = dynamic_cast<const AnalyticScenarioOptions*>(sc.network.model_options.get())) {
      o.min_rto_s = own->min_rto_s;
      o.slow_start = own->slow_start;
      o.initial_window_segments = own->initial_window_segments;
      if (own->slow_start) o.queue_s = sc.network.queue_ms / 1000.0;
      if (own->acks) o.ack_share = AnalyticOptions::DelayedAckShare(sc.network.mtu);
    }
    return std::make_unique<AnalyticModel>(std::move(topology), o);
  };
  return p;
}

}  // namespace

AnalyticFeatures AnalyticFeaturesOf(const core::Scenario& sc) {
  if (sc.network.model != "analytic") return {};
  const auto* own = dynamic_cast<const AnalyticScenarioOptions*>(sc.network.model_options.get());
  return own == nullptr ? AnalyticFeatures{} : AnalyticFeatures{own->slow_start, own->acks};
}

NARROWS_REGISTER_NETWORK_MODEL(analytic_model, AnalyticPlugin());

}  // namespace narrows::sim
