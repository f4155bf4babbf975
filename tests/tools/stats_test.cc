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
// Claims with a margin: "costs little" bounds the gap above by the margin, "matches" on both sides;
// each fails only when the interval lies wholly beyond the margin.
TEST(StatsTest, MarginClaimsNeedTheIntervalWithinTheMargin) {
  EXPECT_EQ(JudgeCostsLittle(0.005, 0.015, 3, 0.02), Verdict::kHolds);     // a cost, but a small one
  EXPECT_EQ(JudgeCostsLittle(-0.01, 0.03, 3, 0.02), Verdict::kInconclusive);
  EXPECT_EQ(JudgeCostsLittle(0.025, 0.095, 5, 0.02), Verdict::kFails);
  EXPECT_EQ(JudgeCostsLittle(-0.5, -0.1, 3, 0.02), Verdict::kHolds);       // a gain costs nothing
  EXPECT_EQ(JudgeMatches(-0.5, -0.1, 3, 0.02), Verdict::kFails);           // but it does not match
  EXPECT_EQ(JudgeMatches(-0.01, 0.015, 3, 0.02), Verdict::kHolds);
  EXPECT_EQ(JudgeMatches(0.01, 0.03, 3, 0.02), Verdict::kInconclusive);
  EXPECT_EQ(JudgeMatches(-0.01, 0.01, 1, 0.02), Verdict::kInconclusive);   // one seed: no spread known
  EXPECT_TRUE(Resolved(0.009, 0.004));
  EXPECT_FALSE(Resolved(-0.007, 0.004));
  EXPECT_TRUE(Resolved(0.001, 0.0));  // no standard error recorded: nothing to resolve against
}

}  // namespace narrows::tools
