// Adaptive batch sizes (Lau et al., arXiv 2412.21124), for DDP and for DiLoCo's inner steps.
//
// An update accumulates `multiple` base batches (batch_size sequences per worker each; steps count
// base batches, so every schedule sees the same tokens). The schedule is constant, a linear warm-up
// of the multiple from 1 to max_multiple over ramp_steps steps, or the norm test: every test_every
// updates, from n gradient samples g_1..g_n of equal size and their mean g,
//   T = [sum_j |g_j - g|^2 / (n - 1)] / (n |g|^2),
// the estimated variance of the mean gradient relative to its squared norm; when T > eta^2 the
// multiple grows to ceil(multiple * T / eta^2) (never shrinks; at most max_multiple). DDP's samples
// are the workers' gradients (n = members); DiLoCo's, the halves of each base batch of the update
// (n = 2 * multiple), one worker's own. Internal to trainer/.
#pragma once

#include <algorithm>
#include <cmath>

#include "core/scenario.h"
#include "trainer/worker.h"

namespace narrows::trainer {

// T above, from sum_j |g_j|^2, |g|^2 and n (sum_j |g_j - g|^2 = sum_j |g_j|^2 - n |g|^2).
inline double NormTestStatistic(double sum_sq_norms, double mean_sq_norm, int64_t n) {
  if (n < 2 || mean_sq_norm <= 0) return 0.0;
  const double variance = std::max(0.0, sum_sq_norms - static_cast<double>(n) * mean_sq_norm) / static_cast<double>(n - 1);
  return variance / (static_cast<double>(n) * mean_sq_norm);
}

class BatchSchedule {
 public:
  BatchSchedule(const core::AlgorithmSpec& a, int64_t steps)
      : a_(a), ramp_(a.ramp_steps > 0 ? a.ramp_steps : std::max<int64_t>(1, steps / 2)) {}

  bool adaptive() const { return a_.batch_schedule != core::BatchSchedule::kConstant; }
  int64_t multiple() const { return multiple_; }
  double last_statistic() const { return statistic_; }

  // Called when an update starts at `step`; returns whether it runs the norm test.
  bool BeginUpdate(int64_t step) {
    if (a_.batch_schedule == core::BatchSchedule::kLinear) {
      const double f = std::min(1.0, static_cast<double>(step) / static_cast<double>(ramp_));
      multiple_ = std::max(multiple_, 1 + static_cast<int64_t>(f * static_cast<double>(a_.max_multiple - 1)));
    }
    return a_.batch_schedule == core::BatchSchedule::kNormTest && updates_++ % a_.test_every == 0;
  }
  // After a test: the statistic, and the multiple it asks for (monotone, capped). Returns whether
  // the multiple grew.
  bool Observe(double statistic) {
    statistic_ = statistic;
    const double eta2 = a_.eta * a_.eta;
    if (statistic <= eta2) return false;
    const auto wanted = static_cast<int64_t>(std::ceil(static_cast<double>(multiple_) * statistic / eta2 - 1e-9));
    const int64_t next = std::clamp<int64_t>(wanted, multiple_, a_.max_multiple);
    const bool grew = next > multiple_;
    multiple_ = next;
    return grew;
  }

 private:
  const core::AlgorithmSpec& a_;
  const int64_t ramp_;
  int64_t multiple_ = 1, updates_ = 0;
  double statistic_ = 0.0;
};

// The gradients of one update, accumulated base batch by base batch in the replica's flat_grads().
class GradientAccumulator {
 public:
  explicit GradientAccumulator(WorkerContext& w) : w_(w) {}

  void Begin() {
    if (!sum_.defined()) sum_ = torch::zeros_like(w_.replica.model().flat_grads());
    sum_.zero_();
    batches_ = 0;
    samples_ = 0;
    sum_sq_norms_ = 0.0;
    loss_ = 0.0;
  }
  // Forward and backward of one base batch, its compute charged; with `halves`, as two halves whose
  // squared gradient norms feed the norm test. Returns the batch's mean loss.
  double Add(const TokenBatch& batch, bool halves) {
    double loss = 0.0;
    w_.Compute(w_.StepFlops(), [&] {
      const int64_t pieces = halves ? 2 : 1, rows = batch.batch / pieces;
      for (int64_t p = 0; p < pieces; ++p) {
        const double l = w_.replica.ComputeGradients(Rows(batch, p * rows, rows));
        loss += l / static_cast<double>(pieces);
        const torch::Tensor& g = w_.replica.model().flat_grads();
        if (halves) sum_sq_norms_ += g.square().sum().item<double>();
        sum_.add_(g, 1.0 / static_cast<double>(pieces));
      }
      samples_ += halves ? 2 : 0;
      return 0;
    });
    ++batches_;
    loss_ += loss;
    return loss;
  }
  // flat_grads() <- the mean over the update's base batches. Returns the update's mean loss.
  double Finish() {
    torch::NoGradGuard no_grad;
    w_.replica.model().flat_grads().copy_(sum_ / static_cast<double>(batches_));
    return loss_ / static_cast<double>(batches_);
  }
  // The norm test's statistic from the halves (call after Finish; 0 when none were taken).
  double Statistic() const {
    // The mean of all the halves is the update's gradient, now in flat_grads().
    const double mean_sq = w_.replica.model().flat_grads().square().sum().item<double>();
    return NormTestStatistic(sum_sq_norms_, mean_sq, samples_);
  }

 private:
  static TokenBatch Rows(const TokenBatch& b, int64_t from, int64_t count) {
    if (from == 0 && count == b.batch) return b;
    TokenBatch out;
    out.batch = count;
    out.seq_len = b.seq_len;
    out.inputs.assign(b.inputs.begin() + from * b.seq_len, b.inputs.begin() + (from + count) * b.seq_len);
    out.targets.assign(b.targets.begin() + from * b.seq_len, b.targets.begin() + (from + count) * b.seq_len);
    return out;
  }

  WorkerContext& w_;
  torch::Tensor sum_;
  int64_t batches_ = 0, samples_ = 0;
  double sum_sq_norms_ = 0.0, loss_ = 0.0;
};

}  // namespace narrows::trainer
