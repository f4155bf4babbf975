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

#include "trainer/algorithms/batch_schedule.h"
#include "trainer/worker.h"

namespace narrows::trainer {

// One worker's updates of the schedule's multiple of base batches, accumulated one base batch per
// step in the replica's flat_grads(); a change of multiple is a `batch_size` event. With
// `test_on_halves` (DiLoCo) a test update computes each base batch as two halves, the samples of
// its norm test; otherwise (DDP) the caller tests across workers.
// Where the norm test's gradient samples come from.
enum class NormTestSamples {
  kWorkers,            // the workers' gradients, compared by the caller (DDP)
  kHalvesOfEachBatch,  // the two halves of each base batch of this worker's update (DiLoCo)
};

class AdaptiveUpdates {
 public:
  AdaptiveUpdates(WorkerContext& w, const BatchOptions& options, NormTestSamples samples)
      : w_(w), schedule_(options, w.entry.sc.train.steps), halves_(samples == NormTestSamples::kHalvesOfEachBatch) {
    if (schedule_.adaptive()) w.records.MarkVaryingBatch();
  }

  bool adaptive() const { return schedule_.adaptive(); }
  BatchSchedule& schedule() { return schedule_; }
  bool testing() const { return testing_; }
  int64_t start() const { return start_; }  // the step the update began at (its learning rate's)
  int64_t length() const { return length_; }

  // Trains the base batch of `step`, beginning an update there if none is open (an update ends by
  // `end`). Returns the batch's loss; on the update's last batch `*done` is set, flat_grads() hold
  // the update's mean gradient and the loss returned is the update's mean.
  double Step(int64_t step, int64_t end, bool* done) {
    if (micro_ == 0) {
      testing_ = schedule_.BeginUpdate(step);
      length_ = std::min(schedule_.multiple(), end - step);
      start_ = step;
      Begin();
      if (schedule_.multiple() != announced_) {
        announced_ = schedule_.multiple();
        w_.records.Event({{"type", "batch_size"}, {"step", step}, {"worker", w_.rank}, {"multiple", announced_}});
      }
    }
    const double loss = Add(w_.sampler.Next(w_.entry.sc.train.batch_size), halves_ && testing_);
    *done = ++micro_ == length_;
    if (!*done) return loss;
    micro_ = 0;
    return Finish();
  }
  // The norm test's statistic from the halves of the update just done (0 when none were taken).
  double HalvesStatistic() const {
    // The mean of all the halves is the update's gradient, now in flat_grads().
    const double mean_sq = w_.replica.model().flat_grads().square().sum().item<double>();
    return NormTestStatistic(sum_sq_norms_, mean_sq, samples_);
  }

 private:
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
  BatchSchedule schedule_;
  const bool halves_;
  torch::Tensor sum_;
  int64_t batches_ = 0, samples_ = 0;
  double sum_sq_norms_ = 0.0, loss_ = 0.0;
  int64_t micro_ = 0, length_ = 1, start_ = 0, announced_ = 1;
  bool testing_ = false;
};

}  // namespace narrows::trainer
