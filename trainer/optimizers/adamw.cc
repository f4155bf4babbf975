#include "trainer/optimizers/adamw.h"

#include <ATen/Parallel.h>

#include <cmath>

namespace narrows::trainer {
namespace {

// PyTorch AdamW: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
void FusedAdamWCpu(float* p, const float* g, float* m, float* v, int64_t n, float lr, float wd,
                   float eps, float beta1, float beta2, float bc1, float bc2_sqrt) {
  const float decay = 1.0f - lr * wd;
  const float step_size = lr / bc1;
  const float inv_bc2_sqrt = 1.0f / bc2_sqrt;
  at::parallel_for(0, n, 1 << 15, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i];
      const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
      const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_bc2_sqrt + eps);
    }
  });
}

}  // namespace

FlatAdamW::FlatAdamW(torch::Tensor params, torch::Tensor grads, std::vector<AdamWGroup> groups,
                     double beta1, double beta2)
    : params_(std::move(params)),
      grads_(std::move(grads)),
      exp_avg_(torch::zeros_like(params_)),
      exp_avg_sq_(torch::zeros_like(params_)),
      groups_(std::move(groups)),
      beta1_(beta1),
      beta2_(beta2) {
  NARROWS_CHECK(params_.is_contiguous() && grads_.is_contiguous());
  NARROWS_CHECK(params_.numel() == grads_.numel());
}

std::unique_ptr<FlatAdamW> FlatAdamW::ForModel(Gpt& model, const core::TrainSpec& train) {
  std::vector<AdamWGroup> groups;
  for (const GroupSlice& g : model.groups()) {
    const GroupScales& s = model.scales().group(g.kind);
    groups.push_back({g.offset, g.numel, s.lr, train.weight_decay * s.weight_decay, train.eps * s.eps});
  }
  return std::make_unique<FlatAdamW>(model.flat_params(), model.flat_grads(), std::move(groups), train.beta1,
                                     train.beta2);
}

void FlatAdamW::Step(double lr) {
  ++steps_;
  const double bc1 = 1.0 - std::pow(beta1_, static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(beta2_, static_cast<double>(steps_));
  torch::NoGradGuard no_grad;
  for (const AdamWGroup& g : groups_) {
    const double group_lr = lr * g.lr_scale;
    if (params_.is_cpu() && params_.scalar_type() == torch::kFloat32) {
      FusedAdamWCpu(params_.data_ptr<float>() + g.offset, grads_.data_ptr<float>() + g.offset,
                    exp_avg_.data_ptr<float>() + g.offset, exp_avg_sq_.data_ptr<float>() + g.offset,
                    g.numel, static_cast<float>(group_lr), static_cast<float>(g.weight_decay),
                    static_cast<float>(g.eps), static_cast<float>(beta1_),
                    static_cast<float>(beta2_), static_cast<float>(bc1),
                    static_cast<float>(std::sqrt(bc2)));
      continue;
    }
    auto p = params_.narrow(0, g.offset, g.numel);
    auto grad = grads_.narrow(0, g.offset, g.numel);
    auto m = exp_avg_.narrow(0, g.offset, g.numel);
    auto v = exp_avg_sq_.narrow(0, g.offset, g.numel);
    p.mul_(1.0 - group_lr * g.weight_decay);
    m.lerp_(grad, 1.0 - beta1_);
    v.mul_(beta2_).addcmul_(grad, grad, 1.0 - beta2_);
    auto denom = (v.sqrt() / std::sqrt(bc2)).add_(g.eps);
    p.addcdiv_(m, denom, -group_lr / bc1);
  }
}

void FlatAdamW::Reset() {
  torch::NoGradGuard no_grad;
  exp_avg_.zero_();
  exp_avg_sq_.zero_();
  steps_ = 0;
}

std::vector<std::pair<std::string, torch::Tensor*>> FlatAdamW::State() {
  return {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}};
}

namespace {

const core::KeyBlock kAdamwKeys("train.adamw",
                                 "AdamW (the default) has no keys of its own: train's beta1, beta2, eps and weight_decay "
                                 "are its.");

InnerOptimizerPlugin AdamWPlugin() {
  InnerOptimizerPlugin p;
  p.parser.name = "adamw";
  p.parser.parse = [](core::OptionReader&, const core::Scenario&) {
    return std::make_shared<const core::PluginOptions>();  // train.adamw takes no keys
  };
  p.summary = "AdamW (PyTorch's), one fused pass on CPU; train.beta1, beta2, eps, weight_decay";
  p.make = [](Gpt& model, const core::TrainSpec& train) -> std::unique_ptr<InnerOptimizer> {
    return FlatAdamW::ForModel(model, train);
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_INNER_OPTIMIZER(adamw, AdamWPlugin());

}  // namespace narrows::trainer
