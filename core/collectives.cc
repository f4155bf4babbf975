#include "core/collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

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

// Sends [sb, se) to `next` and receives [rb, re) from `prev` in pieces of at most `piece` floats,
// one piece sent ahead of each receive; `on_piece(begin, end, incoming)` consumes each received piece.
// Pieces go out from `data` itself, lent to the transport (`sending`); without `incoming` they are
// received into `data`, once what was lent to `settle` (the range being overwritten) is back.
template <typename OnPiece>
Status Exchange(Transport& t, int next, int prev, int tag, double timeout, const float* data, int64_t sb, int64_t se,
                int64_t rb, int64_t re, int64_t piece, float* incoming, SendLease& sending, SendLease* settle,
                OnPiece&& on_piece) {
  auto send = [&](int64_t at) {
    const int64_t end = std::min(se, at + piece);
    return t.SendBorrowed(next, tag, data + at, static_cast<size_t>(end - at) * sizeof(float), sending);
  };
  int64_t s_at = sb;
  if (s_at < se) {
    NARROWS_RETURN_IF_ERROR(send(s_at));
    s_at += piece;
  }
  for (int64_t r_at = rb; r_at < re; r_at += piece) {
    if (s_at < se) {
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
                     double timeout, int64_t pipeline_bytes) {
  const int n = static_cast<int>(group.size());
  const int p = PositionOf(group, t.rank());
  if (n == 1 || count == 0) return Status::Ok();
  const int next = group[Mod(p + 1, n)], prev = group[Mod(p - 1, n)];
  const int64_t piece = pipeline_bytes > 0 ? std::max<int64_t>(1, pipeline_bytes / 4) : count;
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
    NARROWS_RETURN_IF_ERROR(Exchange(t, next, prev, tag, timeout, data, sb, se, rb, re, piece, incoming.data(),
                                     scattering, nullptr, [&](int64_t b, int64_t e, const float* in) {
                                       for (int64_t i = b; i < e; ++i) data[i] += in[i - b];
                                     }));
  }
  // All-gather: pass the reduced chunks around the ring.
  for (int s = 0; s < n - 1; ++s) {
    const auto [sb, se] = Chunk(count, n, Mod(p + 1 - s, n));
    const auto [rb, re] = Chunk(count, n, Mod(p - s, n));
    NARROWS_RETURN_IF_ERROR(Exchange(t, next, prev, tag + 1, timeout, data, sb, se, rb, re, piece, nullptr,
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
      return RingAllReduce(t, data, count, o.group, o.tag, o.timeout_s, o.pipeline_bytes);
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
        NARROWS_RETURN_IF_ERROR(RingAllReduce(t, data, count, leaders, o.tag, o.timeout_s, o.pipeline_bytes));
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

namespace {

// AllReduceSumEncoded's chunk j over the encoded body, and its payload size (the tail rides with
// the last chunk, as fp32).
struct EncodedChunk {
  int64_t begin, end, bytes;
};
EncodedChunk EncodedChunkOf(const Codec& codec, int64_t body, int64_t tail, int n, int j) {
  const auto [b, e] = Chunk(body, n, j);
  return {b, e, codec.EncodedBytes(e - b) + (j == n - 1 ? 4 * tail : 0)};
}

}  // namespace

int64_t EncodedAllReduceBytesPerRank(const Codec& codec, int64_t count, int64_t exact_tail, int n, int position) {
  if (n <= 1) return 0;
  int64_t bytes = 0;
  for (int j = 0; j < n; ++j) {
    const int64_t chunk = EncodedChunkOf(codec, count - exact_tail, exact_tail, n, j).bytes;
    bytes += j == position ? (n - 1) * chunk : chunk;
  }
  return bytes;
}

Status AllReduceSumEncoded(Transport& t, float* data, int64_t count, int64_t exact_tail, const Codec& codec,
                           const CollectiveOptions& o) {
  int p = 0;
  NARROWS_RETURN_IF_ERROR(CheckGroup(t, o, &p));
  if (exact_tail < 0 || exact_tail > count) return Status::InvalidArgument("exact_tail outside the buffer");
  const int n = static_cast<int>(o.group.size());
  if (n == 1 || count == 0) return Status::Ok();
  const int64_t body = count - exact_tail;
  float* tail = data + body;
  auto encode = [&](int j, std::vector<uint8_t>* out, const float* values, const float* tail_values) {
    const EncodedChunk c = EncodedChunkOf(codec, body, exact_tail, n, j);
    out->resize(static_cast<size_t>(c.bytes));
    codec.Encode(values, c.end - c.begin, out->data());
    if (j == n - 1 && exact_tail > 0) {
      std::memcpy(out->data() + (c.bytes - 4 * exact_tail), tail_values, static_cast<size_t>(exact_tail) * 4);
    }
  };
  // Reduce-scatter: chunk j, encoded, to its owner group[j].
  std::vector<uint8_t> payload;
  for (int j = 0; j < n; ++j) {
    if (j == p) continue;
    const EncodedChunk c = EncodedChunkOf(codec, body, exact_tail, n, j);
    encode(j, &payload, data + c.begin, tail);
    NARROWS_RETURN_IF_ERROR(t.Send(o.group[static_cast<size_t>(j)], o.tag, payload.data(), payload.size()));
  }
  const EncodedChunk mine = EncodedChunkOf(codec, body, exact_tail, n, p);
  const int64_t len = mine.end - mine.begin;
  const bool has_tail = p == n - 1 && exact_tail > 0;
  std::vector<float> sum(static_cast<size_t>(len), 0.0f), decoded(static_cast<size_t>(len));
  std::vector<float> tail_sum(static_cast<size_t>(has_tail ? exact_tail : 0), 0.0f);
  std::vector<uint8_t> own;
  encode(p, &own, data + mine.begin, tail);
  for (int r = 0; r < n; ++r) {  // group order: the same sum on whatever ring
    const uint8_t* in = own.data();
    if (r != p) {
      payload.resize(static_cast<size_t>(mine.bytes));
      NARROWS_RETURN_IF_ERROR(t.Recv(o.group[static_cast<size_t>(r)], o.tag, payload.data(), payload.size(), o.timeout_s));
      in = payload.data();
    }
    codec.Decode(in, len, decoded.data());
    for (int64_t i = 0; i < len; ++i) sum[static_cast<size_t>(i)] += decoded[static_cast<size_t>(i)];
    if (has_tail) {
      const uint8_t* at = in + (mine.bytes - 4 * exact_tail);
      for (int64_t i = 0; i < exact_tail; ++i) {
        float v;
        std::memcpy(&v, at + 4 * i, 4);
        tail_sum[static_cast<size_t>(i)] += v;
      }
    }
  }
  // All-gather: the owner's sum, encoded once; everyone (the owner too) keeps its decoding.
  encode(p, &own, sum.data(), tail_sum.data());
  for (int r = 0; r < n; ++r) {
    if (r != p) NARROWS_RETURN_IF_ERROR(t.Send(o.group[static_cast<size_t>(r)], o.tag + 1, own.data(), own.size()));
  }
  auto keep = [&](int j, const uint8_t* in) {
    const EncodedChunk c = EncodedChunkOf(codec, body, exact_tail, n, j);
    codec.Decode(in, c.end - c.begin, data + c.begin);
    if (j == n - 1 && exact_tail > 0) std::memcpy(tail, in + (c.bytes - 4 * exact_tail), static_cast<size_t>(exact_tail) * 4);
  };
  keep(p, own.data());
  for (int j = 0; j < n; ++j) {
    if (j == p) continue;
    payload.resize(static_cast<size_t>(EncodedChunkOf(codec, body, exact_tail, n, j).bytes));
    NARROWS_RETURN_IF_ERROR(t.Recv(o.group[static_cast<size_t>(j)], o.tag + 1, payload.data(), payload.size(), o.timeout_s));
    keep(j, payload.data());
  }
  return Status::Ok();
}

std::unique_ptr<Work> AllReduceSumEncodedAsync(Transport& t, float* data, int64_t count, int64_t exact_tail,
                                               Codec codec, CollectiveOptions options) {
  return t.Start([=](Transport& child) { return AllReduceSumEncoded(child, data, count, exact_tail, codec, options); });
}

Status Broadcast(Transport& t, void* data, size_t bytes, const CollectiveOptions& o) {
  int position = 0;
  NARROWS_RETURN_IF_ERROR(CheckGroup(t, o, &position));
  return StarBroadcast(t, data, bytes, o.group, o.root >= 0 ? o.root : o.group.front(), o.tag + 2,
                       o.timeout_s);
}

}  // namespace narrows::core
