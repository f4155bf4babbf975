// The packet-level model's window: Linux's rules around NewReno and CUBIC (sim/ns3/linux_window.cc)
// against ns-3 3.37's own, each on the traffic that showed the difference: a restart after idle,
// growth only while the window is used, the threshold a timeout keeps during fast recovery, and the
// growth under random loss.
#include "sim/ns3_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace narrows::sim {
namespace {

// Durations (delivery - send) of messages on one connection under ns-3's window and Linux's.
struct Windows {
  std::vector<double> linux_window, ns3_window;
};
Windows Durations(const Topology& topology, const std::vector<Message>& messages, const std::string& tcp) {
  Windows out;
  for (bool linux_window : {true, false}) {
    Ns3Options o;
    o.tcp = tcp;
    o.linux_window = linux_window;
    Ns3Model model(topology, o);
    std::vector<double> done = SimulateMessages(model, messages);
    for (size_t i = 0; i < done.size(); ++i) done[i] -= messages[i].send_time;
    (linux_window ? out.linux_window : out.ns3_window) = std::move(done);
  }
  return out;
}

TEST(Ns3ModelTest, AWindowRestartsAfterIdleAsLinuxDoes) {
  // 4 MB, 3 s of silence, 4 MB again, 1 Gbit/s with 25 ms one way: ns-3 keeps the first
  // transfer's window, Linux starts the second from its initial window again.
  const std::vector<Message> messages = {{0, 1, 4'000'000, 0.0}, {0, 1, 4'000'000, 3.0}};
  for (const std::string tcp : {"newreno", "cubic"}) {
    const Windows d = Durations(Topology::Star(UniformLinks(2, 1e9, 0.025)), messages, tcp);
    EXPECT_LT(d.ns3_window[1], 0.7 * d.ns3_window[0]) << tcp;
    EXPECT_GT(d.linux_window[1], 1.3 * d.ns3_window[1]) << tcp;
  }
}

TEST(Ns3ModelTest, AWindowGrowsOnlyWhileUsedAndALossHalvesTheWindow) {
  // A ring all-reduce's hop as the fidelity runs saw it: 1.26 MB messages on a 100 Mbit/s path with
  // 30 ms one way (750 kB in flight fill it), 0.3 s apart, then two at once, then single ones again.
  // ns-3's NewReno grew its window on every ACK to megabytes the messages never used; the two left
  // at once into the switch's queue, overflowed it, and the window was cut to half the bytes in
  // flight and regrew by a segment a round trip. Linux's window stays near twice what it used,
  // and a loss halves the window.
  std::vector<Message> messages;
  double t = 0;
  for (int i = 0; i < 8; ++i, t += 0.3) messages.push_back({0, 1, 1'260'000, t});
  messages.push_back({0, 1, 1'260'000, t});
  for (int i = 0; i < 8; ++i, t += 0.3) messages.push_back({0, 1, 1'260'000, t});
  const Windows d = Durations(Topology::Star(UniformLinks(2, 100e6, 0.030)), messages, "newreno");
  const auto after = [](const std::vector<double>& v) { return std::accumulate(v.end() - 6, v.end(), 0.0) / 6; };
  EXPECT_LT(after(d.linux_window), 0.25) << "Linux's window: each message about 0.1 s on the wire + 30 ms";
  EXPECT_GT(after(d.ns3_window), 1.3 * after(d.linux_window));
}

TEST(Ns3ModelTest, ATimeoutDuringFastRecoveryKeepsTheRecoverysThreshold) {
  // 1.26 MB every 0.4 s on a 100 Mbit/s path with 30 ms one way, into a 50 ms drop-tail queue: the
  // third message overflows it, and a retransmission lost in the fast recovery that follows times
  // out. Linux (tcp_enter_loss) keeps the threshold the recovery set, half the window, and slow
  // start climbs back to it; ns-3 recomputed it from the window that recovery had shrunk, and the
  // window regrew by a segment a round trip: each message took longer than the 0.4 s between them,
  // and the backlog grew with every message (the fidelity runs' home-100m DDP: a step of 5.8 s,
  // then fifteen steps to come back, where the real run had none).
  std::vector<Message> messages;
  for (int i = 0; i < 16; ++i) messages.push_back({0, 1, 1'260'000, 0.4 * i});
  Ns3Options o;
  o.tcp = "newreno";
  o.host_qdisc = "drop_tail";
  o.queue_s = 0.05;
  Ns3Model model(Topology::Star(UniformLinks(2, 100e6, 0.030)), o);
  const std::vector<double> done = SimulateMessages(model, messages);
  for (size_t i = 6; i < done.size(); ++i) {
    EXPECT_LT(done[i] - messages[i].send_time, 0.3) << "message " << i << ": 0.1 s on the wire + 30 ms + the queue";
  }
}

TEST(Ns3ModelTest, UnderRandomLossRenosWindowGrowsASegmentARoundTripAsLinuxs) {
  // 40 MB at 100 Mbit/s, 30 ms one way, 0.5% loss on each of the path's two links (p = 1%): the
  // window lives in congestion avoidance between losses, and the throughput is the Mathis et al.
  // formula's, MSS / RTT * sqrt(3 / 2p), for a window that grows a segment a round trip (Linux's,
  // which counts the segments each ACK acknowledges). ns-3's NewReno grew by a segment's share per
  // ACK, half a segment a round trip with delayed ACKs: 209 s here, 1.55x the formula.
  const std::vector<Message> messages = {{0, 1, 40'000'000, 0.0}};
  const Windows d = Durations(Topology::Star(UniformLinks(2, 100e6, 0.030, 0.005)), messages, "newreno");
  const double rtt = 0.060, mss = 1448, p = 1 - 0.995 * 0.995;
  const double mathis_s = 40e6 / (mss / rtt * std::sqrt(1.5 / p));  // 135 s
  EXPECT_NEAR(d.linux_window[0] / mathis_s, 1.0, 0.2) << d.linux_window[0] << " s against the formula's " << mathis_s;
}

TEST(Ns3ModelTest, UnderRandomLossAWindowGrowsByWhatEachAckDelivered) {
  // 20 MB at 100 Mbit/s, 30 ms one way, 0.5% loss on each of the path's two links: Linux's Reno
  // through the link emulator took 66.9-71.5 s, 69.2 s on average (six transfers between two
  // namespaces: `narrows linkemu --tcp reno` on this network, a Python socket pair). ns-3 passed every
  // segment selectively acknowledged during a fast recovery to the window again when the recovery
  // ended, two segments of growth a loss episode more than Linux's, and took 60.5 s.
  const double real_s = 69.2;
  const Windows d = Durations(Topology::Star(UniformLinks(2, 100e6, 0.030, 0.005)), {{0, 1, 20'000'000, 0.0}}, "newreno");
  EXPECT_NEAR(d.linux_window[0] / real_s, 1.0, 0.06) << d.linux_window[0] << " s against the link emulator's " << real_s;
}

}  // namespace
}  // namespace narrows::sim
