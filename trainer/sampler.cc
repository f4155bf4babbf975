#include "trainer/sampler.h"

#include <algorithm>

namespace narrows::trainer {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void CopyWindow(const Corpus& corpus, const TokenSpan& span, int64_t offset, int64_t seq_len,
                int64_t row, TokenBatch* out) {
  const uint16_t* src = corpus.segments()[span.segment].data + span.start + offset;
  int64_t* in = out->inputs.data() + row * seq_len;
  int64_t* tg = out->targets.data() + row * seq_len;
  for (int64_t i = 0; i < seq_len; ++i) {
    in[i] = src[i];
    tg[i] = src[i + 1];
  }
}

TokenBatch EmptyBatch(int64_t batch, int64_t seq_len) {
  TokenBatch b;
  b.batch = batch;
  b.seq_len = seq_len;
  b.inputs.resize(static_cast<size_t>(batch * seq_len));
  b.targets.resize(static_cast<size_t>(batch * seq_len));
  return b;
}

}  // namespace

std::vector<TokenSpan> SliceSpans(const std::vector<TokenSpan>& spans, int64_t begin, int64_t end) {
  std::vector<TokenSpan> out;
  int64_t pos = 0;
  for (const TokenSpan& s : spans) {
    const int64_t lo = std::max(begin, pos), hi = std::min(end, pos + s.length);
    if (lo < hi) out.push_back({s.segment, s.start + (lo - pos), hi - lo});
    pos += s.length;
  }
  return out;
}

BatchSampler::BatchSampler(const Corpus& corpus, const std::vector<TokenSpan>& train_spans,
                           int64_t seq_len, uint64_t seed, int worker, int num_workers,
                           core::Sampling sampling)
    : corpus_(corpus), seq_len_(seq_len), rng_(SplitMix64(seed ^ SplitMix64(uint64_t(worker) + 1))) {
  NARROWS_CHECK(num_workers >= 1 && worker >= 0 && worker < num_workers);
  if (sampling == core::Sampling::kNonIid && num_workers > 1) {
    int64_t total = 0;
    for (const auto& s : train_spans) total += s.length;
    spans_ = SliceSpans(train_spans, total * worker / num_workers, total * (worker + 1) / num_workers);
  } else {
    spans_ = train_spans;
  }
  Index(worker);
}

void BatchSampler::UseSpans(std::vector<TokenSpan> spans, int worker) {
  spans_ = std::move(spans);
  cumulative_starts_.clear();
  Index(worker);
}

void BatchSampler::Index(int worker) {
  int64_t sum = 0;
  for (const auto& s : spans_) {
    sum += std::max<int64_t>(0, s.length - seq_len_);  // starts that leave seq_len + 1 tokens
    cumulative_starts_.push_back(sum);
  }
  NARROWS_CHECK(sum > 0) << "worker " << worker << " has no training window of " << seq_len_ + 1
                         << " tokens";
}

TokenBatch BatchSampler::Next(int64_t batch) {
  TokenBatch out = EmptyBatch(batch, seq_len_);
  std::uniform_int_distribution<int64_t> pick(0, cumulative_starts_.back() - 1);
  for (int64_t row = 0; row < batch; ++row) {
    const int64_t r = pick(rng_);
    const size_t span = static_cast<size_t>(
        std::upper_bound(cumulative_starts_.begin(), cumulative_starts_.end(), r) -
        cumulative_starts_.begin());
    const int64_t before = span == 0 ? 0 : cumulative_starts_[span - 1];
    CopyWindow(corpus_, spans_[span], r - before, seq_len_, row, &out);
  }
  return out;
}

std::vector<TokenBatch> ValidationBatches(const Corpus& corpus, const std::vector<TokenSpan>& spans,
                                          int64_t seq_len, int64_t count, int64_t batch,
                                          std::vector<TokenSpan>* positions) {
  std::vector<int64_t> cumulative;
  int64_t sum = 0;
  for (const auto& s : spans) {
    sum += std::max<int64_t>(0, s.length - seq_len);
    cumulative.push_back(sum);
  }
  NARROWS_CHECK(sum > 0) << "no validation window of " << seq_len + 1 << " tokens";
  std::vector<TokenBatch> out;
  const int64_t windows = count * batch;
  for (int64_t b = 0; b < count; ++b) {
    TokenBatch tb = EmptyBatch(batch, seq_len);
    for (int64_t row = 0; row < batch; ++row) {
      const int64_t w = b * batch + row;
      const int64_t r = static_cast<int64_t>((static_cast<__int128>(w) * sum) / windows);
      const size_t span = static_cast<size_t>(
          std::upper_bound(cumulative.begin(), cumulative.end(), r) - cumulative.begin());
      const int64_t before = span == 0 ? 0 : cumulative[span - 1];
      CopyWindow(corpus, spans[span], r - before, seq_len, row, &tb);
      if (positions) positions->push_back({spans[span].segment, spans[span].start + (r - before), seq_len + 1});
    }
    out.push_back(std::move(tb));
  }
  return out;
}

std::vector<TokenBatch> SelectRows(const std::vector<TokenBatch>& batches, const std::vector<size_t>& rows,
                                   int64_t batch) {
  std::vector<TokenBatch> out;
  if (batches.empty()) return out;
  const int64_t seq_len = batches.front().seq_len, per = batches.front().batch;
  for (size_t i = 0; i < rows.size(); i += static_cast<size_t>(batch)) {
    const auto n = static_cast<int64_t>(std::min(rows.size() - i, static_cast<size_t>(batch)));
    TokenBatch tb = EmptyBatch(n, seq_len);
    for (int64_t j = 0; j < n; ++j) {
      const size_t r = rows[i + static_cast<size_t>(j)];
      const TokenBatch& from = batches[r / static_cast<size_t>(per)];
      const auto at = static_cast<std::ptrdiff_t>((static_cast<int64_t>(r) % per) * seq_len);
      std::copy(from.inputs.begin() + at, from.inputs.begin() + at + seq_len, tb.inputs.begin() + j * seq_len);
      std::copy(from.targets.begin() + at, from.targets.begin() + at + seq_len, tb.targets.begin() + j * seq_len);
    }
    out.push_back(std::move(tb));
  }
  return out;
}

}  // namespace narrows::trainer
