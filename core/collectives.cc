#include "core/collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/all_gather.h"
#include "core/collective_chunks.h"

namespace narrows::core {
namespace {

using internal::CheckGroup;
using internal::Chunk;
using internal::EncodedChunkOf;
using internal::Mod;
using internal::PositionOf;

// Sends [sb, se) to `next` and receives [rb, re) from `prev` in pieces of at most `piece` floats,
// one piece sent ahead of each receive; `on_piece(begin, end, incoming)` consumes each received piece.
// Pieces go out from `data` itself, lent to the transport (`sending`); without `incoming` they are
// received into `data`, once what was lent to `settle` (the range being overwritten) is back.
template <typename OnPiece>
Status Exchange(Transport& t, int next, int prev, int tag, double timeout, const float* data, int64_t sb, int64_t se,
                int64_t rb, int64_t re, int64_t piece, int64_t ahead, float* incoming, SendLease& sending,
                SendLease* settle, OnPiece&& on_piece) {
  auto send = [&](int64_t at) {
    const int64_t end = std::min(se, at + piece);
    return t.SendBorrowed(next, tag, data + at, static_cast<size_t>(end - at) * sizeof(float), sending);
  };
  int64_t s_at = sb;
  for (int64_t r_at = rb; r_at < re; r_at += piece) {
    // Before receiving piece i, pieces up to i + ahead are out (the chunk sent is final already).
    while (s_at < se && s_at - sb <= r_at - rb + ahead * piece) {
      NARROWS_RETURN_IF_ERROR(send(s_at));
      s_at += piece;
    }
    const int64_t r_end = std::min(re, r_at + piece);
    const auto bytes = static_cast<size_t>(r_end - r_at) * sizeof(float);
    if (incoming) {  // reduce: read the piece where the transport holds it (no copy out first)
      NARROWS_RETURN_IF_ERROR(t.RecvInPlace(prev, tag, bytes, [&](const void* in) {
        if (reinterpret_cast<uintptr_t>(in) % alignof(float) == 0) {
          on_piece(r_at, r_end, static_cast<const float*>(in));
        } else {
          std::memcpy(incoming, in, bytes);
          on_piece(r_at, r_end, incoming);
        }
      }, timeout));
    } else {
      if (settle) {
        t.AwaitLent(*settle);
        settle = nullptr;
      }
      NARROWS_RETURN_IF_ERROR(t.Recv(prev, tag, const_cast<float*>(data) + r_at, bytes, timeout));
      on_piece(r_at, r_end, const_cast<float*>(data) + r_at);
    }
  }
  for (; s_at < se; s_at += piece) NARROWS_RETURN_IF_ERROR(send(s_at));
  return Status::Ok();
}

Status RingAllReduce(Transport& t, float* data, int64_t count, const std::vector<int>& group, int tag,
                     double timeout, int64_t pipeline_bytes, int64_t send_ahead_bytes) {
  const int n = static_cast<int>(group.size());
  const int p = PositionOf(group, t.rank());
  if (n == 1 || count == 0) return Status::Ok();
  const int next = group[Mod(p + 1, n)], prev = group[Mod(p - 1, n)];
  const int64_t piece = pipeline_bytes > 0 ? std::max<int64_t>(1, pipeline_bytes / 4) : count;
  const int64_t ahead = std::max<int64_t>(1, send_ahead_bytes / (4 * piece));  // pieces
  std::vector<float> incoming(static_cast<size_t>(std::min(count / n + 1, piece)));
  // Pieces are sent from `data` without a copy. A chunk lent during the reduce-scatter is never
  // reduced into again, but the all-gather overwrites it (all-gather step s receives the chunk
  // reduce-scatter step s sent): the all-gather's first receive waits for those to be back, and
  // nothing returns (an error neither) while the transport still reads `data`.
  SendLease scattering, gathering;
  struct Settle {
    Transport& t;
    SendLease &a, &b;
    ~Settle() {
      t.AwaitLent(a);
      t.AwaitLent(b);
    }
  } settle{t, scattering, gathering};
  // Reduce-scatter: after n-1 steps position p holds the full sum of chunk p+1.
  for (int s = 0; s < n - 1; ++s) {
    const auto [sb, se] = Chunk(count, n, Mod(p - s, n));
    const auto [rb, re] = Chunk(count, n, Mod(p - s - 1, n));
    NARROWS_RETURN_IF_ERROR(Exchange(t, next, prev, tag, timeout, data, sb, se, rb, re, piece, ahead, incoming.data(),
                                     scattering, nullptr, [&](int64_t b, int64_t e, const float* in) {
                                       for (int64_t i = b; i < e; ++i) data[i] += in[i - b];
                                     }));
  }
  // All-gather: pass the reduced chunks around the ring.
  for (int s = 0; s < n - 1; ++s) {
    const auto [sb, se] = Chunk(count, n, Mod(p + 1 - s, n));
    const auto [rb, re] = Chunk(count, n, Mod(p - s, n));
    NARROWS_RETURN_IF_ERROR(Exchange(t, next, prev, tag + 1, timeout, data, sb, se, rb, re, piece, ahead, nullptr,
                                     gathering, s == 0 ? &scattering : nullptr,
                                     [](int64_t, int64_t, const float*) {}));
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

Status internal::HierarchicalAllReduce(Transport& t, float* data, int64_t count, const CollectiveOptions& o,
                                       const std::function<Status(const CollectiveOptions& leaders)>& among_leaders) {
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
  if (my_island.empty()) return Status::InvalidArgument("rank " + std::to_string(t.rank()) + " is in no island");
  std::sort(leaders.begin(), leaders.end());
  const int leader = my_island.front();
  NARROWS_RETURN_IF_ERROR(StarReduce(t, data, count, my_island, leader, o.tag + 2, o.timeout_s));
  if (t.rank() == leader && leaders.size() > 1) {
    CollectiveOptions among = o;
    among.group = leaders;
    among.algorithm = AllReduceAlgorithm::kRing;
    NARROWS_RETURN_IF_ERROR(among_leaders(among));
  }
  return StarBroadcast(t, data, static_cast<size_t>(count) * sizeof(float), my_island, leader, o.tag + 2, o.timeout_s);
}

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
      return RingAllReduce(t, data, count, o.group, o.tag, o.timeout_s, o.pipeline_bytes, o.send_ahead_bytes);
    case AllReduceAlgorithm::kTwoPhase:
    case AllReduceAlgorithm::kTree: {
      // The encoded all-reduce's exchanges with fp32 on the wire: exact sums (two-phase in group
      // order, the tree in its own).
      static const Codec fp32{CodecSpec{}};
      return AllReduceSumEncoded(t, data, count, 0, fp32, o);
    }
    case AllReduceAlgorithm::kStar:
      NARROWS_RETURN_IF_ERROR(StarReduce(t, data, count, o.group, root, o.tag + 2, o.timeout_s));
      return StarBroadcast(t, data, static_cast<size_t>(count) * sizeof(float), o.group, root, o.tag + 2,
                           o.timeout_s);
    case AllReduceAlgorithm::kHierarchical:
      return internal::HierarchicalAllReduce(t, data, count, o, [&](const CollectiveOptions& leaders) {
        return RingAllReduce(t, data, count, leaders.group, o.tag, o.timeout_s, o.pipeline_bytes, o.send_ahead_bytes);
      });
  }
  return Status::Internal("unknown all-reduce algorithm");
}

std::unique_ptr<Work> AllReduceSumAsync(Transport& t, float* data, int64_t count, CollectiveOptions options) {
  return t.Start([data, count, options](Transport& child) { return AllReduceSum(child, data, count, options); });
}

Status AllReduceSizeOnly(Transport& t, int64_t count, const Codec* codec, const CollectiveOptions& o) {
  int p = 0;
  NARROWS_RETURN_IF_ERROR(CheckGroup(t, o, &p));
  const int n = static_cast<int>(o.group.size());
  if (n == 1 || count == 0) return Status::Ok();
  static const Codec fp32{CodecSpec{}};
  const Codec& c = codec != nullptr ? *codec : fp32;
  const CodecKernel &first = c.kernel(), &second = c.gather();
  auto rank = [&](int j) { return o.group[static_cast<size_t>(j)]; };
  // The rank's part, step by step, run at once (Transport::RunSizeOnly).
  std::vector<SizeOnlyStep> steps;
  auto send = [&](int dst, int tag, int64_t bytes) { steps.push_back({true, dst, tag, bytes}); };
  auto get = [&](int src, int tag) { steps.push_back({false, src, tag, 0}); };
  const int64_t up = first.EncodedBytes(count), down = second.EncodedBytes(count);
  if (c.sparse()) return AllGatherSizeOnly(t, up, o.group, o.tag, o.timeout_s);  // every body to every other rank
  switch (o.algorithm) {
    case AllReduceAlgorithm::kRing: {
      const int next = rank(Mod(p + 1, n)), prev = rank(Mod(p - 1, n));
      for (int s = 0; s < n - 1; ++s) {
        send(next, o.tag, EncodedChunkOf(first, count, 0, n, Mod(p - s, n)).bytes);
        get(prev, o.tag);
      }
      for (int s = 0; s < n - 1; ++s) {
        send(next, o.tag + 1, EncodedChunkOf(second, count, 0, n, Mod(p + 1 - s, n)).bytes);
        get(prev, o.tag + 1);
      }
      break;
    }
    case AllReduceAlgorithm::kStar: {
      const int root = o.root >= 0 ? o.root : o.group.front();
      if (t.rank() != root) {
        send(root, o.tag, up);
        get(root, o.tag + 1);
        break;
      }
      for (int r : o.group) {
        if (r != root) get(r, o.tag);
      }
      for (int r : o.group) {
        if (r != root) send(r, o.tag + 1, down);
      }
      break;
    }
    case AllReduceAlgorithm::kTree: {
      const int left = 2 * p + 1, right = 2 * p + 2;
      for (int child : {left, right}) {
        if (child < n) get(rank(child), o.tag);
      }
      if (p > 0) {
        send(rank((p - 1) / 2), o.tag, up);
        get(rank((p - 1) / 2), o.tag + 1);
      }
      for (int child : {left, right}) {
        if (child < n) send(rank(child), o.tag + 1, down);
      }
      break;
    }
    case AllReduceAlgorithm::kTwoPhase: {
      for (int j = 0; j < n; ++j) {
        if (j != p) send(rank(j), o.tag, EncodedChunkOf(first, count, 0, n, j).bytes);
      }
      for (int r = 0; r < n; ++r) {
        if (r != p) get(rank(r), o.tag);
      }
      const int64_t sum = EncodedChunkOf(second, count, 0, n, p).bytes;
      for (int r = 0; r < n; ++r) {
        if (r != p) send(rank(r), o.tag + 1, sum);
      }
      for (int r = 0; r < n; ++r) {
        if (r != p) get(rank(r), o.tag + 1);
      }
      break;
    }
    case AllReduceAlgorithm::kHierarchical:
      return Status::InvalidArgument("a size-only all-reduce has no hierarchical form");
  }
  return t.RunSizeOnly(steps, o.timeout_s);
}

Status Broadcast(Transport& t, void* data, size_t bytes, const CollectiveOptions& o) {
  int position = 0;
  NARROWS_RETURN_IF_ERROR(CheckGroup(t, o, &position));
  return StarBroadcast(t, data, bytes, o.group, o.root >= 0 ? o.root : o.group.front(), o.tag + 2,
                       o.timeout_s);
}

std::string CollectiveName(const CollectiveOptions& options, const Codec* codec) {
  const bool lossy = codec != nullptr && !codec->lossless();
  if (options.algorithm == AllReduceAlgorithm::kHierarchical) return "hierarchical";  // any codec among the leaders
  if (lossy && codec->sparse()) return "all-gather";
  switch (options.algorithm) {
    case AllReduceAlgorithm::kRing: return "ring";
    case AllReduceAlgorithm::kStar: return "star";
    case AllReduceAlgorithm::kTree: return "tree";
    case AllReduceAlgorithm::kHierarchical:
    case AllReduceAlgorithm::kTwoPhase: return "two-phase";
  }
  return "?";
}

}  // namespace narrows::core
