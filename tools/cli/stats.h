// Uncertainty of a comparison run over several seeds: the mean of a quantity with its Student-t
// interval, paired differences and ratios against a baseline run on the same seeds, and the
// verdict a claim gets from such an interval. Torch-free; pure functions.
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace narrows::tools {

// The mean of n values with its two-sided t-interval at `level`: mean ± half_width, where
// half_width = t(1 - (1 - level)/2, n - 1) · sd / sqrt(n) and sd is the sample standard deviation.
// With one value, sd and half_width are NaN (no spread is known).
struct Interval {
  int n = 0;
  double mean = 0.0, sd = 0.0, half_width = 0.0;
  double lo() const { return mean - half_width; }
  double hi() const { return mean + half_width; }
};
Interval MeanInterval(const std::vector<double>& values, double level = 0.95);

// The paired differences a[i] - b[i] (the same seed in both): their mean and interval.
// REQUIRES: a.size() == b.size().
Interval PairedDifference(const std::vector<double>& a, const std::vector<double>& b, double level = 0.95);

// The paired ratios a[i] / b[i] (positive): their geometric mean and the interval of the t-interval
// of their logarithms, mapped back (so a speed-up of 2 and one of 1/2 are symmetric).
struct Ratio {
  int n = 0;
  double ratio = 0.0, lo = 0.0, hi = 0.0;
};
Ratio PairedRatio(const std::vector<double>& a, const std::vector<double>& b, double level = 0.95);

// A claim about a paired difference: "holds" when the interval excludes zero on the claimed side
// (`claimed_sign` +1: the difference is positive; -1: negative), "fails" when it excludes zero on the
// other side, "inconclusive" otherwise (and with fewer than two seeds).
enum class Verdict { kHolds, kFails, kInconclusive };
Verdict Judge(double lo, double hi, int n, int claimed_sign);
const char* VerdictName(Verdict v);

// Claims about a paired loss difference d = entry - baseline with an equivalence margin `margin`
// (nats, > 0), set before the runs (docs/explanation/methods.md#verdicts):
// - "costs little" (d < margin): holds when hi < margin, fails when lo > margin;
// - "matches" (|d| < margin): holds when the interval lies inside (-margin, margin), fails when it
//   lies wholly outside it (lo > margin or hi < -margin);
// inconclusive otherwise, and with fewer than two seeds.
Verdict JudgeCostsLittle(double lo, double hi, int n, double margin);
Verdict JudgeMatches(double lo, double hi, int n, double margin);
// The margin of a loss claim that states none of its own: 0.02 nats (five times the evaluation's
// standard error at the default 1024 windows, about 1% of the losses these scenarios reach).
inline constexpr double kDefaultLossMargin = 0.02;
// Whether a loss gap `mean` is resolved by evaluations of standard error `eval_se`: at least twice
// it. A directional verdict on a smaller gap is inconclusive, whatever the seeds say.
inline bool Resolved(double mean, double eval_se) { return !(eval_se > 0) || std::abs(mean) >= 2.0 * eval_se; }

}  // namespace narrows::tools
