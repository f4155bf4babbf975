#include "sim/analytic_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>
#include <utility>

namespace narrows::sim {
namespace {

// Padhye et al.'s TCP throughput in bits per second (1460-byte segments, T0 = max(1 s, 4 RTT)).
double Padhye(double p, double rtt) {
  const double t0 = std::max(1.0, 4 * rtt);
  return 1460 * 8 / (rtt * std::sqrt(2 * p / 3) + t0 * std::min(1.0, 3 * std::sqrt(3 * p / 8)) * p * (1 + 32 * p * p));
}

TEST(AnalyticModelTest, LoneMessageCostsAlphaPlusSizeOverBandwidth) {
  AnalyticModel model(Topology::Star(UniformLinks(2, 100e6, 0.030)));
  const auto t = SimulateMessages(model, {{0, 1, 10'000'000, 1.0}});
  EXPECT_NEAR(t[0], 1.0 + 0.030 + 10e6 * 8 / 100e6, 1e-9);
}

TEST(AnalyticModelTest, IncastOfNFlowsTakesNTimesSOverB) {
  const int n = 8;
  AnalyticModel model(Topology::Star(UniformLinks(n + 1, 1e9, 0.0)));
  std::vector<Message> msgs;
  for (int i = 1; i <= n; ++i) msgs.push_back({i, 0, 1'000'000, 0.0});
  for (double t : SimulateMessages(model, msgs)) EXPECT_NEAR(t, n * 8e6 / 1e9, 1e-9);
}

TEST(AnalyticModelTest, SharingChangesWhenAFlowEnds) {
  // Two flows into worker 0: a 1 MB and a 3 MB one. Both get B/2 until the small one ends at
  // 2 * 8e6 / B; the large one then has 2 MB left at full rate.
  AnalyticModel model(Topology::Star(UniformLinks(3, 1e9, 0.0)));
  const auto t = SimulateMessages(model, {{1, 0, 1'000'000, 0.0}, {2, 0, 3'000'000, 0.0}});
  EXPECT_NEAR(t[0], 2 * 8e6 / 1e9, 1e-9);
  EXPECT_NEAR(t[1], 2 * 8e6 / 1e9 + 2 * 8e6 / 1e9, 1e-9);
}

TEST(AnalyticModelTest, LaterFlowSlowsAnEarlierOne) {
  AnalyticModel model(Topology::Star(UniformLinks(3, 1e9, 0.0)));
  // Flow A alone for 4 ms (half its 1 MB), then B joins: A's second half goes at B/2.
  const auto t = SimulateMessages(model, {{1, 0, 1'000'000, 0.0}, {2, 0, 1'000'000, 0.004}});
  EXPECT_NEAR(t[0], 0.004 + 0.008, 1e-9);
  EXPECT_NEAR(t[1], 0.012 + 0.004, 1e-9);
}

TEST(AnalyticModelTest, MaxMinFairnessGivesUnusedShareToOthers) {
  // Worker 1 sends to 0 and 2; worker 3 sends to 0. Link down:0 is shared by two flows, up:1 too.
  // Every flow gets B/2 (max-min), total into 0 is B.
  AnalyticModel model(Topology::Star(UniformLinks(4, 1e9, 0.0)));
  const auto t = SimulateMessages(model, {{1, 0, 1'000'000, 0}, {1, 2, 1'000'000, 0}, {3, 0, 1'000'000, 0}});
  for (double x : t) EXPECT_NEAR(x, 0.016, 1e-9);
}

TEST(AnalyticModelTest, BandwidthScheduleAndLinkDown) {
  auto links = UniformLinks(2, 1e9, 0.0);
  links[0].schedule = {{0.004, 0.0}, {0.010, 1e9}};  // up:0 down from 4 ms to 10 ms
  AnalyticModel model(Topology::Star(links));
  const auto t = SimulateMessages(model, {{0, 1, 1'000'000, 0.0}});
  EXPECT_NEAR(t[0], 0.008 + 0.006, 1e-9);
}

TEST(AnalyticModelTest, IslandsShareTheWanLink) {
  // Two islands of two; two flows cross the WAN from island 0 to island 1 and share wan-up:0.
  auto access = UniformLinks(4, 100e9, 0.0001);
  AnalyticModel model(Topology::Islands(access, {{0, 1}, {2, 3}}, UniformLinks(2, 1e9, 0.020)));
  const auto t = SimulateMessages(model, {{0, 2, 1'000'000, 0}, {1, 3, 1'000'000, 0}, {0, 1, 1'000'000, 0}});
  const double wan_latency = 0.0001 + 0.020;
  EXPECT_NEAR(t[0], 2 * 8e6 / 1e9 + wan_latency, 1e-6);
  EXPECT_NEAR(t[1], 2 * 8e6 / 1e9 + wan_latency, 1e-6);
  EXPECT_LT(t[2], 0.001);  // inside the island: fast link (shares up:0 only briefly)
}

TEST(AnalyticModelTest, MessagesOfOnePairArriveInOrder) {
  // A large message then a slightly smaller one, sent at the same instant from 0 to 1: one
  // connection transmits them one after the other, so the first arrives first.
  AnalyticModel model(Topology::Star(UniformLinks(2, 1e9, 0.001)));
  const auto t = SimulateMessages(model, {{0, 1, 1'000'004, 0.0}, {0, 1, 1'000'000, 0.0}});
  EXPECT_NEAR(t[0], 0.001 + 8'000'032 / 1e9, 1e-9);
  EXPECT_NEAR(t[1], 0.001 + (8'000'032 + 8'000'000) / 1e9, 1e-9);
}

// Slow start by round trips: a window of w bits sends w at the link's rate, waits for the round
// trip's end and doubles; a flow of `bits` from window `w` ends when the last of them leaves (its
// delivery one latency later), which in its last round is at the link's rate, not spread over the
// round trip; once the window holds a round trip at the link's rate it no longer limits the flow.
double SlowStartSeconds(double bits, double w, double rtt, double bandwidth) {
  double t = 0.0;
  while (w < bandwidth * rtt && bits > w) {
    bits -= w;
    t += rtt;
    w *= 2.0;
  }
  return t + bits / bandwidth;
}

// With slow start a fresh connection opens from 10 segments and doubles its window each round trip;
// a message one round trip later keeps the window grown; after a long idle period the window
// restarts, as Linux's does; without it the same message costs alpha + S/B.
TEST(AnalyticModelTest, SlowStartOpensTheWindowAndRestartsItAfterIdle) {
  AnalyticOptions o;
  o.slow_start = true;
  o.min_rto_s = 0.2;
  const double latency = 0.050, bandwidth = 1e9, bits = 8e6;
  const double path = Topology::Star(UniformLinks(2, bandwidth, latency)).PathLatency(0, 1), rtt = 2 * path;
  const double initial = 10 * 1460 * 8.0;
  const double fresh = SlowStartSeconds(bits, initial, rtt, bandwidth);
  EXPECT_GT(fresh, 6 * rtt);  // 63 windows of 10 segments are 7.4 Mbit: a seventh round trip
  const double window = 64 * initial + (bits - 63 * initial);  // what the first flow's ACKs opened
  const double rto = rtt + o.min_rto_s;
  // Then the same message again: sent a round trip after the first's last bit left (under an RTO)
  // it keeps the open window; after 1.5 RTOs of idleness the window is halved once; after ten
  // seconds (33 RTOs) it is back to 10 segments, a fresh connection's time.
  for (const auto& [idle, w] : std::vector<std::pair<double, double>>{{rtt, window}, {1.5 * rto, window / 2}, {10.0, initial}}) {
    AnalyticModel model(Topology::Star(UniformLinks(2, bandwidth, latency)), o);
    const double first = SimulateMessages(model, {{0, 1, 1'000'000, 0.0}})[0];
    EXPECT_NEAR(first, fresh + path, 1e-9);
    const double at = first - path + idle;  // idle since its last bit left
    const double second = SimulateMessages(model, {{0, 1, 1'000'000, at}})[0];
    EXPECT_NEAR(second - at, SlowStartSeconds(bits, w, rtt, bandwidth) + path, 1e-9) << "idle " << idle;
  }
  // Off: alpha + S/B.
  AnalyticModel plain(Topology::Star(UniformLinks(2, bandwidth, latency)));
  EXPECT_NEAR(SimulateMessages(plain, {{0, 1, 1'000'000, 0.0}})[0], path + bits / bandwidth, 1e-9);
}

// A window spent in round trips, as TCP's is: a message that fits in the window leaves at the
// link's rate (alpha + S/B, where a window spread over the round trip would take S / W round trips);
// one sent while its predecessor's round is still open shares that round's window with the bits
// still in flight, sends what is left of it, and waits for the round's end for the rest.
TEST(AnalyticModelTest, AWindowIsSpentAtTheLinksRateAndSharedWithinItsRound) {
  AnalyticOptions o;
  o.slow_start = true;
  o.min_rto_s = 0.2;
  const double latency = 0.050, bandwidth = 1e9;  // a 200 ms round trip: 200 Mbit in flight at 1 Gbit/s
  const Topology star = Topology::Star(UniformLinks(2, bandwidth, latency));
  const double path = star.PathLatency(0, 1), rtt = 2 * path;
  const double initial = 10 * 1460 * 8.0;
  // A 2 MB message opens the window from 10 segments: 127 windows of 10 segments (14.8 Mbit) in
  // seven round trips, the last 1.2 Mbit at the start of the eighth, at the link's rate.
  AnalyticModel model(star, o);
  const double big = 2e6 * 8;
  const double first = SimulateMessages(model, {{0, 1, 2'000'000, 0.0}})[0];
  EXPECT_NEAR(first, 7 * rtt + (big - 127 * initial) / bandwidth + path, 1e-9);
  // A round trip after that last round began, a 1 MB message finds the window grown to 16.1 Mbit
  // and leaves at the link's rate: 8 ms where a window spread over the round trip takes 99 ms.
  const double at = 7 * rtt + rtt;
  EXPECT_NEAR(SimulateMessages(model, {{0, 1, 1'000'000, at}})[0] - at, path + 8e6 / bandwidth, 1e-9);
  // In a fresh connection's first round (10 segments, 116.8 kbit) two messages one after another:
  // the first (80 kbit) leaves at once; the second (160 kbit), 1 ms later, sends the 36.8 kbit left
  // of the round's window, and the rest when the round ends, a round trip after the first began.
  AnalyticModel fresh(star, o);
  const auto t = SimulateMessages(fresh, {{0, 1, 10'000, 0.0}, {0, 1, 20'000, 0.001}});
  EXPECT_NEAR(t[0], path + 80e3 / bandwidth, 1e-9);
  EXPECT_NEAR(t[1], rtt + (160e3 - (initial - 80e3)) / bandwidth + path, 1e-9);
}

// A drop-tail queue that a burst overflows: two 0.5 MB messages written at once on a connection whose
// window no longer limits it (grown by a 10 MB message just before) leave as one 8 Mbit burst into a
// 5 Mbit queue (50 ms at 100 Mbit/s). The first arrives as without a limit; the second's last 3 Mbit
// are lost and resent a round trip after the queued bits are out (50 ms), when the SACKs of what got
// in show the loss, then at the link's rate. The drops are counted on the uplink; with a 100 ms queue
// the burst fits and nothing is lost. After the loss the window is half what it was: a 2 MB message
// a round trip later needs more rounds than on a connection that lost nothing.
TEST(AnalyticModelTest, ABurstPastTheQueueLosesWhatDoesNotFitAndResendsItAfterARoundTrip) {
  AnalyticOptions o;
  o.slow_start = true;
  o.min_rto_s = 0.2;
  const double bandwidth = 100e6;
  const Topology star = Topology::Star(UniformLinks(2, bandwidth, 0.030));
  const double path = star.PathLatency(0, 1), rtt = 2 * path;
  auto second = [&](double queue_s) {
    o.queue_s = queue_s;
    auto model = std::make_unique<AnalyticModel>(star, o);
    const double first = SimulateMessages(*model, {{0, 1, 10'000'000, 0.0}})[0];
    const double at = first + 0.01;  // idle for a latency and 10 ms: no restart
    const auto t = SimulateMessages(*model, {{0, 1, 500'000, at}, {0, 1, 500'000, at}});
    EXPECT_NEAR(t[0] - at, 4e6 / bandwidth + path, 1e-9) << "queue " << queue_s;
    const int up0 = star.FindLink("up:0");
    EXPECT_GE(up0, 0);
    const int64_t dropped = model->counters()->links()[static_cast<size_t>(up0)].dropped_queue;
    const double later = t[1] + rtt;
    const double big = SimulateMessages(*model, {{0, 1, 2'000'000, later}})[0] - later;
    return std::make_tuple(t[1] - at, dropped, big);
  };
  const auto [shallow, lost, after_loss] = second(0.05);
  EXPECT_NEAR(shallow, 5e6 / bandwidth + rtt + 3e6 / bandwidth + path, 1e-9);
  EXPECT_EQ(lost, static_cast<int64_t>(std::ceil(3e6 / (1460 * 8.0))));
  const auto [deep, none, no_loss] = second(0.1);
  EXPECT_NEAR(deep, 8e6 / bandwidth + path, 1e-9);
  EXPECT_EQ(none, 0);
  EXPECT_GT(after_loss, no_loss + rtt / 2) << after_loss << " s against " << no_loss << " s";
}

// A round trip lasts as long as its ACKs wait: a connection's ACKs cross the reverse route's queues,
// so behind a burst that fills its receiver's uplink (as in a ring, where each uplink carries its
// own phase ahead of the ACKs for the phase it receives) each round of its slow start lasts a
// queue's length longer. Here worker 1's 4 MB burst holds up:1 for 320 ms while a fresh 1 MB
// message from worker 0 to worker 1 slow-starts: it takes over 250 ms longer than without it.
TEST(AnalyticModelTest, ARoundTripWaitsBehindTheReverseRoutesQueue) {
  AnalyticOptions o;
  o.slow_start = true;
  o.min_rto_s = 0.2;
  o.queue_s = 0.5;
  const Topology star = Topology::Star(UniformLinks(2, 100e6, 0.015));
  auto fresh = [&](bool behind_a_burst) {
    AnalyticModel model(star, o);
    const double first = SimulateMessages(model, {{1, 0, 10'000'000, 0.0}})[0];
    const double at = first + 0.01;  // 1 -> 0 is warm: its next message is one burst
    std::vector<Message> msgs = {{0, 1, 1'000'000, at}};
    if (behind_a_burst) msgs.push_back({1, 0, 4'000'000, at});
    return SimulateMessages(model, msgs)[0] - at;
  };
  const double alone = fresh(false), behind = fresh(true);
  EXPECT_GT(behind, alone + 0.25) << behind << " s behind the burst, " << alone << " s alone";
}

// Idleness counts from the host's last send, as Linux's restart does (lsndtime): a 6 MB message that
// leaves as one burst into a deep queue was sent at once and took the link 480 ms, so 50 ms after its
// last bit left the link the connection has been idle 530 ms, over two RTOs (260 ms each): the
// window restarts, halved twice, and a 4 MB message then takes longer than the 320 ms (and the
// latency) it takes at the link's rate, as it would if idleness counted from the link's last bit.
TEST(AnalyticModelTest, IdlenessCountsFromTheHostsLastSendNotTheLinks) {
  AnalyticOptions o;
  o.slow_start = true;
  o.min_rto_s = 0.2;
  const Topology star = Topology::Star(UniformLinks(2, 100e6, 0.030));
  const double path = star.PathLatency(0, 1);
  AnalyticModel model(star, o);
  const double first = SimulateMessages(model, {{0, 1, 10'000'000, 0.0}})[0];
  const double at = first + 0.01;  // the window no longer limits: the next message is one burst
  const double burst = SimulateMessages(model, {{0, 1, 6'000'000, at}})[0];
  EXPECT_NEAR(burst - at, 48e6 / 100e6 + path, 1e-9);
  const double next = burst - path + 0.05;
  const double took = SimulateMessages(model, {{0, 1, 4'000'000, next}})[0] - next;
  EXPECT_GT(took, 32e6 / 100e6 + path + 0.02);
}

// A window that stopped growing while a shared link held its flow below it grows again once the
// link frees up: a 200 MB flow sharing worker 0's downlink with a 20 MB one then finishes within
// slow start's few round trips of the flow model's time, not at the shared rate.
TEST(AnalyticModelTest, AWindowGrowsAgainWhenItsFlowsShareRises) {
  AnalyticOptions o;
  o.slow_start = true;
  o.min_rto_s = 0.2;
  const auto links = UniformLinks(3, 1e9, 0.025);
  AnalyticModel with(Topology::Star(links), o), without(Topology::Star(links));
  const std::vector<Message> msgs = {{1, 0, 200'000'000, 0.0}, {2, 0, 20'000'000, 0.0}};
  const auto t = SimulateMessages(with, msgs), flow = SimulateMessages(without, msgs);
  const double rtt = 2 * Topology::Star(links).PathLatency(1, 0);
  EXPECT_GT(t[0], flow[0]);
  EXPECT_LT(t[0] - flow[0], 8 * rtt) << "with the window " << t[0] << " s, without " << flow[0] << " s";
}

// Past the bandwidth-delay product a window goes on growing while its flow keeps half of it in
// flight, as Linux's does in slow start, into the bottleneck's queue: the flow's rate is the link's
// either way, but what a restart after idleness halves is that larger window. Here a 10 MB message
// at 100 Mbit/s and a 100 ms round trip (a BDP of 10 Mbit) leaves a window of over 20 Mbit, so
// after 1.5 RTOs of idleness (halved once) the next message goes at the link's rate from its first
// bit; a window kept at the BDP would be halved below it and pay a round trip more.
TEST(AnalyticModelTest, AWindowGrowsPastTheBandwidthDelayProductWhileHalfOfItIsInFlight) {
  AnalyticOptions o;
  o.slow_start = true;
  o.min_rto_s = 0.2;
  const double latency = 0.025, bandwidth = 100e6, bits = 80e6;
  const Topology star = Topology::Star(UniformLinks(2, bandwidth, latency));
  const double path = star.PathLatency(0, 1), rtt = 2 * path, rto = rtt + o.min_rto_s;
  AnalyticModel model(star, o);
  const double first = SimulateMessages(model, {{0, 1, 10'000'000, 0.0}})[0];
  EXPECT_GT(first, path + bits / bandwidth + 3 * rtt);  // slow start from 10 segments
  const double at = first - path + 1.5 * rto;
  const double second = SimulateMessages(model, {{0, 1, 10'000'000, at}})[0];
  EXPECT_NEAR(second - at, path + bits / bandwidth, 1e-9);
}

// ACKs on the reverse path: a lone flow keeps the whole link (its ACKs fit beside it), while in a
// ring every uplink also carries the ACKs of the flow its worker receives, so each flow gets
// B / (1 + share); the link counters hold the ACK bits too.
TEST(AnalyticModelTest, AcksLoadTheReversePath) {
  AnalyticOptions o;
  o.ack_share = AnalyticOptions::DelayedAckShare(1500);
  EXPECT_NEAR(o.ack_share, 52.0 / 3000.0, 1e-12);
  const double bandwidth = 100e6, bits = 10e6 * 8;
  const Topology star = Topology::Star(UniformLinks(3, bandwidth, 0.0));
  AnalyticModel lone(star, o);
  EXPECT_NEAR(SimulateMessages(lone, {{0, 1, 10'000'000, 0.0}})[0], bits / bandwidth, 1e-9);
  AnalyticModel ring(star, o), plain(star);
  const std::vector<Message> msgs = {{0, 1, 10'000'000, 0.0}, {1, 2, 10'000'000, 0.0}, {2, 0, 10'000'000, 0.0}};
  for (double t : SimulateMessages(ring, msgs)) EXPECT_NEAR(t, bits * (1 + o.ack_share) / bandwidth, 1e-9);
  for (double t : SimulateMessages(plain, msgs)) EXPECT_NEAR(t, bits / bandwidth, 1e-9);
  const int up1 = star.FindLink("up:1");
  ASSERT_GE(up1, 0);
  EXPECT_NEAR(ring.counters()->links()[static_cast<size_t>(up1)].bits, bits * (1 + o.ack_share), 1.0);
  EXPECT_NEAR(plain.counters()->links()[static_cast<size_t>(up1)].bits, bits, 1.0);
}

TEST(AnalyticModelTest, LossCapsGoodputLikeTcp) {
  AnalyticModel model(Topology::Star(UniformLinks(2, 1e9, 0.050, 0.01)));
  const auto t = SimulateMessages(model, {{0, 1, 10'000'000, 0.0}});
  // Padhye: MSS / (RTT sqrt(2p/3) + T0 min(1, 3 sqrt(3p/8)) p (1 + 32 p^2)); path loss 1-(0.99)^2,
  // RTT 0.1 s, T0 the 1 s minimum.
  const double p = 1 - 0.99 * 0.99;
  const double mathis = 0.1 * std::sqrt(2 * p / 3), timeouts = 1.0 * 3 * std::sqrt(3 * p / 8) * p * (1 + 32 * p * p);
  const double rate = 1460 * 8 / (mathis + timeouts);
  EXPECT_NEAR(t[0], 0.050 + 80e6 / rate, 1e-6);
  EXPECT_DOUBLE_EQ(rate, Padhye(p, 0.1));
  EXPECT_GT(timeouts, 0.4 * mathis);  // at 2% the timeouts already cost 45% on top of Mathis

  // At 5% per link the timeouts dominate: 3.9x slower than Mathis's formula alone.
  AnalyticModel lossy(Topology::Star(UniformLinks(2, 1e9, 0.050, 0.05)));
  const double q = 1 - 0.95 * 0.95;
  const double mathis_s = 80e6 / (1460 * 8 / 0.1 * 1.22 / std::sqrt(q));
  const double slow = SimulateMessages(lossy, {{0, 1, 10'000'000, 0.0}})[0] - 0.050;
  EXPECT_GT(slow, 3.5 * mathis_s);
  EXPECT_LT(slow, 4.5 * mathis_s);
}

// Late in a long run the clock's resolution is coarser than a nanosecond of transmission: a
// transfer interrupted by a long outage still completes when the link returns (it used to spin on
// a remainder that now + remaining / rate rounded away).
TEST(AnalyticModelTest, CompletesATransferResumedLateInVirtualTime) {
  for (double back : {1e6, 1e9, 1e11}) {
    std::vector<Link> links = UniformLinks(2, 100e6, 0.010);
    links[0].schedule = {{0.05, 0.0}, {back, 100e6}};
    AnalyticModel model(Topology::Star(links));
    model.StartFlow(0, 1, 1'000'000, 0.0);
    std::vector<Delivery> delivered;
    for (int steps = 0; delivered.empty() && steps < 100; ++steps) model.AdvanceUntilDelivery(kNever, &delivered);
    ASSERT_EQ(delivered.size(), 1u) << "returns at " << back;
    EXPECT_NEAR(delivered[0].time, back + 0.08 - 0.05 + 0.010, 1e-6 * back);
  }
}

// What a stall watchdog reads: the message in transit that moved least recently. A flow queued
// behind its pair's earlier message is not in transit; it starts moving when the first one ends.
TEST(AnalyticModelTest, StalestFlowIsTheOneThatMovedLeastRecently) {
  std::vector<Link> links = UniformLinks(3, 100e6, 0.010);
  links[2].schedule = {{0.02, 0.0}};  // worker 2's access link goes down for good at 20 ms
  AnalyticModel model(Topology::Star(links));
  EXPECT_EQ(model.StalestFlow().flow, -1);
  const int64_t moving = model.StartFlow(1, 0, 10'000'000, 0.0);
  const int64_t stuck = model.StartFlow(2, 0, 10'000'000, 0.0);
  model.StartFlow(2, 0, 1'000, 0.0);  // behind `stuck`
  std::vector<Delivery> delivered;
  model.AdvanceTo(0.5, &delivered);
  NetworkModel::Stalest s = model.StalestFlow();
  EXPECT_EQ(s.flow, stuck);
  EXPECT_NEAR(s.since, 0.02, 1e-9);
  model.AdvanceTo(10.0, &delivered);  // `moving` done: only the stuck pair is left
  ASSERT_EQ(delivered.size(), 1u);
  EXPECT_EQ(delivered[0].flow, moving);
  EXPECT_EQ(model.StalestFlow().flow, stuck);
}

// Gilbert-Elliott in time: the same seed walks the same switches; the bad state holds about
// mean_bad / (mean_good + mean_bad) of the time; without bursts nothing ever switches.
TEST(LossStatesTest, BurstsAlternateWithTheirMeanStaysFromTheSeed) {
  Link link;
  link.loss = 0.001;
  link.burst = {2.0, 0.5, 0.2, 42};
  LossStates a(link), b(link);
  double bad_time = 0, last = 0;
  int switches = 0;
  EXPECT_FALSE(a.bad());
  EXPECT_DOUBLE_EQ(a.loss(), 0.001);
  while (a.next_switch() < 10000.0) {
    ASSERT_EQ(a.next_switch(), b.next_switch());
    if (a.bad()) bad_time += a.next_switch() - last;
    last = a.next_switch();
    a.Switch();
    b.Switch();
    ++switches;
    EXPECT_DOUBLE_EQ(a.loss(), a.bad() ? 0.2 : 0.001);
  }
  EXPECT_NEAR(bad_time / last, 0.5 / 2.5, 0.02);
  EXPECT_NEAR(switches / 2.0, 10000.0 / 2.5, 200);  // one good and one bad stay every 2.5 s
  link.burst.seed = 43;
  EXPECT_NE(LossStates(link).next_switch(), LossStates(Link{link.name, 1e9, 0, 0.001, {2.0, 0.5, 0.2, 42}, {}}).next_switch());
  EXPECT_EQ(LossStates(Link{}).next_switch(), kNever);
}

// A transfer over a bursty link runs at the link's bandwidth while good (no loss) and at Padhye's
// cap for the bad state's loss while bad: its time is that of the same piecewise rates walked by
// hand over the link's switches.
TEST(AnalyticModelTest, BurstyLossCapsTheRateOnlyWhileBad) {
  std::vector<Link> links = UniformLinks(2, 100e6, 0.025);
  links[0].burst = {1.0, 0.5, 0.02, 7};
  AnalyticModel model(Topology::Star(links));
  const int64_t bytes = 50'000'000;
  const double t = SimulateMessages(model, {{0, 1, bytes, 0.0}})[0];
  const double wire = 1.0;  // AnalyticOptions' defaults: MSS 1460, no header overhead
  const double bad_rate = Padhye(0.02, 0.05) * wire;
  ASSERT_LT(bad_rate, 100e6);
  LossStates states(links[0]);
  double bits = static_cast<double>(bytes) * 8 * wire, now = 0;
  while (true) {
    const double rate = states.bad() ? bad_rate : 100e6;
    if (now + bits / rate <= states.next_switch()) {
      now += bits / rate;
      break;
    }
    bits -= rate * (states.next_switch() - now);
    now = states.next_switch();
    states.Switch();
  }
  EXPECT_NEAR(t, now + 0.025, 1e-6);
  EXPECT_GT(t, 0.025 + 50e6 * 8 * wire / 100e6 + 0.05);  // some of it was sent in a bad stay
  // Nothing outstanding: the switches are no events, so an idle model has none.
  EXPECT_EQ(model.NextEventTime(), kNever);
}

// The counters keep every bit: spread over the bins a span covers, and merged in pairs when the
// time outgrows them.
TEST(LinkCountersTest, BinsSpreadAndCoarsenWithoutLosingBits) {
  LinkCounters c(2);
  c.AddBits(0, 0.0, 0.02, 200.0);  // 10 ms bins: 100 bits in each of the first two
  ASSERT_GE(c.links()[0].bins.size(), 2u);
  EXPECT_DOUBLE_EQ(c.links()[0].bins[0], 100.0);
  EXPECT_DOUBLE_EQ(c.links()[0].bins[1], 100.0);
  c.AddBits(1, 30.0, 30.0, 5.0);  // far past 512 bins of 10 ms: the resolution halves until it fits
  EXPECT_GE(c.bin_s() * LinkCounters::kMaxBins, 30.0);
  EXPECT_LE(c.links()[1].bins.size(), LinkCounters::kMaxBins);
  double total = 0;
  for (double b : c.links()[0].bins) total += b;
  EXPECT_DOUBLE_EQ(total, 200.0);
  EXPECT_DOUBLE_EQ(c.links()[0].bits, 200.0);
  EXPECT_DOUBLE_EQ(c.links()[1].bins.back(), 5.0);
}

// The analytic model counts a message's wire bits on every link of its route, at the rate it
// was sent: one 10 MB message over an idle 100 Mbit/s path fills each of its two links for 0.8 s.
TEST(AnalyticModelTest, CountsEachLinksBitsOverTime) {
  AnalyticModel model(Topology::Star(UniformLinks(3, 100e6, 0.010)));
  SimulateMessages(model, {{0, 1, 10'000'000, 0.0}});
  const auto& links = model.counters()->links();
  const auto& topology = model.topology().links();
  for (size_t l = 0; l < links.size(); ++l) {
    const bool on_route = topology[l].name == "up:0" || topology[l].name == "down:1";
    EXPECT_DOUBLE_EQ(links[l].bits, on_route ? 80e6 : 0.0) << topology[l].name;
    if (!on_route) continue;
    const double bin = model.counters()->bin_s();
    for (size_t i = 0; i + 1 < links[l].bins.size(); ++i) {
      if (static_cast<double>(i + 1) * bin <= 0.8) {
        EXPECT_NEAR(links[l].bins[i], 100e6 * bin, 1e-3) << i;
      }
    }
  }
}

}  // namespace
}  // namespace narrows::sim

