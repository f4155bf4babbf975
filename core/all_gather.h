// An all-gather of equal blocks over any Transport: every rank of the group sends its block of
// floats to every other at once (as the sparse codecs' all-gather does: one latency, (n-1) blocks
// sent per rank) and receives theirs. The result is indexed by rank, not by position in the
// group, so that it keeps its shape when the group shrinks: slot r holds rank r's block, and the
// slots of ranks outside the group are left as they were. A block may carry anything as floats'
// bits (they are copied, never computed on). Tag `tag` is used.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/transport.h"

namespace narrows::core {

// `slots` holds one block of `block` floats per rank of the world; this rank's block must be in its
// own slot. Every member of `group` (ascending, the caller among them) calls it alike.
Status AllGatherBlocks(Transport& t, float* slots, int64_t block, const std::vector<int>& group, int tag,
                       double timeout_s = kForever);

// The same messages carrying no bytes (Transport::SendSizeOnly): `bytes` from every member of
// `group` to every other, what the emulator's sizes-only runs time.
Status AllGatherSizeOnly(Transport& t, int64_t bytes, const std::vector<int>& group, int tag,
                         double timeout_s = kForever);

// Bytes each rank sends in one AllGatherBlocks of `block` floats among `n` ranks.
inline int64_t AllGatherBytesPerRank(int64_t block, int n) { return static_cast<int64_t>(n - 1) * block * 4; }

}  // namespace narrows::core
