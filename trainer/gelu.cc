#include "trainer/gelu.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "trainer/cpu_math.h"

namespace narrows::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// Phi(u) = (1 + erf(u / sqrt 2)) / 2 and phi(u) = exp(-u^2 / 2) / sqrt(2 pi), sharing the exponential.
// erf by Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7), odd-extended without a branch.
inline void NormalCdfPdf(float u, float* cdf, float* pdf) {
  const float z = u * kInvSqrt2;
  const float az = std::fabs(z);
  const float t = 1.0f / (1.0f + 0.3275911f * az);
  const float e = ExpNonPositive(-az * az);
  const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float erf_abs = 1.0f - poly * e;
  const float erf = std::copysign(erf_abs, z);
  *cdf = 0.5f * (1.0f + erf);
  *pdf = kInvSqrt2Pi * e;
}

// a = gelu(h + b) over `rows` rows of `n`.
__attribute__((target_clones("avx2", "default"))) void GeluRows(const float* h, const float* b, float* a,
                                                                 int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float u = h[r * n + j] + b[j];
      float cdf, pdf;
      NormalCdfPdf(u, &cdf, &pdf);
      a[r * n + j] = u * cdf;
    }
  }
}

// dh = da * gelu'(h + b), gelu'(u) = Phi(u) + u phi(u).
__attribute__((target_clones("avx2", "default"))) void GeluGradRows(const float* h, const float* b,
                                                                     const float* da, float* dh, int64_t rows,
                                                                     int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float u = h[r * n + j] + b[j];
      float cdf, pdf;
      NormalCdfPdf(u, &cdf, &pdf);
      dh[r * n + j] = da[r * n + j] * (cdf + u * pdf);
    }
  }
}

// Rows per parallel task: about 64k elements, so that small tensors stay on one thread.
int64_t Grain(int64_t n) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, n)); }

class FusedBiasGelu : public torch::autograd::Function<FusedBiasGelu> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h_in, const torch::Tensor& bias_in) {
    const torch::Tensor h = h_in.contiguous(), bias = bias_in.contiguous();
    const int64_t n = bias.numel(), rows = h.numel() / n;
    auto a = torch::empty_like(h);
    const float* h_p = h.data_ptr<float>();
    const float* b_p = bias.data_ptr<float>();
    float* a_p = a.data_ptr<float>();
    at::parallel_for(0, rows, Grain(n), [&](int64_t begin, int64_t end) {
      GeluRows(h_p + begin * n, b_p, a_p + begin * n, end - begin, n);
    });
    ctx->save_for_backward({h, bias});
    return a;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor h = saved[0], bias = saved[1];
    const torch::Tensor da = grad_outputs[0].contiguous();
    const int64_t n = bias.numel(), rows = h.numel() / n;
    auto dh = torch::empty_like(h);
    const float* h_p = h.data_ptr<float>();
    const float* b_p = bias.data_ptr<float>();
    const float* da_p = da.data_ptr<float>();
    float* dh_p = dh.data_ptr<float>();
    at::parallel_for(0, rows, Grain(n), [&](int64_t begin, int64_t end) {
      GeluGradRows(h_p + begin * n, b_p, da_p + begin * n, dh_p + begin * n, end - begin, n);
    });
    return {dh, dh.reshape({rows, n}).sum(0)};
  }
};

}  // namespace

torch::Tensor BiasGeluReference(const torch::Tensor& h, const torch::Tensor& bias) { return torch::gelu(h + bias); }

torch::Tensor BiasGelu(const torch::Tensor& h, const torch::Tensor& bias) {
  if (h.is_cpu() && h.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32 &&
      bias.dim() == 1 && h.size(-1) == bias.numel()) {
    return FusedBiasGelu::apply(h, bias);
  }
  return BiasGeluReference(h, bias);
}

}  // namespace narrows::trainer
