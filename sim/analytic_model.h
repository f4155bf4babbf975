// AnalyticModel: flow-level network model. A message is a flow that crosses the links of its route;
// concurrent flows share each link max-min fairly (progressive filling), recomputed whenever a flow
// starts or ends or a link's bandwidth changes; a lone flow of S bytes takes S*8/B to transmit.
// It is delivered one path latency after its last byte leaves, so a message costs
// alpha + S/B alone (S counts protocol headers when options say so). Loss is a goodput penalty:
// each flow is capped at Padhye et al.'s (1998) TCP throughput, whose first term is Mathis et al.'s
// MSS/RTT * 1.22/sqrt(p) (RTT twice the path latency) and whose second is the time spent in
// retransmission timeouts, which dominates from a few percent of loss. Messages between one pair of
// workers share one connection, as over TCP: they are transmitted one after another, in the order
// sent, so they also arrive in that order. With `slow_start`, each connection also has a congestion
// window, spent in round trips as TCP's is: in each round a connection sends at most its window, at
// its fair share (a message that fits in what is left of the window goes out at the link's rate, not
// spread over a round trip), then waits for the round's end, one RTT after it began; at that end the
// window grows by what the round sent (doubling while it is what limits the flow) and a new round
// begins. A message sent while the connection's round is still open shares that round's window with
// what its predecessor sent in it (those bits are still in flight). The window starts at
// `initial_window_segments`, and a connection idle for longer than an RTO restarts it, halved once
// per RTO of idleness down to the initial window (Linux's tcp_slow_start_after_idle, RFC 2861). With
// `ack_share`, a flow's acknowledgements load the links of the reverse route: ack_share bits for each
// bit it sends, shared with the flows those links carry (a ring's uplink carries its own data and the
// ACKs for the data it receives). With `queue_s` (and `slow_start`) each link has a drop-tail queue
// that bursts fill: bits a connection releases at once (a round opened after idleness, or a message
// written while its round has window to spare) wait in its route's bottleneck queue until that link
// transmits them; what does not fit is lost. Linux finds such a loss by the SACKs of the packets that
// got in after it (fast recovery; no timeout, no probe): the lost bits are resent a round trip after
// the queued ones are out, the window does not grow meanwhile and is then halved (Reno's ssthresh),
// growing by a segment per round trip after (congestion avoidance). ACK-clocked rounds release at
// the ACKs' rate and fill no queue here. A round begun behind bursts lasts their queueing longer:
// the bursts ahead of it in its own bottleneck's queue, and those in the queues its ACKs cross on
// the reverse route; the idle restart's RTO is the smoothed round trip plus min_rto_s, as Linux's
// is. Deterministic.
#pragma once

#include <deque>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/scenario.h"
#include "sim/network_model.h"

namespace narrows::sim {

struct AnalyticOptions {
  double wire_bytes_per_byte = 1.0;  // link bytes per payload byte (protocol headers)
  double mss_bytes = 1460.0;         // TCP segment payload, for the loss cap
  // The loss cap's retransmission timeout: RFC 6298's minimum of 1 s, which ns-3 keeps (Linux's is
  // 0.2 s); the timeout used is the larger of it and four round trips.
  double min_rto_s = 1.0;
  // The window model (see above); off, a flow runs at its fair share from its first bit. The
  // restart's RTO is Linux's form, the round trip plus min_rto_s (0.2 s on Linux).
  bool slow_start = false;
  int initial_window_segments = 10;  // Linux's (RFC 6928)
  // Reverse-path bits of acknowledgements per forward wire bit (0: ACKs take no capacity).
  double ack_share = 0.0;
  // slow_start: each link's drop-tail queue in seconds at its bandwidth (at least 64 KiB, as the
  // link emulator's); 0: no queue limit, so nothing is lost to overflow.
  double queue_s = 0.0;
  // queue_s: each worker's interface rate (bits/s, the scenario's network.nic_bps). A burst then
  // reaches the queue at this pace while the link drains it, so at its peak only the share
  // 1 - bandwidth / nic_bps of it waits there (none at or below the link's rate); 0: all of it.
  double nic_bps = 0.0;
  // What ack_share is for Linux's delayed ACK: one 52-byte ACK per two full-size segments.
  static double DelayedAckShare(int mtu);
  // TCP over IPv4 with the timestamp option: 52 header bytes in every MTU-sized packet.
  static AnalyticOptions ForMtu(int mtu);
};

// What a scenario's network.analytic block turns on: the window model and ACKs on the reverse path
// (both off where the block is absent or the scenario runs another model).
struct AnalyticFeatures {
  bool window = false;
  bool acks = false;
};
AnalyticFeatures AnalyticFeaturesOf(const core::Scenario& sc);

class AnalyticModel : public NetworkModel {
 public:
  explicit AnalyticModel(Topology topology, AnalyticOptions options = {});
  int64_t StartFlow(int src, int dst, int64_t bytes, double now) override;
  double NextEventTime() const override;
  void AdvanceTo(double t, std::vector<Delivery>* delivered) override;
  const Topology& topology() const override { return topology_; }
  // Bits per link over time, and with queue_s the packets lost to a full queue (random loss is a
  // rate cap, so it drops none).
  const LinkCounters* counters() const override { return &counters_; }
  Stalest StalestFlow() const override;

 private:
  using Links = Path;  // a flow's routes: views into the topology's
  struct Flow {
    int64_t id;
    int pair;  // src * workers + dst: flows of one pair transmit in order
    Links route;
    Links ack_route;  // its ACKs' links (ack_share > 0)
    Links reverse_route;  // queue_s: the links its ACKs cross, whose queues delay them
    double remaining_bits;
    double rate_bps = 0.0;
    double cap_bps;  // Padhye's on the route's current loss (Fill)
    double latency_s;
    double moved_s;  // the last time any of its bits moved (its start until then)
    bool paused = false;  // slow_start: its connection's round has spent the window (Fill)
    // Its progress is applied lazily (Sync): remaining_bits, the links' counters and its
    // connection's counts are as of synced_s, and it has sent at rate_bps since.
    double synced_s = 0.0;
    int64_t version = 0;  // of its rate: a completion entry (Due) of an older version is stale
    int64_t reached = 0;  // the generation of the last Reshare that reached it
  };
  // slow_start: a connection's (one per ordered pair of workers) window in wire bits; since when it
  // has had nothing to send (-1: never used); and its round trip: when the round ends (-1: none
  // open; kNever: the window is too large to limit its flow, so there are no rounds) and the bits
  // sent in it and in the round before.
  struct Connection {
    double window_bits = 0.0;
    double idle_since = -1.0;
    // The smoothed round trip (Linux's srtt: 7/8 of the last plus 1/8 of each new one), which with
    // queue_s includes the queues' delay; the idle restart's RTO is it plus min_rto_s.
    double srtt_s = -1.0;
    double round_end = -1.0;
    double round_sent_bits = 0.0;
    double last_round_sent_bits = 0.0;
    // Slow start ends at the threshold (set by a loss; an idle restart keeps 3/4 of the window).
    double ssthresh_bits = kNever;
    // queue_s: the bits released in the round (at most the window), those released at once that
    // still wait in the bottleneck's queue, the bits transmitted so far, and a loss: the stream
    // position where it begins (kNever: none), and when it is resent (kNever: not yet known, until
    // the bits before it are out).
    int bottleneck = -1;
    double round_released_bits = 0.0;
    double released_bits = 0.0;  // in all rounds
    double burst_bits = 0.0;
    double stream_bits = 0.0;
    double hold_at = kNever;
    double recover_at = kNever;
    // The last burst: when the host sent it, and the stream position where it ends.
    double last_burst_s = -1.0;
    double burst_end_at = -1.0;
  };
  double Rtt(const Flow& f) const { return std::max(2.0 * f.latency_s, 1e-4); }
  // A round trip begun now: the path's, plus with queue_s the time the bursts already waiting in
  // the flow's bottleneck queue hold its first bits, and the time those in the queues of its reverse
  // route hold its ACKs (a ring's uplink carries its own burst ahead of the ACKs for the data it
  // receives, so a round behind a full queue lasts a queue's length longer).
  double RoundTrip(const Flow& f) const;
  // RoundTrip, folded into the connection's smoothed round trip.
  double Trip(Connection& c, const Flow& f) const;
  // A full-size segment on the wire, in bits.
  double SegmentBits() const { return options_.mss_bytes * options_.wire_bytes_per_byte * 8.0; }
  // How a flow came to begin: its message written now (so with queue_s it is a burst), or waiting
  // behind its predecessor, whose release covered it.
  enum class Start { kWritten, kBehind };
  // A flow begins to transmit now: its connection's window, restarted after idleness, and the
  // connection's round (the one still open, or a new one).
  void Begin(Flow& f, Start start);
  // A flow's last bit left: the connection is idle from now (its round runs on to its end).
  void End(const Flow& f);
  // A round ends: the window grows by what it sent if the window was used (Linux grows a window in
  // slow start only while half of it is in flight: tcp_is_cwnd_limited), and then the next round
  // begins now (kNextRound) or none is open (kIdle); a window past twice the route's slowest link's
  // bits per round trip can no longer limit or grow, and has no more rounds.
  enum class Then { kNextRound, kIdle };
  void EndRound(Connection& c, const Flow& f, Then then);
  // Rounds that end now and windows spent by now; true if any flow paused or resumed.
  bool StepRounds();
  // The next round's end or window spent among the transmitting flows.
  double NextWindowEvent() const;
  // Whether the connection's round has sent its window, or it has sent all before a loss that
  // is not yet resent (to within slack_bits).
  bool Spent(const Connection& c, double slack_bits = 0.0) const;
  // The bits of f's pair not yet transmitted: f, its pair's transmitting flow, and those queued
  // behind it (one flow per pair transmits at a time, so no scan of the others).
  double Backlog(const Flow& f) const;
  // queue_s: `bits` released at once into the connection's bottleneck queue; what is past the queue's
  // room is lost.
  void Burst(Connection& c, const Flow& f, double bits);
  // queue_s: a loss's recovery once the bits before it are out; its resending when due.
  bool StepRecovery(Connection& c, const Flow& f);
  double LossCap(Links route, double latency_s) const;
  bool lossy_ = false;  // some link has loss: LossCap has a cap to compute
  // The incremental core (sim/analytic_flows.cc). A flow's share changes only when a flow that
  // shares a link with it, directly or through others, starts or ends, or when one of those links
  // changes: such links are marked dirty, and Reshare recomputes the max-min shares of the flows
  // connected to them alone (as htsim and SimAI's analytical model do), each flow's progress
  // applied up to then (Sync). Completions come from a heap of due times.
  void Sync(Flow& f);
  void Insert(Flow f);  // begins transmitting (a new seq), its links dirty
  void Remove(int64_t seq);  // its links dirty
  void MarkDirty(const Flow& f);
  void MarkDirty(int link);
  void MarkAllDirty();
  void Reshare();
  void Fill(const std::vector<Flow*>& flows, const std::vector<int>& links);
  // The flows whose last bit has left by now, in the order they began.
  std::vector<int64_t> Completed();
  double NextCompletion() const;
  // The next bandwidth change, and with `with_loss_switches` the next loss switch too.
  double NextScheduleChange(bool with_loss_switches = true) const;

  Topology topology_;
  AnalyticOptions options_;
  std::vector<double> bandwidth_;       // current bandwidth per link
  std::vector<size_t> next_change_;     // index into each link's schedule
  std::vector<LossStates> loss_;        // each link's loss now (bursts switch it)
  std::map<int64_t, Flow> flows_;       // transmitting, by the order they began (seq)
  int64_t next_seq_ = 0;
  std::unordered_map<int, std::deque<Flow>> queued_;  // per pair, waiting for the pair's current flow
  std::unordered_set<int> transmitting_;  // the pairs with a flow in flows_
  std::vector<std::vector<int64_t>> on_link_;  // per link: the transmitting flows (seqs) it carries or their ACKs
  // A flow's due time at its rate of `version`, earliest first.
  struct Due {
    double time;
    int64_t seq, version;
    bool operator>(const Due& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  mutable std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;
  std::vector<int> dirty_links_;
  std::vector<char> dirty_;       // per link: in dirty_links_
  std::vector<int> dynamic_links_;  // the links with a bandwidth schedule or loss bursts
  // Reshare's scratch, per link: visited (the generation), free capacity, unfrozen flows' load.
  std::vector<int64_t> seen_;
  int64_t generation_ = 0;
  std::vector<double> capacity_, unfrozen_on_;
  // Kept between calls so that each event allocates nothing (Reshare, Fill, Completed).
  std::vector<int> scratch_links_, scratch_frontier_;
  std::vector<int64_t> scratch_seqs_;
  std::vector<Flow*> scratch_flows_;
  std::vector<char> scratch_frozen_;
  std::vector<Due> scratch_due_;
  std::multimap<double, int64_t> in_flight_;  // transmitted, delivered at key
  std::map<int, Connection> connections_;     // slow_start: by pair
  std::vector<double> queue_bits_;            // queue_s: each link's drop-tail depth
  std::vector<double> burst_queued_;          // the bursts' bits waiting in each link's queue
  double now_ = 0.0;
  int64_t next_id_ = 0;
  LinkCounters counters_;
};

}  // namespace narrows::sim
