#include "core/collectives.h"

#include <algorithm>

namespace narrows::core {
namespace {

int PositionOf(const std::vector<int>& group, int rank) {
  const auto it = std::find(group.begin(), group.end(), rank);
  return it == group.end() ? -1 : static_cast<int>(it - group.begin());
}

// Chunk c of n over count elements: [begin, end).
std::pair<int64_t, int64_t> Chunk(int64_t count, int n, int c) {
  const int64_t base = count / n, extra = count % n;
  const int64_t begin = c * base + std::min<int64_t>(c, extra);
  return {begin, begin + base + (c < extra ? 1 : 0)};
}

int Mod(int a, int n) { return ((a % n) + n) % n; }

Status CheckGroup(const Transport& t, const CollectiveOptions& o, int* position) {
  *position = PositionOf(o.group, t.rank());
  if (*position < 0) {
    return Status::InvalidArgument("rank " + std::to_string(t.rank()) + " is not in the collective's group");
  }
  return Status::Ok();
}

Status RingAllReduce(Transport& t, float* data, int64_t count, const std::vector<int>& group, int tag,
                     double timeout) {
  const int n = static_cast<int>(group.size());
  const int p = PositionOf(group, t.rank());
  if (n == 1 || count == 0) return Status::Ok();
  const int next = group[Mod(p + 1, n)], prev = group[Mod(p - 1, n)];
  std::vector<float> incoming(static_cast<size_t>(count / n + 1));
  // Reduce-scatter: after n-1 steps position p holds the full sum of chunk p+1.
  for (int s = 0; s < n - 1; ++s) {
    const auto [sb, se] = Chunk(count, n, Mod(p - s, n));
    NARROWS_RETURN_IF_ERROR(t.Send(next, tag, data + sb, static_cast<size_t>(se - sb) * sizeof(float)));
    const auto [rb, re] = Chunk(count, n, Mod(p - s - 1, n));
    NARROWS_RETURN_IF_ERROR(
        t.Recv(prev, tag, incoming.data(), static_cast<size_t>(re - rb) * sizeof(float), timeout));
    for (int64_t i = rb; i < re; ++i) data[i] += incoming[i - rb];
  }
  // All-gather: pass the reduced chunks around the ring.
  for (int s = 0; s < n - 1; ++s) {
    const auto [sb, se] = Chunk(count, n, Mod(p + 1 - s, n));
    NARROWS_RETURN_IF_ERROR(t.Send(next, tag + 1, data + sb, static_cast<size_t>(se - sb) * sizeof(float)));
    const auto [rb, re] = Chunk(count, n, Mod(p - s, n));
    NARROWS_RETURN_IF_ERROR(
        t.Recv(prev, tag + 1, data + rb, static_cast<size_t>(re - rb) * sizeof(float), timeout));
  }
  return Status::Ok();
}

Status StarReduce(Transport& t, float* data, int64_t count, const std::vector<int>& group, int root,
                  int tag, double timeout) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  if (t.rank() != root) return t.Send(root, tag, data, bytes);
  std::vector<float> incoming(static_cast<size_t>(count));
  for (int r : group) {
    if (r == root) continue;
    NARROWS_RETURN_IF_ERROR(t.Recv(r, tag, incoming.data(), bytes, timeout));
    for (int64_t i = 0; i < count; ++i) data[i] += incoming[i];
  }
  return Status::Ok();
}

Status StarBroadcast(Transport& t, void* data, size_t bytes, const std::vector<int>& group, int root,
                     int tag, double timeout) {
  if (t.rank() != root) return t.Recv(root, tag, data, bytes, timeout);
  for (int r : group) {
    if (r != root) NARROWS_RETURN_IF_ERROR(t.Send(r, tag, data, bytes));
  }
  return Status::Ok();
}

}  // namespace

int64_t RingAllReduceBytesPerRank(int64_t count, int n, int position) {
  if (n <= 1) return 0;
  auto size = [&](int c) { const auto [b, e] = Chunk(count, n, c); return e - b; };
  return static_cast<int64_t>(sizeof(float)) *
         (2 * count - size(Mod(position + 1, n)) - size(Mod(position + 2, n)));
}

Status AllReduceSum(Transport& t, float* data, int64_t count, const CollectiveOptions& o) {
  int position = 0;
  NARROWS_RETURN_IF_ERROR(CheckGroup(t, o, &position));
  const int root = o.root >= 0 ? o.root : o.group.front();
  switch (o.algorithm) {
    case AllReduceAlgorithm::kRing:
      return RingAllReduce(t, data, count, o.group, o.tag, o.timeout_s);
    case AllReduceAlgorithm::kStar:
      NARROWS_RETURN_IF_ERROR(StarReduce(t, data, count, o.group, root, o.tag + 2, o.timeout_s));
      return StarBroadcast(t, data, static_cast<size_t>(count) * sizeof(float), o.group, root, o.tag + 2,
                           o.timeout_s);
    case AllReduceAlgorithm::kHierarchical: {
      // Reduce to each island's leader, ring among leaders, broadcast inside islands.
      std::vector<int> my_island, leaders;
      for (const auto& island : o.islands) {
        std::vector<int> members;
        for (int r : island) {
          if (PositionOf(o.group, r) >= 0) members.push_back(r);
        }
        if (members.empty()) continue;
        leaders.push_back(members.front());
        if (PositionOf(members, t.rank()) >= 0) my_island = members;
      }
      if (my_island.empty()) {
        return Status::InvalidArgument("rank " + std::to_string(t.rank()) + " is in no island");
      }
      std::sort(leaders.begin(), leaders.end());
      const int leader = my_island.front();
      NARROWS_RETURN_IF_ERROR(StarReduce(t, data, count, my_island, leader, o.tag + 2, o.timeout_s));
      if (t.rank() == leader) {
        NARROWS_RETURN_IF_ERROR(RingAllReduce(t, data, count, leaders, o.tag, o.timeout_s));
      }
      return StarBroadcast(t, data, static_cast<size_t>(count) * sizeof(float), my_island, leader,
                           o.tag + 2, o.timeout_s);
    }
  }
  return Status::Internal("unknown all-reduce algorithm");
}

std::unique_ptr<Work> AllReduceSumAsync(Transport& t, float* data, int64_t count, CollectiveOptions options) {
  return t.Start([data, count, options](Transport& child) { return AllReduceSum(child, data, count, options); });
}

Status Broadcast(Transport& t, void* data, size_t bytes, const CollectiveOptions& o) {
  int position = 0;
  NARROWS_RETURN_IF_ERROR(CheckGroup(t, o, &position));
  return StarBroadcast(t, data, bytes, o.group, o.root >= 0 ? o.root : o.group.front(), o.tag + 2,
                       o.timeout_s);
}

}  // namespace narrows::core
