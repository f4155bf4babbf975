// DiPaCo: its identity with DiLoCo on one path, paths that share modules, routing by domain,
// synchronisation per module, the planner's prediction, and what it refuses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/collectives.h"
#include "tests/trainer/algorithms_fixture.h"
#include "tools/cli/plan_command.h"
#include "trainer/algorithms/paths.h"

namespace narrows::trainer {
namespace {

TEST_F(AlgorithmsTest, DipacoWithOnePathIsDilocoStepForStep) {
  // One level of one module: every worker trains the one path on all the data, and every module is
  // averaged among all of them, with equal token weights: DiLoCo, bit for bit.
  const auto sc = Make("workers: {count: 2}\ncompare: [diloco-h4, {name: p, algorithm: dipaco, inner_steps: 4,"
                       " levels: 1, modules: 1}]\n");
  const EntryResult diloco = Run(sc, 0), dipaco = Run(sc, 1);
  const auto a = Lines(Slurp(dir_ / "out" / "diloco-h4" / "metrics.jsonl"));
  const auto b = Lines(Slurp(dir_ / "out" / "p" / "metrics.jsonl"));
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at("train_loss").get<double>(), b[i].at("train_loss").get<double>()) << "line " << i;
    EXPECT_EQ(a[i].value("val_loss", -1.0), b[i].value("val_loss", -1.0)) << "line " << i;
  }
  EXPECT_EQ(dipaco.final_val_loss, diloco.final_val_loss);
  EXPECT_EQ(dipaco.outer_syncs, diloco.outer_syncs);
}

TEST_F(AlgorithmsTest, DipacoPathsShareModulesAlongTheirDigits) {
  const PathLayout layout{2, 3};  // 9 paths
  EXPECT_EQ(layout.paths(), 9);
  EXPECT_EQ(layout.PathOf(10), 1);
  EXPECT_EQ(layout.ModuleOf(7, 0), 1);  // 7 = 2 * 3 + 1
  EXPECT_EQ(layout.ModuleOf(7, 1), 2);
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(layout.Sharing(all, 0, 1), (std::vector<int>{1, 4, 7}));
  EXPECT_EQ(layout.Sharing(all, 1, 2), (std::vector<int>{6, 7, 8}));
  EXPECT_EQ(layout.Sharing(all, 1, 0), (std::vector<int>{0, 1, 2, 9}));  // worker 9 trains path 0 too
}

// On a corpus of two domains with by-domain sampling: the final evaluation is reported per domain
// (each on half the validation windows, so the overall loss is their mean) in the result and in
// the evaluation lines of metrics.jsonl; DiPaCo's routing event says where each domain went.
TEST_F(AlgorithmsTest, MultiDomainRunsReportLossPerDomainAndDipacoRoutingByDomain) {
  for (const char* d : {"letters", "numbers"}) {
    fs::create_directories(dir_ / "domains" / d);
    std::ofstream text(dir_ / "domains" / d / "text.txt");
    for (int i = 0; i < 3000; ++i) {
      if (d[0] == 'l') {
        text << "it is a truth universally acknowledged.\n";
      } else {
        text << i * 7919 % 10007 << " + " << i << " = " << i * 7919 % 10007 + i << "\n";
      }
    }
  }
  const auto sc = Make("workers: {count: 2}\ncompare: [diloco-h4, {name: p, algorithm: dipaco, inner_steps: 4,"
                       " levels: 1, modules: 2, document_tokens: 256, route_tokens: 64}]\n",
                       "network: {profile: home-100m}\n",
                       {"data.path=" + (dir_ / "domains").string(), "data.sampling=by-domain", "data.domain_mix=0"});
  const EntryResult r = Run(sc, 0);
  ASSERT_EQ(r.final_val_loss_by_domain.size(), 2u);
  EXPECT_EQ(r.final_val_loss_by_domain[0].first, "letters");
  EXPECT_EQ(r.final_val_loss_by_domain[1].first, "numbers");
  EXPECT_NEAR((r.final_val_loss_by_domain[0].second + r.final_val_loss_by_domain[1].second) / 2, r.final_val_loss,
              1e-5);  // float32 batch means against float64 row means
  EXPECT_NE(r.final_val_loss_by_domain[0].second, r.final_val_loss_by_domain[1].second);
  const auto lines = Lines(Slurp(dir_ / "out" / "diloco-h4" / "metrics.jsonl"));
  int with_domains = 0;
  for (const auto& l : lines) {
    if (!l.contains("val_loss")) continue;
    ++with_domains;
    EXPECT_EQ(l.at("val_loss_by_domain").size(), 2u);
  }
  EXPECT_EQ(with_domains, 3);  // steps 4, 8, 12
  Run(sc, 1);
  int routed = 0;
  for (const auto& e : Lines(Slurp(dir_ / "out" / "p" / "events.jsonl"))) {
    if (e.at("type") != "routing") continue;
    ++routed;
    const Json& by = e.at("by_domain");
    EXPECT_EQ(by.at("domains"), Json({"letters", "numbers"}));
    int64_t tokens = 0, windows = 0;
    for (const auto& row : by.at("train_tokens")) {
      for (const auto& t : row) tokens += t.get<int64_t>();
    }
    for (const auto& row : by.at("val_windows")) {
      for (const auto& t : row) windows += t.get<int64_t>();
    }
    int64_t routed_tokens = 0;
    for (const auto& t : e.at("train_tokens")) routed_tokens += t.get<int64_t>();
    EXPECT_EQ(tokens, routed_tokens);
    EXPECT_EQ(windows, 2 * 4);  // eval: 2 batches of 4
  }
  EXPECT_EQ(routed, 1);
}

TEST_F(AlgorithmsTest, DipacoSynchronisesEachModuleOnlyAmongTheWorkersWhosePathHoldsIt) {
  // 2 levels x 2 modules, one block each, 4 workers on 4 paths: each module is held by two workers,
  // the embeddings and final norm by all four. Every unit's bytes are those of a ring of its holders.
  const auto sc = Make("workers: {count: 4}\ncompare: [{name: p, algorithm: dipaco, inner_steps: 4, levels: 2,"
                       " modules: 2, document_tokens: 256, route_tokens: 64}]\n");
  const EntryResult r = Run(sc);
  core::ModelSpec model = sc.model;
  model.vocab_size = 256;
  torch::manual_seed(0);
  Gpt gpt(model, torch::kCPU);
  int64_t shared = 0, block0 = 0;
  for (const auto& s : gpt.slices()) {
    if (BlockOf(s) < 0) shared += s.numel;
    if (BlockOf(s) == 0) block0 += s.numel;  // block 1 (level 1) is the same size
  }
  const PathLayout layout{2, 2};
  int seen = 0;
  std::vector<int64_t> shard_tokens;
  int64_t all_tokens = 0;
  double weights = 0.0;
  for (const auto& e : Lines(Slurp(dir_ / "out" / "p" / "events.jsonl"))) {
    if (e.at("type") == "routing") {
      for (const auto& t : e.at("train_tokens")) {
        EXPECT_GT(t.get<int64_t>(), 0);
        shard_tokens.push_back(t.get<int64_t>());
        all_tokens += t.get<int64_t>();
      }
      // Every validation window (2 batches of 4, 64 targets each) is scored on exactly one path.
      int64_t val = 0;
      for (const auto& t : e.at("val_tokens")) val += t.get<int64_t>();
      EXPECT_EQ(val, 2 * 4 * 64);
    }
    if (e.at("type") != "module_bytes") continue;
    ++seen;
    const int w = e.at("worker");
    // A worker's pseudo-gradients weigh as its path's shard of the training tokens (one worker per
    // path here); the shards differ, so the module averages are not plain means.
    ASSERT_EQ(shard_tokens.size(), 4u);
    EXPECT_DOUBLE_EQ(e.at("shard_weight").get<double>(),
                     static_cast<double>(shard_tokens[static_cast<size_t>(layout.PathOf(w))]) / all_tokens);
    weights += e.at("shard_weight").get<double>();
    const auto& bytes = e.at("bytes_sent");
    ASSERT_EQ(bytes.size(), 3u) << e.dump();  // shared + one module per level
    EXPECT_EQ(bytes.at("shared").get<int64_t>(), 3 * core::RingAllReduceBytesPerRank(shared + 1, 4, w)) << w;
    for (int level = 0; level < 2; ++level) {
      const int64_t m = layout.ModuleOf(layout.PathOf(w), level);
      const auto holders = layout.Sharing({0, 1, 2, 3}, level, m);
      ASSERT_EQ(holders.size(), 2u);
      const int position = holders[0] == w ? 0 : 1;
      const std::string name = "l" + std::to_string(level) + "m" + std::to_string(m);
      EXPECT_EQ(bytes.at(name).get<int64_t>(), 3 * core::RingAllReduceBytesPerRank(block0 + 1, 2, position)) << name;
    }
  }
  EXPECT_EQ(seen, 4);
  EXPECT_NEAR(weights, 1.0, 1e-12);
  EXPECT_NE(*std::min_element(shard_tokens.begin(), shard_tokens.end()),
            *std::max_element(shard_tokens.begin(), shard_tokens.end()));
  EXPECT_EQ(r.outer_syncs, 3);
  EXPECT_GT(r.final_val_loss, 0.0);  // the paths' token-weighted evaluation
  EXPECT_LT(r.final_val_loss, std::log(256.0));
  int evals = 0;
  for (const auto& line : Lines(Slurp(dir_ / "out" / "p" / "metrics.jsonl"))) evals += line.contains("val_loss");
  EXPECT_EQ(evals, 3);  // steps 4, 8, 12
}

TEST_F(AlgorithmsTest, PlanPredictsDipacosModuleRings) {
  const auto sc = Make("workers: {count: 4}\ncompare: [{name: p, algorithm: dipaco, inner_steps: 4, levels: 2,"
                       " modules: 2, document_tokens: 256}]\n", "network: {profile: home-100m}\n");
  auto plan = tools::MakePlan(sc, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const EntryResult run = Run(sc);
  EXPECT_EQ(plan->rows[0].syncs, run.outer_syncs);
  EXPECT_NEAR(plan->rows[0].bytes_per_worker / run.bytes_sent_per_worker, 1.0, 0.02);
  EXPECT_NEAR(plan->rows[0].time_s / run.virtual_time_s, 1.0, 0.10);
}

TEST_F(AlgorithmsTest, DipacoRefusesPathsWithoutWorkersAndFaults) {
  auto sc = core::ParseScenario("workers: {count: 3}\ncompare: [{algorithm: dipaco, levels: 2, modules: 2}]\n", "p.yaml");
  ASSERT_FALSE(sc.ok());
  EXPECT_NE(sc.status().message().find("2^2 paths need at least as many workers"), std::string::npos)
      << sc.status().message();
  sc = core::ParseScenario("model: {n_layers: 3}\nworkers: {count: 4}\ncompare: [{algorithm: dipaco}]\n", "p.yaml");
  ASSERT_FALSE(sc.ok());
  EXPECT_NE(sc.status().message().find("multiple of levels"), std::string::npos) << sc.status().message();
  sc = core::ParseScenario("workers: {count: 4}\nfaults: [{type: leave, worker: 1, at_step: 3}]\n"
                           "compare: [{algorithm: dipaco}]\n", "p.yaml");
  ASSERT_FALSE(sc.ok());
  EXPECT_NE(sc.status().message().find("dipaco does not support faults"), std::string::npos);
}

}  // namespace
}  // namespace narrows::trainer
