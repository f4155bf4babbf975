// SPARTA's subsets (sparta.cc): which parameters the workers average at a sparse average. A
// function of the scenario's seed and the step alone, so that every worker — a restarted or
// resumed one included — draws the same subset without sending it. Torch-free.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <unordered_set>
#include <vector>

namespace narrows::trainer {

// The number of parameters a sparse average carries: `share` of `params`, at least one.
inline int64_t SpartaSubsetSize(double share, int64_t params) {
  return std::clamp<int64_t>(std::llround(share * static_cast<double>(params)), 1, params);
}

// The subset averaged at the sparse average ending at `step`: `k` distinct indices of [0, n), in
// ascending order, drawn by Floyd's sampling from a generator seeded by `seed` and `step`.
inline std::vector<int64_t> SpartaSubset(uint64_t seed, int64_t step, int64_t k, int64_t n) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(step) + 0x5350415254410000ULL));
  std::unordered_set<int64_t> chosen;
  chosen.reserve(static_cast<size_t>(2 * k));
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(k));
  for (int64_t j = n - k; j < n; ++j) {
    const int64_t t = std::uniform_int_distribution<int64_t>(0, j)(rng);
    const int64_t pick = chosen.count(t) ? j : t;
    chosen.insert(pick);
    out.push_back(pick);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace narrows::trainer
