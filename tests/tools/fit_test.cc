#include "tools/cli/fit.h"

#include <gtest/gtest.h>

#include <cmath>

namespace narrows::tools {
namespace {

// Five sizes, 1e5 to 1e9, on L = 3 N^-0.05 with fixed multiplicative noise, at 4 workers.
std::vector<ScalingPoint> NoisyLaw() {
  const std::vector<double> n = {1e5, 1e6, 1e7, 1e8, 1e9};
  const std::vector<double> noise = {0.01, -0.02, 0.015, 0.0, -0.005};
  std::vector<ScalingPoint> points;
  for (size_t i = 0; i < n.size(); ++i) points.push_back({n[i], 4, 3.0 * std::pow(n[i], -0.05) * std::exp(noise[i])});
  return points;
}

TEST(FitTest, RecoversAnExactPowerLawInModelSizeAndWorkers) {
  std::vector<ScalingPoint> points;
  for (double n : {1e6, 4e6, 1.6e7, 6.4e7}) {
    for (double m : {1.0, 2.0, 8.0}) points.push_back({n, m, 20.0 * std::pow(n, -0.07) * std::pow(m, 0.02)});
  }
  auto fit = FitPowerLaw(points);
  ASSERT_TRUE(fit.ok()) << fit.status().message();
  EXPECT_TRUE(fit->uses_params);
  EXPECT_TRUE(fit->uses_workers);
  EXPECT_NEAR(fit->a, 20.0, 1e-9);
  EXPECT_NEAR(fit->alpha, -0.07, 1e-12);
  EXPECT_NEAR(fit->beta, 0.02, 1e-12);
  EXPECT_LT(fit->alpha_err, 1e-9);
  EXPECT_NEAR(fit->r2, 1.0, 1e-12);
  EXPECT_NEAR(fit->Predict(2e6, 4), 20.0 * std::pow(2e6, -0.07) * std::pow(4, 0.02), 1e-9);
}

// The standard error of the slope must be ordinary least squares' (σ² / Σ(x − x̄)², σ² the
// residual variance with n − 2 degrees of freedom), not GSL's unscaled (XᵀX)⁻¹.
TEST(FitTest, StandardErrorIsTheResidualOne) {
  const std::vector<ScalingPoint> points = NoisyLaw();
  auto fit = FitPowerLaw(points);
  ASSERT_TRUE(fit.ok());
  EXPECT_FALSE(fit->uses_workers);
  double mx = 0, my = 0;
  for (const auto& p : points) {
    mx += std::log(p.params) / 5;
    my += std::log(p.loss) / 5;
  }
  double sxx = 0, sxy = 0;
  for (const auto& p : points) {
    sxx += std::pow(std::log(p.params) - mx, 2);
    sxy += (std::log(p.params) - mx) * (std::log(p.loss) - my);
  }
  const double slope = sxy / sxx;
  double rss = 0;
  for (const auto& p : points) rss += std::pow(std::log(p.loss) - my - slope * (std::log(p.params) - mx), 2);
  EXPECT_NEAR(fit->alpha, slope, 1e-12);
  EXPECT_NEAR(fit->alpha_err, std::sqrt(rss / 3 / sxx), 1e-12);
  EXPECT_GT(fit->alpha_err, 0);
}

// The prediction interval of a new point is ordinary least squares': t(n − 2) · σ · sqrt(1 + 1/n +
// (x − x̄)² / Sxx) about the fit in log space; it widens away from the points and is zero for an
// exact law. The range the points span is kept.
TEST(FitTest, PredictionIntervalIsOrdinaryLeastSquares) {
  const std::vector<ScalingPoint> points = NoisyLaw();
  auto fit = FitPowerLaw(points);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->params_min, 1e5);
  EXPECT_EQ(fit->params_max, 1e9);
  EXPECT_TRUE(fit->Covers(1e7, 4));
  EXPECT_FALSE(fit->Covers(1e10, 4));
  double mx = 0;
  for (const auto& p : points) mx += std::log(p.params) / 5;
  double sxx = 0;
  for (const auto& p : points) sxx += std::pow(std::log(p.params) - mx, 2);
  const double sigma = std::sqrt(fit->residual_var);
  const double t975_3 = 3.182446305284263;  // Student's t, 3 degrees of freedom
  for (double x : {1e7, 1e10}) {
    const auto iv = fit->PredictionInterval(x, 4);
    const double half = t975_3 * sigma * std::sqrt(1 + 0.2 + std::pow(std::log(x) - mx, 2) / sxx);
    EXPECT_NEAR(std::log(iv.hi / fit->Predict(x, 4)), half, 1e-9) << x;
    EXPECT_NEAR(std::log(fit->Predict(x, 4) / iv.lo), half, 1e-9) << x;
  }
  std::vector<ScalingPoint> exact;
  for (const auto& p : points) exact.push_back({p.params, 4, 3.0 * std::pow(p.params, -0.05)});
  auto exact_fit = FitPowerLaw(exact);
  ASSERT_TRUE(exact_fit.ok());
  const auto iv = exact_fit->PredictionInterval(1e10, 4);
  EXPECT_NEAR(iv.hi / iv.lo, 1.0, 1e-6);
}

TEST(FitTest, RefusesWhatCannotBeFitted) {
  EXPECT_FALSE(FitPowerLaw({{1e6, 2, 3.0}, {1e6, 2, 2.9}, {1e6, 2, 2.8}}).ok());  // nothing varies
  EXPECT_FALSE(FitPowerLaw({{1e6, 2, 3.0}, {2e6, 2, 2.9}}).ok());                // 2 points, 2 parameters
  EXPECT_FALSE(FitPowerLaw({{1e6, 2, 3.0}, {2e6, 2, -1.0}, {4e6, 2, 2.5}}).ok());  // a loss ≤ 0
  EXPECT_TRUE(FitPowerLaw({{1e6, 2, 3.0}, {2e6, 2, 2.9}, {4e6, 2, 2.7}}).ok());
}

}  // namespace
}  // namespace narrows::tools
