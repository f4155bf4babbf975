#include "trainer/algorithms/plan.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <queue>

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

double PlanInputs::AllReduceSeconds(double scatter_bytes, double gather_bytes, core::CollectiveKind kind) const {
  const int m = workers();
  if (m < 2 || scatter_bytes <= 0) return 0.0;
  const auto up = static_cast<int64_t>(std::ceil(scatter_bytes)), down = static_cast<int64_t>(std::ceil(gather_bytes));
  switch (kind) {
    case core::CollectiveKind::kTwoPhase: return EncodedAllReduceSeconds(scatter_bytes, gather_bytes);
    case core::CollectiveKind::kStar: {
      std::vector<PlanMessage> in, out;
      for (int w = 1; w < m; ++w) {
        in.push_back({w, 0, up});
        out.push_back({0, w, down});
      }
      return slowest_delivery(in) + slowest_delivery(out);
    }
    case core::CollectiveKind::kTree: {
      if (!deliveries) break;
      return TreeRoundsSeconds(scatter_bytes, gather_bytes, 0.0, 1.0);
    }
    case core::CollectiveKind::kHierarchical: {
      // Each island's members send their buffer to its leader at once, the leaders all-reduce in a
      // ring, and each leader sends the sum to its members.
      if (sc->network.islands.empty()) break;
      double sent = 0.0;
      return IslandsSeconds(scatter_bytes, ConcurrentRingsSeconds({IslandLeaders()}, scatter_bytes, &sent));
    }
    case core::CollectiveKind::kRing:
    case core::CollectiveKind::kAuto: break;
  }
  if (up == down) return RingAllReduceSeconds(scatter_bytes);
  return RingRoundsSeconds(scatter_bytes, gather_bytes, 0.0, 1.0);
}

double PlanInputs::TreeRoundsSeconds(double scatter_bytes, double gather_bytes, double compute_s, double rounds) const {
  const int m = workers();
  const auto n = static_cast<size_t>(m);
  if (rounds <= 0) return 0.0;
  std::vector<double> compute(n, compute_s);
  for (size_t w = 0; w < n && w < sc->workers.speed.size(); ++w) compute[w] /= sc->workers.speed[w];
  if (m < 2 || scatter_bytes <= 0 || !deliveries) return rounds * *std::max_element(compute.begin(), compute.end());
  // As core/collectives.cc runs it (the binary heap of ranks, 0 the root): a rank sends its sum up
  // once its compute ended and both its children's sums came, and passes the result down as soon as
  // it has it. Each edge's time from the network with the edges that go at once sending together:
  // up, those of one height in the tree (every leaf's at once, then their parents'); down, those of
  // one depth.
  const auto up = static_cast<int64_t>(std::ceil(scatter_bytes)), down = static_cast<int64_t>(std::ceil(gather_bytes));
  std::vector<int> height(n, 0);
  for (int i = m - 1; i >= 1; --i) {
    const size_t parent = static_cast<size_t>((i - 1) / 2);
    height[parent] = std::max(height[parent], height[static_cast<size_t>(i)] + 1);
  }
  std::map<int, std::vector<int>> up_groups, down_groups;  // height (up) or depth (down) -> children
  for (int i = 1; i < m; ++i) {
    up_groups[height[static_cast<size_t>(i)]].push_back(i);
    down_groups[static_cast<int>(std::floor(std::log2(i + 1)))].push_back(i);
  }
  std::vector<double> t_up(n, 0.0), t_down(n, 0.0);  // by child
  auto time_groups = [&](const std::map<int, std::vector<int>>& groups, bool upward, std::vector<double>* t) {
    for (const auto& [level, children] : groups) {
      std::vector<PlanMessage> messages;
      for (int c : children) {
        messages.push_back(upward ? PlanMessage{c, (c - 1) / 2, up} : PlanMessage{(c - 1) / 2, c, down});
      }
      const std::vector<double> times = deliveries(messages);
      for (size_t k = 0; k < children.size(); ++k) (*t)[static_cast<size_t>(children[k])] = times[k];
    }
  };
  time_groups(up_groups, true, &t_up);
  time_groups(down_groups, false, &t_down);
  // Round by round on each worker's clock: its next round starts when it has the result.
  std::vector<double> clock(n, 0.0), has_sum(n), has_result(n);
  const int simulated = static_cast<int>(std::min(rounds, 32.0));
  double end = 0.0, end_half = 0.0;
  for (int r = 0; r < simulated; ++r) {
    for (size_t i = 0; i < n; ++i) has_sum[i] = clock[i] + compute[i];
    for (int i = m - 1; i >= 1; --i) {  // children before parents
      const size_t parent = static_cast<size_t>((i - 1) / 2);
      has_sum[parent] = std::max(has_sum[parent], has_sum[static_cast<size_t>(i)] + t_up[static_cast<size_t>(i)]);
    }
    has_result[0] = has_sum[0];
    for (int i = 1; i < m; ++i) {  // parents before children
      has_result[static_cast<size_t>(i)] = has_result[static_cast<size_t>((i - 1) / 2)] + t_down[static_cast<size_t>(i)];
    }
    clock = has_result;
    end = *std::max_element(clock.begin(), clock.end());
    if (r + 1 == simulated / 2) end_half = end;
  }
  if (rounds <= simulated) return end;
  return end + (rounds - simulated) * (end - end_half) / static_cast<double>(simulated - simulated / 2);
}

double PlanInputs::AllGatherSeconds(double bytes, const std::vector<int>& group) const {
  std::vector<int> all = group;
  if (all.empty()) {
    all.resize(static_cast<size_t>(workers()));
    std::iota(all.begin(), all.end(), 0);
  }
  if (all.size() < 2 || bytes <= 0) return 0.0;
  std::vector<PlanMessage> phase;
  for (int w : all) {
    for (int v : all) {
      if (v != w) phase.push_back({w, v, static_cast<int64_t>(std::ceil(bytes))});
    }
  }
  return slowest_delivery(phase);
}

std::vector<int> PlanInputs::IslandLeaders() const {
  std::vector<int> leaders;
  for (const auto& island : sc->network.islands) {
    if (!island.empty()) leaders.push_back(island.front());
  }
  std::sort(leaders.begin(), leaders.end());
  return leaders;
}

double PlanInputs::IslandsSeconds(double island_bytes, double among_leaders_s) const {
  std::vector<PlanMessage> in, out;
  const auto bytes = static_cast<int64_t>(std::ceil(island_bytes));
  for (const auto& island : sc->network.islands) {
    for (size_t k = 1; k < island.size(); ++k) {
      in.push_back({island[k], island.front(), bytes});
      out.push_back({island.front(), island[k], bytes});
    }
  }
  return (in.empty() ? 0.0 : slowest_delivery(in)) + among_leaders_s + (out.empty() ? 0.0 : slowest_delivery(out));
}

double PlanInputs::ConcurrentRingsSeconds(const std::vector<std::vector<int>>& groups, double bytes,
                                          double* sent_per_worker) const {
  if (bytes <= 0) return 0.0;
  std::vector<PlanMessage> step, probe;
  for (const auto& g : groups) {
    if (g.size() < 2) continue;
    const double n = static_cast<double>(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      step.push_back({g[i], g[(i + 1) % g.size()], static_cast<int64_t>(std::ceil(bytes / n))});
      probe.push_back({g[i], g[(i + 1) % g.size()], 1});
    }
    *sent_per_worker += n * 2.0 * (n - 1) / n * bytes / workers();
  }
  if (step.empty()) return 0.0;
  if (!deliveries) {  // no per-message model: every step as slow as its slowest hop
    size_t longest = 0;
    for (const auto& g : groups) longest = std::max(longest, g.size());
    return 2.0 * static_cast<double>(longest - 1) * slowest_delivery(step);
  }
  const std::vector<double> full = deliveries(step), latency = deliveries(probe);
  double seconds = 0.0;
  size_t at = 0;  // the group's first hop in `step`
  for (const auto& g : groups) {
    if (g.size() < 2) continue;
    const size_t n = g.size();
    // Hop j: member j to member j + 1. ready[j]: when member j + 1 has hop j's chunk of the last step.
    std::vector<double> ready(n, 0.0), link_free(n, 0.0);
    for (size_t k = 0; k < 2 * (n - 1); ++k) {
      std::vector<double> next(n);
      for (size_t j = 0; j < n; ++j) {
        const double transfer = std::max(0.0, full[at + j] - latency[at + j]);
        const double has_chunk = k == 0 ? 0.0 : ready[(j + n - 1) % n];
        const double start = std::max(has_chunk, link_free[j]);
        link_free[j] = start + transfer;
        next[j] = start + std::max(full[at + j], transfer);
      }
      ready = std::move(next);
    }
    seconds = std::max(seconds, *std::max_element(ready.begin(), ready.end()));
    at += n;
  }
  return seconds;
}

double PlanInputs::RingRoundsSeconds(double scatter_bytes, double gather_bytes, double compute_s, double rounds) const {
  return BucketedRingRoundsSeconds({scatter_bytes}, {1.0}, compute_s, rounds, gather_bytes / scatter_bytes);
}

namespace {

// One round of every bucket's ring among n workers (BucketedRingRoundsSeconds): each hop's latency
// and its transfer of the largest bucket's chunk, from which a smaller chunk's transfer scales with
// its bytes.
struct BucketRings {
  const std::vector<double>& bucket_bytes;
  const std::vector<double>& ready_at;
  double gather_share, largest, overlap_s;
  const std::vector<double>& full;     // hop j: the largest chunk's delivery
  const std::vector<double>& latency;  // hop j: a one-byte message's

  // When each worker's part of the round's rings ended (overlapped: when its ring ended had there
  // been no next round), from `clock` (when each worker ended the last round, or overlapped, when
  // its compute of this one ended) and `now` (this round's compute, each worker's); `link_free`:
  // when each hop's link is next free, carried from round to round.
  std::vector<double> Round(const std::vector<double>& clock, const std::vector<double>& now,
                            std::vector<double>* link_free) const {
    const size_t n = clock.size();
    struct Send {
      double at;
      size_t bucket, k, hop;
      bool operator>(const Send& o) const { return at > o.at; }
    };
    // Every bucket's ring, its first sends once the bucket's gradients are ready at each worker;
    // each link sends one chunk at a time, in the order they were ready to go (FIFO).
    std::priority_queue<Send, std::vector<Send>, std::greater<Send>> ready;
    // When worker j's share of bucket b is ready to send.
    auto ready_time = [&](size_t j, size_t b) { return overlap_s > 0 ? clock[j] : clock[j] + ready_at[b] * now[j]; };
    for (size_t b = 0; b < bucket_bytes.size(); ++b) {
      for (size_t j = 0; j < n; ++j) ready.push({ready_time(j, b), b, 0, j});
    }
    std::vector<double> done(n, 0.0);
    for (size_t j = 0; j < n; ++j) done[j] = overlap_s > 0 ? clock[j] : clock[j] + now[j];
    while (!ready.empty()) {
      const Send s = ready.top();
      ready.pop();
      // The reduce-scatter's n - 1 steps carry the first phase's chunks, the all-gather's the second's.
      const double share = bucket_bytes[s.bucket] * (s.k + 1 < n ? 1.0 : gather_share) / largest;
      const double transfer = std::max(0.0, full[s.hop] - latency[s.hop]) * share;
      const double start = std::max(s.at, (*link_free)[s.hop]);
      (*link_free)[s.hop] = start + transfer;
      const double arrives = start + latency[s.hop] + transfer;
      const size_t to = (s.hop + 1) % n;
      if (s.k + 1 < 2 * (n - 1)) {
        // Worker `to` sends on once it has this chunk and its own bucket is ready (a straggler
        // still computing holds up the ring at its hop).
        ready.push({std::max(arrives, ready_time(to, s.bucket)), s.bucket, s.k + 1, to});
      } else {
        done[to] = std::max(done[to], arrives);
      }
    }
    return done;
  }
};

}  // namespace

double PlanInputs::BucketedRingRoundsSeconds(const std::vector<double>& bucket_bytes, const std::vector<double>& ready_at,
                                             double compute_s, double rounds, double gather_share, double overlap_s,
                                             double last_compute_s) const {
  const int m = workers();
  if (rounds <= 0) return 0.0;
  std::vector<double> compute(static_cast<size_t>(m), compute_s);
  for (int w = 0; w < m && static_cast<size_t>(w) < sc->workers.speed.size(); ++w) {
    compute[static_cast<size_t>(w)] /= sc->workers.speed[static_cast<size_t>(w)];
  }
  // The last round's compute (a run whose steps the rounds do not divide), each worker's.
  std::vector<double> last = compute;
  if (last_compute_s >= 0 && compute_s > 0) {
    for (double& c : last) c *= last_compute_s / compute_s;
  }
  double total_bytes = 0.0, largest = 0.0;
  for (double b : bucket_bytes) {
    total_bytes += b;
    largest = std::max(largest, b * std::max(1.0, gather_share));
  }
  if (m < 2 || total_bytes <= 0 || !deliveries) {
    double ring = 0.0;
    for (double b : bucket_bytes) ring += m < 2 ? 0.0 : RingAllReduceSeconds(b);  // (no per-hop model)
    return rounds * (*std::max_element(compute.begin(), compute.end()) + ring);
  }
  const auto n = static_cast<size_t>(m);
  // Each hop's latency (a one-byte message) and its transfer of the largest bucket's chunk, every
  // hop sending at once; a smaller chunk's transfer scales with its bytes.
  std::vector<PlanMessage> step, probe;
  const auto reference = static_cast<int64_t>(std::ceil(largest / m));
  for (int w = 0; w < m; ++w) {
    step.push_back({w, (w + 1) % m, reference});
    probe.push_back({w, (w + 1) % m, 1});
  }
  const std::vector<double> full = deliveries(step), latency = deliveries(probe);
  std::vector<double> clock(n, 0.0), link_free(n, 0.0);  // clock[j]: when worker j ended its last round
  // Overlapped (overlap_s > 0): clock[j] is when worker j's compute of the round ends and its ring
  // starts; it computes on, and waits for the ring only overlap_s (at its speed) into the next round.
  std::vector<double> overlap(n, 0.0);
  if (overlap_s > 0) {
    for (size_t j = 0; j < n; ++j) {
      overlap[j] = std::min(compute[j], overlap_s * compute[j] / compute_s);
      clock[j] = last_compute_s >= 0 && rounds <= 1 ? last[j] : compute[j];  // the first round's compute
    }
  }
  // Enough rounds for the chain to settle, fewer for large rings (the cost grows as rounds x n^2).
  const double cap = n <= 64 ? 32.0 : n <= 256 ? 8.0 : 3.0;
  const int simulated = static_cast<int>(std::min(rounds, cap));
  double end = 0.0, end_half = 0.0;
  const BucketRings rings{bucket_bytes, ready_at, gather_share, largest, overlap_s, full, latency};
  const bool shorter_last = last_compute_s >= 0 && rounds <= simulated;
  for (int r = 0; r < simulated; ++r) {
    // Round r's compute, each worker's: the last one's may be shorter.
    const std::vector<double>& now = shorter_last && r + 1 == simulated ? last : compute;
    const std::vector<double>& next = shorter_last && r + 2 == simulated ? last : compute;
    const std::vector<double> done = rings.Round(clock, now, &link_free);
    if (overlap_s > 0) {
      // done[j]: when the round's ring ended at j, had there been no next round; the next round's
      // compute goes on beside the ring and waits for it overlap[j] in.
      end = *std::max_element(done.begin(), done.end());
      for (size_t j = 0; j < n; ++j) {
        const double beside = std::min(overlap[j], next[j]);
        clock[j] = std::max(clock[j] + beside, done[j]) + next[j] - beside;
      }
    } else {
      clock = done;
      end = *std::max_element(clock.begin(), clock.end());
    }
    if (r + 1 == simulated / 2) end_half = end;
  }
  if (rounds <= simulated) return end;
  const double per_round = (end - end_half) / static_cast<double>(simulated - simulated / 2);
  // A shorter last round beyond the simulated ones: the slowest worker's compute it saves.
  const double saved = last_compute_s >= 0 ? *std::max_element(compute.begin(), compute.end()) -
                                                 *std::max_element(last.begin(), last.end())
                                           : 0.0;
  return end + (rounds - simulated) * per_round - saved;
}

}  // namespace narrows::trainer
