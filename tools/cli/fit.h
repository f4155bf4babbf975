// Power-law fits of loss for scaling studies, in the manner of "Scaling Laws for DiLoCo"
// (arXiv 2503.09799): L = A · N^α in model size N, and jointly L = A · N^α · M^β with the number
// of workers M, each fitted by least squares in log space (GSL), with standard errors from the
// residuals. When only one of N and M varies, that one alone is fitted.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace narrows::tools {

struct ScalingPoint {
  double params = 0;   // N
  double workers = 0;  // M
  double loss = 0;     // L
};

struct PowerLawFit {
  int points = 0;
  bool uses_params = false;   // α fitted
  bool uses_workers = false;  // β fitted
  double a = 0, a_err = 0;    // A and its standard error (from log A's, by the delta method)
  double alpha = 0, alpha_err = 0;
  double beta = 0, beta_err = 0;
  double r2 = 0;             // of log L
  double rms_rel_error = 0;  // root mean square of (fit − L) / L over the points
  // The range the points span, and what a prediction's interval needs: the covariance of the
  // log-space coefficients (log A, then α and β where fitted; row-major), the residual variance of
  // log L, and the residual degrees of freedom.
  double params_min = 0, params_max = 0, workers_min = 0, workers_max = 0;
  std::vector<double> cov;
  double residual_var = 0;
  int dof = 0;

  double Predict(double params, double workers) const;
  // The `level` prediction interval of one new run's loss at (params, workers): from the
  // coefficients' covariance and the residual variance, Student's t with the residual degrees of
  // freedom, in log space.
  struct Interval {
    double lo = 0, hi = 0;
  };
  Interval PredictionInterval(double params, double workers, double level = 0.95) const;
  bool Covers(double params, double workers) const {
    return params >= params_min * (1 - 1e-9) && params <= params_max * (1 + 1e-9) &&
           workers >= workers_min * (1 - 1e-9) && workers <= workers_max * (1 + 1e-9);
  }
};

// Needs at least one more point than parameters; N and M positive, L positive. A variable with a
// single value is left out of the fit.
core::Result<PowerLawFit> FitPowerLaw(const std::vector<ScalingPoint>& points);

}  // namespace narrows::tools
