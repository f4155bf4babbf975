#include "tools/cli/stats.h"

#include <gsl/gsl_cdf.h>

#include <cmath>
#include <limits>

#include "core/check.h"

namespace narrows::tools {

Interval MeanInterval(const std::vector<double>& values, double level) {
  Interval out;
  out.n = static_cast<int>(values.size());
  if (values.empty()) return out;
  for (double v : values) out.mean += v;
  out.mean /= out.n;
  if (out.n < 2) {
    out.sd = out.half_width = std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  double squares = 0.0;
  for (double v : values) squares += (v - out.mean) * (v - out.mean);
  out.sd = std::sqrt(squares / (out.n - 1));
  const double t = gsl_cdf_tdist_Pinv(1.0 - (1.0 - level) / 2.0, out.n - 1);
  out.half_width = t * out.sd / std::sqrt(static_cast<double>(out.n));
  return out;
}

Interval PairedDifference(const std::vector<double>& a, const std::vector<double>& b, double level) {
  NARROWS_CHECK(a.size() == b.size()) << "paired values of " << a.size() << " and " << b.size() << " seeds";
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return MeanInterval(d, level);
}

Ratio PairedRatio(const std::vector<double>& a, const std::vector<double>& b, double level) {
  NARROWS_CHECK(a.size() == b.size()) << "paired values of " << a.size() << " and " << b.size() << " seeds";
  std::vector<double> logs(a.size());
  for (size_t i = 0; i < a.size(); ++i) logs[i] = std::log(a[i] / b[i]);
  const Interval l = MeanInterval(logs, level);
  return {l.n, std::exp(l.mean), std::exp(l.lo()), std::exp(l.hi())};
}

Verdict Judge(double lo, double hi, int n, int claimed_sign) {
  if (n < 2 || std::isnan(lo) || std::isnan(hi)) return Verdict::kInconclusive;
  const bool positive = lo > 0.0, negative = hi < 0.0;
  if ((claimed_sign > 0 && positive) || (claimed_sign < 0 && negative)) return Verdict::kHolds;
  if ((claimed_sign > 0 && negative) || (claimed_sign < 0 && positive)) return Verdict::kFails;
  return Verdict::kInconclusive;
}

Verdict JudgeCostsLittle(double lo, double hi, int n, double margin) {
  if (n < 2 || std::isnan(lo) || std::isnan(hi)) return Verdict::kInconclusive;
  if (hi < margin) return Verdict::kHolds;
  if (lo > margin) return Verdict::kFails;
  return Verdict::kInconclusive;
}

Verdict JudgeMatches(double lo, double hi, int n, double margin) {
  if (n < 2 || std::isnan(lo) || std::isnan(hi)) return Verdict::kInconclusive;
  if (lo > -margin && hi < margin) return Verdict::kHolds;
  if (lo > margin || hi < -margin) return Verdict::kFails;
  return Verdict::kInconclusive;
}

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kHolds: return "holds";
    case Verdict::kFails: return "fails";
    case Verdict::kInconclusive: return "inconclusive";
  }
  return "?";
}

}  // namespace narrows::tools
