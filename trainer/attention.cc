#include "trainer/attention.h"

#include <ATen/Parallel.h>
#include <cblas.h>
#include <torch/version.h>

#include <cmath>

#include "trainer/cpu_math.h"

namespace narrows::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kBlock = 64;  // rows per causal block: blocks above the diagonal are skipped

struct Shape {
  int64_t b, t, d, h, hd;
};

Shape ShapeOf(const torch::Tensor& qkv, int64_t n_heads) {
  const int64_t d = qkv.size(2) / 3;
  return {qkv.size(0), qkv.size(1), d, n_heads, d / n_heads};
}

// Row-major single-precision GEMM: C = alpha op(A) op(B) + beta C.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// Row i of a causal softmax, in place: p[j] = softmax(scale * s[0..n))_j for j < n, 0 up to `width`.
__attribute__((target_clones("avx2", "default"))) void CausalSoftmaxRow(float* row, int64_t n,
                                                                           int64_t width, float scale) {
  float max = row[0];
#pragma omp simd reduction(max : max)
  for (int64_t j = 0; j < n; ++j) max = row[j] > max ? row[j] : max;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) row[j] = ExpNonPositive((row[j] - max) * scale);
  const float sum = SumInLanes(row, n);
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  for (int64_t j = n; j < width; ++j) row[j] = 0.0f;
}

// Softmax backward of row i, in place on dp: ds[j] = scale * p[j] (dp[j] - sum_k p[k] dp[k]).
__attribute__((target_clones("avx2", "default"))) void CausalSoftmaxGradRow(const float* p, float* dp,
                                                                               int64_t n, int64_t width,
                                                                               float scale) {
  const float dot = DotInLanes(p, dp, n);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) dp[j] = scale * p[j] * (dp[j] - dot);
  for (int64_t j = n; j < width; ++j) dp[j] = 0.0f;
}

class FusedCausalAttention : public torch::autograd::Function<FusedCausalAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv_in, int64_t n_heads, double score_scale) {
    const torch::Tensor qkv = qkv_in.contiguous();
    const Shape s = ShapeOf(qkv, n_heads);
    const auto scale = static_cast<float>(score_scale);
    auto y = torch::empty({s.b, s.t, s.d}, qkv.options());
    auto probs = torch::empty({s.b, s.h, s.t, s.t}, qkv.options());
    const float* qkv_p = qkv.data_ptr<float>();
    float* y_p = y.data_ptr<float>();
    float* probs_p = probs.data_ptr<float>();
    const int64_t ld = 3 * s.d, t = s.t;
    at::parallel_for(0, s.b * s.h, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / s.h, h = i % s.h;
        const float* q = qkv_p + b * t * ld + h * s.hd;
        const float* k = q + s.d;
        const float* v = q + 2 * s.d;
        float* p = probs_p + i * t * t;
        float* out = y_p + b * t * s.d + h * s.hd;
        for (int64_t r0 = 0; r0 < t; r0 += kBlock) {
          const int64_t r1 = std::min(t, r0 + kBlock), rows = r1 - r0;
          // Scores of rows [r0, r1) against keys [0, r1): the causal lower block triangle.
          Gemm(false, true, rows, r1, s.hd, 1.0f, q + r0 * ld, ld, k, ld, 0.0f, p + r0 * t, t);
          for (int64_t row = r0; row < r1; ++row) CausalSoftmaxRow(p + row * t, row + 1, t, scale);
          Gemm(false, false, rows, s.hd, r1, 1.0f, p + r0 * t, t, v, ld, 0.0f, out + r0 * s.d, s.d);
        }
      }
    });
    ctx->save_for_backward({qkv, probs});
    ctx->saved_data["n_heads"] = n_heads;
    ctx->saved_data["scale"] = score_scale;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor qkv = saved[0], probs = saved[1];
    const torch::Tensor dy = grad_outputs[0].contiguous();
    const Shape s = ShapeOf(qkv, ctx->saved_data["n_heads"].toInt());
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    auto dqkv = torch::empty_like(qkv);
    const float* qkv_p = qkv.data_ptr<float>();
    const float* probs_p = probs.data_ptr<float>();
    const float* dy_p = dy.data_ptr<float>();
    float* dqkv_p = dqkv.data_ptr<float>();
    const int64_t ld = 3 * s.d, t = s.t;
    at::parallel_for(0, s.b * s.h, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> ds_buffer(static_cast<size_t>(t * t));
      float* ds = ds_buffer.data();
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / s.h, h = i % s.h;
        const float* q = qkv_p + b * t * ld + h * s.hd;
        const float* k = q + s.d;
        const float* v = q + 2 * s.d;
        const float* p = probs_p + i * t * t;
        const float* g = dy_p + b * t * s.d + h * s.hd;
        float* dq = dqkv_p + b * t * ld + h * s.hd;
        float* dk = dq + s.d;
        float* dv = dq + 2 * s.d;
        for (int64_t r0 = 0; r0 < t; r0 += kBlock) {
          const int64_t r1 = std::min(t, r0 + kBlock), rows = r1 - r0;
          // dP = dY V^T, then dS = scale * softmax'(dP), rows [r0, r1) against keys [0, r1).
          Gemm(false, true, rows, r1, s.hd, 1.0f, g + r0 * s.d, s.d, v, ld, 0.0f, ds + r0 * t, t);
          for (int64_t row = r0; row < r1; ++row) {
            CausalSoftmaxGradRow(p + row * t, ds + row * t, row + 1, r1, scale);
          }
          Gemm(false, false, rows, s.hd, r1, 1.0f, ds + r0 * t, t, k, ld, 0.0f, dq + r0 * ld, ld);
        }
        for (int64_t c0 = 0; c0 < t; c0 += kBlock) {
          // Keys [c0, c1) receive from queries [c0, t): dV = P^T dY, dK = dS^T Q.
          const int64_t c1 = std::min(t, c0 + kBlock), cols = c1 - c0, rows = t - c0;
          Gemm(true, false, cols, s.hd, rows, 1.0f, p + c0 * t + c0, t, g + c0 * s.d, s.d, 0.0f,
               dv + c0 * ld, ld);
          Gemm(true, false, cols, s.hd, rows, 1.0f, ds + c0 * t + c0, t, q + c0 * ld, ld, 0.0f,
               dk + c0 * ld, ld);
        }
      }
    });
    return {dqkv, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor CausalAttentionReference(const torch::Tensor& qkv, int64_t n_heads, const torch::Tensor& causal_bias,
                                       double scale) {
  const Shape s = ShapeOf(qkv, n_heads);
  auto parts = qkv.view({s.b, s.t, 3, s.h, s.hd}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, hd]
  auto q = parts[0].reshape({s.b * s.h, s.t, s.hd});
  auto k = parts[1].reshape({s.b * s.h, s.t, s.hd});
  auto v = parts[2].reshape({s.b * s.h, s.t, s.hd});
  const auto mask = causal_bias.narrow(0, 0, s.t).narrow(1, 0, s.t).to(qkv.scalar_type());
  auto att = torch::softmax(torch::baddbmm(mask, q, k.transpose(1, 2), 1.0, scale), -1);
  return torch::bmm(att, v).view({s.b, s.h, s.t, s.hd}).transpose(1, 2).reshape({s.b, s.t, s.d});
}

torch::Tensor CausalAttention(const torch::Tensor& qkv, int64_t n_heads, const torch::Tensor& causal_bias,
                              double scale) {
  if (qkv.is_cpu() && qkv.scalar_type() == torch::kFloat32) {
    return FusedCausalAttention::apply(qkv, n_heads, scale);
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  if (!qkv.is_cpu()) {
    // PyTorch's fused kernels (flash attention for bfloat16 on recent GPUs), causal, at our scale.
    const Shape s = ShapeOf(qkv, n_heads);
    auto parts = qkv.view({s.b, s.t, 3, s.h, s.hd}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, hd]
    auto y = at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true, scale);
    return y.transpose(1, 2).reshape({s.b, s.t, s.d});
  }
#endif
  return CausalAttentionReference(qkv, n_heads, causal_bias, scale);
}

}  // namespace narrows::trainer
