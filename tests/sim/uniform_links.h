// Test helper: n access links with the same bandwidth, latency and loss.
#pragma once

#include <vector>

#include "sim/network_model.h"

namespace narrows::sim {

inline std::vector<Link> Uniform(int n, double bps, double latency_s, double loss = 0.0) {
  std::vector<Link> links(static_cast<size_t>(n));
  for (auto& l : links) {
    l.bandwidth_bps = bps;
    l.latency_s = latency_s;
    l.loss = loss;
  }
  return links;
}

}  // namespace narrows::sim
