// Collectives written once on top of any Transport: all-reduce (ring, star/parameter-server,
// hierarchical for islands) and broadcast, over an explicit group of ranks.
//
// Every rank of `group` calls the same collective with the same options and the same element
// count; the call blocks until this rank's part is done (the ring all-reduce returns when the last
// chunk arrives). Errors of the transport (a peer gone, a timeout) are returned, never thrown. Tags
// `tag` .. `tag + 2` are used; concurrent collectives need distinct tags. Costs on a uniform network
// with latency a and bandwidth B, S bytes over n ranks: ring 2(n-1)a + 2(n-1)/n S/B; star
// 2a + 2(n-1) S/B at the root's link.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/codec.h"
#include "core/transport.h"

namespace narrows::core {

enum class AllReduceAlgorithm { kRing, kStar, kHierarchical };

struct CollectiveOptions {
  std::vector<int> group;  // participating ranks, ascending; must include the caller
  int tag = 100;
  double timeout_s = kForever;
  int root = -1;  // star and broadcast: the root rank (-1 = group.front())
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kRing;
  // Hierarchical: the islands, each a list of ranks; reduce inside each island, ring across the
  // islands' leaders (their first rank in `group`), broadcast back inside each island.
  std::vector<std::vector<int>> islands;
  // Ring: each step's chunk travels as messages of at most this many bytes (0: one message), sent
  // ahead of the receive so that copying, checksumming, the wire and the reduction overlap. The
  // sums are the same either way.
  int64_t pipeline_bytes = 0;
};

// In-place element-wise sum over the group.
Status AllReduceSum(Transport& t, float* data, int64_t count, const CollectiveOptions& options);
// AllReduceSum started beside the caller (Transport::Start); `data` must live until Wait returns.
std::unique_ptr<Work> AllReduceSumAsync(Transport& t, float* data, int64_t count, CollectiveOptions options);
// All-reduce (sum) whose first `count - exact_tail` floats travel encoded by `codec` and whose last
// `exact_tail` floats travel as fp32 (counts, votes). Reduce-scatter to owners, then all-gather:
// every rank sends chunk j of its buffer, encoded, to the j-th rank of the group; that owner
// decodes each contribution (its own too) and sums them in fp32 in group order — one rounding per
// contribution, none in the accumulation, and a sum that does not depend on who sits where in a
// ring; the owner encodes the sum once and sends it to every rank, and every rank (the owner too)
// ends with the decoded sum. Bytes per rank: EncodedAllReduceBytesPerRank. Tags tag, tag + 1.
Status AllReduceSumEncoded(Transport& t, float* data, int64_t count, int64_t exact_tail, const Codec& codec,
                           const CollectiveOptions& options);
std::unique_ptr<Work> AllReduceSumEncodedAsync(Transport& t, float* data, int64_t count, int64_t exact_tail,
                                               Codec codec, CollectiveOptions options);
// Bytes the rank at `position` of `n` sends in AllReduceSumEncoded: its n-1 foreign chunks encoded
// (reduce-scatter) and its own chunk encoded to n-1 ranks (all-gather); the tail rides with the
// last chunk.
int64_t EncodedAllReduceBytesPerRank(const Codec& codec, int64_t count, int64_t exact_tail, int n, int position);

// Copies the root's buffer to every rank of the group.
Status Broadcast(Transport& t, void* data, size_t bytes, const CollectiveOptions& options);

// Bytes each rank sends in one all-reduce of `count` floats over `n` ranks (ring: 2(n-1)/n S per
// rank, exactly, with S split into n chunks; star: non-roots S, root (n-1) S).
int64_t RingAllReduceBytesPerRank(int64_t count, int n, int position);

}  // namespace narrows::core
