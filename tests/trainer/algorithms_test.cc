// The DiLoCo family beyond DiLoCo itself: Streaming DiLoCo's identities, fragment schedule and
// overlap; compressed outer gradients' bytes; DyLU; asynchronous DiLoCo; peak bytes per round; and
// the planner's predictions of them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/codec.h"
#include "core/collectives.h"
#include "tests/trainer/algorithms_fixture.h"
#include "tools/cli/plan_command.h"
#include "trainer/algorithms/fragments.h"
#include "trainer/algorithms/outer.h"

namespace narrows::trainer {
namespace {

TEST_F(AlgorithmsTest, StreamingWithOneFragmentNoOverlapAndAlphaOneIsDilocoStepForStep) {
  const auto sc = Make("workers: {count: 3}\ncompare: [diloco-h4,\n"
                       "  {name: s, algorithm: streaming-diloco, inner_steps: 4, fragments: 1, overlap_steps: 0,"
                       " merge_alpha: 1}]\n");
  const EntryResult diloco = Run(sc, 0), streaming = Run(sc, 1);
  const auto a = Lines(Slurp(dir_ / "out" / "diloco-h4" / "metrics.jsonl"));
  const auto b = Lines(Slurp(dir_ / "out" / "s" / "metrics.jsonl"));
  ASSERT_EQ(a.size(), 4u);  // steps 4, 8, 10, 12: evaluations and log_every
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at("train_loss").get<double>(), b[i].at("train_loss").get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i].value("val_loss", -1.0), b[i].value("val_loss", -1.0)) << "step " << i + 1;
  }
  EXPECT_EQ(streaming.final_val_loss, diloco.final_val_loss);
  EXPECT_EQ(streaming.bytes_sent_per_worker, diloco.bytes_sent_per_worker);
  EXPECT_EQ(streaming.outer_syncs, diloco.outer_syncs);
  EXPECT_NEAR(streaming.virtual_time_s, diloco.virtual_time_s, 1e-9 * diloco.virtual_time_s);
}

TEST_F(AlgorithmsTest, FragmentsHoldEveryParameterExactlyOnce) {
  auto sc = core::ParseScenario("model: {preset: tiny}\n", "tiny.yaml");
  ASSERT_TRUE(sc.ok());
  core::ModelSpec model = sc->model;
  model.vocab_size = 256;
  torch::manual_seed(0);
  const Gpt gpt(model, torch::kCPU);
  for (auto pattern : {FragmentPattern::kStrided, FragmentPattern::kSequential}) {
    for (int64_t p : {1, 2, 3, 4}) {
      const auto fragments = SplitIntoFragments(gpt.slices(), model.n_layers, p, pattern);
      ASSERT_EQ(static_cast<int64_t>(fragments.size()), p);
      std::vector<int> owner(static_cast<size_t>(gpt.num_params()), 0);
      for (const auto& f : fragments) {
        int64_t numel = 0;
        for (const auto& [offset, n] : f.ranges) {
          for (int64_t i = offset; i < offset + n; ++i) ++owner[static_cast<size_t>(i)];
          numel += n;
        }
        EXPECT_EQ(numel, f.numel);
        EXPECT_GT(f.numel, 0) << "an empty fragment";
      }
      for (size_t i = 0; i < owner.size(); ++i) ASSERT_EQ(owner[i], 1) << "element " << i << ", P = " << p;
    }
  }
  // Strided: block 1 of 4 with P = 2 is in fragment 1, as is block 3; sequential puts it in fragment 0.
  const auto strided = SplitIntoFragments(gpt.slices(), 4, 2, FragmentPattern::kStrided);
  const auto sequential = SplitIntoFragments(gpt.slices(), 4, 2, FragmentPattern::kSequential);
  int64_t block1 = -1;
  for (const auto& s : gpt.slices()) {
    if (s.name.rfind("h.1.", 0) == 0) block1 = s.offset;
  }
  auto holds = [&](const Fragment& f) {
    for (const auto& [offset, n] : f.ranges) {
      if (block1 >= offset && block1 < offset + n) return true;
    }
    return false;
  };
  EXPECT_TRUE(holds(strided[1]));
  EXPECT_TRUE(holds(sequential[0]));
}

TEST_F(AlgorithmsTest, EachFragmentIsSynchronisedOnceEveryHSteps) {
  const auto sc = Make("workers: {count: 2}\ncompare: [{name: s, algorithm: streaming-diloco, inner_steps: 4,"
                       " fragments: 2, overlap_steps: 1}]\n");
  const EntryResult r = Run(sc);
  EXPECT_EQ(r.outer_syncs, 6);  // 12 steps, a fragment every 2
  std::map<int64_t, std::vector<int64_t>> steps_of;  // fragment -> the steps it was synchronised at
  for (const auto& e : Lines(Slurp(dir_ / "out" / "s" / "events.jsonl"))) {
    if (e.at("type") == "outer_sync") steps_of[e.at("fragment").get<int64_t>()].push_back(e.at("step").get<int64_t>());
  }
  EXPECT_EQ(steps_of[1], (std::vector<int64_t>{2, 6, 10}));
  EXPECT_EQ(steps_of[0], (std::vector<int64_t>{4, 8, 12}));
}

TEST_F(AlgorithmsTest, OverlapHidesTheFragmentsAllReduceBehindInnerSteps) {
  const auto sc = Make("workers: {count: 2}\ncompare: [\n"
                       "  {name: tau0, algorithm: streaming-diloco, inner_steps: 4, fragments: 2, overlap_steps: 0},\n"
                       "  {name: tau1, algorithm: streaming-diloco, inner_steps: 4, fragments: 2, overlap_steps: 1}]\n",
                       "network: {profile: internet-1g}\n");
  const EntryResult tau0 = Run(sc, 0), tau1 = Run(sc, 1);
  EXPECT_LT(tau1.virtual_time_s, tau0.virtual_time_s);
  EXPECT_GT(tau1.compute_utilization, tau0.compute_utilization);
  EXPECT_EQ(tau1.bytes_sent_per_worker, tau0.bytes_sent_per_worker);
  EXPECT_NE(tau1.final_val_loss, tau0.final_val_loss);  // the merge lands a step later: other numbers
}

TEST_F(AlgorithmsTest, CompressedOuterGradientsSendTheFormulasBytes) {
  for (const char* format : {"int8", "int4", "bf16", "topk", "sign"}) {
    const auto sc = Make(std::string("workers: {count: 4}\ncompare: [{name: c, algorithm: diloco, inner_steps: 4,"
                                     " outer_gradient: {format: ") + format +
                             (std::string(format) == "topk" ? ", topk: 0.25" : std::string(format) == "bf16" ? "" : ", block: 64") +
                             "}}]\n");
    const EntryResult r = Run(sc);
    const core::Codec codec(sc.compare[0].Options<OuterOptions>().outer_gradient);
    const int64_t count = Params(sc) + 1 + 4;  // pseudo-gradient, contributor count, join votes
    double per_worker = 0.0;
    for (int p = 0; p < 4; ++p) {
      per_worker += core::EncodedAllReduceBytesPerRank(codec, count, 1 + 4, 4, p, core::AllReduceAlgorithm::kRing) / 4.0;
    }
    EXPECT_DOUBLE_EQ(r.bytes_sent_per_worker, per_worker * 3) << format;
    EXPECT_GT(r.final_val_loss, 0.0) << format;
    EXPECT_LT(r.final_val_loss, std::log(256.0)) << format;
  }
}

// SparseLoCo: at density 1 with fp32 values and no decay it is local SGD (outer SGD, lr 1) step for
// step (2 workers: both sums are one addition); its own settings send the chunked codec's bytes,
// all-gathered, and train.
TEST_F(AlgorithmsTest, SparseLocoIsLocalSgdAtDensityOneAndSendsItsFormulasBytes) {
  const auto sc = Make("workers: {count: 2}\ncompare: [local-sgd-h4, {name: dense, algorithm: diloco, inner_steps: 4,"
                       " outer_optimizer: sgd, outer_lr: 1.0, outer_momentum: 0.0,"
                       " outer_gradient: {format: topk, topk: 1.0, chunk: 64}}, sparseloco-h4]\n");
  const EntryResult local = Run(sc, 0), dense = Run(sc, 1), sparse = Run(sc, 2);
  EXPECT_EQ(local.final_val_loss, dense.final_val_loss);
  const core::Codec codec(sc.compare[2].Options<OuterOptions>().outer_gradient);
  const int64_t count = Params(sc) + 1 + 2;  // pseudo-gradient, contributor count, join votes
  EXPECT_DOUBLE_EQ(sparse.bytes_sent_per_worker, 3.0 * core::EncodedAllReduceBytesPerRank(codec, count, 1 + 2, 2, 0));
  EXPECT_LT(sparse.bytes_sent_per_worker, local.bytes_sent_per_worker / 50);
  EXPECT_LT(sparse.final_val_loss, std::log(256.0));
}

TEST_F(AlgorithmsTest, ErrorFeedbackChangesWhatALossyCodecSends) {
  const auto sc = Make("workers: {count: 2}\ncompare: [\n"
                       "  {name: plain, algorithm: diloco, inner_steps: 2, outer_gradient: {format: int4}},\n"
                       "  {name: ef, algorithm: diloco, inner_steps: 2, outer_gradient: {format: int4, error_feedback: true}}]\n");
  const EntryResult plain = Run(sc, 0), ef = Run(sc, 1);
  EXPECT_NE(plain.final_val_loss, ef.final_val_loss);
  EXPECT_EQ(plain.bytes_sent_per_worker, ef.bytes_sent_per_worker);
}

TEST_F(AlgorithmsTest, PeakBytesPerRoundFollowTheAlgorithm) {
  const auto sc = Make("workers: {count: 2}\ncompare: [{algorithm: ddp, overlap: false}, diloco-h4,\n"
                       "  {name: s, algorithm: streaming-diloco, inner_steps: 4, fragments: 2, overlap_steps: 0},\n"
                       "  {name: o, algorithm: streaming-diloco, inner_steps: 4, fragments: 2, overlap_steps: 1}]\n");
  const EntryResult ddp = Run(sc, 0), diloco = Run(sc, 1), streaming = Run(sc, 2), overlapped = Run(sc, 3);
  const int64_t n = Params(sc);
  EXPECT_EQ(ddp.peak_bytes_per_round, core::RingAllReduceBytesPerRank(n + 3, 2, 0));  // every step (+ loss, votes)
  EXPECT_EQ(diloco.peak_bytes_per_round, core::RingAllReduceBytesPerRank(n + 3, 2, 0));
  // Two fragments: about half of DiLoCo's peak (the embeddings make fragment 0 the larger), with
  // or without overlap (an overlapped all-reduce counts for the round that started it).
  EXPECT_LT(streaming.peak_bytes_per_round, 0.8 * diloco.peak_bytes_per_round);
  EXPECT_GT(streaming.peak_bytes_per_round, 0.3 * diloco.peak_bytes_per_round);
  EXPECT_EQ(overlapped.peak_bytes_per_round, streaming.peak_bytes_per_round);
}

TEST_F(AlgorithmsTest, DyluWithEqualSpeedsIsDiloco) {
  const auto sc = Make("workers: {count: 3}\ncompare: [diloco-h4, {name: dylu, algorithm: diloco, inner_steps: 4, dylu: true}]\n");
  const EntryResult diloco = Run(sc, 0), dylu = Run(sc, 1);
  const auto a = Lines(Slurp(dir_ / "out" / "diloco-h4" / "metrics.jsonl"));
  const auto b = Lines(Slurp(dir_ / "out" / "dylu" / "metrics.jsonl"));
  ASSERT_EQ(a.size(), b.size());
  // The step times ride in the all-reduce, which moves the ring's chunk boundaries: equal to rounding.
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i].at("train_loss").get<double>(), b[i].at("train_loss").get<double>(), 1e-5) << i;
  }
  EXPECT_NEAR(dylu.final_val_loss, diloco.final_val_loss, 1e-5);
  EXPECT_EQ(dylu.tokens, diloco.tokens);
  // No worker's inner steps changed (the outer steps record the plan: H for everyone).
  const std::string events = Slurp(dir_ / "out" / "dylu" / "events.jsonl");
  EXPECT_EQ(events.find("\"type\":\"inner_steps\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"inner_steps\":[4,4,4]"), std::string::npos) << events;
}

TEST_F(AlgorithmsTest, DyluGivesASlowWorkerFewerInnerStepsSoNobodyWaits) {
  const auto sc = Make("workers: {count: 2, speed: [1, 0.5]}\n"
                       "compare: [{name: wait, algorithm: diloco, inner_steps: 4}, {name: dylu, algorithm: diloco,"
                       " inner_steps: 4, dylu: true}]\n");
  const EntryResult wait = Run(sc, 0), dylu = Run(sc, 1);
  const std::string events = Slurp(dir_ / "out" / "dylu" / "events.jsonl");
  EXPECT_NE(events.find("\"inner_steps\":2"), std::string::npos) << events;  // half speed: H / 2 from round 2
  EXPECT_NE(events.find("\"worker\":1"), std::string::npos);
  EXPECT_LT(dylu.virtual_time_s, wait.virtual_time_s);
  EXPECT_GT(dylu.compute_utilization, wait.compute_utilization);
  EXPECT_EQ(dylu.tokens, wait.tokens - 2 * 4 * 64 * 2);  // worker 1 skips 2 steps in rounds 2 and 3
}

TEST_F(AlgorithmsTest, PlanCountsStreamingAndCompressedBytesAsTheTrainerSends) {
  // One definition of fragments, overlap and formats: the planner's bytes for these entries equal
  // the emulated run's (fragments are whole blocks in the trainer, even shares in the planner: the
  // same total per H steps), and its time is close.
  const auto sc = Make("workers: {count: 4}\ncompare: [\n"
                       "  {name: int8, algorithm: diloco, inner_steps: 4, outer_gradient: int8},\n"
                       "  {name: s, algorithm: streaming-diloco, inner_steps: 4, fragments: 2, overlap_steps: 1,"
                       " outer_gradient: bf16}]\n",
                       "network: {profile: internet-1g}\n");
  auto plan = tools::MakePlan(sc, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->rows.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const EntryResult run = Run(sc, i);
    EXPECT_EQ(plan->rows[i].syncs, run.outer_syncs) << run.name;
    EXPECT_NEAR(plan->rows[i].bytes_per_worker / run.bytes_sent_per_worker, 1.0, 0.01) << run.name;
    EXPECT_NEAR(plan->rows[i].time_s / run.virtual_time_s, 1.0, 0.05) << run.name;
  }
}

// The planner's asynchronous row: the same number of updates, and bytes and time close to the
// emulated run's (the run also sends goodbyes and the pushes the budget stopped).
TEST_F(AlgorithmsTest, PlanPredictsAsyncUpdatesTimeAndBytes) {
  const auto sc = Make("workers: {count: 4, speed: [1, 1, 1, 0.5]}\n"
                       "compare: [{name: a, algorithm: async-diloco, inner_steps: 4, outer_gradient: int8}]\n",
                       "network: {profile: home-100m}\n");
  auto plan = tools::MakePlan(sc, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const EntryResult run = Run(sc);
  EXPECT_EQ(plan->rows[0].syncs, run.outer_syncs);
  EXPECT_NEAR(plan->rows[0].bytes_per_worker / run.bytes_sent_per_worker, 1.0, 0.10);
  EXPECT_NEAR(plan->rows[0].time_s / run.virtual_time_s, 1.0, 0.10);
}

// The planner predicts each entry's own collective: over a 50 ms network among 6 workers, DDP's
// ring pays 2(M-1) latencies per step and two-phase 2, and both predictions match the emulator.
TEST_F(AlgorithmsTest, PlanPredictsEachEntrysCollective) {
  const auto sc = Make("workers: {count: 6}\ncompare: [{algorithm: ddp, overlap: false},"
                       " {algorithm: ddp, overlap: false, name: tp, collective: two-phase},"
                       " {algorithm: ddp, overlap: false, name: st, collective: star}]\n",
                       "network: {profile: internet-1g}\n");
  auto plan = tools::MakePlan(sc, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->rows.size(), 3u);
  EXPECT_LT(plan->rows[1].time_s, plan->rows[0].time_s * 0.6);
  EXPECT_EQ(plan->rows[1].bytes_per_worker, plan->rows[0].bytes_per_worker);
  for (size_t i = 0; i < 3; ++i) {
    const EntryResult run = Run(sc, i);
    EXPECT_NEAR(plan->rows[i].time_s / run.virtual_time_s, 1.0, 0.10) << sc.compare[i].name;
  }
}

TEST_F(AlgorithmsTest, StreamingDilocoWithLeavesCrashesAndJoins) {
  const auto sc = Make("workers: {count: 4}\n"
                       "faults: [{type: leave, worker: 3, at_step: 3}, {type: join, worker: 3, at_step: 6},\n"
                       "         {type: crash, worker: 1, at_step: 5}, {type: join, worker: 1, at_step: 10}]\n"
                       "compare: [{name: s, algorithm: streaming-diloco, inner_steps: 4, fragments: 2, overlap_steps: 1,"
                       " outer_gradient: int8}]\n");
  const EntryResult r = Run(sc);
  EXPECT_LT(r.final_val_loss, std::log(256.0));
  const std::string events = Slurp(dir_ / "out" / "s" / "events.jsonl");
  for (const char* e : {"\"join\"", "\"crash\"", "\"leave\""}) EXPECT_NE(events.find(e), std::string::npos) << e;
  EXPECT_EQ(r.outer_syncs, 6);
}

// Asynchronous outer updates: with one worker the server applies each pseudo-gradient as DiLoCo's
// outer step would (delayed Nesterov with N = 1 is Nesterov), so the run is DiLoCo's, line for line.
TEST_F(AlgorithmsTest, AsyncWithOneWorkerIsDilocoWithOneWorker) {
  const auto sc = Make("workers: {count: 1}\ncompare: [diloco-h4, async-diloco-h4]\n");
  const EntryResult diloco = Run(sc, 0), async = Run(sc, 1);
  const auto a = Lines(Slurp(dir_ / "out" / "diloco-h4" / "metrics.jsonl"));
  const auto b = Lines(Slurp(dir_ / "out" / "async-diloco-h4" / "metrics.jsonl"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at("train_loss").get<double>(), b[i].at("train_loss").get<double>()) << "line " << i;
    EXPECT_EQ(a[i].value("val_loss", -1.0), b[i].value("val_loss", -1.0)) << "line " << i;
  }
  EXPECT_EQ(async.final_val_loss, diloco.final_val_loss);
  EXPECT_EQ(async.outer_syncs, diloco.outer_syncs);
  EXPECT_EQ(async.tokens, diloco.tokens);
  EXPECT_EQ(async.bytes_sent_per_worker, 0);  // its server is beside it: nothing crosses the network
}

// A straggler at half speed: synchronous DiLoCo waits for it every round; asynchronous workers do
// not, and the fast ones contribute more of the same token budget. With DyLU the straggler is
// given H/2 inner steps. (Outer lr 0.35: delayed Nesterov at 0.7 overshoots on this 12-step run.)
TEST_F(AlgorithmsTest, AsyncWorkersDoNotWaitForAStraggler) {
  const auto sc = Make("workers: {count: 3, speed: [1, 1, 0.5]}\n"
                       "compare: [diloco-h4, {name: async, algorithm: async-diloco, inner_steps: 4, outer_lr: 0.35},"
                       " {name: dylu, algorithm: async-diloco, inner_steps: 4, outer_lr: 0.35, dylu: true}]\n");
  const EntryResult wait = Run(sc, 0), async = Run(sc, 1), dylu = Run(sc, 2);
  EXPECT_LT(async.virtual_time_s, 0.8 * wait.virtual_time_s);
  EXPECT_GT(async.compute_utilization, wait.compute_utilization);
  // The budget is DiLoCo's tokens, applied in updates of H steps; steps a worker was still taking
  // when the budget ran out are counted as trained but never applied.
  EXPECT_EQ(async.outer_syncs, 3 * 12 / 4);
  EXPECT_GE(async.tokens, wait.tokens);
  EXPECT_LT(async.tokens, wait.tokens + 2 * 4 * 4 * sc.model.seq_len);
  EXPECT_LT(async.final_val_loss, std::log(256.0));
  const auto events = Lines(Slurp(dir_ / "out" / "async" / "events.jsonl"));
  std::vector<int> pushes(3, 0);
  int64_t max_staleness = 0;
  for (const auto& e : events) {
    if (e.at("type") != "outer_sync") continue;
    ++pushes[e.at("worker").get<size_t>()];
    max_staleness = std::max(max_staleness, e.at("staleness").get<int64_t>());
  }
  EXPECT_GT(pushes[0], pushes[2]);
  EXPECT_GT(pushes[1], pushes[2]);
  EXPECT_GT(max_staleness, 0);
  bool halved = false;
  for (const auto& e : Lines(Slurp(dir_ / "out" / "dylu" / "events.jsonl"))) {
    if (e.at("type") == "inner_steps") halved = halved || (e.at("worker") == 2 && e.at("inner_steps") == 2);
    if (e.at("type") == "outer_sync" && e.at("worker") != 2) {
      EXPECT_EQ(e.at("inner_steps"), 4);
    }
  }
  EXPECT_TRUE(halved);
  EXPECT_LT(dylu.final_val_loss, std::log(256.0));
}

// Pseudo-gradients travel through the outer_gradient codec: int8 pushes are a quarter of fp32's
// (plus a scale per block); the parameters sent back stay fp32.
TEST_F(AlgorithmsTest, AsyncPushesAreEncoded) {
  const auto sc = Make("workers: {count: 2}\ncompare: [{name: fp32, algorithm: async-diloco, inner_steps: 4},"
                       " {name: int8, algorithm: async-diloco, inner_steps: 4, outer_gradient: int8}]\n");
  Run(sc, 0);
  Run(sc, 1);
  auto worker1_sent = [&](const char* entry) {
    const auto lines = Lines(Slurp(dir_ / "out" / entry / "metrics.jsonl"));
    return lines.back().at("workers").at(1).at("bytes_sent").get<int64_t>();
  };
  // What worker 1 had sent by its last step: its three pushes, with a header each.
  const int64_t n = Params(sc), pushes = 3, header = 24;
  const core::Codec int8(*core::ParseCodec("int8"));
  EXPECT_EQ(worker1_sent("fp32"), pushes * (header + 4 * n));
  EXPECT_EQ(worker1_sent("int8"), pushes * (header + int8.EncodedBytes(n)));
}

// Workers leave and crash; the survivors spend the budget and the server ends when all said goodbye.
TEST_F(AlgorithmsTest, AsyncGoesOnWithoutWorkersThatLeave) {
  const auto sc = Make("workers: {count: 3}\n"
                       "faults: [{type: leave, worker: 2, at_step: 3}, {type: crash, worker: 1, at_step: 6}]\n"
                       "compare: [{name: async-diloco-h2, algorithm: async-diloco, inner_steps: 2, outer_lr: 0.35}]\n");
  const EntryResult r = Run(sc);
  EXPECT_EQ(r.outer_syncs, 3 * 12 / 2);  // the survivors spend the whole budget
  EXPECT_LT(r.final_val_loss, std::log(256.0));
  const std::string events = Slurp(dir_ / "out" / "async-diloco-h2" / "events.jsonl");
  for (const char* e : {"\"crash\"", "\"leave\""}) EXPECT_NE(events.find(e), std::string::npos) << e;
}

TEST_F(AlgorithmsTest, AsyncRefusesJoinsAndFaultsOfTheServersWorker) {
  for (const char* faults : {"[{type: join, worker: 1, at_step: 3}]", "[{type: leave, worker: 0, at_step: 3}]"}) {
    auto sc = core::ParseScenario(std::string("name: a\nworkers: {count: 3}\nfaults: ") + faults +
                                  "\ncompare: [async-diloco-h4]\n", "a.yaml");
    ASSERT_FALSE(sc.ok()) << faults;
    EXPECT_NE(sc.status().message().find("a.yaml:"), std::string::npos) << sc.status().message();
    EXPECT_NE(sc.status().message().find("worker 0 hosts the server"), std::string::npos) << sc.status().message();
  }
}

}  // namespace
}  // namespace narrows::trainer
