// Adaptive batch sizes, eager outer updates and gossip (NoLoCo): their identities, hand
// computations and runs; and the newer methods on both network models and in the planner.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/trainer/algorithms_fixture.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/run_command.h"
#include "trainer/algorithms/batch_size.h"
#include "trainer/algorithms/fragments.h"
#include "trainer/algorithms/gossip.h"
#include "trainer/replica.h"

namespace narrows::trainer {
namespace {

// --- Adaptive batch sizes ---

TEST_F(AlgorithmsTest, NormTestStatisticOfDdpMatchesAHandComputation) {
  // DDP's first norm test compares the two workers' first gradients: rebuild them here, from the
  // same initial weights and the same data order, and compute the statistic the long way.
  const auto sc = Make("workers: {count: 2}\ncompare: [{name: n, algorithm: ddp, batch: {schedule: norm-test,"
                       " eta: 0.01, test_every: 100, max_multiple: 4}}]\n");
  Run(sc);
  double logged = -1.0;
  int64_t multiple = 0;
  for (const auto& e : Lines(Slurp(dir_ / "out" / "n" / "events.jsonl"))) {
    if (e.at("type") == "norm_test" && logged < 0) {
      logged = e.at("statistic");
      multiple = e.at("multiple");
    }
  }
  auto data = LoadDataset(sc, "");
  ASSERT_TRUE(data.ok());
  core::ModelSpec model = sc.model;
  model.vocab_size = 256;
  std::vector<torch::Tensor> grads;
  for (int w = 0; w < 2; ++w) {
    torch::manual_seed(sc.seed);
    Replica replica(model, sc.train, torch::kCPU);
    BatchSampler sampler((*data)->corpus, (*data)->split.train, model.seq_len, sc.seed, w, 2, sc.data.sampling);
    replica.ComputeGradients(sampler.Next(sc.train.batch_size));
    grads.push_back(replica.model().flat_grads().to(torch::kFloat64).clone());
  }
  const torch::Tensor mean = (grads[0] + grads[1]) / 2;
  const double variance = ((grads[0] - mean).square().sum() + (grads[1] - mean).square().sum()).item<double>() / (2 - 1);
  const double hand = variance / (2 * mean.square().sum().item<double>());
  EXPECT_NEAR(logged, hand, 1e-4 * hand);
  // eta = 0.01: the noise is far above eta^2, so the batch grows to the cap at once.
  EXPECT_GT(hand, 0.01 * 0.01);
  EXPECT_EQ(multiple, 4);
}

TEST_F(AlgorithmsTest, DilocosNormTestComparesTheHalvesOfAWorkersBatch) {
  // Worker 0's first inner update is a test: its batch as two halves, whose gradients are the
  // samples. Rebuild them and compute the statistic the long way.
  const auto sc = Make("workers: {count: 2}\ncompare: [{name: n, algorithm: diloco, inner_steps: 4,"
                       " batch: {schedule: norm-test, eta: 0.01, test_every: 100, max_multiple: 2}}]\n");
  Run(sc);
  double logged = -1.0;
  for (const auto& e : Lines(Slurp(dir_ / "out" / "n" / "events.jsonl"))) {
    if (e.at("type") == "norm_test" && e.at("worker") == 0 && logged < 0) {
      logged = e.at("statistic");
      EXPECT_EQ(e.at("samples"), 2);
      EXPECT_EQ(e.at("multiple"), 2);  // far above eta^2: straight to the cap
    }
  }
  auto data = LoadDataset(sc, "");
  ASSERT_TRUE(data.ok());
  core::ModelSpec model = sc.model;
  model.vocab_size = 256;
  torch::manual_seed(sc.seed);
  Replica replica(model, sc.train, torch::kCPU);
  BatchSampler sampler((*data)->corpus, (*data)->split.train, model.seq_len, sc.seed, 0, 2, sc.data.sampling);
  const TokenBatch batch = sampler.Next(sc.train.batch_size);
  std::vector<torch::Tensor> halves;
  for (int h = 0; h < 2; ++h) {
    TokenBatch half;
    half.batch = batch.batch / 2;
    half.seq_len = batch.seq_len;
    const auto from = static_cast<std::ptrdiff_t>(h * half.batch * half.seq_len);
    const auto to = from + static_cast<std::ptrdiff_t>(half.batch * half.seq_len);
    half.inputs.assign(batch.inputs.begin() + from, batch.inputs.begin() + to);
    half.targets.assign(batch.targets.begin() + from, batch.targets.begin() + to);
    replica.ComputeGradients(half);
    halves.push_back(replica.model().flat_grads().to(torch::kFloat64).clone());
  }
  const torch::Tensor mean = (halves[0] + halves[1]) / 2;
  const double variance = ((halves[0] - mean).square().sum() + (halves[1] - mean).square().sum()).item<double>();
  const double hand = variance / (2 * mean.square().sum().item<double>());
  EXPECT_NEAR(logged, hand, 1e-4 * hand);
}

TEST_F(AlgorithmsTest, BatchGrowthIsMonotoneAndCapped) {
  BatchOptions a;
  a.schedule = BatchScheduleKind::kNormTest;
  a.eta = 0.5;  // eta^2 = 0.25
  a.max_multiple = 6;
  a.test_every = 2;
  BatchSchedule norm(a, 100);
  EXPECT_TRUE(norm.BeginUpdate(0));
  EXPECT_FALSE(norm.Observe(0.2));  // below eta^2: stays
  EXPECT_EQ(norm.multiple(), 1);
  EXPECT_FALSE(norm.BeginUpdate(1));  // every second update tests
  EXPECT_TRUE(norm.BeginUpdate(2));
  EXPECT_TRUE(norm.Observe(0.6));  // ceil(1 * 0.6 / 0.25) = 3
  EXPECT_EQ(norm.multiple(), 3);
  EXPECT_FALSE(norm.Observe(0.01));  // never shrinks
  EXPECT_EQ(norm.multiple(), 3);
  EXPECT_TRUE(norm.Observe(100.0));  // capped
  EXPECT_EQ(norm.multiple(), 6);
  a.schedule = BatchScheduleKind::kLinear;
  a.ramp_steps = 50;
  BatchSchedule linear(a, 100);
  int64_t last = 0;
  for (int64_t step = 0; step < 100; step += 5) {
    EXPECT_FALSE(linear.BeginUpdate(step));
    EXPECT_GE(linear.multiple(), last);
    last = linear.multiple();
  }
  EXPECT_EQ(last, 6);

  // A run: the same tokens as a constant batch, fewer all-reduces, a monotone logged schedule.
  const auto sc = Make("workers: {count: 2}\ncompare: [{name: c, algorithm: ddp, overlap: false},"
                       " {name: l, algorithm: ddp, batch: {schedule: linear, max_multiple: 4, ramp_steps: 6}}]\n");
  const EntryResult constant = Run(sc, 0), grown = Run(sc, 1);
  EXPECT_EQ(grown.tokens, constant.tokens);
  EXPECT_LT(grown.bytes_sent_per_worker, 0.6 * constant.bytes_sent_per_worker);
  int64_t previous = 0;
  for (const auto& line : Lines(Slurp(dir_ / "out" / "l" / "metrics.jsonl"))) {
    const int64_t g = line.at("global_batch");
    EXPECT_GE(g, previous);
    EXPECT_LE(g, 4 * 4 * 2);
    previous = g;
  }
  EXPECT_EQ(previous, 32);
}

TEST_F(AlgorithmsTest, PlanFollowsAnEntrysDepthAndALinearBatchWarmUp) {
  const auto sc = Make("workers: {count: 2}\ncompare: [{name: deep, algorithm: diloco, inner_steps: 4, n_layers: 4},"
                       " {name: lin, algorithm: ddp, batch: {schedule: linear, max_multiple: 4, ramp_steps: 6}}]\n",
                       "network: {profile: home-100m}\n");
  auto plan = tools::MakePlan(sc, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (size_t i = 0; i < 2; ++i) {
    const EntryResult run = Run(sc, i);
    EXPECT_NEAR(plan->rows[i].bytes_per_worker / run.bytes_sent_per_worker, 1.0, 0.02) << sc.compare[i].name;
    EXPECT_NEAR(plan->rows[i].time_s / run.virtual_time_s, 1.0, 0.10) << sc.compare[i].name;
  }
}

// Eager outer updates (arXiv 2502.12996). With one worker the others' part is empty: DiLoCo step for
// step, whatever the overlap.
TEST_F(AlgorithmsTest, EagerWithOneWorkerIsDilocoStepForStep) {
  const auto sc = Make("workers: {count: 1}\ncompare: [diloco-h4, eager-diloco-h4]\n");
  const EntryResult diloco = Run(sc, 0), eager = Run(sc, 1);
  const auto a = Lines(Slurp(dir_ / "out" / "diloco-h4" / "metrics.jsonl"));
  const auto b = Lines(Slurp(dir_ / "out" / "eager-diloco-h4" / "metrics.jsonl"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at("train_loss").get<double>(), b[i].at("train_loss").get<double>()) << "line " << i;
    EXPECT_EQ(a[i].value("val_loss", -1.0), b[i].value("val_loss", -1.0)) << "line " << i;
  }
  EXPECT_EQ(eager.final_val_loss, diloco.final_val_loss);
  EXPECT_EQ(eager.outer_syncs, diloco.outer_syncs);
}

// The paper's update by hand, for the first of two workers: its fresh pseudo-gradient and the
// other's of the previous round, over two; in the first round the other's part is zero.
TEST(EagerOuterGradientTest, MatchesTheHandComputationForTwoWorkers) {
  const torch::Tensor own = torch::tensor({1.0f, 2.0f, -4.0f});
  const torch::Tensor own_before = torch::tensor({1.0f, 1.0f, 0.5f}), other_before = torch::tensor({2.0f, 4.0f, -1.5f});
  const torch::Tensor delta = EagerOuterGradient(own, own_before + other_before, own_before, 2);
  EXPECT_TRUE(torch::allclose(delta, torch::tensor({1.5f, 3.0f, -2.75f}))) << delta;
  const torch::Tensor zeros = torch::zeros({3});
  EXPECT_TRUE(torch::equal(EagerOuterGradient(own, zeros, zeros, 2), own / 2));
  EXPECT_TRUE(torch::equal(EagerOuterGradient(own, own_before, own_before, 1), own));  // one worker: its own, exactly
}

// With two workers eager moves DiLoCo's bytes, hides the all-reduce behind a whole round (the last
// one excepted) and trains; its numbers are its own. With fragments every fragment is stepped once
// every H steps.
TEST_F(AlgorithmsTest, EagerOverlapsAWholeRoundAndTrains) {
  const auto sc = Make("workers: {count: 2}\ncompare: [diloco-h4, eager-diloco-h4,\n"
                       "  {name: ef, algorithm: streaming-diloco, inner_steps: 4, fragments: 2, eager: true}]\n",
                       "network: {profile: internet-1g}\n", {"train.steps=24"});  // nano's first rounds are rough
  const EntryResult diloco = Run(sc, 0), eager = Run(sc, 1), fragments = Run(sc, 2);
  EXPECT_EQ(eager.bytes_sent_per_worker, diloco.bytes_sent_per_worker);
  EXPECT_LT(eager.virtual_time_s, diloco.virtual_time_s);
  EXPECT_GT(eager.compute_utilization, diloco.compute_utilization);
  EXPECT_NE(eager.final_val_loss, diloco.final_val_loss);
  EXPECT_LT(eager.final_val_loss, std::log(256.0));
  EXPECT_LT(fragments.final_val_loss, std::log(256.0));
  std::map<int64_t, std::vector<int64_t>> steps_of;
  for (const auto& e : Lines(Slurp(dir_ / "out" / "ef" / "events.jsonl"))) {
    if (e.at("type") == "outer_sync") steps_of[e.at("fragment").get<int64_t>()].push_back(e.at("step").get<int64_t>());
  }
  EXPECT_EQ(steps_of[1], (std::vector<int64_t>{2, 6, 10, 14, 18, 22}));
  EXPECT_EQ(steps_of[0], (std::vector<int64_t>{4, 8, 12, 16, 20, 24}));
}

TEST_F(AlgorithmsTest, EagerRefusesAnOverlapOfItsOwn) {
  auto sc = core::ParseScenario("compare: [{algorithm: streaming-diloco, eager: true, overlap_steps: 1}]\n", "e.yaml");
  ASSERT_FALSE(sc.ok());
  EXPECT_NE(sc.status().message().find("overlap_steps: eager outer updates overlap"), std::string::npos)
      << sc.status().message();
}

// NoLoCo's matching: every rank paired with one other, symmetric; an odd world leaves one out; the
// same draw for the same (seed, step), another for another step.
TEST(GossipTest, PartnersAreARandomPerfectMatchingPerRound) {
  for (int world : {2, 3, 7, 8}) {
    std::set<std::vector<int>> seen;
    for (int64_t step = 4; step <= 80; step += 4) {
      const auto p = GossipPartners(world, 1, step);
      ASSERT_EQ(static_cast<int>(p.size()), world);
      int alone = 0;
      for (int r = 0; r < world; ++r) {
        const int q = p[static_cast<size_t>(r)];
        if (q < 0) {
          ++alone;
          continue;
        }
        EXPECT_NE(q, r);
        EXPECT_EQ(p[static_cast<size_t>(q)], r) << "world " << world << ", step " << step;
      }
      EXPECT_EQ(alone, world % 2);
      EXPECT_EQ(p, GossipPartners(world, 1, step));
      seen.insert(p);
    }
    if (world > 3) {
      EXPECT_GT(seen.size(), 5u) << "world " << world;  // 7 and 8 workers have 105 matchings each
    }
  }
}

// Gossip alone contracts the replicas: with no inner progress (local = anchor) and no momentum,
// pairwise steps shrink the consensus distance round after round, though no step involves more than
// two of the eight workers.
TEST(GossipTest, ConsensusDistanceShrinksWithoutAnyGlobalStep) {
  const int m = 8;
  torch::manual_seed(3);
  std::vector<torch::Tensor> anchors, velocities;
  for (int i = 0; i < m; ++i) {
    anchors.push_back(torch::randn({64}));
    velocities.push_back(torch::zeros({64}));
  }
  auto consensus = [&] {
    const torch::Tensor mean = torch::stack(anchors).mean(0);
    double d = 0;
    for (const auto& a : anchors) d += (a - mean).pow(2).sum().item<double>();
    return d / m;
  };
  const double first = consensus();
  double last = first;
  const GossipStep o{0.5, 0.0, 0.5};
  for (int64_t round = 1; round <= 12; ++round) {
    const auto partners = GossipPartners(m, 0, round * 4);
    std::vector<torch::Tensor> before;
    for (const auto& a : anchors) before.push_back(a.clone());
    for (int i = 0; i < m; ++i) {
      const int q = partners[static_cast<size_t>(i)];
      const torch::Tensor mean = (before[static_cast<size_t>(i)] + before[static_cast<size_t>(q)]) / 2;
      GossipOuterStep(o, anchors[static_cast<size_t>(i)], velocities[static_cast<size_t>(i)], mean, mean);
    }
    const double now = consensus();
    EXPECT_LT(now, last * (1 - 1e-6)) << "round " << round;
    last = now;
  }
  EXPECT_LT(last, first / 20);
}

// With two workers the only pair is everyone: with outer lr 1 and no momentum each worker continues
// from the mean of the two replicas, which is local SGD's step (to rounding: a + (m - a) for m).
TEST_F(AlgorithmsTest, GossipWithTwoWorkersIsPairwiseAveraging) {
  const auto sc = Make("workers: {count: 2}\ncompare: [local-sgd-h4,\n"
                       "  {name: g, algorithm: noloco, inner_steps: 4, outer_lr: 1.0, outer_momentum: 0.0}]\n");
  const EntryResult local = Run(sc, 0), gossip = Run(sc, 1);
  const auto a = Lines(Slurp(dir_ / "out" / "local-sgd-h4" / "metrics.jsonl"));
  const auto b = Lines(Slurp(dir_ / "out" / "g" / "metrics.jsonl"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i].at("train_loss").get<double>(), b[i].at("train_loss").get<double>(), 1e-5) << "line " << i;
  }
  EXPECT_NEAR(gossip.final_val_loss, local.final_val_loss, 1e-5);
  EXPECT_EQ(gossip.bytes_sent_per_worker, 3.0 * 4 * Params(sc));  // 3 rounds of the local parameters to one peer
}

// Five workers: each round two pairs exchange and one sits out; worker 4 leaves at step 3 and its
// partners step alone; the anchors travel too when consensus_lr differs from outer_lr.
TEST_F(AlgorithmsTest, GossipSendsToOnePeerARoundAndSurvivesALeave) {
  const auto sc = Make("workers: {count: 5}\nfaults: [{type: leave, worker: 4, at_step: 3}]\n"
                       "compare: [noloco-h4, {name: both, algorithm: noloco, inner_steps: 4, consensus_lr: 0.5}]\n");
  const EntryResult plain = Run(sc, 0), both = Run(sc, 1);
  const double n = static_cast<double>(Params(sc));
  int64_t pairs = 0;
  for (int64_t end : {4, 8, 12}) {
    const auto p = GossipPartners(5, sc.seed, end);
    for (int r = 0; r < 4; ++r) pairs += (p[static_cast<size_t>(r)] >= 0 && p[static_cast<size_t>(r)] != 4) ? 1 : 0;
  }
  EXPECT_DOUBLE_EQ(plain.bytes_sent_per_worker * 5, 4.0 * n * static_cast<double>(pairs));
  EXPECT_DOUBLE_EQ(both.bytes_sent_per_worker, 2 * plain.bytes_sent_per_worker);
  EXPECT_LT(plain.final_val_loss, std::log(256.0));
  EXPECT_NE(plain.final_val_loss, both.final_val_loss);
  int gossip_events = 0;
  for (const auto& e : Lines(Slurp(dir_ / "out" / "noloco-h4" / "events.jsonl"))) {
    if (e.at("type") == "gossip") {
      ++gossip_events;
      EXPECT_GT(e.at("distance").get<double>(), 0.0);
      EXPECT_NE(e.at("pair")[1].get<int>(), 4);
    }
  }
  EXPECT_EQ(gossip_events * 2, pairs);
}

// The 2025-26 methods on either network model: the same losses and bytes under ns-3 as under the
// analytic model, times no shorter; and the planner's prediction of each (uniform workers) within 1% of
// the emulated run's time and bytes.
TEST_F(AlgorithmsTest, NewMethodsRunOnBothNetworkModelsAndArePredicted) {
  const std::string algos = "workers: {count: 4}\ncompare: [sparseloco-h4, eager-diloco-h4, noloco-h4]\n";
  const std::string net = "network: {profile: internet-1g, model: ";
  const auto analytic_sc = Make(algos, net + "analytic}\n"), ns3_sc = Make(algos, net + "ns3}\n");
  auto plan = tools::MakePlan(analytic_sc, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->rows.size(), 3u);
  for (size_t entry = 0; entry < 3; ++entry) {
    const EntryResult analytic = Run(analytic_sc, entry), ns3 = Run(ns3_sc, entry);
    const std::string name = analytic.name;
    EXPECT_EQ(ns3.final_val_loss, analytic.final_val_loss) << name;
    EXPECT_EQ(ns3.bytes_sent_per_worker, analytic.bytes_sent_per_worker) << name;
    // ns-3's TCP pays slow start on every fresh connection, which the analytic model does not: most
    // of NoLoCo's pairs are new each round (at nano's 140 kB on 50 ms links, about twice the time).
    EXPECT_GE(ns3.virtual_time_s / analytic.virtual_time_s, 0.95) << name;
    if (name != "noloco-h4") {
      EXPECT_LE(ns3.virtual_time_s / analytic.virtual_time_s, 1.25) << name;
    }
    const auto& p = plan->rows[entry];
    EXPECT_EQ(p.name, name);
    EXPECT_NEAR(p.time_s / analytic.virtual_time_s, 1.0, 0.01) << name;
    EXPECT_NEAR(p.bytes_per_worker / analytic.bytes_sent_per_worker, 1.0, 0.001) << name;
  }
}

// A whole `narrows run` on the ns-3 model with modelled compute writes its summary (the host line's
// planner runs on the analytic model: ns-3's simulator is one per process).
TEST_F(AlgorithmsTest, RunOnNs3WithModelledComputeWritesItsSummary) {
  auto sc = Make("workers: {count: 2}\ncompare: [ddp]\n", "network: {profile: internet-1g, model: ns3}\n");
  sc.output.dir = (dir_ / "ns3run").string();
  tools::RunOptions options;
  options.progress = nullptr;
  ASSERT_TRUE(tools::RunScenario(sc, options).ok());
  const auto summary = nlohmann::json::parse(Slurp(dir_ / "ns3run" / "d" / "summary.json"));
  EXPECT_TRUE(summary.at("host").contains("planned_speedup"));
}

}  // namespace
}  // namespace narrows::trainer
