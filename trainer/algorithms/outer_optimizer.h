// The outer optimiser of DiLoCo (arXiv 2311.08105 Alg. 1): a step on the global parameters from the
// averaged pseudo-gradient (global - local), and error feedback for compressed pseudo-gradients.
// Shared by the DiLoCo family; one state per set of parameters it updates (Streaming DiLoCo keeps
// one per fragment). Internal to trainer/.
#pragma once

#include <cmath>

#include <vector>

#include "core/codec.h"
#include "trainer/algorithms/outer.h"
#include "trainer/torch_pch.h"

namespace narrows::trainer {

struct OuterOptimizerState {
  torch::Tensor momentum, adam_m, adam_v;
  int64_t steps = 0;

  static OuterOptimizerState Like(const torch::Tensor& params) {
    return {torch::zeros_like(params), torch::zeros_like(params), torch::zeros_like(params), 0};
  }
};

inline void OuterStep(const OuterOptions& a, torch::Tensor& global, const torch::Tensor& delta,
                      OuterOptimizerState& s) {
  torch::NoGradGuard no_grad;
  ++s.steps;
  const double lr = a.outer_lr, mu = a.outer_momentum;
  switch (a.outer_optimizer) {
    case OuterOptimizer::kSgd:
      if (mu > 0) {
        s.momentum.mul_(mu).add_(delta);
        global.sub_(s.momentum, lr);
      } else {
        global.sub_(delta, lr);
      }
      break;
    case OuterOptimizer::kNesterov:  // PyTorch SGD(nesterov=True) on the pseudo-gradient
      s.momentum.mul_(mu).add_(delta);
      global.sub_(delta + mu * s.momentum, lr);
      break;
    case OuterOptimizer::kAdam: {
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

// Error feedback for a lossy outer-gradient codec over one message encoded whole (asynchronous
// DiLoCo's push): what the codec lost of this worker's contribution is added to its next one, so
// that nothing is lost for good, only delayed. All-reduces keep theirs in core::EncodingResiduals,
// on the wire's own chunks (core/collectives.h).
class ErrorFeedback {
 public:
  // `values` (this worker's contribution) += the residual; the residual becomes what encoding the
  // sum loses. A lossless codec, or error feedback off: nothing.
  void Apply(const core::Codec& codec, float* values, int64_t count) {
    if (codec.lossless() || !codec.spec().error_feedback) return;
    residual_.resize(static_cast<size_t>(count), 0.0f);
    wire_.resize(static_cast<size_t>(codec.EncodedBytes(count)));
    decoded_.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) values[i] += residual_[static_cast<size_t>(i)];
    codec.Encode(values, count, wire_.data());
    codec.Decode(wire_.data(), count, decoded_.data());
    for (int64_t i = 0; i < count; ++i) residual_[static_cast<size_t>(i)] = values[i] - decoded_[static_cast<size_t>(i)];
  }

 private:
  std::vector<float> residual_, decoded_;
  std::vector<uint8_t> wire_;
};

}  // namespace narrows::trainer
