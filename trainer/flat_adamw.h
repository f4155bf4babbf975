// FlatAdamW: AdamW (Loshchilov & Hutter 2019, PyTorch's formulation) over one flat parameter buffer
// split into groups with their own lr, weight-decay and eps multipliers. Plus the learning-rate
// schedule (linear warm-up, cosine decay).
//
// On CPU float32 the update is one fused pass over memory (parameters, gradients and both moments
// read once, written once), parallelised with ATen's thread pool; on other devices it runs as a
// handful of whole-buffer tensor ops. Either way it equals torch.optim.AdamW up to float rounding.
// Not thread-safe; the buffers are borrowed from the model and must outlive the optimiser.
#pragma once

#include <vector>

#include "core/scenario.h"
#include "trainer/gpt.h"

namespace narrows::trainer {

struct AdamWGroup {
  int64_t offset = 0, numel = 0;
  double lr_scale = 1.0, weight_decay = 0.0, eps = 1e-8;
};

class FlatAdamW {
 public:
  FlatAdamW(torch::Tensor params, torch::Tensor grads, std::vector<AdamWGroup> groups, double beta1,
            double beta2);
  // Groups, decay and eps from the model's parameterisation and the scenario's train section.
  static FlatAdamW ForModel(Gpt& model, const core::TrainSpec& train);

  // One update with base learning rate `lr` (each group scales it).
  void Step(double lr);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t steps) { step_ = steps; }
  // Forgets the moments and the step count (a worker that lost its state).
  void Reset();
  torch::Tensor& exp_avg() { return exp_avg_; }
  torch::Tensor& exp_avg_sq() { return exp_avg_sq_; }
  const std::vector<AdamWGroup>& groups() const { return groups_; }

 private:
  torch::Tensor params_, grads_, exp_avg_, exp_avg_sq_;
  std::vector<AdamWGroup> groups_;
  double beta1_, beta2_;
  int64_t step_ = 0;
};

// Learning rate at `step` (0-based): linear warm-up to train.lr over warmup_steps, then cosine
// decay to lr * min_lr_ratio at train.steps (or constant).
double LearningRate(const core::TrainSpec& train, int64_t step);

// Scales gradients so that their global L2 norm is at most max_norm (0 = no clipping).
// Returns the norm before clipping.
double ClipGradNorm(torch::Tensor& grads, double max_norm);

}  // namespace narrows::trainer
