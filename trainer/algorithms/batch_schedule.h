// Adaptive batch sizes (Lau et al., arXiv 2412.21124): the schedule of the batch multiple, and the
// norm test's statistic (batch_size.h says how the trainer uses them). Torch-free, so that the
// planner (tools/cli/plan_command.cc) counts a schedule's updates with the trainer's own rule.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/option_reader.h"

namespace narrows::trainer {

enum class BatchScheduleKind { kConstant, kLinear, kNormTest };

// `batch:` of a ddp or diloco entry: constant, a linear warm-up of the batch multiple from 1 to
// max_multiple over ramp_steps steps (0: half the run), or the norm test every test_every updates
// (grow when the gradient noise exceeds eta^2 of the mean gradient's squared norm), up to
// max_multiple. The multiple is how many base batches (train.batch_size per worker) one update
// accumulates; steps count base batches, so every schedule trains on the same tokens.
struct BatchOptions {
  BatchScheduleKind schedule = BatchScheduleKind::kConstant;
  int64_t max_multiple = 8, ramp_steps = 0, test_every = 10;
  double eta = 0.2;
};

// Reads an entry's `batch:` (`key`, which the entry's algorithm declares; the schedule's own keys are
// declared in trainer/algorithms/outer.cc).
BatchOptions ReadBatchOptions(core::OptionReader& entry, const core::StructureKey& key);

// The norm test's T = [sum_j |g_j - g|^2 / (n - 1)] / (n |g|^2) of n gradient samples g_j and their
// mean g, from sum_j |g_j|^2, |g|^2 and n (sum_j |g_j - g|^2 = sum_j |g_j|^2 - n |g|^2).
inline double NormTestStatistic(double sum_sq_norms, double mean_sq_norm, int64_t n) {
  if (n < 2 || mean_sq_norm <= 0) return 0.0;
  const double variance = std::max(0.0, sum_sq_norms - static_cast<double>(n) * mean_sq_norm) / static_cast<double>(n - 1);
  return variance / (static_cast<double>(n) * mean_sq_norm);
}

class BatchSchedule {
 public:
  BatchSchedule(const BatchOptions& a, int64_t steps)
      : a_(a), ramp_(a.ramp_steps > 0 ? a.ramp_steps : std::max<int64_t>(1, steps / 2)) {}

  bool adaptive() const { return a_.schedule != BatchScheduleKind::kConstant; }
  int64_t multiple() const { return multiple_; }

  // Called when an update starts at `step`; returns whether it runs the norm test.
  bool BeginUpdate(int64_t step) {
    if (a_.schedule == BatchScheduleKind::kLinear) {
      const double f = std::min(1.0, static_cast<double>(step) / static_cast<double>(ramp_));
      multiple_ = std::max(multiple_, 1 + static_cast<int64_t>(f * static_cast<double>(a_.max_multiple - 1)));
    }
    return a_.schedule == BatchScheduleKind::kNormTest && updates_++ % a_.test_every == 0;
  }
  // After a test: the multiple its statistic asks for (monotone, capped). Returns whether the
  // multiple grew.
  bool Observe(double statistic) {
    const double eta2 = a_.eta * a_.eta;
    if (statistic <= eta2) return false;
    const auto wanted = static_cast<int64_t>(std::ceil(static_cast<double>(multiple_) * statistic / eta2 - 1e-9));
    const int64_t next = std::clamp<int64_t>(wanted, multiple_, a_.max_multiple);
    const bool grew = next > multiple_;
    multiple_ = next;
    return grew;
  }

 private:
  const BatchOptions a_;
  const int64_t ramp_;
  int64_t multiple_ = 1, updates_ = 0;
};

}  // namespace narrows::trainer
