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
#include "core/tags.h"
#include "core/transport.h"

namespace narrows::core {

// kTwoPhase: every rank sends chunk j to the group's j-th rank, which sums the chunks in group order
// and sends the sum to every rank: 2 latencies instead of the ring's 2(n-1), the ring's bytes, n-1
// messages per rank per phase. kTree: binary reduce to the group's first rank, then broadcast down
// the same tree (position i's children 2i+1, 2i+2), whole messages: 2 floor(log2 n) latencies,
// S up from every rank but the root and S down to each child.
enum class AllReduceAlgorithm { kRing, kStar, kHierarchical, kTwoPhase, kTree };

struct CollectiveOptions {
  std::vector<int> group;  // participating ranks, ascending; must include the caller
  int tag = tags::kReduce;  // the first of kCollectiveSpan tags (core/tags.h)
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
  // Ring with pieces: how many bytes of a step's chunk may be sent beyond what has been received
  // (at least one piece). Over a long link this should cover the bandwidth-delay product, or the
  // ring sends one piece per round trip whatever the transport can carry.
  int64_t send_ahead_bytes = 0;
};

// In-place element-wise sum over the group.
Status AllReduceSum(Transport& t, float* data, int64_t count, const CollectiveOptions& options);
// AllReduceSum started beside the caller (Transport::Start); `data` must live until Wait returns.
std::unique_ptr<Work> AllReduceSumAsync(Transport& t, float* data, int64_t count, CollectiveOptions options);
// Error feedback for the encoded all-reduce of one buffer, kept by its caller from one all-reduce to
// the next: what encoding this rank's contribution lost (added to its next contribution before
// encoding) and, for dense formats, what re-encoding the sums this rank owned lost (added to its
// next sum of the same elements). Per element of the encoded body, computed with the wire's own
// chunks and blocks, so that over any number of all-reduces the results plus every rank's
// residuals add up to the sum of every contribution, to float rounding.
struct EncodingResiduals {
  std::vector<float> sent, owned;
};

// All-reduce (sum) whose first `count - exact_tail` floats travel encoded by `codec` and whose last
// `exact_tail` floats travel as fp32 (counts, votes); every rank ends with the same values.
// Dense formats run over `options.algorithm`; each rounds differently
// (docs/explanation/methods.md):
// - kRing: a chunk's partial sum is decoded, added to and re-encoded at each of n-1 hops (n-1
//   roundings), then the owner's full sum is encoded once with the second phase's codec and
//   forwarded unchanged (one more).
// - kStar: one rounding per contribution (the root's own travels not), one of the sum.
// - kTree: one rounding per level of the reduce (floor(log2 n) on the deepest path), one of the sum.
// - kHierarchical: each island's sum in fp32 to its leader (its first member in the group), the
//   encoded ring among the leaders alone (n-1 roundings over the islands' sums, then one), and the
//   result back to each island in fp32: a WAN link carries one island's encoded update.
// - kTwoPhase: reduce-scatter to owners, then all-gather, as follows. Every rank sends chunk j of its
//   buffer, encoded, to the j-th rank of the group; that owner decodes each contribution (its own
//   too) and sums them in fp32 in group order — one rounding per contribution, none in the
//   accumulation, and a sum that does not depend on who sits where in a ring. The owner encodes the
//   sum with the second phase's codec (codec.gather(): the same, bf16 or fp32) and sends it to every
//   rank; every rank, the owner too, keeps its decoding. Tags tag, tag + 1.
// - Sparse formats (top-k): every rank's whole body, encoded once, goes to every other rank, which
//   decodes and sums all of them in fp32 in group order: each contribution is pruned once, the sum
//   never. Tag tag.
// With `residuals` (error feedback), they are added before encoding and updated once the
// all-reduce has succeeded (so that a retry among survivors starts from the same residuals).
// Bytes per rank: EncodedAllReduceBytesPerRank.
Status AllReduceSumEncoded(Transport& t, float* data, int64_t count, int64_t exact_tail, const Codec& codec,
                           const CollectiveOptions& options, EncodingResiduals* residuals = nullptr);
// The same, started beside the caller; `data` and `residuals` must live until Wait returns.
std::unique_ptr<Work> AllReduceSumEncodedAsync(Transport& t, float* data, int64_t count, int64_t exact_tail,
                                               Codec codec, CollectiveOptions options,
                                               EncodingResiduals* residuals = nullptr);
// Bytes the rank at `position` of `n` sends in AllReduceSumEncoded. Dense: its n-1 foreign chunks
// in the codec (reduce-scatter) and its own chunk's sum in the second phase's codec to n-1 ranks
// (all-gather). Sparse: its encoded body to n-1 ranks. The tail rides with the last chunk (dense)
// or with the body (sparse). kHierarchical depends on the islands: not counted here (two-phase's).
int64_t EncodedAllReduceBytesPerRank(const Codec& codec, int64_t count, int64_t exact_tail, int n, int position,
                                     AllReduceAlgorithm algorithm = AllReduceAlgorithm::kTwoPhase);

// The messages of AllReduceSumEncoded with `codec` (of AllReduceSum when null: fp32, the ring one
// message per chunk), in their sizes and order but carrying no bytes (Transport::SendSizeOnly):
// what the emulator's sizes-only runs time, at any model size. No tail; no hierarchical form.
Status AllReduceSizeOnly(Transport& t, int64_t count, const Codec* codec, const CollectiveOptions& options);
// Copies the root's buffer to every rank of the group.
Status Broadcast(Transport& t, void* data, size_t bytes, const CollectiveOptions& options);

// The collective an all-reduce with `options` and `codec` (null: fp32) runs: `options.algorithm`,
// but a sparse codec all-gathers (among the leaders, for hierarchical).
std::string CollectiveName(const CollectiveOptions& options, const Codec* codec);

// Bytes each rank sends in one all-reduce of `count` floats over `n` ranks (ring: 2(n-1)/n S per
// rank, exactly, with S split into n chunks; star: non-roots S, root (n-1) S).
int64_t RingAllReduceBytesPerRank(int64_t count, int n, int position);

}  // namespace narrows::core
