// The encoded all-reduce (AllReduceSumEncoded, collectives.h): each algorithm's exchanges with the
// codec's formats on the wire, error feedback's residuals, and the bytes each rank sends.
#include "core/collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/collective_chunks.h"

namespace narrows::core {
namespace {

using internal::CheckGroup;
using internal::EncodedChunk;
using internal::EncodedChunkOf;
using internal::Mod;

// Whether a range of the encoded body carries the buffer's unencoded tail after it (the chunk that
// ends the body does).
enum class Tail { kWithout, kWith };
Tail TailIf(bool last) { return last ? Tail::kWith : Tail::kWithout; }

// The encoded all-reduce's buffers: the caller's data split into a body (encoded) and an exact tail,
// and error feedback's residuals, updated only once the whole all-reduce has succeeded (a retry
// among survivors starts from the same residuals).
class EncodedReduce {
 public:
  EncodedReduce(Transport& t, float* data, int64_t count, int64_t exact_tail, const Codec& codec,
                const CollectiveOptions& o, int position, EncodingResiduals* residuals)
      : t_(t), data_(data), body_(count - exact_tail), tail_(exact_tail), codec_(codec), o_(o),
        n_(static_cast<int>(o.group.size())), p_(position), residuals_(residuals) {
    if (residuals_) {
      residuals_->sent.resize(static_cast<size_t>(body_), 0.0f);
      residuals_->owned.resize(static_cast<size_t>(body_), 0.0f);
      sent_ = residuals_->sent;
    }
  }

  Status Run() {
    if (codec_.sparse()) {
      NARROWS_RETURN_IF_ERROR(SparseAllGather());
    } else {
      switch (o_.algorithm) {
        case AllReduceAlgorithm::kRing: NARROWS_RETURN_IF_ERROR(Ring()); break;
        case AllReduceAlgorithm::kStar: NARROWS_RETURN_IF_ERROR(Star()); break;
        case AllReduceAlgorithm::kTree: NARROWS_RETURN_IF_ERROR(Tree()); break;
        case AllReduceAlgorithm::kTwoPhase:
        case AllReduceAlgorithm::kHierarchical:  // not here: AllReduceSumEncoded runs it among the leaders
          NARROWS_RETURN_IF_ERROR(ReduceScatterAllGather());
          break;
      }
    }
    // Only now, with every chunk in: the residuals move on.
    if (residuals_) {
      residuals_->sent.swap(sent_);
      for (const auto& [at, value] : owned_) residuals_->owned[static_cast<size_t>(at)] = value;
    }
    return Status::Ok();
  }

 private:
  int Rank(int j) const { return o_.group[static_cast<size_t>(j)]; }

  // This rank's contribution to [begin, end) of the body, plus what encoding it lost last time,
  // encoded with `kernel` into `out` (after which `out` holds the tail's exact floats when
  // `tail`); with error feedback, the new residual of that range goes to sent_.
  void EncodeContribution(const CodecKernel& kernel, int64_t begin, int64_t end, Tail tail, std::vector<uint8_t>* out) {
    const int64_t len = end - begin;
    const float* values = data_ + begin;
    if (residuals_) {
      scratch_.resize(static_cast<size_t>(len));
      const auto decay = static_cast<float>(codec_.spec().error_feedback_decay);
      for (int64_t i = 0; i < len; ++i) scratch_[static_cast<size_t>(i)] = values[i] + decay * sent_[static_cast<size_t>(begin + i)];
      values = scratch_.data();
    }
    const int64_t bytes = kernel.EncodedBytes(len);
    out->resize(static_cast<size_t>(bytes + (tail == Tail::kWith ? 4 * tail_ : 0)));
    if (tail == Tail::kWith && tail_ > 0) std::memcpy(out->data() + bytes, data_ + body_, static_cast<size_t>(tail_) * 4);
    if (len == 0) return;  // an empty chunk (fewer values than ranks): the tail alone
    kernel.Encode(values, len, out->data());
    if (residuals_) {
      decoded_.resize(static_cast<size_t>(len));
      kernel.Decode(out->data(), len, decoded_.data());
      for (int64_t i = 0; i < len; ++i) sent_[static_cast<size_t>(begin + i)] = values[i] - decoded_[static_cast<size_t>(i)];
    }
  }

  // Dense formats. Reduce-scatter: chunk j of every contribution, encoded, to its owner group[j],
  // which decodes them (its own too) and sums in fp32 in group order. All-gather: the owner's sum
  // (plus what re-encoding its sums lost last time, with error feedback) encoded with the second
  // phase's codec to every rank; everyone, the owner too, keeps the decoding.
  Status ReduceScatterAllGather() {
    const CodecKernel& first = codec_.kernel();
    const CodecKernel& second = codec_.gather();
    std::vector<uint8_t> payload, own;
    for (int j = 0; j < n_; ++j) {
      if (j == p_) continue;
      const EncodedChunk c = EncodedChunkOf(first, body_, tail_, n_, j);
      EncodeContribution(first, c.begin, c.end, TailIf(j == n_ - 1), &payload);
      NARROWS_RETURN_IF_ERROR(t_.Send(Rank(j), o_.tag, payload.data(), payload.size()));
    }
    const EncodedChunk mine = EncodedChunkOf(first, body_, tail_, n_, p_);
    const bool last = p_ == n_ - 1;
    EncodeContribution(first, mine.begin, mine.end, TailIf(last), &own);
    // The owned chunk (and the tail, with the last chunk) becomes the sum, from zero in group order:
    // the same sum on whatever ring.
    std::fill(data_ + mine.begin, data_ + mine.end, 0.0f);
    if (last) std::fill(data_ + body_, data_ + body_ + tail_, 0.0f);
    for (int r = 0; r < n_; ++r) {
      const uint8_t* in = own.data();
      if (r != p_) {
        payload.resize(static_cast<size_t>(mine.bytes));
        NARROWS_RETURN_IF_ERROR(t_.Recv(Rank(r), o_.tag, payload.data(), payload.size(), o_.timeout_s));
        in = payload.data();
      }
      AddDecoded(first, in, mine.begin, mine.end, TailIf(last));
    }
    EncodeSum(mine.begin, mine.end, TailIf(last), &own);
    for (int r = 0; r < n_; ++r) {
      if (r != p_) NARROWS_RETURN_IF_ERROR(t_.Send(Rank(r), o_.tag + 1, own.data(), own.size()));
    }
    for (int j = 0; j < n_; ++j) {
      if (j == p_) continue;
      payload.resize(static_cast<size_t>(EncodedChunkOf(second, body_, tail_, n_, j).bytes));
      NARROWS_RETURN_IF_ERROR(t_.Recv(Rank(j), o_.tag + 1, payload.data(), payload.size(), o_.timeout_s));
      Keep(j, payload.data());
    }
    return Status::Ok();
  }

  // What re-encoding the sum of [begin, begin + len) lost (its decoding is in the data by now), for
  // the owner's next sum of the same elements; committed when the all-reduce succeeds.
  void NoteOwned(int64_t begin, const float* sum, int64_t len) {
    if (!residuals_) return;
    for (int64_t i = 0; i < len; ++i) owned_.emplace_back(begin + i, sum[i] - data_[begin + i]);
  }

  // Adds the decoding of `in` (values for [begin, end) in `kernel`, the tail after them when
  // `tail`) into the data and its tail.
  void AddDecoded(const CodecKernel& kernel, const uint8_t* in, int64_t begin, int64_t end, Tail tail) {
    const int64_t len = end - begin;
    decoded_.resize(static_cast<size_t>(len));
    if (len > 0) kernel.Decode(in, len, decoded_.data());
    for (int64_t i = 0; i < len; ++i) data_[begin + i] += decoded_[static_cast<size_t>(i)];
    if (tail == Tail::kWithout) return;
    const uint8_t* at = in + kernel.EncodedBytes(len);
    for (int64_t i = 0; i < tail_; ++i) {
      float v;
      std::memcpy(&v, at + 4 * i, 4);
      data_[body_ + i] += v;
    }
  }

  // The owner of a whole sum (a ring's chunk, the star's or the tree's root): adds what re-encoding
  // its last sum of these elements lost, encodes the sum with the second phase's codec into `out`
  // (the tail exact after it) and keeps the decoding in the data. One rounding of the sum.
  void EncodeSum(int64_t begin, int64_t end, Tail tail, std::vector<uint8_t>* out) {
    const CodecKernel& second = codec_.gather();
    const int64_t len = end - begin;
    std::vector<float> sum(data_ + begin, data_ + end);
    if (residuals_) {
      for (int64_t i = 0; i < len; ++i) sum[static_cast<size_t>(i)] += residuals_->owned[static_cast<size_t>(begin + i)];
    }
    const int64_t bytes = second.EncodedBytes(len);
    out->resize(static_cast<size_t>(bytes + (tail == Tail::kWith ? 4 * tail_ : 0)));
    if (len > 0) {
      second.Encode(sum.data(), len, out->data());
      second.Decode(out->data(), len, data_ + begin);
    }
    if (tail == Tail::kWith && tail_ > 0) std::memcpy(out->data() + bytes, data_ + body_, static_cast<size_t>(tail_) * 4);
    NoteOwned(begin, sum.data(), len);
  }

  // Writes the decoding of a whole-body payload in the second phase's codec into the data.
  void KeepWhole(const uint8_t* in) {
    const CodecKernel& second = codec_.gather();
    if (body_ > 0) second.Decode(in, body_, data_);
    if (tail_ > 0) std::memcpy(data_ + body_, in + second.EncodedBytes(body_), static_cast<size_t>(tail_) * 4);
  }

  // Dense formats over a ring. Reduce-scatter: at each of n-1 hops a rank decodes the partial sum
  // of a chunk from its predecessor, adds its own contribution in fp32 and encodes the result for
  // its successor: a chunk's values are rounded once per hop, n-1 times, as the partial sum grows.
  // All-gather: each chunk's owner encodes the full sum once with the second phase's codec and
  // the bytes travel round the ring unchanged (one more rounding). Tags tag, tag + 1.
  Status Ring() {
    const CodecKernel& first = codec_.kernel();
    const CodecKernel& second = codec_.gather();
    const int next = Rank(Mod(p_ + 1, n_)), prev = Rank(Mod(p_ - 1, n_));
    std::vector<uint8_t> out, in;
    for (int s = 0; s < n_ - 1; ++s) {
      const int cs = Mod(p_ - s, n_), cr = Mod(p_ - s - 1, n_);
      const EncodedChunk send = EncodedChunkOf(first, body_, tail_, n_, cs);
      EncodeContribution(first, send.begin, send.end, TailIf(cs == n_ - 1), &out);
      NARROWS_RETURN_IF_ERROR(t_.Send(next, o_.tag, out.data(), out.size()));
      const EncodedChunk recv = EncodedChunkOf(first, body_, tail_, n_, cr);
      in.resize(static_cast<size_t>(recv.bytes));
      NARROWS_RETURN_IF_ERROR(t_.Recv(prev, o_.tag, in.data(), in.size(), o_.timeout_s));
      AddDecoded(first, in.data(), recv.begin, recv.end, TailIf(cr == n_ - 1));
    }
    const int owned = Mod(p_ + 1, n_);
    const EncodedChunk mine = EncodedChunkOf(second, body_, tail_, n_, owned);
    EncodeSum(mine.begin, mine.end, TailIf(owned == n_ - 1), &out);
    for (int s = 0; s < n_ - 1; ++s) {
      NARROWS_RETURN_IF_ERROR(t_.Send(next, o_.tag + 1, out.data(), out.size()));
      const int cr = Mod(p_ - s, n_);
      in.resize(static_cast<size_t>(EncodedChunkOf(second, body_, tail_, n_, cr).bytes));
      NARROWS_RETURN_IF_ERROR(t_.Recv(prev, o_.tag + 1, in.data(), in.size(), o_.timeout_s));
      Keep(cr, in.data());
      out.swap(in);  // forwarded as it came, at the next step
    }
    return Status::Ok();
  }

  // Dense formats through a star: every rank but the root sends its whole contribution, encoded
  // (one rounding), to the root, which decodes them and sums them with its own in fp32 in group
  // order, encodes the sum once with the second phase's codec and sends it to every rank. Tags
  // tag, tag + 1.
  Status Star() {
    const int root = o_.root >= 0 ? o_.root : o_.group.front();
    const CodecKernel& first = codec_.kernel();
    std::vector<uint8_t> payload;
    if (t_.rank() != root) {
      EncodeContribution(first, 0, body_, Tail::kWith, &payload);
      NARROWS_RETURN_IF_ERROR(t_.Send(root, o_.tag, payload.data(), payload.size()));
      payload.resize(static_cast<size_t>(codec_.gather().EncodedBytes(body_) + 4 * tail_));
      NARROWS_RETURN_IF_ERROR(t_.Recv(root, o_.tag + 1, payload.data(), payload.size(), o_.timeout_s));
      KeepWhole(payload.data());
      return Status::Ok();
    }
    const std::vector<float> own(data_, data_ + body_ + tail_);
    std::fill(data_, data_ + body_ + tail_, 0.0f);
    payload.resize(static_cast<size_t>(first.EncodedBytes(body_) + 4 * tail_));
    for (int r : o_.group) {  // group order
      if (r == root) {
        for (int64_t i = 0; i < body_ + tail_; ++i) data_[i] += own[static_cast<size_t>(i)];
        continue;
      }
      NARROWS_RETURN_IF_ERROR(t_.Recv(r, o_.tag, payload.data(), payload.size(), o_.timeout_s));
      AddDecoded(first, payload.data(), 0, body_, Tail::kWith);
    }
    EncodeSum(0, body_, Tail::kWith, &payload);
    for (int r : o_.group) {
      if (r != root) NARROWS_RETURN_IF_ERROR(t_.Send(r, o_.tag + 1, payload.data(), payload.size()));
    }
    return Status::Ok();
  }

  // A binary tree over the group's positions (position i's children are 2i+1 and 2i+2). Reduce:
  // each rank adds its children's decoded partial sums to its own contribution in fp32 and sends the
  // result, encoded, to its parent: rounded once per level below the root, floor(log2 n) times on
  // the deepest path. Broadcast: the root encodes the sum once with the second phase's codec and
  // the bytes go down the tree unchanged. Whole messages, 2 floor(log2 n) latencies. Tags tag, tag + 1.
  Status Tree() {
    const CodecKernel& first = codec_.kernel();
    std::vector<uint8_t> payload;
    const int left = 2 * p_ + 1, right = 2 * p_ + 2;
    payload.resize(static_cast<size_t>(first.EncodedBytes(body_) + 4 * tail_));
    for (int child : {left, right}) {
      if (child >= n_) continue;
      NARROWS_RETURN_IF_ERROR(t_.Recv(Rank(child), o_.tag, payload.data(), payload.size(), o_.timeout_s));
      AddDecoded(first, payload.data(), 0, body_, Tail::kWith);
    }
    if (p_ > 0) {
      const int parent = Rank((p_ - 1) / 2);
      EncodeContribution(first, 0, body_, Tail::kWith, &payload);
      NARROWS_RETURN_IF_ERROR(t_.Send(parent, o_.tag, payload.data(), payload.size()));
      payload.resize(static_cast<size_t>(codec_.gather().EncodedBytes(body_) + 4 * tail_));
      NARROWS_RETURN_IF_ERROR(t_.Recv(parent, o_.tag + 1, payload.data(), payload.size(), o_.timeout_s));
      KeepWhole(payload.data());
    } else {
      EncodeSum(0, body_, Tail::kWith, &payload);
    }
    for (int child : {left, right}) {
      if (child < n_) NARROWS_RETURN_IF_ERROR(t_.Send(Rank(child), o_.tag + 1, payload.data(), payload.size()));
    }
    return Status::Ok();
  }

  // Writes the decoding of the sum of chunk j (second phase) into the data.
  void Keep(int j, const uint8_t* in) {
    const CodecKernel& second = codec_.gather();
    const EncodedChunk c = EncodedChunkOf(second, body_, tail_, n_, j);
    if (c.end > c.begin) second.Decode(in, c.end - c.begin, data_ + c.begin);
    if (j == n_ - 1 && tail_ > 0) {
      std::memcpy(data_ + body_, in + second.EncodedBytes(c.end - c.begin), static_cast<size_t>(tail_) * 4);
    }
  }

  // Sparse formats: every rank's whole body, encoded once (the k largest of the whole contribution),
  // goes to every other rank; each decodes all of them (its own too) and sums in fp32 in group
  // order. Nothing is pruned again.
  Status SparseAllGather() {
    const CodecKernel& kernel = codec_.kernel();
    std::vector<uint8_t> own, payload;
    EncodeContribution(kernel, 0, body_, Tail::kWith, &own);
    for (int r = 0; r < n_; ++r) {
      if (r != p_) NARROWS_RETURN_IF_ERROR(t_.Send(Rank(r), o_.tag, own.data(), own.size()));
    }
    std::fill(data_, data_ + body_ + tail_, 0.0f);  // the sum, from zero in group order
    for (int r = 0; r < n_; ++r) {
      const uint8_t* in = own.data();
      if (r != p_) {
        payload.resize(own.size());
        NARROWS_RETURN_IF_ERROR(t_.Recv(Rank(r), o_.tag, payload.data(), payload.size(), o_.timeout_s));
        in = payload.data();
      }
      AddDecoded(kernel, in, 0, body_, Tail::kWith);
    }
    return Status::Ok();
  }

  Transport& t_;
  float* data_;
  const int64_t body_, tail_;
  const Codec& codec_;
  const CollectiveOptions& o_;
  const int n_, p_;
  EncodingResiduals* residuals_;
  std::vector<float> sent_, scratch_, decoded_;
  std::vector<std::pair<int64_t, float>> owned_;  // the owner's new residuals, committed on success
};

}  // namespace

int64_t EncodedAllReduceBytesPerRank(const Codec& codec, int64_t count, int64_t exact_tail, int n, int position,
                                     AllReduceAlgorithm algorithm) {
  if (n <= 1) return 0;
  const int64_t body = count - exact_tail;
  const int64_t up = codec.kernel().EncodedBytes(body) + 4 * exact_tail;
  const int64_t down = codec.gather().EncodedBytes(body) + 4 * exact_tail;
  if (codec.sparse()) return (n - 1) * up;
  switch (algorithm) {
    case AllReduceAlgorithm::kRing: {
      int64_t bytes = 0;
      for (int s = 0; s < n - 1; ++s) {
        bytes += EncodedChunkOf(codec.kernel(), body, exact_tail, n, Mod(position - s, n)).bytes;
        bytes += EncodedChunkOf(codec.gather(), body, exact_tail, n, Mod(position + 1 - s, n)).bytes;
      }
      return bytes;
    }
    case AllReduceAlgorithm::kStar:
      return position == 0 ? (n - 1) * down : up;
    case AllReduceAlgorithm::kTree: {
      const int children = (2 * position + 1 < n ? 1 : 0) + (2 * position + 2 < n ? 1 : 0);
      return (position > 0 ? up : 0) + children * down;
    }
    case AllReduceAlgorithm::kTwoPhase:
    case AllReduceAlgorithm::kHierarchical: break;
  }
  int64_t bytes = 0;
  for (int j = 0; j < n; ++j) {
    if (j == position) {
      bytes += (n - 1) * EncodedChunkOf(codec.gather(), body, exact_tail, n, j).bytes;
    } else {
      bytes += EncodedChunkOf(codec.kernel(), body, exact_tail, n, j).bytes;
    }
  }
  return bytes;
}

Status AllReduceSumEncoded(Transport& t, float* data, int64_t count, int64_t exact_tail, const Codec& codec,
                           const CollectiveOptions& o, EncodingResiduals* residuals) {
  int p = 0;
  NARROWS_RETURN_IF_ERROR(CheckGroup(t, o, &p));
  if (exact_tail < 0 || exact_tail > count) return Status::InvalidArgument("exact_tail outside the buffer");
  if (o.group.size() == 1 || count == 0) return Status::Ok();
  if (o.algorithm == AllReduceAlgorithm::kHierarchical) {
    // Each island's sum in fp32 to its leader (the fast links), the codec among the leaders alone.
    return internal::HierarchicalAllReduce(t, data, count, o, [&](const CollectiveOptions& leaders) {
      return EncodedReduce(t, data, count, exact_tail, codec, leaders, internal::PositionOf(leaders.group, t.rank()),
                           residuals)
          .Run();
    });
  }
  return EncodedReduce(t, data, count, exact_tail, codec, o, p, residuals).Run();
}

std::unique_ptr<Work> AllReduceSumEncodedAsync(Transport& t, float* data, int64_t count, int64_t exact_tail,
                                               Codec codec, CollectiveOptions options, EncodingResiduals* residuals) {
  return t.Start([=](Transport& child) {
    return AllReduceSumEncoded(child, data, count, exact_tail, codec, options, residuals);
  });
}

}  // namespace narrows::core
