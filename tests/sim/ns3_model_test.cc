// The packet-level model: agreement with the analytic model where both should agree (bulk
// transfers, ring all-reduce on an uncongested star) and the TCP behaviour the formula cannot show
// (slow start, incast losses, loss recovery, outages), with the analytic figure beside each; its
// counters, queues and fast-forward. Its window rules are in ns3_window_test.cc.
#include "sim/ns3_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/collectives.h"
#include "core/scenario.h"
#include "emu/engine.h"
#include "emu/network_from_scenario.h"
#include "sim/analytic_model.h"

namespace narrows::sim {
namespace {

struct Both {
  std::vector<double> ns3, analytic;
  uint64_t events = 0;
};

Both Simulate(const Topology& topology, const std::vector<Message>& messages, Ns3Options options = {}) {
  Both out;
  {
    Ns3Model model(topology, options);
    out.ns3 = SimulateMessages(model, messages);
    out.events = model.events();
  }
  AnalyticModel analytic(topology, AnalyticOptions::ForMtu(options.mtu));
  out.analytic = SimulateMessages(analytic, messages);
  return out;
}

double Max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

TEST(Ns3ModelTest, BulkTransferAgreesWithTheAnalyticModel) {
  // 100 MB over 100 Mbit/s with 10 ms one way: slow start and headers are a few percent of 8.3 s.
  const Both t = Simulate(Topology::Star(UniformLinks(2, 100e6, 0.010)), {{0, 1, 100'000'000, 0.0}});
  EXPECT_NEAR(t.ns3[0] / t.analytic[0], 1.0, 0.05) << "ns3 " << t.ns3[0] << " analytic " << t.analytic[0];
  EXPECT_GT(t.ns3[0], t.analytic[0]);  // slow start costs something
}

double RingAllReduceTime(std::unique_ptr<NetworkModel> network, int n, size_t floats) {
  emu::Engine engine(n, std::move(network));
  std::vector<double> done(static_cast<size_t>(n));
  engine.Run([&](int r) {
    std::vector<float> v(floats, static_cast<float>(r + 1));
    core::CollectiveOptions options;
    options.group.resize(static_cast<size_t>(n));
    std::iota(options.group.begin(), options.group.end(), 0);
    ASSERT_TRUE(core::AllReduceSum(engine.endpoint(r), v.data(), static_cast<int64_t>(v.size()), options).ok());
    EXPECT_EQ(v[floats / 2], n * (n + 1) / 2.0f);
    done[static_cast<size_t>(r)] = engine.endpoint(r).clock().Now();
  });
  return Max(done);
}

TEST(Ns3ModelTest, RingAllReduceAgreesWithTheAnalyticModel) {
  const int n = 4;
  const size_t floats = 8'000'000;  // 32 MB: 48 MB sent per worker
  const Topology topology = Topology::Star(UniformLinks(n, 100e6, 0.010));
  const double ns3 = RingAllReduceTime(std::make_unique<Ns3Model>(topology, Ns3Options{}), n, floats);
  const double analytic =
      RingAllReduceTime(std::make_unique<AnalyticModel>(topology, AnalyticOptions::ForMtu(1500)), n, floats);
  EXPECT_NEAR(ns3 / analytic, 1.0, 0.05) << "ns3 " << ns3 << " analytic " << analytic;
}

TEST(Ns3ModelTest, SameSeedSameTimesAndLossUsesTheSeed) {
  const Topology topology = Topology::Star(UniformLinks(3, 100e6, 0.010, 0.01));
  const std::vector<Message> messages = {{0, 1, 2'000'000, 0.0}, {2, 1, 2'000'000, 0.0}, {1, 0, 100'000, 0.1}};
  Ns3Options a, b;
  b.seed = 7;
  const Both first = Simulate(topology, messages, a), again = Simulate(topology, messages, a);
  const Both other = Simulate(topology, messages, b);
  EXPECT_EQ(first.ns3, again.ns3);
  EXPECT_EQ(first.events, again.events);
  EXPECT_NE(first.ns3, other.ns3);
}

TEST(Ns3ModelTest, ShortMessageIsDominatedBySlowStart) {
  // 1 MB on a fresh 1 Gbit/s path with 50 ms one way: the formula says latency + 8 ms; TCP starts
  // at 10 segments and needs several round trips to open its window.
  const Both t = Simulate(Topology::Star(UniformLinks(2, 1e9, 0.050)), {{0, 1, 1'000'000, 0.0}});
  EXPECT_GT(t.ns3[0], 2.5 * t.analytic[0]) << "ns3 " << t.ns3[0] << " analytic " << t.analytic[0];
}

TEST(Ns3ModelTest, IncastOverflowsTheReceiversQueue) {
  // 8 senders into one receiver behind a 100-packet queue: drops, retransmission timeouts, and a
  // finish well after the fair-share figure; with a bandwidth-delay-product queue they finish close to it.
  const int n = 8;
  std::vector<Message> messages;
  for (int i = 1; i <= n; ++i) messages.push_back({i, 0, 10'000'000, 0.0});
  const Topology topology = Topology::Star(UniformLinks(n + 1, 1e9, 0.010));
  Ns3Options shallow;
  shallow.queue_packets = 100;
  const Both small = Simulate(topology, messages, shallow), deep = Simulate(topology, messages);
  EXPECT_GT(Max(small.ns3), 1.5 * Max(small.analytic)) << Max(small.ns3) << " vs " << Max(small.analytic);
  EXPECT_LT(Max(deep.ns3), Max(small.ns3));
}

TEST(Ns3ModelTest, LossSlowsTcpDown) {
  const std::vector<Message> messages = {{0, 1, 20'000'000, 0.0}};
  const Both clean = Simulate(Topology::Star(UniformLinks(2, 100e6, 0.025)), messages);
  const Both lossy = Simulate(Topology::Star(UniformLinks(2, 100e6, 0.025, 0.005)), messages);
  EXPECT_GT(lossy.ns3[0], 1.5 * clean.ns3[0]) << lossy.ns3[0] << " vs " << clean.ns3[0];
}

// BBR paces by its bandwidth and RTT estimates, not by loss: random loss that halves CUBIC's
// throughput barely touches it (this machine's kernel defaults to BBR: docs/results/fidelity.md).
TEST(Ns3ModelTest, BbrShrugsOffRandomLossThatSlowsCubic) {
  const std::vector<Message> messages = {{0, 1, 20'000'000, 0.0}};
  const Topology lossy = Topology::Star(UniformLinks(2, 100e6, 0.025, 0.005));
  Ns3Options bbr;
  bbr.tcp = "bbr";
  const Both cubic = Simulate(lossy, messages), paced = Simulate(lossy, messages, bbr);
  EXPECT_LT(paced.ns3[0], 0.5 * cubic.ns3[0]) << "bbr " << paced.ns3[0] << " s, cubic " << cubic.ns3[0] << " s";
  EXPECT_LT(paced.ns3[0], 2.0 * 20e6 * 8 / 100e6) << "bbr should keep most of the 100 Mbit/s";
}

// Bursty loss (the same switches as the analytic model's): a transfer completes, slower than
// without loss and faster than with the bad state's loss throughout; afterwards the model drains
// (the switches go on for ever but are no events while nothing is outstanding).
TEST(Ns3ModelTest, BurstyLossCompletesBetweenNoLossAndAlwaysBad) {
  const std::vector<Message> messages = {{0, 1, 20'000'000, 0.0}, {1, 0, 1000, 30.0}};
  std::vector<Link> bursty = UniformLinks(2, 100e6, 0.025);
  bursty[0].burst = {1.0, 1.0, 0.01, 3};
  const Both clean = Simulate(Topology::Star(UniformLinks(2, 100e6, 0.025)), messages);
  const Both always = Simulate(Topology::Star(UniformLinks(2, 100e6, 0.025, 0.01)), messages);
  Ns3Model model(Topology::Star(bursty), {});
  const auto t = SimulateMessages(model, messages);
  EXPECT_GT(t[0], 1.1 * clean.ns3[0]) << t[0] << " vs " << clean.ns3[0];
  EXPECT_LT(t[0], always.ns3[0]) << t[0] << " vs " << always.ns3[0];
  EXPECT_LT(t[1], 31.0);
  EXPECT_EQ(model.NextEventTime(), kNever);
}

// ns-3's counters: the sender's uplink carries the payload and its headers, its error model drops
// about the loss rate of what arrives, and the unused links carry next to nothing (ARP's few
// frames).
TEST(Ns3ModelTest, CountsEachLinksBytesAndDrops) {
  Ns3Model model(Topology::Star(UniformLinks(3, 100e6, 0.010, 0.01)), {});
  SimulateMessages(model, {{0, 1, 5'000'000, 0.0}});
  const auto& topology = model.topology().links();
  const auto& links = model.counters()->links();
  for (size_t l = 0; l < links.size(); ++l) {
    const std::string& name = topology[l].name;
    if (name == "up:0") {
      EXPECT_GT(links[l].bits, 8 * 5e6);
      EXPECT_LT(links[l].bits, 8 * 5e6 * 1.2);
      EXPECT_NEAR(static_cast<double>(links[l].dropped_loss) / static_cast<double>(links[l].packets), 0.01, 0.005);
    }
    if (name == "up:2" || name == "down:2") {
      EXPECT_LT(links[l].bits, 8 * 200) << name;
    }
  }
}

// Drops of a full queue are counted on the link whose queue overflowed: a switch port's (two
// senders into one receiver), a drop-tail host's (one sender's own egress) — both dropped by ns-3's
// traffic-control layer while the device's queue is stopped, which no ns-3 trace reports — and a
// host's fq_codel. Every message is still delivered (TCP retransmits what was dropped).
TEST(Ns3ModelTest, CountsTheDropsOfAFullQueueWhereItOverflowed) {
  auto drops = [](const Ns3Model& model, const std::string& link) {
    const auto& topology = model.topology().links();
    for (size_t l = 0; l < topology.size(); ++l) {
      if (topology[l].name == link) return model.counters()->links()[l].dropped_queue;
    }
    ADD_FAILURE() << "no link " << link;
    return int64_t{-1};
  };
  {
    Ns3Options o;
    o.queue_packets = 30;
    Ns3Model model(Topology::Star(UniformLinks(3, 100e6, 0.010)), o);
    const auto t = SimulateMessages(model, {{0, 2, 3'000'000, 0.0}, {1, 2, 3'000'000, 0.0}});
    EXPECT_GT(drops(model, "down:2"), 0);  // where the two flows meet
    EXPECT_EQ(drops(model, "up:0"), 0);    // fq_codel at the senders: their own link is not the bottleneck
    EXPECT_GT(std::min(t[0], t[1]), 0.24);  // both delivered: each 3 MB at 100 Mbit/s at best
    EXPECT_GT(std::max(t[0], t[1]), 0.48);  // and 6 MB through one 100 Mbit/s port
  }
  {
    Ns3Options o;
    o.queue_packets = 30;
    o.host_qdisc = "drop_tail";
    Ns3Model model(Topology::Star(UniformLinks(2, 100e6, 0.010)), o);
    const auto t = SimulateMessages(model, {{0, 1, 3'000'000, 0.0}});
    EXPECT_GT(drops(model, "up:0"), 0);  // the sender's own egress, the first bottleneck on its path
    EXPECT_GT(t[0], 0.24);
  }
}

// A switch port's queue given in time (network.queue_ms) is that many bytes at the link's rate, as
// the link emulator's: 6 ms at 100 Mbit/s is 75 kB, 50 packets of 1500 bytes, which two senders
// into one receiver overflow about as a queue of 50 packets does; a packet count, where set, wins;
// a queue of 1 s drops nothing.
TEST(Ns3ModelTest, AQueueInSecondsIsThatManyBytesAtTheLinksRate) {
  auto run = [](int64_t packets, double seconds) {
    Ns3Options o;
    o.queue_packets = packets;
    o.queue_s = seconds;
    Ns3Model model(Topology::Star(UniformLinks(3, 100e6, 0.010)), o);
    const auto t = SimulateMessages(model, {{0, 2, 3'000'000, 0.0}, {1, 2, 3'000'000, 0.0}});
    int64_t dropped = 0;
    for (const auto& c : model.counters()->links()) dropped += c.dropped_queue;
    return std::make_pair(dropped, std::max(t[0], t[1]));
  };
  const auto counted = run(50, 0.0), timed = run(0, 0.006), both = run(50, 1.0), deep = run(0, 1.0);
  EXPECT_GT(counted.first, 0);
  EXPECT_NEAR(static_cast<double>(timed.first) / static_cast<double>(counted.first), 1.0, 0.25);
  EXPECT_NEAR(timed.second / counted.second, 1.0, 0.02);
  EXPECT_EQ(both.first, counted.first);
  EXPECT_EQ(both.second, counted.second);
  EXPECT_EQ(deep.first, 0);
}

// A worker's interface rate (nic_bps) paces its packets into its access link's queue. Without it
// a window leaves the host at once: over 1 Gbit/s, 30 ms and a 5 ms queue (625 kB), a 4 MB
// transfer's slow start overflows the queue. An interface at the link's own rate keeps the queue
// empty (the burst waits in the host's transmit queue) and the transfer loses nothing; the
// interface adds no latency a small message would see beyond its own serialisation.
TEST(Ns3ModelTest, AnInterfaceRatePacesAWindowIntoTheAccessLinksQueue) {
  auto run = [](double nic_bps, int64_t bytes) {
    Ns3Options o;
    o.tcp = "newreno";
    o.host_qdisc = "drop_tail";
    o.queue_s = 0.005;
    o.nic_bps = nic_bps;
    Ns3Model model(Topology::Star(UniformLinks(2, 1e9, 0.030)), o);
    const auto t = SimulateMessages(model, {{0, 1, bytes, 0.0}});
    int64_t dropped = 0;
    for (const auto& c : model.counters()->links()) dropped += c.dropped_queue;
    return std::make_pair(dropped, t[0]);
  };
  const auto at_once = run(0.0, 4'000'000), paced = run(1e9, 4'000'000);
  EXPECT_GT(at_once.first, 0);
  EXPECT_EQ(paced.first, 0);
  EXPECT_LT(paced.second, at_once.second);
  const auto small = run(0.0, 1000), small_paced = run(1e9, 1000);
  EXPECT_NEAR(small_paced.second, small.second, 1e-4);
  // The scenario's network.nic_bps is the rate the model is given (the link emulator reads the
  // same key), and a negative rate is an error naming it.
  auto dropped = [](const std::string& nic) {
    auto sc = core::ParseScenario("workers: {count: 2}\nnetwork: {model: ns3, bandwidth_bps: 1e9, latency_ms: 30, "
                                  "queue_ms: 5" + nic + ", ns3: {tcp: newreno, host_qdisc: drop_tail}}\n", "n.yaml");
    EXPECT_TRUE(sc.ok()) << sc.status().ToString();
    auto model = emu::NetworkFromScenario(*sc);
    SimulateMessages(*model, {{0, 1, 4'000'000, 0.0}});
    int64_t n = 0;
    for (const auto& c : model->counters()->links()) n += c.dropped_queue;
    return n;
  };
  EXPECT_GT(dropped(""), 0);
  EXPECT_EQ(dropped(", nic_bps: 1e9"), 0);
  EXPECT_NE(core::ParseScenario("network: {nic_bps: -1}\n", "c.yaml").status().message().find("network.nic_bps"),
            std::string::npos);
}

// ... and an ACK takes its bytes of such a queue, not a packet's place. In a ring all-reduce every
// worker's uplink carries its data to the next worker and its ACKs to the one before. Rounds of a
// 3.4 MB ring among 4 workers over 100 Mbit/s, 1 ms and 100 ms queues, each after a barrier (as
// tools/bench/allreduce times them): 0.84 MB a step never fills a queue of 1.25 MB, and through the
// link emulator Linux dropped nothing in 60 rounds, 0.45 s each. Counted in packets, the uplinks
// were full at about two thirds of their bytes: drops, and rounds of 1.08, 0.92, then 0.61-0.63 s.
TEST(Ns3ModelTest, AQueueInSecondsHoldsAcksByTheirBytes) {
  Ns3Options o;
  o.tcp = "newreno";
  o.host_qdisc = "drop_tail";
  o.queue_s = 0.1;
  const Topology topology = Topology::Star(UniformLinks(4, 100e6, 0.001));
  auto model = std::make_unique<Ns3Model>(topology, o);
  const Ns3Model* ns3 = model.get();
  emu::Engine engine(4, std::move(model));
  std::vector<double> rounds(4);
  engine.Run([&](int r) {
    std::vector<float> v(842'500, 1.0f);
    core::CollectiveOptions c;
    c.group = {0, 1, 2, 3};
    for (int round = 0; round < 3; ++round) {
      float token = 1.0f;
      c.tag = 100 + 2 * round;
      ASSERT_TRUE(core::AllReduceSum(engine.endpoint(r), &token, 1, c).ok());  // the barrier
      c.tag = 101 + 2 * round;
      const double start = engine.endpoint(r).clock().Now();
      ASSERT_TRUE(core::AllReduceSum(engine.endpoint(r), v.data(), static_cast<int64_t>(v.size()), c).ok());
      rounds[static_cast<size_t>(r)] = engine.endpoint(r).clock().Now() - start;
    }
  });
  for (const auto& c : ns3->counters()->links()) EXPECT_EQ(c.dropped_queue, 0);
  const double analytic = RingAllReduceTime(std::make_unique<AnalyticModel>(topology, AnalyticOptions::ForMtu(1500)), 4, 842'500);
  EXPECT_NEAR(Max(rounds) / analytic, 1.0, 0.05) << "ns-3 " << Max(rounds) << " s a round, analytic " << analytic;
}

// A link's queue delay: two senders into one receiver at twice its downlink's rate queue there
// (at most the queue's length over the link's rate), not on their own uplinks' first hop alone.
TEST(Ns3ModelTest, CountsTheQueueDelayWhereFlowsMeet) {
  Ns3Model model(Topology::Star(UniformLinks(3, 100e6, 0.010)), {});
  SimulateMessages(model, {{0, 2, 5'000'000, 0.0}, {1, 2, 5'000'000, 0.0}});
  const auto& topology = model.topology().links();
  for (size_t l = 0; l < topology.size(); ++l) {
    const auto& c = model.counters()->links()[l];
    if (topology[l].name != "down:2") continue;
    ASSERT_GT(c.queued, 0);
    EXPECT_GT(c.queue_delay_max_s, 1e-3);  // packets waited behind the other sender's
    EXPECT_LE(c.queue_delay_sum_s / static_cast<double>(c.queued), c.queue_delay_max_s);
  }
}

TEST(Ns3ModelTest, OutageDelaysDeliveryPastTheRestore) {
  std::vector<Link> links = UniformLinks(2, 100e6, 0.010);
  links[0].schedule = {{1.0, 0.0}, {3.0, 100e6}};
  const Both t = Simulate(Topology::Star(links), {{0, 1, 20'000'000, 0.5}});
  EXPECT_GT(t.ns3[0], 3.0);
  EXPECT_GE(t.ns3[0], t.analytic[0]);  // TCP resumes at its next retransmission timeout, not at once
}

// A lost segment with nothing after it to raise duplicate ACKs waits for the retransmission
// timeout: Linux's is the smoothed RTT plus at least 200 ms (here about 0.24 s on a 40 ms round
// trip), RFC 6298's at least 1 s. A brief outage eats the second message's only segment.
TEST(Ns3ModelTest, ATailLossWaitsLinuxsRetransmissionTimeoutOrRfc6298s) {
  std::vector<Link> links = UniformLinks(2, 100e6, 0.010);
  links[0].schedule = {{1.0, 0.0}, {1.01, 100e6}};
  const std::vector<Message> messages = {{0, 1, 100'000, 0.0}, {0, 1, 1000, 1.0}};
  Ns3Options rfc;
  rfc.linux_rto = false;
  const Both linux_rto = Simulate(Topology::Star(links), messages), rfc_rto = Simulate(Topology::Star(links), messages, rfc);
  EXPECT_GT(linux_rto.ns3[1], 1.0 + 0.2);
  EXPECT_LT(linux_rto.ns3[1], 1.0 + 0.35) << "Linux: srtt + 200 ms, then 20 ms one way";
  EXPECT_GT(rfc_rto.ns3[1], 1.0 + 1.0) << "RFC 6298: 1 s at least";
}

// The stall watchdog's reading: a connection whose link went down keeps retransmitting, but its
// receiver got nothing since the outage began.
TEST(Ns3ModelTest, StalestFlowIsTheOneWhoseReceiverGotNothing) {
  std::vector<Link> links = UniformLinks(3, 100e6, 0.010);
  links[2].schedule = {{0.3, 0.0}};  // worker 2's access link, down for good
  Ns3Model model(Topology::Star(links), {});
  const int64_t moving = model.StartFlow(1, 0, 2'000'000, 0.0);
  const int64_t stuck = model.StartFlow(2, 0, 20'000'000, 0.0);
  std::vector<Delivery> delivered;
  model.AdvanceTo(0.1, &delivered);
  EXPECT_GT(model.StalestFlow().since, 0.05);  // both moving
  model.AdvanceTo(30.0, &delivered);
  ASSERT_EQ(delivered.size(), 1u);
  EXPECT_EQ(delivered[0].flow, moving);
  const NetworkModel::Stalest s = model.StalestFlow();
  EXPECT_EQ(s.flow, stuck);
  EXPECT_GT(s.since, 0.25);
  EXPECT_LT(s.since, 0.35);  // the last bytes in flight when the link went down
}

TEST(Ns3ModelTest, JumboFramesNeedFewerEventsForTheSameTransfer) {
  const Topology topology = Topology::Star(UniformLinks(2, 100e6, 0.010));
  Ns3Options jumbo;
  jumbo.mtu = 9000;
  const Both standard = Simulate(topology, {{0, 1, 20'000'000, 0.0}});
  const Both large = Simulate(topology, {{0, 1, 20'000'000, 0.0}}, jumbo);
  EXPECT_LT(large.events * 4, standard.events);
  EXPECT_NEAR(large.ns3[0] / large.analytic[0], 1.0, 0.05);  // each near the formula for its MTU
  EXPECT_NEAR(standard.ns3[0] / standard.analytic[0], 1.0, 0.05);
}

TEST(Ns3ModelTest, IslandsShareTheirWanLink) {
  // Two islands of two; both cross-island flows share island 0's WAN uplink.
  const Topology topology = Topology::Islands(UniformLinks(4, 10e9, 0.0002), {{0, 1}, {2, 3}}, UniformLinks(2, 100e6, 0.010));
  const Both one = Simulate(topology, {{0, 2, 10'000'000, 0.0}});
  const Both two = Simulate(topology, {{0, 2, 10'000'000, 0.0}, {1, 3, 10'000'000, 0.0}});
  EXPECT_NEAR(Max(two.ns3) / one.ns3[0], 2.0, 0.3) << Max(two.ns3) << " vs " << one.ns3[0];
  EXPECT_NEAR(Max(two.analytic) / one.analytic[0], 2.0, 0.03);
  EXPECT_GE(Max(two.ns3), Max(two.analytic));  // two TCP flows on one queue fill it less evenly than fair sharing
}

TEST(Ns3ModelTest, DeliversMessagesOfOnePairInOrderAndEmptyOnes) {
  const Both t = Simulate(Topology::Star(UniformLinks(2, 1e9, 0.001)),
                          {{0, 1, 1'000'000, 0.0}, {0, 1, 0, 0.0}, {0, 1, 10, 0.0}});
  EXPECT_LE(t.ns3[0], t.ns3[1]);
  EXPECT_LE(t.ns3[1], t.ns3[2]);
  EXPECT_LT(t.ns3[2], 1.0);
}

// Fast-forward (on by default; every other test here runs with it) against full packet level: a
// 1 GB transfer at 100 Mbit/s cycles through loss episodes in a steady pattern (pairs of them,
// 17 s a pair); whole cycles are skipped, with the same delivery times and link counters to a
// hundredth of a percent. The jump ends before a message sent later (at 70 s, within the next
// cycle after the first chance to jump): that message starts at its time, and its delivery
// agrees too.
TEST(Ns3ModelTest, FastForwardSkipsWholeLossCycles) {
  const Topology topology = Topology::Star(UniformLinks(2, 100e6, 0.030));
  const std::vector<Message> messages = {{0, 1, 1'000'000'000, 0.0}, {1, 0, 1000, 70.0}};
  struct Outcome {
    std::vector<double> times;
    double bits, skipped_s;
    int64_t packets, jumps;
    uint64_t events;
  };
  auto simulate = [&](bool fast_forward) {
    Ns3Options o;
    o.fast_forward = fast_forward;
    Ns3Model model(topology, o);
    std::vector<double> t = SimulateMessages(model, messages);
    const auto& up = model.counters()->links()[0];
    return Outcome{t, up.bits, model.skipped_s(), up.packets, model.jumps(), model.events()};
  };
  const Outcome full = simulate(false), ff = simulate(true);
  EXPECT_EQ(full.jumps, 0);
  EXPECT_GE(ff.jumps, 1);
  EXPECT_GT(ff.skipped_s, 10.0);
  for (size_t i = 0; i < messages.size(); ++i) {
    EXPECT_NEAR(ff.times[i] / full.times[i], 1.0, 1e-4) << i << ": " << ff.times[i] << " vs " << full.times[i];
  }
  EXPECT_LT(ff.events, 0.8 * static_cast<double>(full.events));
  EXPECT_NEAR(ff.bits / full.bits, 1.0, 1e-3);
  EXPECT_NEAR(static_cast<double>(ff.packets) / static_cast<double>(full.packets), 1.0, 1e-3);
}

// The ns-3 model reads its own block of the scenario (network.ns3), registered from its own file.
TEST(Ns3ModelTest, ReadsItsOwnScenarioBlock) {
  auto sc = core::ParseScenario("network: {model: ns3, mtu: 9000, ns3: {tcp: newreno, queue_packets: 50, fast_forward: false, window: ns3, rto: rfc6298}}\n", "n.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->network.model, "ns3");
  EXPECT_EQ(sc->network.mtu, 9000);
  const auto& own = sc->network.ModelOptions<Ns3ScenarioOptions>();
  EXPECT_EQ(own.tcp, "newreno");
  EXPECT_EQ(own.queue_packets, 50);
  EXPECT_FALSE(own.fast_forward);
  EXPECT_FALSE(own.linux_window);
  EXPECT_FALSE(own.linux_rto);
  auto changed = core::ParseScenario(sc->resolved_yaml, "n.yaml", {{"network.model", "analytic", "network.model=analytic"}});
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_EQ(changed->network.model, "analytic");
}

}  // namespace
}  // namespace narrows::sim
