#include "tools/cli/fit.h"

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_multifit.h>

#include <cmath>
#include <memory>
#include <set>

namespace narrows::tools {
namespace {

struct GslFree {
  void operator()(gsl_matrix* m) const { gsl_matrix_free(m); }
  void operator()(gsl_vector* v) const { gsl_vector_free(v); }
  void operator()(gsl_multifit_linear_workspace* w) const { gsl_multifit_linear_free(w); }
};
template <typename T>
using GslPtr = std::unique_ptr<T, GslFree>;

}  // namespace

double PowerLawFit::Predict(double params, double workers) const {
  double l = a;
  if (uses_params) l *= std::pow(params, alpha);
  if (uses_workers) l *= std::pow(workers, beta);
  return l;
}

PowerLawFit::Interval PowerLawFit::PredictionInterval(double params, double workers, double level) const {
  std::vector<double> x = {1.0};
  if (uses_params) x.push_back(std::log(params));
  if (uses_workers) x.push_back(std::log(workers));
  double var = residual_var;
  const size_t k = x.size();
  for (size_t i = 0; i < k && cov.size() == k * k; ++i) {
    for (size_t j = 0; j < k; ++j) var += x[i] * cov[i * k + j] * x[j];
  }
  const double t = dof > 0 ? gsl_cdf_tdist_Pinv(0.5 + level / 2, dof) : NAN;
  const double mid = std::log(Predict(params, workers)), half = t * std::sqrt(std::max(0.0, var));
  return {std::exp(mid - half), std::exp(mid + half)};
}

core::Result<PowerLawFit> FitPowerLaw(const std::vector<ScalingPoint>& points) {
  std::set<double> ns, ms;
  for (const auto& p : points) {
    if (!(p.params > 0) || !(p.workers > 0) || !(p.loss > 0)) {
      return core::Status::InvalidArgument("fit: parameters, workers and loss must be positive");
    }
    ns.insert(p.params);
    ms.insert(p.workers);
  }
  PowerLawFit fit;
  if (!ns.empty()) {
    fit.params_min = *ns.begin();
    fit.params_max = *ns.rbegin();
    fit.workers_min = *ms.begin();
    fit.workers_max = *ms.rbegin();
  }
  fit.points = static_cast<int>(points.size());
  fit.uses_params = ns.size() > 1;
  fit.uses_workers = ms.size() > 1;
  const size_t k = 1 + (fit.uses_params ? 1 : 0) + (fit.uses_workers ? 1 : 0);
  if (k == 1) return core::Status::InvalidArgument("fit: neither the model size nor the number of workers varies");
  if (points.size() < k + 1) {
    return core::Status::InvalidArgument("fit: " + std::to_string(points.size()) + " points for " +
                                         std::to_string(k) + " parameters; need at least " + std::to_string(k + 1));
  }
  const size_t n = points.size();
  GslPtr<gsl_matrix> x(gsl_matrix_alloc(n, k));
  GslPtr<gsl_vector> y(gsl_vector_alloc(n));
  GslPtr<gsl_vector> c(gsl_vector_alloc(k));
  GslPtr<gsl_matrix> cov(gsl_matrix_alloc(k, k));
  for (size_t i = 0; i < n; ++i) {
    size_t col = 0;
    gsl_matrix_set(x.get(), i, col++, 1.0);
    if (fit.uses_params) gsl_matrix_set(x.get(), i, col++, std::log(points[i].params));
    if (fit.uses_workers) gsl_matrix_set(x.get(), i, col++, std::log(points[i].workers));
    gsl_vector_set(y.get(), i, std::log(points[i].loss));
  }
  GslPtr<gsl_multifit_linear_workspace> work(gsl_multifit_linear_alloc(n, k));
  double chisq = 0;
  // cov is σ²(XᵀX)⁻¹ with σ² = χ²/(n − k), the residual variance: standard errors of ordinary least squares.
  if (gsl_multifit_linear(x.get(), y.get(), c.get(), cov.get(), &chisq, work.get()) != GSL_SUCCESS) {
    return core::Status::InvalidArgument("fit: the least-squares problem is singular");
  }
  auto se = [&](size_t i) { return std::sqrt(std::max(0.0, gsl_matrix_get(cov.get(), i, i))); };
  fit.a = std::exp(gsl_vector_get(c.get(), 0));
  fit.a_err = fit.a * se(0);
  size_t col = 1;
  if (fit.uses_params) {
    fit.alpha = gsl_vector_get(c.get(), col);
    fit.alpha_err = se(col++);
  }
  if (fit.uses_workers) {
    fit.beta = gsl_vector_get(c.get(), col);
    fit.beta_err = se(col++);
  }
  double mean = 0;
  for (size_t i = 0; i < n; ++i) mean += gsl_vector_get(y.get(), i) / static_cast<double>(n);
  double total = 0, rel = 0;
  for (size_t i = 0; i < n; ++i) {
    total += std::pow(gsl_vector_get(y.get(), i) - mean, 2);
    rel += std::pow(fit.Predict(points[i].params, points[i].workers) / points[i].loss - 1.0, 2);
  }
  fit.dof = static_cast<int>(n - k);
  fit.residual_var = chisq / static_cast<double>(n - k);
  for (size_t i = 0; i < k; ++i) {
    for (size_t j = 0; j < k; ++j) fit.cov.push_back(gsl_matrix_get(cov.get(), i, j));
  }
  fit.r2 = total > 0 ? 1.0 - chisq / total : 1.0;
  fit.rms_rel_error = std::sqrt(rel / static_cast<double>(n));
  return fit;
}

}  // namespace narrows::tools
