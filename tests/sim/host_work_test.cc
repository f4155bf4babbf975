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
