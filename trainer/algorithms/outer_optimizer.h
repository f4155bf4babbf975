// The outer optimiser of DiLoCo (arXiv 2311.08105 Alg. 1): a step on the global parameters from the
// averaged pseudo-gradient (global - local). Shared by the DiLoCo family; one state per set of
// parameters it updates (Streaming DiLoCo keeps one per fragment). Internal to trainer/.
#pragma once

#include <cmath>

#include "core/scenario.h"
#include "trainer/torch_pch.h"

namespace narrows::trainer {

struct OuterOptimizerState {
  torch::Tensor momentum, adam_m, adam_v;
  int64_t steps = 0;

  static OuterOptimizerState Like(const torch::Tensor& params) {
    return {torch::zeros_like(params), torch::zeros_like(params), torch::zeros_like(params), 0};
  }
};

inline void OuterStep(const core::AlgorithmSpec& a, torch::Tensor& global, const torch::Tensor& delta,
                      OuterOptimizerState& s) {
  torch::NoGradGuard no_grad;
  ++s.steps;
  const double lr = a.outer_lr, mu = a.outer_momentum;
  switch (a.outer_optimizer) {
    case core::OuterOptimizer::kSgd:
      if (mu > 0) {
        s.momentum.mul_(mu).add_(delta);
        global.sub_(s.momentum, lr);
      } else {
        global.sub_(delta, lr);
      }
      break;
    case core::OuterOptimizer::kNesterov:  // PyTorch SGD(nesterov=True) on the pseudo-gradient
      s.momentum.mul_(mu).add_(delta);
      global.sub_(delta + mu * s.momentum, lr);
      break;
    case core::OuterOptimizer::kAdam: {
      constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
      s.adam_m.mul_(b1).add_(delta, 1 - b1);
      s.adam_v.mul_(b2).addcmul_(delta, delta, 1 - b2);
      const double bc1 = 1 - std::pow(b1, static_cast<double>(s.steps));
      const double bc2 = 1 - std::pow(b2, static_cast<double>(s.steps));
      global.addcdiv_(s.adam_m, (s.adam_v / bc2).sqrt_().add_(eps), -lr / bc1);
      break;
    }
  }
}

}  // namespace narrows::trainer
