#include "trainer/algorithms/plan.h"

#include <algorithm>
#include <cmath>

namespace narrows::trainer {

double PlanInputs::RingAllReduceSeconds(double bytes, const std::vector<int>& group) const {
  std::vector<int> ranks = group;
  if (ranks.empty()) {
    for (int w = 0; w < workers(); ++w) ranks.push_back(w);
  }
  double sent = 0.0;
  return ConcurrentRingsSeconds({ranks}, bytes, &sent);
}

double PlanInputs::EncodedAllReduceSeconds(double scatter_bytes, double gather_bytes) const {
  const int m = workers();
  if (m < 2) return 0.0;
  return AllGatherSeconds(std::ceil(scatter_bytes / m)) + AllGatherSeconds(std::ceil(gather_bytes / m));
}

double PlanInputs::AllReduceSeconds(double bytes, core::CollectiveKind kind) const {
  const int m = workers();
  if (m < 2 || bytes <= 0) return 0.0;
  switch (kind) {
    case core::CollectiveKind::kTwoPhase: return EncodedAllReduceSeconds(bytes, bytes);
    case core::CollectiveKind::kStar: {
      std::vector<PlanMessage> in, out;
      for (int w = 1; w < m; ++w) {
        in.push_back({w, 0, static_cast<int64_t>(std::ceil(bytes))});
        out.push_back({0, w, static_cast<int64_t>(std::ceil(bytes))});
      }
      return slowest_delivery(in) + slowest_delivery(out);
    }
    case core::CollectiveKind::kRing:
    case core::CollectiveKind::kHierarchical: break;
  }
  return RingAllReduceSeconds(bytes);
}

double PlanInputs::AllGatherSeconds(double bytes) const {
  const int m = workers();
  if (m < 2 || bytes <= 0) return 0.0;
  std::vector<PlanMessage> phase;
  for (int w = 0; w < m; ++w) {
    for (int v = 0; v < m; ++v) {
      if (v != w) phase.push_back({w, v, static_cast<int64_t>(std::ceil(bytes))});
    }
  }
  return slowest_delivery(phase);
}

double PlanInputs::ConcurrentRingsSeconds(const std::vector<std::vector<int>>& groups, double bytes,
                                          double* sent_per_worker) const {
  if (bytes <= 0) return 0.0;
  std::vector<PlanMessage> step;
  size_t longest = 0;
  for (const auto& g : groups) {
    if (g.size() < 2) continue;
    longest = std::max(longest, g.size());
    const double n = static_cast<double>(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      step.push_back({g[i], g[(i + 1) % g.size()], static_cast<int64_t>(std::ceil(bytes / n))});
    }
    *sent_per_worker += n * 2.0 * (n - 1) / n * bytes / workers();
  }
  return step.empty() ? 0.0 : 2.0 * static_cast<double>(longest - 1) * slowest_delivery(step);
}

}  // namespace narrows::trainer
