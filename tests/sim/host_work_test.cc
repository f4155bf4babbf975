#include "sim/host_work.h"

#include <gtest/gtest.h>

#include "core/scenario.h"
#include "emu/network_from_scenario.h"
#include "sim/analytic_model.h"

namespace narrows::sim {
namespace {

// A message costs its sender's host S/R before it leaves and its receiver's host S/R after it
// arrives; each host handles one message at a time, so a host's second message waits for its first.
TEST(HostWorkTest, EachHostHandlesItsMessagesOneAfterAnother) {
  const double bandwidth = 100e6, rate = 50e6, latency = Topology::Star(UniformLinks(3, bandwidth, 0.010)).PathLatency(0, 1);
  const double s = 1e6, host = s / rate, wire = s * 8 / bandwidth;
  HostWork lone(std::make_unique<AnalyticModel>(Topology::Star(UniformLinks(3, bandwidth, 0.010))), rate);
  EXPECT_NEAR(SimulateMessages(lone, {{0, 1, 1'000'000, 1.0}})[0], 1.0 + host + wire + latency + host, 1e-9);
  // Worker 0 sends to 1 and to 2 at once: the second leaves one host time later, on a link of its
  // own once the first has gone; worker 2 receives from 0 and from 1: the later one waits.
  HostWork two(std::make_unique<AnalyticModel>(Topology::Star(UniformLinks(3, bandwidth, 0.010))), rate);
  const auto t = SimulateMessages(two, {{0, 1, 1'000'000, 0.0}, {0, 2, 1'000'000, 0.0}});
  // The first sends alone for one host time, then both share worker 0's uplink at B/2: 16 Mbit
  // leave from `host` on at B, the first's last bit at 0.16 s, the second's at 0.18 s.
  ASSERT_NEAR(host, 0.02, 1e-12);
  ASSERT_NEAR(wire, 0.08, 1e-12);
  EXPECT_NEAR(t[0], 0.16 + latency + host, 1e-9);
  EXPECT_NEAR(t[1], 0.18 + latency + host, 1e-9);
  HostWork in(std::make_unique<AnalyticModel>(Topology::Star(UniformLinks(3, bandwidth, 0.0))), 1e6);
  const auto u = SimulateMessages(in, {{0, 2, 1'000, 0.0}, {1, 2, 1'000, 0.0}});
  const double h = 1e3 / 1e6, w = 1e3 * 8 / bandwidth;
  EXPECT_NEAR(std::min(u[0], u[1]), h + 2 * w + h, 1e-9);  // both share worker 2's downlink
  EXPECT_NEAR(std::max(u[0], u[1]), h + 2 * w + 2 * h, 1e-9);
}

// A network with an event every millisecond while anything is in flight (as a packet-level model
// has one per packet), which runs to its next delivery in one call: the host work lets it, instead
// of stepping it event by event (with ns-3 that made a run of seconds take many minutes).
class TickingNetwork : public NetworkModel {
 public:
  explicit TickingNetwork(Topology topology) : inner_(std::move(topology)) {}
  int64_t StartFlow(int src, int dst, int64_t bytes, double now) override { return inner_.StartFlow(src, dst, bytes, now); }
  double NextEventTime() const override {
    return inner_.NextEventTime() < kNever ? std::min(inner_.NextEventTime(), now_ + 1e-3) : kNever;
  }
  void AdvanceTo(double t, std::vector<Delivery>* delivered) override {
    ++calls;
    inner_.AdvanceTo(t, delivered);
    now_ = t;
  }
  void AdvanceUntilDelivery(double limit, std::vector<Delivery>* delivered) override {
    ++calls;
    const size_t before = delivered->size();
    inner_.AdvanceUntilDelivery(limit, delivered);
    now_ = delivered->size() > before ? delivered->back().time : limit;
  }
  const Topology& topology() const override { return inner_.topology(); }
  int calls = 0;

 private:
  AnalyticModel inner_;
  double now_ = 0.0;
};

TEST(HostWorkTest, LetsTheNetworkRunToItsNextDeliveryInOneGo) {
  const Topology star = Topology::Star(UniformLinks(3, 100e6, 0.010));
  auto ticking = std::make_unique<TickingNetwork>(star);
  const TickingNetwork* network = ticking.get();
  HostWork host(std::move(ticking), 50e6);
  HostWork reference(std::make_unique<AnalyticModel>(star), 50e6);
  // 10 MB each way: 0.8 s on the wire, 800 of the network's ticks.
  const std::vector<Message> messages = {{0, 1, 10'000'000, 0.0}, {1, 0, 10'000'000, 0.5}, {2, 0, 1000, 0.6}};
  const auto t = SimulateMessages(host, messages), want = SimulateMessages(reference, messages);
  for (size_t i = 0; i < messages.size(); ++i) EXPECT_NEAR(t[i], want[i], 1e-9) << "message " << i;
  EXPECT_LT(network->calls, 40) << "the network was stepped tick by tick";
}

// compute.host_bytes_per_s wraps the scenario's network in it; 0 leaves the network alone; a
// negative rate is refused with the key's name.
TEST(HostWorkTest, TheScenarioKeyWrapsTheNetwork) {
  const std::string base = "workers: {count: 2}\nnetwork: {profile: custom, bandwidth_bps: 1e9, latency_ms: 0}\n";
  auto with = core::ParseScenario(base + "compute: {host_bytes_per_s: 1e6}\n", "host.yaml");
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  auto without = core::ParseScenario(base, "host.yaml");
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  auto a = emu::NetworkFromScenario(*with), b = emu::NetworkFromScenario(*without);
  const double t_with = SimulateMessages(*a, {{0, 1, 10'000, 0.0}})[0];
  const double t_without = SimulateMessages(*b, {{0, 1, 10'000, 0.0}})[0];
  EXPECT_NEAR(t_with - t_without, 2 * 10'000 / 1e6, 1e-9);
  auto bad = core::ParseScenario(base + "compute: {host_bytes_per_s: -1}\n", "host.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("host_bytes_per_s"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace narrows::sim
