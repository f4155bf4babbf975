#include <gtest/gtest.h>

#include "trainer/optimizers/adamw.h"

namespace narrows::trainer {
namespace {

TEST(ScheduleTest, WarmupThenCosineToMinimum) {
  core::TrainSpec t;
  t.lr = 1.0;
  t.steps = 110;
  t.warmup_steps = 10;
  t.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(LearningRate(t, 0), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(t, 9), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(t, 10), 1.0);
  EXPECT_NEAR(LearningRate(t, 60), 0.55, 1e-12);  // halfway through the cosine
  EXPECT_NEAR(LearningRate(t, 110), 0.1, 1e-12);
  for (int s = 11; s < 110; ++s) EXPECT_LT(LearningRate(t, s), LearningRate(t, s - 1));
  t.schedule = core::LrSchedule::kConstant;
  EXPECT_DOUBLE_EQ(LearningRate(t, 80), 1.0);
}

// The fused flat AdamW must equal LibTorch's own AdamW, group by group.
void ExpectMatchesTorchAdamW(torch::Device device) {
  torch::manual_seed(0);
  const int64_t n1 = 1000, n2 = 300;
  auto flat = torch::randn({n1 + n2}).to(device);
  auto grads = torch::zeros_like(flat);
  std::vector<AdamWGroup> groups = {{0, n1, 1.0, 0.1, 1e-8}, {n1, n2, 0.5, 0.0, 1e-6}};
  FlatAdamW ours(flat, grads, groups, 0.9, 0.95);

  auto p1 = flat.narrow(0, 0, n1).clone().set_requires_grad(true);
  auto p2 = flat.narrow(0, n1, n2).clone().set_requires_grad(true);
  const double lr = 1e-2;
  torch::optim::AdamW ref1({p1}, torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  torch::optim::AdamW ref2({p2}, torch::optim::AdamWOptions(lr * 0.5).betas({0.9, 0.95}).eps(1e-6).weight_decay(0.0));
  for (int step = 0; step < 5; ++step) {
    auto g = torch::randn({n1 + n2}).to(device);
    grads.copy_(g);
    p1.mutable_grad() = g.narrow(0, 0, n1).clone();
    p2.mutable_grad() = g.narrow(0, n1, n2).clone();
    ours.Step(lr);
    ref1.step();
    ref2.step();
  }
  EXPECT_TRUE(torch::allclose(flat.narrow(0, 0, n1), p1.detach(), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(flat.narrow(0, n1, n2), p2.detach(), 1e-5, 1e-6));
  EXPECT_EQ(ours.steps_taken(), 5);
}

TEST(FlatAdamWTest, MatchesTorchAdamWOnCpu) { ExpectMatchesTorchAdamW(torch::kCPU); }

TEST(FlatAdamWTest, MatchesTorchAdamWOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExpectMatchesTorchAdamW(torch::Device(torch::kCUDA, 0));
}

TEST(ClipTest, ClipsToMaxNormAndReportsTheNormBefore) {
  auto g = torch::full({4}, 3.0);  // norm 6
  EXPECT_NEAR(ClipGradNorm(g, 1.5), 6.0, 1e-6);
  EXPECT_NEAR(g.norm().item<double>(), 1.5, 1e-5);
  auto h = torch::full({4}, 0.1);
  ClipGradNorm(h, 1.0);
  EXPECT_NEAR(h[0].item<double>(), 0.1, 1e-7);  // below the bound: untouched
}

}  // namespace
}  // namespace narrows::trainer
