#include "emu/engine.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/collectives.h"
#include "core/scenario.h"
#include "emu/network_from_scenario.h"
#include "sim/analytic_model.h"

namespace narrows::emu {
namespace {

std::unique_ptr<sim::AnalyticModel> Star(int n, double bps, double one_way_latency_s) {
  return std::make_unique<sim::AnalyticModel>(sim::Topology::Star(sim::UniformLinks(n, bps, one_way_latency_s)));
}

// Ring all-reduce of S bytes over n ranks: 2(n-1) alpha + 2(n-1)/n S/B (within 1%).
TEST(EngineTest, RingAllReduceMatchesClosedForm) {
  for (int n : {2, 4, 8}) {
    const double bps = 100e6, alpha = 0.030;
    const int64_t count = 25'000'000 / 4;  // 25 MB of floats
    Engine engine(n, Star(n, bps, alpha));
    std::vector<double> finish(n);
    engine.Run([&](int r) {
      std::vector<float> data(static_cast<size_t>(count), 1.0f);
      core::CollectiveOptions o;
      o.group.resize(n);
      std::iota(o.group.begin(), o.group.end(), 0);
      ASSERT_TRUE(core::AllReduceSum(engine.endpoint(r), data.data(), count, o).ok());
      EXPECT_EQ(data[count - 1], static_cast<float>(n));
      finish[r] = engine.endpoint(r).clock().Now();
    });
    const double s_bits = count * 4.0 * 8.0;
    const double expected = 2 * (n - 1) * alpha + 2.0 * (n - 1) / n * s_bits / bps;
    for (double f : finish) EXPECT_NEAR(f, expected, 0.01 * expected) << "n=" << n;
  }
}

TEST(EngineTest, ComputeChargesTheVirtualClockOnly) {
  Engine engine(2, Star(2, 1e9, 0.001));
  engine.Run([&](int r) {
    engine.endpoint(r).clock().ChargeCompute(r == 0 ? 2.0 : 5.0);
    int32_t x = 42;
    if (r == 0) {
      ASSERT_TRUE(engine.endpoint(r).Send(1, 0, &x, 4).ok());
    } else {
      ASSERT_TRUE(engine.endpoint(r).Recv(0, 0, &x, 4).ok());
      // Already delivered at 2.001 s; the receiver was busy until 5 s.
      EXPECT_DOUBLE_EQ(engine.endpoint(r).clock().Now(), 5.0);
    }
  });
  EXPECT_DOUBLE_EQ(engine.clock_of(0), 2.0);
}

TEST(EngineTest, WaitingAdvancesToTheDeliveryTime) {
  Engine engine(2, Star(2, 8e6, 0.010));  // 1 MB/s
  engine.Run([&](int r) {
    std::vector<uint8_t> buf(1'000'000);
    if (r == 0) {
      engine.endpoint(r).clock().ChargeCompute(1.0);
      ASSERT_TRUE(engine.endpoint(r).Send(1, 0, buf.data(), buf.size()).ok());
    } else {
      ASSERT_TRUE(engine.endpoint(r).Recv(0, 0, buf.data(), buf.size()).ok());
      EXPECT_NEAR(engine.endpoint(r).clock().Now(), 1.0 + 0.010 + 1.0, 1e-9);
    }
  });
}

TEST(EngineTest, WaitingForAFinishedPeerFailsInsteadOfHanging) {
  Engine engine(3, Star(3, 1e9, 0.001));
  engine.Run([&](int r) {
    if (r == 1) {
      int32_t x;
      const core::Status s = engine.endpoint(r).Recv(0, 0, &x, 4);
      EXPECT_EQ(s.code(), core::StatusCode::kPeerUnavailable) << s.ToString();
    }
  });
}

// A server's receive from any source takes messages in the order they arrive in virtual time (not
// the order the senders ran), and a message from the rank itself arrives at once.
TEST(EngineTest, ReceiveFromAnySourceIsInVirtualArrivalOrder) {
  Engine engine(4, Star(4, 8e6, 0.010));  // 1 MB/s
  engine.Run([&](int r) {
    core::Transport& t = engine.endpoint(r);
    std::vector<uint8_t> buf(100'000, static_cast<uint8_t>(r));
    if (r != 0) {
      t.clock().ChargeCompute(1.0 * (4 - r));  // rank 3 sends first, rank 1 last
      ASSERT_TRUE(t.Send(0, 1, buf.data(), buf.size()).ok());
      return;
    }
    t.clock().ChargeCompute(0.5);
    ASSERT_TRUE(t.Send(0, 1, buf.data(), 10).ok());  // to itself, at 0.5 s
    std::vector<int> order;
    std::vector<double> at;
    for (int i = 0; i < 4; ++i) {
      std::vector<uint8_t> got;
      auto src = t.RecvMessage(core::kAnySource, 1, &got);
      ASSERT_TRUE(src.ok()) << src.status().ToString();
      order.push_back(*src);
      at.push_back(t.clock().Now());
    }
    EXPECT_EQ(order, (std::vector<int>{0, 3, 2, 1}));
    EXPECT_NEAR(at[0], 0.5, 1e-12);
    EXPECT_NEAR(at[1], 1.0 + 0.010 + 0.1, 1e-9);  // sent at 1 s, 0.1 s on the wire
    EXPECT_NEAR(at[3], 3.0 + 0.010 + 0.1, 1e-9);
    std::vector<uint8_t> none;
    EXPECT_EQ(t.RecvMessage(core::kAnySource, 1, &none).status().code(), core::StatusCode::kPeerUnavailable);
  });
}

// Communication started asynchronously overlaps computation: time = max(compute, comm), not the sum.
TEST(EngineTest, AsyncCollectiveOverlapsCompute) {
  const int n = 4;
  const int64_t count = 2'500'000;  // 10 MB
  const double comm = 2 * 3 * 0.010 + 2.0 * 3 / 4 * count * 32.0 / 100e6;
  for (double compute : {0.5, 2.0}) {
    Engine engine(n, Star(n, 100e6, 0.010));
    engine.Run([&](int r) {
      std::vector<float> data(static_cast<size_t>(count), 1.0f);
      core::CollectiveOptions o;
      o.group = {0, 1, 2, 3};
      auto work = core::AllReduceSumAsync(engine.endpoint(r), data.data(), count, o);
      engine.endpoint(r).clock().ChargeCompute(compute);
      EXPECT_EQ(work->Done(), compute > comm);
      ASSERT_TRUE(work->Wait().ok());
      EXPECT_NEAR(engine.endpoint(r).clock().Now(), std::max(compute, comm), 0.01 * comm) << compute;
      EXPECT_EQ(data[0], 4.0f);
    });
  }
}

TEST(EngineTest, WaitTimesOutInVirtualTime) {
  Engine engine(2, Star(2, 1e6, 0.010));
  engine.Run([&](int r) {
    std::vector<float> data(250'000, 1.0f);  // 1 MB at 1 Mbit/s: ~16 s
    core::CollectiveOptions o;
    o.group = {0, 1};
    auto work = core::AllReduceSumAsync(engine.endpoint(r), data.data(), 250'000, o);
    EXPECT_EQ(work->Wait(1.0).code(), core::StatusCode::kTimeout);
    EXPECT_NEAR(engine.endpoint(r).clock().Now(), 1.0, 1e-9);
    EXPECT_TRUE(work->Wait().ok());
    EXPECT_GT(engine.endpoint(r).clock().Now(), 8.0);
  });
}

TEST(EngineTest, SameInputsSameTimeline) {
  auto run = [] {
    Engine engine(4, Star(4, 50e6, 0.005));
    std::vector<double> out(4);
    engine.Run([&](int r) {
      engine.endpoint(r).clock().ChargeCompute(0.1 * (r + 1));
      std::vector<float> data(100000, 1.0f);
      core::CollectiveOptions o;
      o.group = {0, 1, 2, 3};
      ASSERT_TRUE(core::AllReduceSum(engine.endpoint(r), data.data(), 100000, o).ok());
      out[r] = engine.endpoint(r).clock().Now();
    });
    return out;
  };
  EXPECT_EQ(run(), run());
}

// A link the schedule takes down for good: the run ends (nothing hangs) with an error that names
// the link and when it went down.
TEST(EngineTest, ALinkDownForGoodEndsTheWaitNamingTheLink) {
  std::vector<sim::Link> links = sim::UniformLinks(2, 100e6, 0.010);
  links[0].schedule = {{0.5, 0.0}};  // worker 0's access link: up:0 and down:0
  Engine engine(2, std::make_unique<sim::AnalyticModel>(sim::Topology::Star(links)));
  core::Status got;
  engine.Run([&](int r) {
    std::vector<uint8_t> bytes(1 << 20);
    if (r == 0) {
      engine.endpoint(0).clock().ChargeCompute(1.0);  // after the outage began
      ASSERT_TRUE(engine.endpoint(0).Send(1, 7, bytes.data(), bytes.size()).ok());
    } else {
      got = engine.endpoint(1).Recv(0, 7, bytes.data(), bytes.size());
    }
  });
  EXPECT_EQ(got.code(), core::StatusCode::kPeerUnavailable);
  EXPECT_NE(got.message().find("links up:0 (down from 0.5 s), down:0 (down from 0.5 s), and the schedule never "
                               "brings them back"),
            std::string::npos)
      << got.message();
}

// A link down for a long while (not for good): with a stall timeout the run fails once the message
// caught on it has moved no byte for that long, naming the message, its route and the link's state,
// and every later transport call fails the same way. A slow transfer that keeps moving, longer
// than the timeout, is not a stall.
TEST(EngineTest, AStalledTransferFailsTheRunNamingItsRoute) {
  std::vector<sim::Link> links = sim::UniformLinks(2, 100e6, 0.010);
  links[0].schedule = {{0.5, 0.0}, {1e9, 100e6}};
  Engine engine(2, std::make_unique<sim::AnalyticModel>(sim::Topology::Star(links)));
  engine.SetStallTimeout(100.0);
  core::Status got, later;
  double failed_at = 0;
  engine.Run([&](int r) {
    std::vector<uint8_t> bytes(1 << 20);
    if (r == 0) {
      engine.endpoint(0).clock().ChargeCompute(1.0);
      ASSERT_TRUE(engine.endpoint(0).Send(1, 7, bytes.data(), bytes.size()).ok());
    } else {
      got = engine.endpoint(1).Recv(0, 7, bytes.data(), bytes.size());
      failed_at = engine.endpoint(1).clock().Now();
      later = engine.endpoint(1).Send(0, 8, bytes.data(), 8);
    }
  });
  EXPECT_EQ(got.code(), core::StatusCode::kAborted) << got.message();
  EXPECT_NE(got.message().find("a message of 1048576 bytes from worker 0 to worker 1 has moved no byte since 1.000 s"),
            std::string::npos)
      << got.message();
  EXPECT_NE(got.message().find("its route: up:0 (down since 0.5 s), down:1"), std::string::npos) << got.message();
  EXPECT_NEAR(failed_at, 101.0, 1e-6);
  EXPECT_EQ(later.code(), core::StatusCode::kAborted);
  EXPECT_EQ(engine.failure().code(), core::StatusCode::kAborted);

  Engine slow(2, Star(2, 1e3, 0.010));  // 1 MB at 1 kbit/s: 8,389 s, always moving
  slow.SetStallTimeout(100.0);
  core::Status received;
  slow.Run([&](int r) {
    std::vector<uint8_t> bytes(1 << 20);
    if (r == 0) {
      ASSERT_TRUE(slow.endpoint(0).Send(1, 7, bytes.data(), bytes.size()).ok());
    } else {
      received = slow.endpoint(1).Recv(0, 7, bytes.data(), bytes.size());
    }
  });
  EXPECT_TRUE(received.ok()) << received.message();
  EXPECT_GT(slow.clock_of(1), 8000.0);
}

}  // namespace
}  // namespace narrows::emu

namespace narrows::emu {
namespace {

// The scenario's keys reach the emulator: the analytic loss cap's minimum timeout (Linux's 0.2 s
// makes a lossy transfer faster than ns-3's 1 s) and the stall timeout.
TEST(EngineTest, AnalyticMinRtoAndStallTimeoutComeFromTheScenario) {
  auto linux_like = core::ParseScenario(
      "workers: {count: 2}\nnetwork: {loss: 0.05, stall_timeout_s: 30, analytic: {min_rto_s: 0.2}}\n", "a.yaml");
  auto default_rto = core::ParseScenario("workers: {count: 2}\nnetwork: {loss: 0.05}\n", "b.yaml");
  ASSERT_TRUE(linux_like.ok() && default_rto.ok()) << linux_like.status().ToString();
  EXPECT_EQ(linux_like->network.stall_timeout_s, 30.0);
  EXPECT_EQ(default_rto->network.stall_timeout_s, 600.0);
  const auto fast = NetworkFromScenario(*linux_like), slow = NetworkFromScenario(*default_rto);
  const double t_fast = sim::SimulateMessages(*fast, {{0, 1, 1'000'000, 0.0}})[0];
  const double t_slow = sim::SimulateMessages(*slow, {{0, 1, 1'000'000, 0.0}})[0];
  EXPECT_LT(t_fast, 0.6 * t_slow) << t_fast << " s against " << t_slow << " s";
  EXPECT_NE(core::ParseScenario("network: {analytic: {min_rto_s: 0}}\n", "c.yaml").status().message().find(
                "network.analytic.min_rto_s"),
            std::string::npos);
}


// network.queue_ms reaches the analytic model's window: the same burst (two 0.5 MB messages written
// at once on a connection a 10 MB message has opened) loses what does not fit in a 20 ms queue and
// arrives a round trip later than with no queue limit; a negative depth is an error naming the key.
// Through an interface at the link's rate (network.nic_bps) the burst arrives as fast as the link
// drains it and nothing waits; at twice the link's rate half of its 8 Mbit waits at the peak, still
// more than the queue's 2 Mbit.
TEST(EngineTest, TheQueueDepthComesFromTheScenario) {
  auto burst = [](const std::string& queue) {
    auto sc = core::ParseScenario("workers: {count: 2}\nnetwork: {bandwidth_bps: 100e6, latency_ms: 30" + queue +
                                      ", analytic: {slow_start: true, min_rto_s: 0.2}}\n",
                                  "q.yaml");
    EXPECT_TRUE(sc.ok()) << sc.status().ToString();
    const auto net = NetworkFromScenario(*sc);
    const double first = sim::SimulateMessages(*net, {{0, 1, 10'000'000, 0.0}})[0];
    const double at = first + 0.01;
    return sim::SimulateMessages(*net, {{0, 1, 500'000, at}, {0, 1, 500'000, at}})[1] - at;
  };
  const double shallow = burst(", queue_ms: 20"), unlimited = burst("");
  EXPECT_GT(shallow, unlimited + 0.05) << shallow << " s against " << unlimited << " s";  // a 60 ms round trip
  EXPECT_NEAR(burst(", queue_ms: 20, nic_bps: 100e6"), unlimited, 1e-6);
  EXPECT_GT(burst(", queue_ms: 20, nic_bps: 200e6"), unlimited + 0.05);
  EXPECT_NE(core::ParseScenario("network: {queue_ms: -1}\n", "c.yaml").status().message().find("network.queue_ms"),
            std::string::npos);
}

// A scenario predicted on the analytic model (the planner's, whatever model the scenario runs on)
// takes its own network.analytic block and network.nic_bps, not the options of the model it names:
// on ns-3 with an analytic block that turns the window on, the moved scenario times a burst as the
// same scenario on the analytic model does, and slower than the flow model.
TEST(EngineTest, AScenarioMovedToTheAnalyticModelKeepsItsOwnAnalyticBlock) {
  auto scenario = [](const std::string& model) {
    return core::ParseScenario("workers: {count: 2}\nnetwork: {model: " + model +
                                   ", bandwidth_bps: 100e6, latency_ms: 30, queue_ms: 20, nic_bps: 200e6, analytic: "
                                   "{slow_start: true, min_rto_s: 0.2}}\n",
                               "m.yaml");
  };
  auto ns3 = scenario("ns3");
  if (!ns3.ok()) GTEST_SKIP() << "no ns-3 model in this build: " << ns3.status().ToString();
  auto analytic = scenario("analytic");
  ASSERT_TRUE(analytic.ok()) << analytic.status().ToString();
  auto burst = [](const core::Scenario& sc) {
    const auto net = NetworkFromScenario(sc);
    const double first = sim::SimulateMessages(*net, {{0, 1, 10'000'000, 0.0}})[0];
    const double at = first + 0.01;
    return sim::SimulateMessages(*net, {{0, 1, 500'000, at}, {0, 1, 500'000, at}})[1] - at;
  };
  const core::Scenario moved = core::WithNetworkModel(*ns3, "analytic");
  EXPECT_EQ(moved.network.model, "analytic");
  EXPECT_NEAR(burst(moved), burst(*analytic), 1e-9);
  core::Scenario flow = *analytic;
  flow.network.model_options = nullptr;  // the analytic model's defaults: no window
  EXPECT_GT(burst(moved), burst(flow) + 0.05);
}
}  // namespace
}  // namespace narrows::emu

namespace narrows::emu {
namespace {

// A size-only all-reduce sends the messages of the real one, in size and order, without their
// bytes: every rank's clock and bytes sent come out identical, for each collective and for fp32,
// a block-quantised and a sparse format.
TEST(EngineTest, SizeOnlyAllReduceTimesLikeTheRealOne) {
  const int n = 5;
  const int64_t count = 100'003;
  const core::Codec int8(*core::ParseCodec("{format: int8, block: 64}"));
  const core::Codec topk(*core::ParseCodec("{format: topk, topk: 0.05}"));
  for (const core::Codec* codec : {static_cast<const core::Codec*>(nullptr), &int8, &topk}) {
    for (auto algorithm : {core::AllReduceAlgorithm::kRing, core::AllReduceAlgorithm::kStar,
                           core::AllReduceAlgorithm::kTree, core::AllReduceAlgorithm::kTwoPhase}) {
      auto run = [&](bool size_only, std::vector<int64_t>* sent) {
        std::vector<sim::Link> links = sim::UniformLinks(n, 100e6, 0.005);
        links[2].bandwidth_bps = 40e6;  // uneven, so that order matters
        Engine engine(n, std::make_unique<sim::AnalyticModel>(sim::Topology::Star(links)));
        engine.Run([&](int r) {
          core::CollectiveOptions o;
          o.group = {0, 1, 2, 3, 4};
          o.algorithm = algorithm;
          core::Transport& t = engine.endpoint(r);
          std::vector<float> data(static_cast<size_t>(count), 1.0f + static_cast<float>(r));
          core::Status s = size_only ? core::AllReduceSizeOnly(t, count, codec, o)
                           : codec ? core::AllReduceSumEncoded(t, data.data(), count, 0, *codec, o)
                                   : core::AllReduceSum(t, data.data(), count, o);
          EXPECT_TRUE(s.ok()) << s.ToString();
          (*sent)[static_cast<size_t>(r)] = t.stats().bytes_sent;
        });
        std::vector<double> clocks;
        for (int r = 0; r < n; ++r) clocks.push_back(engine.clock_of(r));
        return clocks;
      };
      std::vector<int64_t> sent_real(n), sent_sizes(n);
      const std::vector<double> real = run(false, &sent_real), sizes = run(true, &sent_sizes);
      for (int r = 0; r < n; ++r) {
        EXPECT_NEAR(sizes[static_cast<size_t>(r)], real[static_cast<size_t>(r)], 1e-9)
            << "rank " << r << ", " << core::CollectiveName({{}, 100, core::kForever, -1, algorithm, {}, 0}, codec);
      }
      EXPECT_EQ(sent_sizes, sent_real);
    }
  }
}

// A plan (Transport::RunSizeOnly) run by the scheduler takes the times, bytes and outcomes of the
// same steps taken one call at a time (the base class's RunSizeOnly), with unequal clocks at entry,
// other traffic in the network, a started operation beside it, and a receive that times out.
TEST(EngineTest, APlanTakesTheTimesOfItsStepsOneByOne) {
  const int n = 6;
  struct Outcome {
    std::vector<double> clocks;
    std::vector<int64_t> sent;
    std::vector<std::string> status;
  };
  auto run = [&](bool plan) {
    std::vector<sim::Link> links = sim::UniformLinks(n, 100e6, 0.004);
    links[3].bandwidth_bps = 30e6;
    Engine engine(n, std::make_unique<sim::AnalyticModel>(sim::Topology::Star(links)));
    Outcome out{std::vector<double>(n), std::vector<int64_t>(n), std::vector<std::string>(n)};
    engine.Run([&](int r) {
      core::Transport& t = engine.endpoint(r);
      t.clock().ChargeCompute(0.003 * r);
      // A real message beside the plan, received after it.
      std::vector<uint8_t> payload(40'000, 1), got(40'000);
      ASSERT_TRUE(t.Send((r + 2) % n, 7, payload.data(), payload.size()).ok());
      auto side = t.Start([&](core::Transport& op) { return op.SendSizeOnly((r + 1) % n, 9, 250'000); });
      std::vector<core::SizeOnlyStep> steps;
      for (int k = 1; k <= 3; ++k) steps.push_back({true, (r + k) % n, 100 + k, 30'000 * (r + k)});
      for (int k = 3; k >= 1; --k) steps.push_back({false, (r - k + n) % n, 100 + k, 0});
      steps.push_back({false, (r + n - 1) % n, 9, 0});
      if (r == 4) steps.push_back({false, 0, 55, 0});  // never sent: times out after 0.5 s
      core::Status s = plan ? t.RunSizeOnly(steps, 0.5) : t.core::Transport::RunSizeOnly(steps, 0.5);
      EXPECT_TRUE(side->Wait(core::kForever).ok());
      EXPECT_TRUE(t.Recv((r + n - 2) % n, 7, got.data(), got.size()).ok());
      out.status[static_cast<size_t>(r)] = s.ToString();
      out.sent[static_cast<size_t>(r)] = t.stats().bytes_sent;
      out.clocks[static_cast<size_t>(r)] = t.clock().Now();
    });
    return out;
  };
  const Outcome planned = run(true), stepped = run(false);
  for (int r = 0; r < n; ++r) {
    EXPECT_DOUBLE_EQ(planned.clocks[static_cast<size_t>(r)], stepped.clocks[static_cast<size_t>(r)]) << "rank " << r;
  }
  EXPECT_EQ(planned.sent, stepped.sent);
  EXPECT_EQ(planned.status, stepped.status);
  EXPECT_NE(planned.status[4].find("no message from rank 0 within"), std::string::npos) << planned.status[4];
  EXPECT_GT(planned.clocks[4], planned.clocks[3] + 0.4);  // the timeout's half second
}

}  // namespace
}  // namespace narrows::emu
