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

  double Predict(double params, double workers) const;
};

// Needs at least one more point than parameters; N and M positive, L positive. A variable with a
// single value is left out of the fit.
core::Result<PowerLawFit> FitPowerLaw(const std::vector<ScalingPoint>& points);

}  // namespace narrows::tools
