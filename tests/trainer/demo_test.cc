// DeMo (trainer/algorithms/demo.cc): its chunked DCT, top-k and mean of what was sent against hand
// computations, the sign update every worker applies alike, its bytes on the wire, and the
// planner's prediction against the emulator.
#include <gtest/gtest.h>

#include "core/all_gather.h"
#include "tests/trainer/distributed_fixture.h"
#include "tools/cli/plan_command.h"
#include "trainer/algorithms/demo_dct.h"
#include "trainer/gpt.h"

namespace narrows::trainer {
namespace {

TEST(DemoDctTest, ChunksAreTheLargestDivisorsAndTheTransformIsOrthonormal) {
  EXPECT_EQ(ChunkLength(128, 64), 64);
  EXPECT_EQ(ChunkLength(384, 64), 64);
  EXPECT_EQ(ChunkLength(6, 4), 3);
  EXPECT_EQ(ChunkLength(7, 4), 1);
  EXPECT_EQ(ChunkLength(3, 64), 3);
  const torch::Tensor d = DctMatrix(5, torch::kFloat64);
  EXPECT_TRUE(torch::allclose(d.matmul(d.t()), torch::eye(5, torch::kFloat64), 1e-12, 1e-12));
  // Row 0 is the mean's direction, 1/sqrt(n) each; row 1 a half cosine.
  EXPECT_NEAR(d[0][3].item<double>(), 1.0 / std::sqrt(5.0), 1e-12);
  EXPECT_NEAR(d[1][0].item<double>(), std::sqrt(2.0 / 5.0) * std::cos(M_PI / 10.0), 1e-12);

  // A [6, 8] tensor in chunks of 3 x 4: 2 x 2 chunks of 12 coefficients; decode(encode(x)) = x.
  const ChunkDct t({6, 8}, 4, torch::kFloat32);
  EXPECT_EQ(t.chunks(), 4);
  EXPECT_EQ(t.elements(), 12);
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({6, 8});
  const torch::Tensor c = t.Encode(x);
  ASSERT_EQ(c.sizes(), (std::vector<int64_t>{4, 12}));
  EXPECT_TRUE(torch::allclose(t.Decode(c), x, 1e-5, 1e-5));
  // A chunk that is constant has its DC coefficient alone: sqrt(12) times the value.
  torch::Tensor y = torch::zeros({6, 8});
  y.index_put_({torch::indexing::Slice(3, 6), torch::indexing::Slice(0, 4)}, 2.0);  // chunk (1, 0)
  const torch::Tensor cy = t.Encode(y);
  EXPECT_NEAR(cy[2][0].item<float>(), 2.0 * std::sqrt(12.0), 1e-5);
  EXPECT_NEAR(cy.abs().sum().item<float>(), 2.0 * std::sqrt(12.0), 1e-4);
  // A vector: chunks of 4 of a length 8.
  const ChunkDct v({8}, 4, torch::kFloat32);
  EXPECT_EQ(v.chunks(), 2);
  EXPECT_EQ(v.elements(), 4);
  const torch::Tensor xv = torch::randn({8});
  EXPECT_TRUE(torch::allclose(v.Decode(v.Encode(xv)), xv, 1e-5, 1e-5));
}

// Top-k by magnitude per chunk; the mean of what two workers sent: a coefficient both sent is their
// mean, one that one sent is its value, the others zero; the update's direction is its decode's sign.
TEST(DemoDctTest, TopKAndTheMeanOfWhatWasSentByHand) {
  const torch::Tensor c = torch::tensor({{0.5f, -3.0f, 1.0f, 2.0f}, {-1.0f, 0.1f, 0.2f, 0.0f}});
  const ChunkTopK top = TopKPerChunk(c, 2);
  EXPECT_EQ(top.index[0][0].item<int64_t>(), 1);
  EXPECT_EQ(top.index[0][1].item<int64_t>(), 3);
  EXPECT_EQ(top.index[1][0].item<int64_t>(), 0);
  EXPECT_EQ(top.index[1][1].item<int64_t>(), 2);
  EXPECT_FLOAT_EQ(top.value[0][0].item<float>(), -3.0f);
  const torch::Tensor dense = Densify(top, 2, 4);
  EXPECT_TRUE(torch::equal(dense, torch::tensor({{0.0f, -3.0f, 0.0f, 2.0f}, {-1.0f, 0.0f, 0.2f, 0.0f}})));
  // Momentum minus what it sent keeps the rest.
  EXPECT_TRUE(torch::equal(c - dense, torch::tensor({{0.5f, 0.0f, 1.0f, 0.0f}, {0.0f, 0.1f, 0.0f, 0.0f}})));

  const ChunkTopK a{torch::tensor({{0, 2}}, torch::kLong), torch::tensor({{1.0f, 4.0f}})};
  const ChunkTopK b{torch::tensor({{2, 3}}, torch::kLong), torch::tensor({{-2.0f, 6.0f}})};
  const torch::Tensor mean = MeanOfSent({a, b}, 1, 4);
  EXPECT_TRUE(torch::equal(mean, torch::tensor({{1.0f, 0.0f, 1.0f, 6.0f}})));
  // A chunk of four as a tensor of four: the sign of the decoded mean is the update's direction.
  const ChunkDct t({4}, 4, torch::kFloat32);
  const torch::Tensor d = DctMatrix(4, torch::kFloat32);
  const torch::Tensor expected = d.t().matmul(torch::tensor({1.0f, 0.0f, 1.0f, 6.0f})).sign();
  EXPECT_TRUE(torch::equal(t.Decode(mean).sign(), expected));
}

class DemoTest : public DistributedTest {};

// The workers apply the same update, so their replicas stay one: DeMo's run learns, and each step
// every worker sends its block to each other worker — the coefficients of every tensor's chunks
// (values and 16-bit indices), its loss and the votes — and nothing else.
TEST_F(DemoTest, LearnsAndSendsItsBlocks) {
  const core::Scenario sc = Make("workers: {count: 3}\ncompare: [demo, {algorithm: demo, topk: 4, chunk: 8, "
                                 "name: demo-k4}]\n");
  const EntryResult r = Run(sc, 0), small = Run(sc, 1);
  EXPECT_LT(r.final_val_loss, std::log(256.0));
  EXPECT_TRUE(std::isfinite(small.final_val_loss));
  EXPECT_EQ(r.collective, "all-gather");
  core::ModelSpec m = sc.model;
  m.vocab_size = 256;
  torch::manual_seed(0);
  const Gpt gpt(m, torch::kCPU);
  for (const auto& [result, chunk, k] : {std::tuple{r, 64, 32}, std::tuple{small, 8, 4}}) {
    int64_t coefficients = 0;
    for (const auto& p : gpt.parameters()) {
      const ChunkDct t(p.sizes().vec(), chunk, torch::kFloat32);
      coefficients += t.chunks() * std::min<int64_t>(k, t.elements());
    }
    const int64_t block = coefficients + (coefficients + 1) / 2 + 1 + 3;
    EXPECT_DOUBLE_EQ(result.bytes_sent_per_worker, 12.0 * static_cast<double>(core::AllGatherBytesPerRank(block, 3)));
  }
  auto plan = tools::MakePlan(sc, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->rows.size(), 2u);
  EXPECT_NEAR(plan->rows[0].time_s, r.virtual_time_s, 0.05 * r.virtual_time_s);
  EXPECT_NEAR(plan->rows[0].bytes_per_worker, r.bytes_sent_per_worker, 1e-6 * r.bytes_sent_per_worker);
  EXPECT_NEAR(plan->rows[1].time_s, small.virtual_time_s, 0.05 * small.virtual_time_s);
  // Sizes only: the same all-gathers without training, the same bytes.
  const nlohmann::json timed = SizesOnly(sc);
  const auto& rows = timed["results"];
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& [row, result] : {std::pair{rows[0], r}, std::pair{rows[1], small}}) {
    EXPECT_DOUBLE_EQ(row["bytes_sent_per_worker"].get<double>(), result.bytes_sent_per_worker);
    EXPECT_NEAR(row["time_s"].get<double>(), result.virtual_time_s, 0.05 * result.virtual_time_s);
    EXPECT_EQ(row["collective"], "all-gather");
  }
}

TEST_F(DemoTest, RefusesWhatItCannotIndex) {
  auto bad = core::ParseScenario("compare: [{algorithm: demo, chunk: 512}]\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compare[0].chunk: a chunk's coefficients are indexed in 16 bits"),
            std::string::npos)
      << bad.status().ToString();
  bad = core::ParseScenario("compare: [{algorithm: demo, decay: 1.0}]\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compare[0].decay"), std::string::npos) << bad.status().ToString();
  bad = core::ParseScenario("compare: [{algorithm: demo, chunk: 8, topk: 100}]\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compare[0].topk: at least a whole chunk's coefficients (chunk² = 64)"),
            std::string::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace narrows::trainer
