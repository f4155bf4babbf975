#include <gtest/gtest.h>

#include "trainer/optimizers/adamw.h"
#include "trainer/optimizers/muon.h"

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

// Newton-Schulz pushes every singular value towards 1 (Muon's quintic lands them in about
// [0.7, 1.2]) and keeps the singular vectors: the result is close to U V^T of the input.
TEST(MuonTest, NewtonSchulzGivesSingularValuesNearOneAndKeepsTheVectors) {
  torch::manual_seed(3);
  for (const auto& shape : {std::vector<int64_t>{64, 32}, std::vector<int64_t>{32, 64}, std::vector<int64_t>{48, 48}}) {
    // Singular values spread over two orders of magnitude.
    const auto [u, s0, v] = torch::linalg_svd(torch::randn(shape), false);
    const auto s = torch::logspace(0, -2, s0.size(0));
    const torch::Tensor g = u.mm(torch::diag(s)).mm(v);
    const torch::Tensor x = NewtonSchulz(g, 5);
    const auto sv = std::get<1>(torch::linalg_svd(x, false));
    EXPECT_GT(sv.min().item<float>(), 0.6f) << shape[0] << "x" << shape[1];
    EXPECT_LT(sv.max().item<float>(), 1.25f) << shape[0] << "x" << shape[1];
    const torch::Tensor polar = u.mm(v);
    EXPECT_LT((x - polar).norm().item<float>() / polar.norm().item<float>(), 0.3f);
  }
}

// One Muon step by hand on a nano GPT: a hidden matrix moves by -lr·0.2·sqrt(max(rows, cols))·NS(g +
// 0.95·g) after its weight decay (the momentum starts at g; Nesterov looks one step ahead); an
// embedding moves by AdamW's first step, -lr·sign(g) after decay.
TEST(MuonTest, OneStepMatchesAHandComputation) {
  core::ModelSpec spec;
  spec.preset = "nano";
  spec.d_model = 32;
  spec.n_layers = 1;
  spec.n_heads = 2;
  spec.seq_len = 8;
  torch::manual_seed(0);
  Gpt model(spec, torch::kCPU);
  core::TrainSpec train;
  Muon muon(model, train, MuonOptions{});
  torch::NoGradGuard no_grad;
  model.flat_grads().copy_(torch::randn_like(model.flat_grads()));
  const torch::Tensor before = model.flat_params().clone();
  const double lr = 0.01;
  muon.Step(lr);
  bool saw_matrix = false, saw_embedding = false;
  for (size_t i = 0; i < model.slices().size(); ++i) {
    const ParamSlice& s = model.slices()[i];
    const auto shape = model.parameters()[i].sizes();
    const torch::Tensor p0 = before.narrow(0, s.offset, s.numel), g = model.flat_grads().narrow(0, s.offset, s.numel);
    const torch::Tensor p1 = model.flat_params().narrow(0, s.offset, s.numel);
    const GroupScales& scale = model.scales().group(s.group);
    const double decay = 1.0 - lr * scale.lr * train.weight_decay * scale.weight_decay;
    torch::Tensor expected;
    if (s.group == ParamGroupKind::kHidden && shape.size() == 2) {
      const torch::Tensor gm = g.view(shape);
      const double k = 0.2 * std::sqrt(static_cast<double>(std::max(shape[0], shape[1])));
      expected = (p0.view(shape) * decay - lr * scale.lr * k * NewtonSchulz(gm + 0.95 * gm, 5)).reshape({-1});
      saw_matrix = true;
    } else {
      // AdamW's first step: m / sqrt(v) = g / |g| (bias-corrected), eps aside.
      expected = p0 * decay - lr * scale.lr * g / (g.abs() + train.eps * scale.eps);
      saw_embedding = saw_embedding || s.group == ParamGroupKind::kEmbedding;
    }
    EXPECT_LT((p1 - expected).abs().max().item<float>(), 1e-6f) << s.name;
  }
  EXPECT_TRUE(saw_matrix && saw_embedding);
  EXPECT_EQ(muon.State().size(), 3u);
  EXPECT_EQ(muon.State().back().first, "muon_momentum");
}

}  // namespace
}  // namespace narrows::trainer
