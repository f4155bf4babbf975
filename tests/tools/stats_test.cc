// Intervals, paired differences and verdicts against hand computations (t quantiles from tables:
// t(0.975, 2) = 4.302653, t(0.975, 3) = 3.182446).
#include "tools/cli/stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace narrows::tools {
namespace {

TEST(StatsTest, MeanIntervalIsStudentsT) {
  const Interval i = MeanInterval({1, 2, 3, 4});
  EXPECT_EQ(i.n, 4);
  EXPECT_DOUBLE_EQ(i.mean, 2.5);
  EXPECT_NEAR(i.sd, std::sqrt(5.0 / 3.0), 1e-12);
  EXPECT_NEAR(i.half_width, 3.182446 * std::sqrt(5.0 / 3.0) / 2.0, 1e-5);
  const Interval one = MeanInterval({7});
  EXPECT_EQ(one.mean, 7);
  EXPECT_TRUE(std::isnan(one.half_width));
}

TEST(StatsTest, PairedDifferencesAndRatios) {
  // Seed by seed, a is 0.1, 0.1 and 0.05 above b: the spread of each is large, that of the
  // differences small, so the pairing decides the verdict.
  const Interval d = PairedDifference({2.0, 2.1, 2.05}, {1.9, 2.0, 2.0});
  EXPECT_NEAR(d.mean, 0.25 / 3, 1e-12);
  EXPECT_NEAR(d.sd, std::sqrt(0.0025 / 3), 1e-12);
  EXPECT_NEAR(d.half_width, 4.302653 * std::sqrt(0.0025 / 3) / std::sqrt(3.0), 1e-5);
  EXPECT_GT(d.lo(), 0.0);
  EXPECT_EQ(Judge(d.lo(), d.hi(), d.n, +1), Verdict::kHolds);
  EXPECT_EQ(Judge(d.lo(), d.hi(), d.n, -1), Verdict::kFails);
  const Interval unpaired_a = MeanInterval({2.0, 2.1, 2.05}), unpaired_b = MeanInterval({1.9, 2.0, 2.0});
  EXPECT_LT(unpaired_a.lo(), unpaired_b.hi());  // the intervals of the means overlap

  const Ratio r = PairedRatio({2, 4}, {1, 1});
  EXPECT_NEAR(r.ratio, std::pow(2.0, 1.5), 1e-12);  // the geometric mean
  EXPECT_LT(r.lo, r.ratio);
  EXPECT_GT(r.hi, r.ratio);
}

TEST(StatsTest, AVerdictNeedsTheIntervalToExcludeZero) {
  EXPECT_EQ(Judge(-0.1, 0.2, 5, +1), Verdict::kInconclusive);
  EXPECT_EQ(Judge(-0.3, -0.1, 5, -1), Verdict::kHolds);
  EXPECT_EQ(Judge(0.1, 0.2, 1, +1), Verdict::kInconclusive);  // one seed: no spread known
  EXPECT_STREQ(VerdictName(Verdict::kInconclusive), "inconclusive");
}

}  // namespace
}  // namespace narrows::tools
