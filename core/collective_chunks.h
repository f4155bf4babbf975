// How the collectives (collectives.cc, encoded_reduce.cc) cut a buffer among a group: a rank's
// position in the group, chunk c of n, and an encoded chunk's bytes. Internal to those two files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/collectives.h"

namespace narrows::core::internal {

inline int PositionOf(const std::vector<int>& group, int rank) {
  const auto it = std::find(group.begin(), group.end(), rank);
  return it == group.end() ? -1 : static_cast<int>(it - group.begin());
}

// Chunk c of n over count elements: [begin, end).
inline std::pair<int64_t, int64_t> Chunk(int64_t count, int n, int c) {
  const int64_t base = count / n, extra = count % n;
  const int64_t begin = c * base + std::min<int64_t>(c, extra);
  return {begin, begin + base + (c < extra ? 1 : 0)};
}

inline int Mod(int a, int n) { return ((a % n) + n) % n; }

inline Status CheckGroup(const Transport& t, const CollectiveOptions& o, int* position) {
  *position = PositionOf(o.group, t.rank());
  if (*position < 0) {
    return Status::InvalidArgument("rank " + std::to_string(t.rank()) + " is not in the collective's group");
  }
  return Status::Ok();
}

// The hierarchical all-reduce over `o.islands` (each island's members of o.group): every island's sum
// in fp32 to its leader (its first member), `among_leaders` (the leaders' options: their group,
// ascending, with o's tag and timeout) run by the leaders alone, and the leader's result back to its
// island in fp32. AllReduceSum runs a ring among the leaders; AllReduceSumEncoded its codec's.
Status HierarchicalAllReduce(Transport& t, float* data, int64_t count, const CollectiveOptions& o,
                             const std::function<Status(const CollectiveOptions& leaders)>& among_leaders);

// AllReduceSumEncoded's chunk j over the encoded body, and its payload size in `kernel` (the tail
// rides with the last chunk, as fp32).
struct EncodedChunk {
  int64_t begin, end, bytes;
};
inline EncodedChunk EncodedChunkOf(const CodecKernel& kernel, int64_t body, int64_t tail, int n, int j) {
  const auto [b, e] = Chunk(body, n, j);
  return {b, e, kernel.EncodedBytes(e - b) + (j == n - 1 ? 4 * tail : 0)};
}

}  // namespace narrows::core::internal
