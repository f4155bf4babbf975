// FlatAdamW: AdamW (Loshchilov & Hutter 2019, PyTorch's formulation) over one flat parameter buffer
// split into groups with their own lr, weight-decay and eps multipliers; the `adamw` inner
// optimiser (trainer/inner_optimizer.h), which reads no block of its own: train.beta1, beta2, eps
// and weight_decay, scaled per group by the model's parameterisation.
//
// On CPU float32 the update is one fused pass over memory (parameters, gradients and both moments
// read once, written once), parallelised with ATen's thread pool; on other devices it runs as a
// handful of whole-buffer tensor ops. Either way it equals torch.optim.AdamW up to float rounding.
// Not thread-safe; the buffers are borrowed from the model and must outlive the optimiser.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/scenario.h"
#include "trainer/gpt.h"
#include "trainer/inner_optimizer.h"

namespace narrows::trainer {

struct AdamWGroup {
  int64_t offset = 0, numel = 0;
  double lr_scale = 1.0, weight_decay = 0.0, eps = 1e-8;
};

class FlatAdamW final : public InnerOptimizer {
 public:
  FlatAdamW(torch::Tensor params, torch::Tensor grads, std::vector<AdamWGroup> groups, double beta1,
            double beta2);
  // Groups, decay and eps from the model's parameterisation and the scenario's train section.
  static std::unique_ptr<FlatAdamW> ForModel(Gpt& model, const core::TrainSpec& train);

  void Step(double lr) override;
  void Reset() override;
  // exp_avg and exp_avg_sq, the first and second moments.
  std::vector<std::pair<std::string, torch::Tensor*>> State() override;
  torch::Tensor& exp_avg() { return exp_avg_; }
  torch::Tensor& exp_avg_sq() { return exp_avg_sq_; }
  const std::vector<AdamWGroup>& groups() const { return groups_; }

 private:
  torch::Tensor params_, grads_, exp_avg_, exp_avg_sq_;
  std::vector<AdamWGroup> groups_;
  double beta1_, beta2_;
};

}  // namespace narrows::trainer
