// Hierarchical DiLoCo (inner: ddp, trainer/algorithms/island_inner.h) and SPARTA (sparta.cc):
// against hand computations and the identities they reduce to, their WAN bytes, their planner
// predictions against the emulator, and what they refuse.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "core/collectives.h"
#include "tests/trainer/distributed_fixture.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/replay_command.h"
#include "tools/cli/report_command.h"
#include "tools/cli/run_command.h"
#include "trainer/algorithms/sparta_subset.h"

namespace narrows::trainer {
namespace {

class IslandSparseTest : public DistributedTest {
 protected:
  // Runs `sc` with the command's own run (links.json and summary.json written) and returns the
  // summary; `links` gets each entry's links by name.
  nlohmann::json RunAll(const core::Scenario& sc) {
    tools::RunOptions quiet;
    quiet.progress = nullptr;
    const core::Status s = tools::RunScenario(sc, quiet);
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::ifstream in(fs::path(sc.output.dir) / sc.name / "summary.json");
    return nlohmann::json::parse(in);
  }
  // The bytes an entry's run sent over the links whose names start with `prefix`.
  double LinkBytes(const core::Scenario& sc, const std::string& entry, const std::string& prefix) {
    std::ifstream in(fs::path(sc.output.dir) / sc.name / entry / "links.json");
    const auto links = nlohmann::json::parse(in);
    double bytes = 0;
    for (const auto& l : links.at("links")) {
      if (l.at("link").get<std::string>().rfind(prefix, 0) == 0) bytes += l.at("bytes").get<double>();
    }
    return bytes;
  }
  // The model's parameters (the byte-level corpus: 256 tokens).
  static int64_t Params(const core::Scenario& sc) {
    core::ModelSpec m = sc.model;
    m.vocab_size = 256;
    return CostOf(m).params;
  }
  static constexpr const char* kIslands =
      "network: {topology: islands, islands: [[0, 1], [2, 3]], profile: internet-1g, intra: {profile: dc-100g}}\n";
};

// The subset is a function of the seed and the step: the same wherever it is drawn, k distinct
// indices in order, another at another step or seed, and over many steps every index about as often.
TEST(SpartaSubsetTest, IsTheSameOnEveryWorkerDistinctAndUniform) {
  const int64_t n = 1000, k = SpartaSubsetSize(0.01, n);
  EXPECT_EQ(k, 10);
  EXPECT_EQ(SpartaSubsetSize(1e-9, n), 1);
  EXPECT_EQ(SpartaSubsetSize(1.0, n), n);
  const auto a = SpartaSubset(7, 12, k, n);
  EXPECT_EQ(a, SpartaSubset(7, 12, k, n));  // another worker, another process: the same
  ASSERT_EQ(a.size(), static_cast<size_t>(k));
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), a.size());
  EXPECT_GE(a.front(), 0);
  EXPECT_LT(a.back(), n);
  EXPECT_NE(a, SpartaSubset(7, 13, k, n));
  EXPECT_NE(a, SpartaSubset(8, 12, k, n));
  std::vector<int> hits(static_cast<size_t>(n), 0);
  for (int64_t step = 0; step < 5000; ++step) {
    for (int64_t i : SpartaSubset(3, step, k, n)) ++hits[static_cast<size_t>(i)];
  }
  // 50 expected per index; a binomial's 5-sigma band.
  for (int h : hits) {
    EXPECT_GT(h, 15);
    EXPECT_LT(h, 85);
  }
  const auto all = SpartaSubset(1, 1, n, n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], i);
}

// With the whole of the parameters as the subset, SPARTA averages the replicas after every AdamW
// step: local SGD with H = 1 (DiLoCo with outer SGD at lr 1), to float rounding. Each step's
// all-reduce carries the subset, the contributor count and one vote per worker: exactly the ring's
// bytes for that many floats.
TEST_F(IslandSparseTest, SpartaWithTheWholeSubsetIsLocalSgdEveryStepAndSendsTheSubset) {
  const core::Scenario sc = Make("workers: {count: 2}\ncompare: [{algorithm: sparta, share: 1.0}, local-sgd-h1, "
                                 "{algorithm: sparta, share: 0.01, name: sparse}]\n");
  const EntryResult whole = Run(sc, 0), local = Run(sc, 1), sparse = Run(sc, 2);
  EXPECT_NEAR(whole.final_val_loss, local.final_val_loss, 1e-4);
  EXPECT_EQ(whole.outer_syncs, 12);
  const int64_t k = SpartaSubsetSize(0.01, Params(sc));
  const double per_step = static_cast<double>(core::RingAllReduceBytesPerRank(k + 1 + 2, 2, 0));
  EXPECT_DOUBLE_EQ(sparse.bytes_sent_per_worker, 12 * per_step);
  // Most of the replicas drift apart: the sparse run differs from both.
  EXPECT_NE(sparse.final_val_loss, whole.final_val_loss);
}

// SPARTA beside DiLoCo: every H steps the outer step too; its bytes are the subset's every step plus
// the whole pseudo-gradient's every H.
TEST_F(IslandSparseTest, SpartaBesideDilocoAddsTheOuterStep) {
  const core::Scenario sc = Make("workers: {count: 2}\ncompare: [{algorithm: sparta, share: 0.01, inner_steps: 4}]\n");
  EXPECT_EQ(sc.compare[0].name, "sparta-diloco-h4");
  const EntryResult r = Run(sc, 0);
  const int64_t k = SpartaSubsetSize(0.01, Params(sc));
  const double expected = 12.0 * static_cast<double>(core::RingAllReduceBytesPerRank(k + 3, 2, 0)) +
                          3.0 * static_cast<double>(core::RingAllReduceBytesPerRank(Params(sc) + 3, 2, 0));
  EXPECT_DOUBLE_EQ(r.bytes_sent_per_worker, expected);
  // Sizes only: the same collectives without training (the subset's every step, the whole every H).
  const nlohmann::json timed = SizesOnly(sc);
  ASSERT_EQ(timed["results"].size(), 1u);
  EXPECT_NEAR(timed["results"][0]["bytes_sent_per_worker"].get<double>(), expected, 0.01 * expected);
  auto bad = core::ParseScenario("compare: [{algorithm: sparta, every: 3, inner_steps: 4}]\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compare[0].inner_steps: must be a multiple of every (3)"), std::string::npos)
      << bad.status().ToString();
  bad = core::ParseScenario("compare: [{algorithm: sparta, share: 0}]\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compare[0].share"), std::string::npos) << bad.status().ToString();
}

// Hierarchical DiLoCo with one worker per island is DiLoCo: an island of one takes its own steps.
// With two per island, the island's members stay one replica (their islands' rings make their
// gradients one), and the WAN carries one island's update per outer step: the ring among the two
// leaders of the pseudo-gradient, the count and the votes, and nothing else (the inner rings stay
// inside). Flat DiLoCo's ring crosses the WAN with every worker's chunks.
TEST_F(IslandSparseTest, HierarchicalDilocoCrossesTheWanWithOneIslandsUpdate) {
  core::Scenario sc = Make("workers: {count: 4}\ncompare: [{algorithm: diloco, inner_steps: 4, inner: ddp, "
                           "collective: hierarchical}, {algorithm: diloco, inner_steps: 4, collective: ring}]\n",
                           kIslands);
  EXPECT_EQ(sc.compare[0].name, "hierarchical-diloco-h4");
  const nlohmann::json summary = RunAll(sc);
  const int64_t count = Params(sc) + 1 + 4;
  const double wan_up = LinkBytes(sc, "hierarchical-diloco-h4", "wan-up");
  // On the links, TCP/IPv4's headers (with timestamps): 52 bytes in every 1,500-byte packet.
  const double wire = 1500.0 / 1448.0;
  EXPECT_NEAR(wan_up, wire * 3.0 * static_cast<double>(core::RingAllReduceBytesPerRank(count, 2, 0) +
                                                       core::RingAllReduceBytesPerRank(count, 2, 1)),
              1e-6 * wan_up);
  // A flat ring's chunks cross both WAN hops at each of its 2(M - 1) steps: 1.5x as many bytes.
  EXPECT_NEAR(LinkBytes(sc, "diloco-h4", "wan-up"), 1.5 * wan_up, 0.01 * wan_up);
  ASSERT_EQ(summary.at("results").size(), 2u);
  // summary.json's wan_bytes are those links' bytes; a round's peak is its outer step alone (the
  // island's reduce to its leader, the leaders' ring, the broadcast back), not its island rings.
  const auto& hier = summary["results"][0];
  EXPECT_DOUBLE_EQ(hier["network"]["wan_bytes"].get<double>(), wan_up);
  const double outer_step = static_cast<double>(core::RingAllReduceBytesPerRank(count, 2, 0)) + 2.0 * 4.0 * count;
  EXPECT_LE(hier["peak_bytes_per_round"].get<double>(), outer_step);
  EXPECT_GE(hier["peak_bytes_per_round"].get<double>(), 4.0 * count);
  EXPECT_LT(hier["peak_bytes_per_round"].get<double>(), hier["bytes_sent_per_worker"].get<double>() / 3.0);
  // The report's summary has the same column (its bytes per worker count the islands' own links).
  auto report = tools::WriteReport({(fs::path(sc.output.dir) / sc.name).string()}, "");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_NE(Slurp(*report).find("across islands (all WAN links, whole run)"), std::string::npos);

  core::Scenario singles = Make("workers: {count: 2}\ncompare: [{algorithm: diloco, inner_steps: 4, inner: ddp}, "
                                "diloco-h4]\n",
                                "network: {topology: islands, islands: [[0], [1]], profile: internet-1g, "
                                "intra: {profile: dc-100g}}\n");
  EXPECT_EQ(Run(singles, 0).final_val_loss, Run(singles, 1).final_val_loss);
}

// With an encoded outer gradient the islands sum in fp32 and only their leaders encode: the WAN
// carries the codec's ring between the two leaders per outer step, and nothing else.
TEST_F(IslandSparseTest, AnEncodedOuterGradientCrossesTheWanOnceEncoded) {
  core::Scenario sc = Make("workers: {count: 4}\ncompare: [{algorithm: diloco, inner_steps: 4, inner: ddp, "
                           "collective: hierarchical, outer_gradient: int8}]\n",
                           kIslands);
  const nlohmann::json summary = RunAll(sc);
  const int64_t count = Params(sc) + 1 + 4, tail = 1 + 4;  // the count and the votes travel exactly
  auto spec = core::ParseCodec("int8");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const core::Codec codec(*spec);
  const double ring = static_cast<double>(
      core::EncodedAllReduceBytesPerRank(codec, count, tail, 2, 0, core::AllReduceAlgorithm::kRing) +
      core::EncodedAllReduceBytesPerRank(codec, count, tail, 2, 1, core::AllReduceAlgorithm::kRing));
  const double wan_up = LinkBytes(sc, sc.compare[0].name, "wan-up");
  EXPECT_NEAR(wan_up, 1500.0 / 1448.0 * 3.0 * ring, 1e-6 * wan_up);
  EXPECT_LT(ring, 0.3 * 2.0 * 4.0 * static_cast<double>(count));  // int8: about a quarter of fp32's
  EXPECT_EQ(summary["results"][0]["collective"], "hierarchical");
  EXPECT_LT(summary["results"][0]["final_val_loss"].get<double>(), std::log(256.0));
}

// An island trains as one data-parallel replica: hierarchical DiLoCo over a single island of two
// workers (no islands: the whole group is one) with H = the whole run has DDP's losses.
TEST_F(IslandSparseTest, OneIslandWithAnOuterStepAtTheEndIsDdp) {
  const core::Scenario sc = Make("workers: {count: 2}\ncompare: [{algorithm: diloco, inner_steps: 12, inner: ddp, "
                                 "outer_optimizer: sgd, outer_lr: 1.0}, {algorithm: ddp, overlap: false}]\n");
  const EntryResult h = Run(sc, 0), ddp = Run(sc, 1);
  EXPECT_NEAR(h.final_val_loss, ddp.final_val_loss, 1e-5);
}

// Sizes only times hierarchical DiLoCo's island rings every step beside its outer steps: the trained
// run's bytes and time; what it cannot model (DyLU's rounds) is refused, named.
TEST_F(IslandSparseTest, SizesOnlyTimesTheIslandRings) {
  core::Scenario sc = Make("workers: {count: 4}\ncompare: [{algorithm: diloco, inner_steps: 4, inner: ddp, "
                           "collective: ring}, {algorithm: sparta, share: 0.01}]\n",
                           kIslands);
  const EntryResult h = Run(sc, 0), sparse = Run(sc, 1);
  const nlohmann::json timed = SizesOnly(sc);
  const auto& rows = timed["results"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NEAR(rows[0]["bytes_sent_per_worker"].get<double>(), h.bytes_sent_per_worker, 0.01 * h.bytes_sent_per_worker);
  EXPECT_NEAR(rows[0]["time_s"].get<double>(), h.virtual_time_s, 0.05 * h.virtual_time_s);
  // SPARTA's subset carries the count and the votes too: its bytes exact to 1%.
  EXPECT_NEAR(rows[1]["bytes_sent_per_worker"].get<double>(), sparse.bytes_sent_per_worker,
              0.01 * sparse.bytes_sent_per_worker);
  core::Scenario dylu = Make("workers: {count: 2}\ncompare: [{algorithm: diloco, inner_steps: 4, dylu: true}]\n");
  tools::RunOptions quiet;
  quiet.progress = nullptr;
  auto refused = tools::RunSizesOnly(dylu, quiet);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--sizes-only does not model dylu"), std::string::npos)
      << refused.status().ToString();
}

// The hierarchical collective without islands is refused, named where it is asked for.
TEST_F(IslandSparseTest, TheHierarchicalCollectiveNeedsIslands) {
  auto bad = core::ParseScenario("compare: [{algorithm: diloco, collective: hierarchical}]\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compare[0].collective: hierarchical reduces inside each island"),
            std::string::npos)
      << bad.status().ToString();
  bad = core::ParseScenario("collective: hierarchical\ncompare: [ddp]\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("collective: hierarchical reduces inside each island"), std::string::npos)
      << bad.status().ToString();
}

TEST_F(IslandSparseTest, HierarchicalDilocoRefusesWhatWouldSplitAnIsland) {
  for (const auto& [yaml, error] : std::vector<std::pair<std::string, std::string>>{
           {"workers: {count: 4}\nfaults: [{type: leave, worker: 1, at_step: 6}]\n"
            "compare: [{algorithm: diloco, inner_steps: 4, inner: ddp}]\n",
            "compare[0].inner: inner: ddp takes leaves and crashes at outer steps only (a multiple of 4 steps); "
            "worker 1 departs at step 6"},
           {"compare: [{algorithm: diloco, inner: ddp, dylu: true}]\n", "compare[0].dylu"},
           {"compare: [{algorithm: diloco, inner: ddp, drop_probability: 0.1}]\n", "compare[0].drop_probability"},
           {"compare: [{algorithm: diloco, inner: allreduce}]\n", "compare[0].inner"}}) {
    auto sc = core::ParseScenario(yaml, "b.yaml");
    ASSERT_FALSE(sc.ok()) << yaml;
    EXPECT_NE(sc.status().message().find(error), std::string::npos) << sc.status().ToString();
  }
}

// The planner predicts both within 5% of the emulator's virtual time (modelled compute).
TEST_F(IslandSparseTest, ThePlannerPredictsBothAsTheEmulatorRunsThem) {
  core::Scenario sc = Make("workers: {count: 4}\ncompare: [{algorithm: diloco, inner_steps: 4, inner: ddp, "
                           "collective: hierarchical}, {algorithm: streaming-diloco, inner_steps: 4, fragments: 2, "
                           "overlap_steps: 1, inner: ddp, collective: hierarchical}, "
                           "{algorithm: sparta, share: 0.01}, {algorithm: sparta, share: 0.01, inner_steps: 4}, "
                           "{algorithm: diloco, inner_steps: 4, inner: ddp, collective: hierarchical, outer_gradient: int8, "
                           "name: h-int8}, {algorithm: diloco, inner_steps: 4, inner: ddp, collective: hierarchical, "
                           "outer_gradient: {format: topk, topk: 0.1}, name: h-topk}]\n",
                           kIslands);
  auto plan = tools::MakePlan(sc, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->rows.size(), sc.compare.size());
  for (size_t i = 0; i < sc.compare.size(); ++i) {
    const EntryResult r = Run(sc, i);
    SCOPED_TRACE(sc.compare[i].name);
    EXPECT_NEAR(plan->rows[i].time_s, r.virtual_time_s, 0.05 * r.virtual_time_s);
    EXPECT_NEAR(plan->rows[i].bytes_per_worker, r.bytes_sent_per_worker, 0.05 * r.bytes_sent_per_worker);
  }
}

// Their membership traces, read from their events as a deployment's would be, replay in the
// emulator bit for bit: SPARTA's rounds (outer_sync events, here with a worker that crashes) and
// DeMo's steps (DDP's form).
TEST_F(IslandSparseTest, SpartaAndDemoReplayTheirMembershipTraces) {
  const core::Scenario sc = Make("workers: {count: 3}\ncompare: [{algorithm: sparta, share: 0.01}, demo]\n");
  const core::Scenario crash = Make("workers: {count: 3}\nfaults: [{type: crash, worker: 2, at_step: 5}]\n"
                                    "compare: [{algorithm: sparta, share: 0.01}]\n");
  for (const auto& [scenario, i] : {std::pair{&crash, size_t{0}}, std::pair{&sc, size_t{1}}}) {
    SCOPED_TRACE(scenario->compare[i].name);
    const EntryResult live = Run(*scenario, i);
    auto trace = i == 0 ? tools::ReadMembershipTrace(Events(scenario->compare[i].name), "events.jsonl")
                        : tools::ReadStepMembershipTrace(Events(scenario->compare[i].name), "events.jsonl", 3, 12);
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    ExperimentOptions replay;
    replay.membership = Membership::kReplay;
    replay.trace = std::make_shared<const MembershipTrace>(*trace);
    EXPECT_EQ(Run(*scenario, i, replay).final_val_loss, live.final_val_loss);
  }
}

// A worker that crashes and joins again receives a member's parameters (its own momentum or
// optimiser state lost) and trains on with the others.
TEST_F(IslandSparseTest, SpartaAndDemoTakeAJoinerBack) {
  const core::Scenario sc = Make("workers: {count: 3}\nfaults: [{type: crash, worker: 2, at_step: 4}, "
                                 "{type: join, worker: 2, at_step: 8}]\n"
                                 "compare: [{algorithm: sparta, share: 0.01}, demo, {algorithm: sparta, share: 0.01, "
                                 "inner_steps: 4}]\n");
  for (size_t i = 0; i < sc.compare.size(); ++i) {
    SCOPED_TRACE(sc.compare[i].name);
    const EntryResult r = Run(sc, i);
    EXPECT_TRUE(std::isfinite(r.final_val_loss));
    EXPECT_LT(r.final_val_loss, std::log(256.0));
    bool joined = false;
    for (const auto& e : Events(sc.compare[i].name)) joined = joined || e.value("type", "") == "join";
    EXPECT_TRUE(joined);
  }
}

}  // namespace
}  // namespace narrows::trainer
