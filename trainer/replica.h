// Replica: one copy of the model with its inner optimiser, taking optimiser steps on token batches.
//
// The unit every algorithm is built from: plain training owns one, data-parallel and DiLoCo
// workers own one each. Parameters, gradients and the optimiser's state are flat buffers (trainer/gpt.h),
// so an algorithm can average, send or overwrite a replica's state as single tensors.
// Not thread-safe. Includes LibTorch.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/scenario.h"
#include "trainer/inner_optimizer.h"
#include "trainer/gpt.h"
#include "trainer/sampler.h"

namespace narrows::trainer {

struct StepStats {
  double loss = 0.0;       // mean over the micro-batches (nats per token)
  double grad_norm = 0.0;  // global L2 norm before clipping
};

// "cpu", "cuda", "cuda:N" -> a device, or InvalidArgument if this LibTorch cannot use it.
core::Result<torch::Device> ResolveDevice(const std::string& name);
// Sets LibTorch's intra-op threads (0 = all cores) and keeps freed activations on the heap
// (core/heap.h); returns the thread count in effect. Process-wide; call before training.
int ConfigureThreads(int64_t threads);

class Replica {
 public:
  // REQUIRES: the global LibTorch generator is seeded (the model initialises from it).
  Replica(const core::ModelSpec& model, const core::TrainSpec& train, torch::Device device);

  // Forward and backward over `batch` in train.grad_accum micro-batches, gradient clipping, then
  // one step of the inner optimiser (train.optimizer) at learning rate `lr`.
  StepStats TrainStep(const TokenBatch& batch, double lr);
  // Forward and backward only: gradients of the mean loss over `batch` in flat_grads().
  // `before_backward`, if set, receives the loss of the last micro-batch before its backward.
  double ComputeGradients(const TokenBatch& batch, const std::function<void(double)>& before_backward = {});
  // A replica of a run that is timed, not trained (ExperimentOptions::timing_only): every forward and
  // backward runs over the first 16 tokens of one sequence of its batch, so that backward still
  // reaches the parameters in their order (DDP's buckets start as in training), at a small share of
  // the cost; the gradients and losses are not the training's. Evaluations are not computed.
  void set_timing_only(bool on) { timing_only_ = on; }
  bool timing_only() const { return timing_only_; }
  // Clip, then step the inner optimiser with the gradients in flat_grads().
  double ApplyGradients(double lr);
  // Mean loss (nats per token) over every token of the batches (a batch weighs as its rows), without
  // gradients.
  double Evaluate(const std::vector<TokenBatch>& batches);
  // The same mean, with the standard error of the evaluation itself: the standard deviation of
  // the sequences' own mean losses over the square root of their number (NaN for one sequence).
  struct Evaluation {
    double loss = 0.0, standard_error = 0.0;
    std::vector<double> rows;  // each row's mean loss, batch by batch
  };
  Evaluation EvaluateWithError(const std::vector<TokenBatch>& batches);

  Gpt& model() { return model_; }
  InnerOptimizer& optimizer() { return *optimizer_; }
  torch::Device device() const { return model_.device(); }

  // Waits for this replica's queued GPU kernels (nothing on the CPU). Emulated replicas that share a
  // GPU compute one at a time (emu/engine.h); a step timed on the host up to here is this replica's
  // GPU time, not partly the next one's.
  void FinishOnDevice() const;

 private:
  torch::Tensor ToDevice(const std::vector<int64_t>& ids, int64_t rows, int64_t row_offset,
                         int64_t seq_len) const;

  core::TrainSpec train_;
  Gpt model_;
  std::unique_ptr<InnerOptimizer> optimizer_;
  bool timing_only_ = false;
};

}  // namespace narrows::trainer
