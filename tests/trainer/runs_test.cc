// What an entry's run does beside its algorithm: warm starts, time to the target loss, the
// collective it ran, measured and traced compute, the progress line; and runs of runs: tune and
// seeds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "tests/trainer/algorithms_fixture.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/report_command.h"
#include "tools/cli/run_command.h"
#include "tools/cli/stats.h"
#include "tools/cli/tune_command.h"
#include "trainer/checkpoint.h"
#include "trainer/replica.h"
#include "trainer/warm_start.h"
#include "trainer/worker.h"

namespace narrows::trainer {
namespace {

TEST_F(AlgorithmsTest, WarmStartPreTrainsOnceAndEveryEntryStartsFromIt) {
  auto sc = Make("workers: {count: 2}\nwarm_start: {steps: 30}\ncompare: [ddp, diloco-h4]\n");
  sc.output.log_every = 1;  // the first step's line
  auto data = LoadDataset(sc, "");
  ASSERT_TRUE(data.ok());
  const std::string cache = (dir_ / "cache").string();
  auto path = PrepareWarmStart(sc, **data, cache, nullptr);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const auto written = fs::last_write_time(*path);
  auto again = PrepareWarmStart(sc, **data, cache, nullptr);  // cached: the same file, not rewritten
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *path);
  EXPECT_EQ(fs::last_write_time(*again), written);
  auto other = sc;
  other.seed = 9;
  EXPECT_NE(*PrepareWarmStart(other, **data, cache, nullptr), *path);  // another seed, other weights

  // Both entries start from the pre-trained weights: their first step's losses agree, and are far
  // below a cold start's.
  auto first_loss = [&](size_t entry, bool warm) {
    auto exp = Experiment::Create(sc, sc.compare.at(entry), *data);
    EXPECT_TRUE(exp.ok());
    if (warm) {
      EXPECT_TRUE((*exp)->SetWarmStart(*path).ok());
    }
    emu::Engine engine(sc.workers.count, emu::NetworkFromScenario(sc));
    engine.Run([&](int rank) { (*exp)->RunWorker(rank, engine.endpoint(rank)); });
    const std::string out = (dir_ / "warm" / (sc.compare[entry].name + (warm ? "-warm" : "-cold"))).string();
    EXPECT_TRUE((*exp)->Finish(out).ok());
    return Lines(Slurp(fs::path(out) / "metrics.jsonl")).front().at("train_loss").get<double>();
  };
  const double ddp = first_loss(0, true), diloco = first_loss(1, true), cold = first_loss(1, false);
  EXPECT_NEAR(ddp, diloco, 1e-5);
  EXPECT_LT(diloco, cold - 0.3);

  // A model file of another model is refused, naming both sizes.
  auto tiny = core::ParseScenario("model: {preset: tiny}\ncompare: [ddp]\n", "tiny.yaml");
  ASSERT_TRUE(tiny.ok());
  auto exp = Experiment::Create(*tiny, tiny->compare[0], *data);
  ASSERT_TRUE(exp.ok());
  const core::Status s = (*exp)->SetWarmStart(*path);
  EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("another model"), std::string::npos) << s.ToString();
}

// warm_start.optimizer: continued. The pre-training is the start of one schedule over its steps and
// the entries' and writes its AdamW moments; an entry continues both: one worker is exactly a
// replica that takes the file's weights, moments and step count and trains on at step 6 of 18
// (no fresh warm-up). A file without optimiser state is refused.
TEST_F(AlgorithmsTest, AContinuedWarmStartCarriesTheOptimiserAndTheSchedule) {
  auto sc = Make("workers: {count: 1}\nwarm_start: {steps: 6, optimizer: continued}\ncompare: [local-sgd-h3]\n");
  sc.output.log_every = 1;
  auto data = LoadDataset(sc, "");
  ASSERT_TRUE(data.ok());
  auto path = PrepareWarmStart(sc, **data, (dir_ / "cache").string(), nullptr);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  core::ModelSpec model = sc.model;
  model.vocab_size = (*data)->vocab_size;
  auto file = ReadModelFile(*path, CostOf(model).params);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ(file->tensors.size(), 3u);
  EXPECT_EQ(file->tensors[1].first, "exp_avg");
  EXPECT_EQ(file->step, 6);
  EXPECT_EQ(file->inner_steps, 6);

  auto exp = Experiment::Create(sc, sc.compare[0], *data);
  ASSERT_TRUE(exp.ok());
  ASSERT_TRUE((*exp)->SetWarmStart(*path).ok());
  emu::Engine engine(1, emu::NetworkFromScenario(sc));
  engine.Run([&](int rank) { (*exp)->RunWorker(rank, engine.endpoint(rank)); });
  auto r = (*exp)->Finish((dir_ / "out" / "continued").string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();

  core::TrainSpec schedule = sc.train;
  schedule.steps = 6 + sc.train.steps;
  ConfigureThreads(sc.threads);
  torch::manual_seed(sc.seed);
  Replica replica(model, sc.train, torch::kCPU);
  {
    torch::NoGradGuard no_grad;
    replica.model().flat_params().copy_(file->tensors[0].second);
    const auto state = replica.optimizer().State();
    for (size_t i = 0; i < state.size(); ++i) state[i].second->copy_(file->tensors[1 + i].second);
    replica.optimizer().set_steps_taken(file->inner_steps);
  }
  BatchSampler sampler((*data)->corpus, (*data)->split.train, sc.model.seq_len, sc.seed, 0, 1, sc.data.sampling);
  for (int64_t s = 0; s < sc.train.steps; ++s) {
    replica.TrainStep(sampler.Next(sc.train.batch_size), LearningRate(schedule, 6 + s));
  }
  EXPECT_NEAR(r->final_val_loss, replica.Evaluate((*data)->val_batches), 1e-5);
  // Not what a fresh optimiser with the entries' own schedule (warm-up again) reaches.
  torch::manual_seed(sc.seed);
  Replica fresh(model, sc.train, torch::kCPU);
  {
    torch::NoGradGuard no_grad;
    fresh.model().flat_params().copy_(file->tensors[0].second);
  }
  BatchSampler again_sampler((*data)->corpus, (*data)->split.train, sc.model.seq_len, sc.seed, 0, 1, sc.data.sampling);
  for (int64_t s = 0; s < sc.train.steps; ++s) fresh.TrainStep(again_sampler.Next(sc.train.batch_size), LearningRate(sc.train, s));
  EXPECT_GT(std::fabs(r->final_val_loss - fresh.Evaluate((*data)->val_batches)), 1e-3);

  // A model file with weights alone has nothing to continue.
  WorkerCheckpoint bare = *file;
  bare.tensors.resize(1);
  const std::string bare_path = (dir_ / "bare.ckpt").string();
  ASSERT_TRUE(WriteCheckpoint(bare_path, bare).ok());
  auto again = Experiment::Create(sc, sc.compare[0], *data);
  ASSERT_TRUE(again.ok());
  const core::Status s = (*again)->SetWarmStart(bare_path);
  EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no inner optimiser state"), std::string::npos) << s.ToString();
}

// Time and bytes to the target loss are interpolated between the evaluations that bracket it, on a
// hand-made curve: a reaches 2.0 a quarter of the way from its evaluation at 10 s (2.2) to the one
// at 20 s (1.4); b hits it exactly at 30 s; c starts below it; d never reaches it.
TEST_F(AlgorithmsTest, TimeToTargetIsInterpolatedBetweenTheBracketingEvaluations) {
  auto sc = Make("target_loss: 2.0\n");
  sc.eval.every = 10;
  const fs::path run = dir_ / "interp";
  auto write = [&](const std::string& name, const std::vector<std::array<double, 3>>& evals) {
    fs::create_directories(run / name);
    std::ofstream out(run / name / "metrics.jsonl");
    out << "{\"step\": 1, \"virtual_time_s\": 0.5, \"train_loss\": 3.0}\n";  // no evaluation
    for (const auto& [t, loss, bytes] : evals) {
      out << "{\"virtual_time_s\": " << t << ", \"val_loss\": " << loss << ", \"bytes_sent\": " << bytes << "}\n";
    }
  };
  write("a", {{10, 2.2, 100}, {20, 1.4, 500}});
  write("b", {{10, 2.5, 10}, {30, 2.0, 30}, {40, 1.0, 40}});
  write("c", {{5, 1.9, 7}});
  write("d", {{5, 2.1, 7}});
  nlohmann::json summary = {{"results", {{{"name", "a"}, {"final_val_loss", 1.4}}, {{"name", "b"}, {"final_val_loss", 1.0}},
                                         {{"name", "c"}, {"final_val_loss", 1.9}}, {{"name", "d"}, {"final_val_loss", 2.1}}}}};
  tools::AddEqualQuality(sc, run.string(), &summary);
  const auto& r = summary.at("results");
  EXPECT_DOUBLE_EQ(r[0].at("time_to_target_s").get<double>(), 12.5);
  EXPECT_DOUBLE_EQ(r[0].at("bytes_to_target").get<double>(), 200.0);
  EXPECT_EQ(r[1].at("time_to_target_s").get<double>(), 30.0);
  EXPECT_EQ(r[2].at("time_to_target_s").get<double>(), 5.0);
  // c was below the target at its first evaluation: that time is a bound, and said to be.
  EXPECT_TRUE(r[2].value("target_at_first_evaluation", false));
  EXPECT_FALSE(r[0].contains("target_at_first_evaluation"));
  EXPECT_TRUE(r[3].at("time_to_target_s").is_null());
  EXPECT_DOUBLE_EQ(r[1].at("speedup_at_target").get<double>(), 12.5 / 30.0);
  EXPECT_EQ(summary.at("eval_every").get<int64_t>(), 10);
}

// The collective an entry ran is in its summary: the scenario's default or its own for fp32; two-phase
// for a dense lossy codec and all-gather for a sparse one, whatever is asked. DDP over two-phase
// sums the same gradients as over the ring (in another order).
TEST_F(AlgorithmsTest, TheSummarySaysWhichCollectiveEachEntryRan) {
  auto sc = Make("collective: two-phase\nworkers: {count: 3}\ncompare: [ddp, {algorithm: ddp, name: ring, collective: ring},\n"
                 "  {algorithm: diloco, inner_steps: 4, name: i8, outer_gradient: int8},\n"
                 "  {algorithm: diloco, inner_steps: 4, name: tk, outer_gradient: topk, collective: star}]\n");
  const std::vector<std::string> expected = {"two-phase", "ring", "two-phase", "all-gather"};
  std::vector<double> loss;
  for (size_t e = 0; e < sc.compare.size(); ++e) {
    const EntryResult r = Run(sc, e);
    EXPECT_EQ(r.collective, expected[e]) << sc.compare[e].name;
    loss.push_back(r.final_val_loss);
  }
  EXPECT_NEAR(loss[0], loss[1], 1e-4);
  EXPECT_EQ(tools::EntryJson(Run(sc, 1), 0.0).at("collective"), "ring");
}

// Measured compute under compute.statistic: median: a step a host hiccup slowed 50-fold costs what
// its neighbours did; a lasting change of speed is followed once it is the majority; a step charged
// in pieces counts once, and its pieces split the median step by their FLOPs.
TEST(MedianRateTest, AHiccupCostsTheMedianRateAndALastingChangeIsFollowed) {
  MedianRate rate(1e9, 5);
  EXPECT_DOUBLE_EQ(rate.Charge(1.0, 1e9).seconds, 1.0);
  EXPECT_DOUBLE_EQ(rate.Charge(1.0, 1e9).step_rate, 1e-9);
  for (int i = 0; i < 2; ++i) EXPECT_DOUBLE_EQ(rate.Charge(1.0, 1e9).seconds, 1.0);
  EXPECT_DOUBLE_EQ(rate.Charge(50.0, 1e9).seconds, 1.0);
  // One step in two pieces (modelled shares 1/4 and 3/4, host times 0.9 and 0.1): charged 0.25 and
  // 0.75 of the median step; the step's rate is 1e-9 s/FLOP, and the first piece ends no step.
  const auto first = rate.Charge(0.9, 0.25e9);
  EXPECT_DOUBLE_EQ(first.seconds, 0.25);
  EXPECT_TRUE(std::isnan(first.step_rate));
  EXPECT_DOUBLE_EQ(rate.Charge(0.1, 0.75e9).seconds, 0.75);
  EXPECT_DOUBLE_EQ(rate.Charge(3.0, 1e9).seconds, 1.0);
  EXPECT_DOUBLE_EQ(rate.Charge(3.0, 1e9).seconds, 3.0);  // the last 5 steps: 1, 50, 1, 3, 3 (e-9 s/FLOP)
}

// The progress line follows the slowest worker: with one worker at a quarter of the speed and no
// synchronisation before the end, step s is shown only once the slow worker has computed it.
TEST_F(AlgorithmsTest, TheProgressLineShowsTheSlowestWorkersStep) {
  auto sc = Make("workers: {count: 2, speed: [1, 0.25]}\ncompare: [{algorithm: diloco, inner_steps: 100}]\n");
  auto data = LoadDataset(sc, "");
  ASSERT_TRUE(data.ok());
  auto exp = Experiment::Create(sc, sc.compare.at(0), *data);
  ASSERT_TRUE(exp.ok());
  std::vector<std::pair<int64_t, double>> shown;
  (*exp)->SetProgress([&](int64_t steps, double virtual_s, double) { shown.emplace_back(steps, virtual_s); });
  emu::Engine engine(sc.workers.count, emu::NetworkFromScenario(sc));
  engine.Run([&](int rank) { (*exp)->RunWorker(rank, engine.endpoint(rank)); });
  ASSERT_TRUE((*exp)->Finish((dir_ / "out" / "p").string()).ok());
  ASSERT_FALSE(shown.empty());
  EXPECT_EQ(shown.back().first, sc.train.steps);
  core::ModelSpec model = sc.model;
  model.vocab_size = 256;
  const double step_s = CostOf(model).train_flops_per_token * static_cast<double>(sc.train.batch_size * model.seq_len) /
                        sc.compute.device_flops;
  for (size_t i = 1; i < shown.size(); ++i) EXPECT_GT(shown[i].first, shown[i - 1].first);
  // Each step is shown at the slow worker's clock: s quarter-speed steps (the leader's would be s steps).
  for (const auto& [steps, at] : shown) EXPECT_GE(at, 0.999 * 4.0 * step_s * static_cast<double>(steps)) << steps;
}

// compute.trace replays a run's compute per worker and step (its metrics.jsonl): each step of each
// worker is charged what the trace says, whatever the FLOPs and speeds, and DDP's step waits for
// the slower of the two every step. A trace that cannot serve the run is refused, naming why.
TEST_F(AlgorithmsTest, AComputeTraceChargesEachWorkersStepWhatTheRunMeasured) {
  auto seconds = [](int w, int s) { return w == 0 ? 0.01 * (s + 1) : 0.3 - 0.02 * s; };  // cross at step 9
  auto write = [&](const std::string& name, int steps, int skip) {
    std::ofstream out(dir_ / name);
    double total[2] = {0, 0};
    for (int s = 0; s < steps; ++s) {
      if (s + 1 == skip) continue;
      Json workers = Json::array();
      for (int w = 0; w < 2; ++w) {
        total[w] += seconds(w, s);
        workers.push_back({{"worker", w}, {"compute_s", total[w]}, {"comm_s", 0.0}});
      }
      out << Json{{"step", s + 1}, {"train_loss", 3.0}, {"workers", workers}}.dump() << "\n";
      if ((s + 1) % 4 == 0) out << Json{{"step", s + 1}, {"val_loss", 3.0}}.dump() << "\n";  // an evaluation's line
    }
    return (dir_ / name).string();
  };
  const std::string trace = write("trace.jsonl", 12, 0);
  auto sc = Make("workers: {count: 2, speed: [1, 0.25]}\ncompare: [{algorithm: ddp}]\n", "network: {profile: dc-100g}\n",
                 {"compute.trace=" + trace, "output.log_every=1"});
  Run(sc);
  const auto lines = Lines(Slurp(dir_ / "out" / "ddp" / "metrics.jsonl"));
  double before[2] = {0, 0}, clock = 0.0;
  int steps = 0;
  for (const Json& line : lines) {
    if (!line.contains("workers")) continue;
    const int s = line["step"].get<int>() - 1;
    double slowest = 0.0;
    for (const Json& w : line["workers"]) {
      const int r = w["worker"].get<int>();
      const double c = w["compute_s"].get<double>();
      EXPECT_NEAR(c - before[r], seconds(r, s), 1e-9) << "worker " << r << ", step " << s;
      slowest = std::max(slowest, seconds(r, s));
      before[r] = c;
    }
    const double now = line["virtual_time_s"].get<double>();
    EXPECT_GE(now - clock, slowest * (1 - 1e-9)) << "step " << s;  // the ring waits for the slower
    clock = now;
    ++steps;
  }
  EXPECT_EQ(steps, 12);
  auto refused = [&](const std::vector<std::string>& sets) {
    auto bad = Make("workers: {count: 2}\ncompare: [ddp]\n", "network: {profile: dc-100g}\n", sets);
    auto data = LoadDataset(bad, "");
    EXPECT_TRUE(data.ok());
    auto exp = Experiment::Create(bad, bad.compare.at(0), *data);
    EXPECT_FALSE(exp.ok());
    return exp.ok() ? std::string() : exp.status().message();
  };
  EXPECT_NE(refused({"compute.trace=" + write("short.jsonl", 11, 0)}).find("short.jsonl: has 11 steps; the run takes 12"),
            std::string::npos);
  EXPECT_NE(refused({"compute.trace=" + write("gap.jsonl", 12, 5)}).find("gap.jsonl:6: step 6 follows step 4"),
            std::string::npos);
  // A trace that is no file is refused when the scenario is read, before anything runs.
  auto missing = core::ParseScenario("compute: {mode: modelled, trace: " + (dir_ / "none.jsonl").string() + "}\n", "t.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("none.jsonl' is not a file"), std::string::npos) << missing.status().message();
  EXPECT_NE(refused({"compute.trace=" + trace, "workers.count=3"}).find("has 2 workers, the scenario 3"), std::string::npos);
  auto measured = core::ParseScenario("compute: {mode: measured, trace: t.jsonl}\n", "m.yaml");
  ASSERT_FALSE(measured.ok());
  EXPECT_NE(measured.status().message().find("compute.trace: replays a run's measured compute in modelled time"),
            std::string::npos)
      << measured.status().message();
}

// collective: auto takes the collective the planner predicts fastest for the entry: over 8 workers
// with 200 ms links the ring's 14 latencies lose to fewer; the run says which it chose.
TEST_F(AlgorithmsTest, AutoPicksThePredictedFastestCollective) {
  const std::string workers = "workers: {count: 8}\n";
  auto sc = Make(workers + "compare: [{algorithm: ddp, collective: auto}]\n",
                 "network: {bandwidth_bps: 1.0e9, latency_ms: 200}\n");
  const core::AlgorithmSpec chosen = tools::ChooseCollective(sc, sc.compare[0]);
  EXPECT_TRUE(chosen.collective_auto);
  double fastest = 1e300;
  core::CollectiveKind best = core::CollectiveKind::kRing;
  for (const char* kind : {"ring", "two-phase", "tree", "star"}) {
    auto one = Make(workers + "compare: [{algorithm: ddp, collective: " + std::string(kind) + "}]\n",
                    "network: {bandwidth_bps: 1.0e9, latency_ms: 200}\n");
    auto plan = tools::MakePlan(one, {});
    ASSERT_TRUE(plan.ok());
    if (plan->rows.at(0).time_s < fastest) {
      fastest = plan->rows.at(0).time_s;
      best = one.compare[0].collective;
    }
  }
  EXPECT_EQ(chosen.collective, best);
  EXPECT_NE(chosen.collective, core::CollectiveKind::kRing);
  const auto entries = tools::Entries(sc);
  EXPECT_EQ(entries[0].collective, best);
  const EntryResult r = Run([&] { core::Scenario resolved = sc; resolved.compare = entries; return resolved; }());
  EXPECT_NE(r.collective.find("(auto)"), std::string::npos) << r.collective;
}

// tune: a learning rate of 1e-9 learns nothing, so 3e-3 is every entry's best; an outer learning
// rate of 1e-6 hardly moves DiLoCo's model, so 0.7 is its best, and that axis (compare.1.…) does not
// vary DDP, which runs at 2 points, not 4. The comparison then runs at the chosen values on the
// final seeds, paired, and the report shows the grid.
TEST_F(AlgorithmsTest, TunePicksEachEntrysBestValuesThenComparesOnFreshSeeds) {
  const fs::path file = dir_ / "tune.yaml";
  {
    std::ofstream out(file);
    out << "name: t\nthreads: 2\nseeds: 2\nmodel: {preset: nano}\nworkers: {count: 2}\n"
        << "train: {steps: 8, batch_size: 4, lr: 3e-3, warmup_steps: 1}\neval: {every: 4, batches: 2, batch_size: 4}\n"
        << "compute: {mode: modelled, device_flops: 1.0e9}\nnetwork: {profile: home-100m}\n"
        << "output: {dir: " << (dir_ / "runs").string() << "}\ndata: {path: " << (dir_ / "corpus.txt").string() << "}\n"
        << "compare: [ddp, {algorithm: diloco, name: diloco, inner_steps: 4}]\n";
  }
  tools::TuneOptions o;
  o.scenario_file = file.string();
  o.quiet = true;
  o.tuning_seeds = 1;
  o.axes = {*tools::ParseAxis("train.lr=1e-9,3e-3"), *tools::ParseAxis("compare.1.outer_lr=1e-6,0.7")};
  const core::Status tuned = tools::RunTune(o);
  ASSERT_TRUE(tuned.ok()) << tuned.ToString();
  const fs::path out = dir_ / "runs" / "t-tune";
  const auto summary = Json::parse(Slurp(out / "summary.json"));
  const Json& tuning = summary.at("tuning");
  EXPECT_EQ(tuning.at("entries").at(0).at("chosen"), Json({{"train.lr", "3e-3"}}));
  EXPECT_EQ(tuning.at("entries").at(0).at("points").size(), 2u);
  EXPECT_EQ(tuning.at("entries").at(1).at("chosen"), Json({{"train.lr", "3e-3"}, {"compare.1.outer_lr", "0.7"}}));
  EXPECT_EQ(tuning.at("entries").at(1).at("points").size(), 4u);
  EXPECT_EQ(tuning.at("tuning_seeds"), Json::array({1000}));
  EXPECT_EQ(summary.at("seeds"), Json::array({0, 1}));
  EXPECT_TRUE(summary.at("results").at(1).contains("versus_baseline"));
  // The final runs are at the chosen values: at an outer learning rate of 1e-6 or an inner one of
  // 1e-9, DiLoCo would end about where it started (ln 256 = 5.55 nats).
  EXPECT_NE(Slurp(out / "seed-0" / "diloco" / "metrics.jsonl"), "");
  EXPECT_LT(summary.at("results").at(1).at("final_val_loss").get<double>(), 5.0);
  const Json& worst = tuning.at("entries").at(1).at("points").at(0);  // lr 1e-9, outer lr 1e-6
  EXPECT_GT(worst.at("score").get<double>(), 5.4);
  auto report = tools::WriteReport({out.string()}, "");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_NE(Slurp(*report).find("Tuning (by final loss"), std::string::npos);
  // Run again: everything resumes; nothing is trained twice.
  const auto written = fs::last_write_time(out / "final" / "ddp" / "seed-1" / "ddp" / "metrics.jsonl");
  ASSERT_TRUE(tools::RunTune(o).ok());
  EXPECT_EQ(fs::last_write_time(out / "final" / "ddp" / "seed-1" / "ddp" / "metrics.jsonl"), written);
}

// Seeds: every entry runs once per seed into seed-<seed>/; two seeds differ (initialisation, data
// order), the same seed twice is the same run to the byte; the aggregate holds each entry's mean
// with its interval and the paired comparison against the first entry.
TEST_F(AlgorithmsTest, SeedsRunEveryEntryPerSeedAndAggregatePaired) {
  auto sc = Make("seeds: 2\nworkers: {count: 2}\ncompare: [ddp, diloco-h4]\n");
  sc.output.dir = (dir_ / "seeds").string();
  tools::RunOptions options;
  options.progress = nullptr;
  ASSERT_TRUE(tools::RunScenario(sc, options).ok());
  const fs::path run = dir_ / "seeds" / "d";
  const std::string a = Slurp(run / "seed-0" / "ddp" / "metrics.jsonl"), b = Slurp(run / "seed-1" / "ddp" / "metrics.jsonl");
  EXPECT_FALSE(a.empty());
  EXPECT_NE(a, b);
  const auto summary = nlohmann::json::parse(Slurp(run / "summary.json"));
  EXPECT_EQ(summary.at("seeds"), nlohmann::json::array({0, 1}));
  const auto& ddp = summary.at("results").at(0);
  const double l0 = ddp.at("per_seed").at(0).at("final_val_loss"), l1 = ddp.at("per_seed").at(1).at("final_val_loss");
  EXPECT_DOUBLE_EQ(ddp.at("final_val_loss").get<double>(), (l0 + l1) / 2);
  EXPECT_NEAR(ddp.at("final_val_loss_ci95").get<double>(), 12.706205 * std::fabs(l0 - l1) / 2, 1e-6);  // t(0.975, 1)
  const auto& gap = summary.at("results").at(1).at("versus_baseline").at("loss_gap");
  const double d0 = summary.at("results").at(1).at("per_seed").at(0).at("final_val_loss").get<double>() - l0;
  const double d1 = summary.at("results").at(1).at("per_seed").at(1).at("final_val_loss").get<double>() - l1;
  EXPECT_NEAR(gap.at("mean").get<double>(), (d0 + d1) / 2, 1e-12);
  EXPECT_TRUE(gap.contains("lower_loss"));
  // The margin claims by methods.md's rule at the default margin, from the same interval.
  EXPECT_DOUBLE_EQ(gap.at("margin").get<double>(), tools::kDefaultLossMargin);
  EXPECT_EQ(gap.at("costs_little"),
            tools::VerdictName(tools::JudgeCostsLittle(gap.at("lo"), gap.at("hi"), 2, tools::kDefaultLossMargin)));
  EXPECT_EQ(gap.at("matches"),
            tools::VerdictName(tools::JudgeMatches(gap.at("lo"), gap.at("hi"), 2, tools::kDefaultLossMargin)));
  // The report draws each entry's mean validation curve over the seeds with its band.
  auto report = tools::WriteReport({run.string()}, "");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const std::string html = Slurp(*report);
  EXPECT_NE(html.find("ddp (mean of 2 seeds) (95% band)"), std::string::npos);

  // A third seed resumes: seeds 0 and 1 are taken as they finished (not run again).
  const auto written = fs::last_write_time(run / "seed-1" / "ddp" / "metrics.jsonl");
  sc.seeds = 3;
  ASSERT_TRUE(tools::RunScenario(sc, options).ok());
  EXPECT_EQ(fs::last_write_time(run / "seed-1" / "ddp" / "metrics.jsonl"), written);
  EXPECT_EQ(nlohmann::json::parse(Slurp(run / "summary.json")).at("seeds").size(), 3u);

  // Seed 1 again, alone: the same bytes as the first time.
  auto again = Make("seed: 1\nworkers: {count: 2}\ncompare: [ddp, diloco-h4]\n");
  again.output.dir = (dir_ / "again").string();
  ASSERT_TRUE(tools::RunScenario(again, options).ok());
  EXPECT_EQ(Slurp(dir_ / "again" / "d" / "ddp" / "metrics.jsonl"), b);
}

}  // namespace
}  // namespace narrows::trainer
