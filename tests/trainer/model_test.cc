#include <cblas.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "trainer/attention.h"
#include "trainer/cpu_math.h"
#include "trainer/gelu.h"
#include "trainer/gpt.h"
#include "trainer/parameterization.h"

namespace narrows::trainer {
namespace {

core::ModelSpec Nano(core::Positions positions = core::Positions::kLearned) {
  core::ModelSpec spec;
  spec.d_model = 32;
  spec.n_layers = 2;
  spec.n_heads = 4;
  spec.seq_len = 16;
  spec.vocab_size = 64;
  spec.positions = positions;
  spec.base_depth = 2;
  spec.base_width = 32;
  return spec;
}

TEST(GptTest, ShapesAndParameterCount) {
  torch::manual_seed(0);
  Gpt model(Nano(), torch::kCPU);
  auto tokens = torch::randint(0, 64, {3, 10}, torch::kInt64);
  EXPECT_EQ(model.Forward(tokens).sizes(), (std::vector<int64_t>{3, 10, 64}));
  // wte 64x32, wpe 16x32, per layer 12 d^2 + 13 d, final norm 2d.
  const int64_t d = 32;
  EXPECT_EQ(model.num_params(), 64 * d + 16 * d + 2 * (12 * d * d + 13 * d) + 2 * d);
  // Groups are contiguous and cover the flat buffer.
  int64_t offset = 0;
  for (const auto& g : model.groups()) {
    EXPECT_EQ(g.offset, offset);
    offset += g.numel;
  }
  EXPECT_EQ(offset, model.num_params());
}

void ExpectCausal(core::Positions positions) {
  torch::manual_seed(1);
  Gpt model(Nano(positions), torch::kCPU);
  torch::NoGradGuard no_grad;
  auto a = torch::randint(0, 64, {2, 16}, torch::kInt64);
  auto b = a.clone();
  b.narrow(1, 9, 7).random_(0, 64);  // change tokens 9..15
  auto la = model.Forward(a), lb = model.Forward(b);
  EXPECT_TRUE(torch::equal(la.narrow(1, 0, 9), lb.narrow(1, 0, 9)))
      << "logits of tokens 0..8 must not see tokens 9..15";
  EXPECT_FALSE(torch::allclose(la.narrow(1, 9, 7), lb.narrow(1, 9, 7)));
}

TEST(GptTest, CausalMaskingLearnedPositions) { ExpectCausal(core::Positions::kLearned); }
TEST(GptTest, CausalMaskingRope) { ExpectCausal(core::Positions::kRope); }

TEST(GptTest, GradientsLandInTheFlatBuffer) {
  torch::manual_seed(2);
  Gpt model(Nano(), torch::kCPU);
  auto tokens = torch::randint(0, 64, {2, 16}, torch::kInt64);
  model.ZeroGrad();
  model.Loss(tokens, tokens).backward();
  EXPECT_GT(model.flat_grads().abs().sum().item<double>(), 0.0);
  // Every parameter slice got a gradient (the tied embedding from both of its uses; the batch
  // spans all of seq_len, so every position row too).
  for (const auto& s : model.slices()) {
    EXPECT_GT(model.flat_grads().narrow(0, s.offset, s.numel).abs().sum().item<double>(), 0.0) << s.name;
  }
  // Changing the flat buffer changes the model: parameters are views, not copies.
  auto before = model.Forward(tokens).detach().clone();
  {
    torch::NoGradGuard no_grad;
    model.flat_params().mul_(1.5);
  }
  EXPECT_FALSE(torch::allclose(before, model.Forward(tokens)));
}

TEST(GptTest, LossAtInitIsNearUniform) {
  torch::manual_seed(3);
  Gpt model(Nano(), torch::kCPU);
  auto tokens = torch::randint(0, 64, {4, 16}, torch::kInt64);
  auto targets = torch::randint(0, 64, {4, 16}, torch::kInt64);
  EXPECT_NEAR(model.Loss(tokens, targets).item<double>(), std::log(64.0), 0.1);
}

// Loss and flat float32 gradients of one batch, with the model's products in `precision`.
std::pair<double, torch::Tensor> LossAndGradients(core::Positions positions, core::Precision precision,
                                                  torch::Device device) {
  torch::manual_seed(4);
  Gpt model(Nano(positions), device);
  model.set_precision(precision);
  torch::manual_seed(5);
  auto tokens = torch::randint(0, 64, {4, 16}, torch::kInt64).to(device);
  model.ZeroGrad();
  auto loss = model.Loss(tokens, tokens.roll(1, 1));
  loss.backward();
  return {loss.item<double>(), model.flat_grads().cpu().clone()};
}

void ExpectBf16TracksFloat32(core::Positions positions, torch::Device device) {
  const auto [loss32, grad32] = LossAndGradients(positions, core::Precision::kFp32, torch::kCPU);
  const auto [loss16, grad16] = LossAndGradients(positions, core::Precision::kBf16, device);
  EXPECT_EQ(grad16.scalar_type(), torch::kFloat32) << "master gradients stay float32";
  EXPECT_NE(loss16, loss32) << "the products did not run in bfloat16";
  EXPECT_NEAR(loss16, loss32, 0.02 * loss32);  // bfloat16 keeps 8 bits of mantissa
  const double cosine = (grad16 * grad32).sum().item<double>() / grad16.norm().item<double>() /
                        grad32.norm().item<double>();
  EXPECT_GT(cosine, 0.99);
}

TEST(GptTest, Bf16ProductsTrackFloat32LearnedPositions) {
  ExpectBf16TracksFloat32(core::Positions::kLearned, torch::kCPU);
}
TEST(GptTest, Bf16ProductsTrackFloat32Rope) { ExpectBf16TracksFloat32(core::Positions::kRope, torch::kCPU); }
// On a GPU with LibTorch >= 2.1 this is scaled_dot_product_attention's path.
TEST(GptTest, Bf16OnTheGpuTracksFloat32OnTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExpectBf16TracksFloat32(core::Positions::kLearned, torch::Device("cuda:0"));
  ExpectBf16TracksFloat32(core::Positions::kRope, torch::Device("cuda:0"));
}

TEST(ParameterizationTest, StandardIsGpt2) {
  const auto s = ComputeScales(Nano());
  EXPECT_EQ(s.residual, 1.0);
  EXPECT_EQ(s.logits, 1.0);
  EXPECT_DOUBLE_EQ(s.attention, 1.0 / std::sqrt(8.0));  // head_dim 8
  EXPECT_EQ(s.hidden_init_std, 1.0);
  EXPECT_DOUBLE_EQ(s.output_init_divisor, 2.0);  // sqrt(2 n_layers)
  EXPECT_EQ(s.group(ParamGroupKind::kHidden).lr, 1.0);
  EXPECT_EQ(s.group(ParamGroupKind::kVector).weight_decay, 0.0);
  EXPECT_EQ(s.group(ParamGroupKind::kFinalNorm).weight_decay, 0.0);
  EXPECT_EQ(s.group(ParamGroupKind::kHidden).weight_decay, 1.0);
}

TEST(ParameterizationTest, CompletePMultipliers) {
  core::ModelSpec spec = Nano();
  spec.parameterization = core::Parameterization::kCompleteP;
  spec.n_layers = 8;    // m_d = 8 / 2 = 4
  spec.d_model = 128;   // m_w = 128 / 32 = 4
  const auto s = ComputeScales(spec);
  EXPECT_DOUBLE_EQ(s.depth_multiplier, 4.0);
  EXPECT_DOUBLE_EQ(s.width_multiplier, 4.0);
  EXPECT_DOUBLE_EQ(s.residual, 0.25);                                  // m_d^-1
  EXPECT_DOUBLE_EQ(s.group(ParamGroupKind::kHidden).lr, 0.25);         // 1/m_w * m_d^0
  EXPECT_DOUBLE_EQ(s.group(ParamGroupKind::kHidden).weight_decay, 4);  // m_w
  EXPECT_DOUBLE_EQ(s.group(ParamGroupKind::kHidden).eps, 1.0 / 16);    // 1/m_w * m_d^-1
  EXPECT_DOUBLE_EQ(s.group(ParamGroupKind::kVector).lr, 1.0);          // m_d^0
  EXPECT_DOUBLE_EQ(s.group(ParamGroupKind::kEmbedding).eps, 0.25);     // 1/m_w
  EXPECT_DOUBLE_EQ(s.group(ParamGroupKind::kFinalNorm).lr, 1.0);
  EXPECT_DOUBLE_EQ(s.logits, 0.25);
  EXPECT_DOUBLE_EQ(s.attention, 1.0 / 32);  // 1/head_dim, head_dim 128/4
  EXPECT_DOUBLE_EQ(s.hidden_init_std, 0.5);
  EXPECT_DOUBLE_EQ(s.output_init_divisor, 2.0);  // sqrt(m_w), no depth factor

  spec.depth_alpha = 0.5;
  const auto half = ComputeScales(spec);
  EXPECT_DOUBLE_EQ(half.residual, 0.5);                                   // m_d^-1/2
  EXPECT_DOUBLE_EQ(half.group(ParamGroupKind::kHidden).lr, 0.125);        // 1/m_w * m_d^-1/2
  EXPECT_DOUBLE_EQ(half.group(ParamGroupKind::kHidden).eps, 0.125);       // 1/m_w * m_d^-1/2
  EXPECT_DOUBLE_EQ(half.group(ParamGroupKind::kVector).lr, 0.5);          // m_d^-1/2
  EXPECT_DOUBLE_EQ(half.group(ParamGroupKind::kFinalNorm).lr, 1.0);
  EXPECT_DOUBLE_EQ(half.output_init_divisor, 2.0);
}

// The same draws, scaled per parameterisation: at the base shape CompleteP's weights are standard's
// but for the residual output projections (init_std, not init_std / sqrt(2 n_layers)); wider than
// base every hidden matrix, the output projections included, is drawn with init_std / sqrt(m_w).
TEST(ParameterizationTest, EachParameterizationInitialisesAsItsReference) {
  core::ModelSpec completep = Nano();
  completep.parameterization = core::Parameterization::kCompleteP;
  torch::manual_seed(4);
  Gpt a(Nano(), torch::kCPU);
  torch::manual_seed(4);
  Gpt b(completep, torch::kCPU);
  ASSERT_EQ(a.slices().size(), b.slices().size());
  for (size_t i = 0; i < a.slices().size(); ++i) {
    const std::string& name = a.slices()[i].name;
    const bool output = name.find("attn.proj.weight") != std::string::npos || name.find("mlp.proj.weight") != std::string::npos;
    const torch::Tensor& pa = a.parameters()[i];
    const torch::Tensor& pb = b.parameters()[i];
    if (output) {
      EXPECT_TRUE(torch::allclose(pb, pa * 2.0, 1e-6, 0.0)) << name;  // sqrt(2 n_layers) = 2
    } else {
      EXPECT_TRUE(torch::equal(pa, pb)) << name;
    }
  }
  completep.d_model = 64;  // m_w = 2
  completep.base_depth = 1;  // m_d = 2: branches scaled by 1/2
  torch::manual_seed(4);
  Gpt c(completep, torch::kCPU);
  for (size_t i = 0; i < c.slices().size(); ++i) {
    if (c.slices()[i].group != ParamGroupKind::kHidden) continue;
    const double std = c.parameters()[i].std().item<double>();
    EXPECT_NEAR(std, 0.02 / std::sqrt(2.0), 0.02 * 0.1) << c.slices()[i].name;
  }
  auto tokens = torch::randint(0, 64, {2, 16}, torch::kInt64);
  EXPECT_FALSE(torch::allclose(a.Forward(tokens), b.Forward(tokens)));
}

}  // namespace
}  // namespace narrows::trainer

namespace narrows::trainer {
namespace {

void ExpectFusedMatchesReference(int64_t t, bool mup_scale = false) {
  torch::manual_seed(5);
  const int64_t b = 3, h = 4, hd = 8, d = h * hd;
  const double scale = mup_scale ? 1.0 / hd : 1.0 / std::sqrt(static_cast<double>(hd));
  auto bias = torch::full({t, t}, -std::numeric_limits<float>::infinity()).triu(1);
  auto qkv = torch::randn({b, t, 3 * d}, torch::requires_grad());
  auto qkv_ref = qkv.detach().clone().requires_grad_(true);
  auto dy = torch::randn({b, t, d});
  auto y = CausalAttention(qkv, h, bias, scale);
  auto y_ref = CausalAttentionReference(qkv_ref, h, bias, scale);
  EXPECT_TRUE(torch::allclose(y, y_ref, 1e-5, 1e-5));
  (y * dy).sum().backward();
  (y_ref * dy).sum().backward();
  EXPECT_TRUE(torch::allclose(qkv.grad(), qkv_ref.grad(), 1e-4, 1e-5))
      << (qkv.grad() - qkv_ref.grad()).abs().max().item<double>();
  // The first query attends only to itself, so its output is v of token 0.
  EXPECT_TRUE(torch::allclose(y.select(1, 0), qkv.detach().select(1, 0).narrow(-1, 2 * d, d)));
}

TEST(BiasGeluTest, FusedMatchesGeluOfTheSumInValueAndGradients) {
  torch::manual_seed(6);
  // Pre-activations from -12 to 12: the erf approximation's tails and its sign flip at 0.
  auto h = (torch::rand({3, 50, 96}) * 24 - 12).requires_grad_(true);
  auto bias = torch::randn({96}, torch::requires_grad());
  auto h_ref = h.detach().clone().requires_grad_(true);
  auto bias_ref = bias.detach().clone().requires_grad_(true);
  auto da = torch::randn({3, 50, 96});
  auto a = BiasGelu(h, bias);
  auto a_ref = BiasGeluReference(h_ref, bias_ref);
  EXPECT_LT((a - a_ref).abs().max().item<double>(), 1e-5);
  (a * da).sum().backward();
  (a_ref * da).sum().backward();
  EXPECT_LT((h.grad() - h_ref.grad()).abs().max().item<double>(), 1e-5);
  EXPECT_TRUE(torch::allclose(bias.grad(), bias_ref.grad(), 1e-4, 1e-4))
      << (bias.grad() - bias_ref.grad()).abs().max().item<double>();
}

TEST(AttentionTest, FusedMatchesReferenceWithinOneBlock) {
  ExpectFusedMatchesReference(20);
  ExpectFusedMatchesReference(20, /*mup_scale=*/true);  // CompleteP's 1/head_dim
}
// 150 rows: two full causal blocks of 64 and a ragged third.
TEST(AttentionTest, FusedMatchesReferenceAcrossBlocks) { ExpectFusedMatchesReference(150); }

}  // namespace
}  // namespace narrows::trainer

namespace narrows::trainer {
namespace {

TEST(AttentionTest, SgemmComesFromTheOptimisedBlas) {
  // The attention kernel calls cblas_sgemm; ns-3 links GSL's reference CBLAS, which must not be the
  // one that provides it (a link-order slip made training 3x slower).
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&cblas_sgemm), &info), 0);
  ASSERT_NE(info.dli_fname, nullptr);
  EXPECT_EQ(std::string(info.dli_fname).find("gslcblas"), std::string::npos) << info.dli_fname;
}

TEST(CpuMathTest, LaneSumsAreTheSameWhereverTheValuesLie) {
  std::vector<float> values(203), b(203);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = std::sin(0.37f * static_cast<float>(i)) * 1e3f + 1e-3f * static_cast<float>(i);
    b[i] = std::cos(0.11f * static_cast<float>(i));
  }
  double exact = 0.0;
  for (float v : values) exact += v;
  std::vector<float> buffer(values.size() + 16), other(values.size() + 16);
  float sum0 = 0.0f, dot0 = 0.0f;
  for (size_t shift = 0; shift < 16; ++shift) {  // every alignment of a 64-byte line
    std::copy(values.begin(), values.end(), buffer.begin() + static_cast<long>(shift));
    std::copy(b.begin(), b.end(), other.begin() + static_cast<long>(15 - shift));
    const float sum = SumInLanes(buffer.data() + shift, static_cast<int64_t>(values.size()));
    const float dot = DotInLanes(buffer.data() + shift, other.data() + 15 - shift, static_cast<int64_t>(values.size()));
    if (shift == 0) {
      sum0 = sum;
      dot0 = dot;
      EXPECT_NEAR(sum, exact, 1e-6 * 1e3 * values.size());
    }
    EXPECT_EQ(sum, sum0) << "shifted by " << shift;
    EXPECT_EQ(dot, dot0) << "shifted by " << shift;
  }
}

TEST(CpuMathTest, ExpMatchesTheLibrary) {
  for (float x = -90.0f; x <= 0.0f; x += 0.0137f) {
    const float expected = std::exp(std::max(x, -87.0f));
    ASSERT_NEAR(ExpNonPositive(x), expected, 4e-7f * expected) << x;
  }
}

}  // namespace
}  // namespace narrows::trainer
