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
                           core::Sampling sampling, double domain_mix)
    : corpus_(corpus), seq_len_(seq_len), rng_(SplitMix64(seed ^ SplitMix64(uint64_t(worker) + 1))), first_rng_(rng_) {
  NARROWS_CHECK(num_workers >= 1 && worker >= 0 && worker < num_workers);
  const int domains = static_cast<int>(corpus.domains().size());
  if (sampling == core::Sampling::kNonIid && num_workers > 1) {
    int64_t total = 0;
    for (const auto& s : train_spans) total += s.length;
    own_ = Index(SliceSpans(train_spans, total * worker / num_workers, total * (worker + 1) / num_workers), seq_len,
                 worker);
  } else if (sampling == core::Sampling::kByDomain && domains > 1) {
    const int home = worker % domains;
    std::vector<TokenSpan> spans;
    for (const auto& s : train_spans) {
      if (corpus.segments()[static_cast<size_t>(s.segment)].domain == home) spans.push_back(s);
    }
    own_ = Index(std::move(spans), seq_len, worker);
    if (domain_mix > 0.0) {
      mixed_ = Index(train_spans, seq_len, worker);
      mix_ = domain_mix;
    }
  } else {
    own_ = Index(train_spans, seq_len, worker);
  }
}

void BatchSampler::UseSpans(std::vector<TokenSpan> spans, int worker) {
  own_ = Index(std::move(spans), seq_len_, worker);
  mixed_ = {};
  mix_ = 0.0;
}

BatchSampler::Pool BatchSampler::Index(std::vector<TokenSpan> spans, int64_t seq_len, int worker) {
  Pool pool;
  int64_t sum = 0;
  for (const auto& s : spans) {
    sum += std::max<int64_t>(0, s.length - seq_len);  // starts that leave seq_len + 1 tokens
    pool.cumulative_starts.push_back(sum);
  }
  NARROWS_CHECK(sum > 0) << "worker " << worker << " has no training window of " << seq_len + 1 << " tokens";
  pool.spans = std::move(spans);
  return pool;
}

void BatchSampler::Draw(const Pool& pool, int64_t row, TokenBatch* out) {
  std::uniform_int_distribution<int64_t> pick(0, pool.cumulative_starts.back() - 1);
  const int64_t r = pick(rng_);
  const size_t span = static_cast<size_t>(
      std::upper_bound(pool.cumulative_starts.begin(), pool.cumulative_starts.end(), r) -
      pool.cumulative_starts.begin());
  const int64_t before = span == 0 ? 0 : pool.cumulative_starts[span - 1];
  CopyWindow(corpus_, pool.spans[span], r - before, seq_len_, row, out);
}

TokenBatch BatchSampler::Next(int64_t batch) {
  TokenBatch out = EmptyBatch(batch, seq_len_);
  std::bernoulli_distribution mixed(mix_);
  for (int64_t row = 0; row < batch; ++row) {
    // Without a mixture no extra draw is made, so i.i.d. and non-i.i.d. streams are as before.
    Draw(mix_ > 0.0 && mixed(rng_) ? mixed_ : own_, row, &out);
  }
  return out;
}

std::vector<TokenBatch> ValidationBatches(const Corpus& corpus, const std::vector<TokenSpan>& spans,
                                          int64_t seq_len, int64_t count, int64_t batch,
                                          std::vector<TokenSpan>* positions) {
  // Per domain: its spans and the prefix sums of their valid window starts.
  const auto domains = corpus.domains().size();
  std::vector<std::vector<const TokenSpan*>> by_domain(domains);
  std::vector<std::vector<int64_t>> cumulative(domains);
  for (const auto& s : spans) {
    const auto d = static_cast<size_t>(corpus.segments()[static_cast<size_t>(s.segment)].domain);
    const int64_t before = cumulative[d].empty() ? 0 : cumulative[d].back();
    by_domain[d].push_back(&s);
    cumulative[d].push_back(before + std::max<int64_t>(0, s.length - seq_len));
  }
  std::vector<size_t> scored;  // the domains with a window
  for (size_t d = 0; d < domains; ++d) {
    if (!cumulative[d].empty() && cumulative[d].back() > 0) scored.push_back(d);
  }
  NARROWS_CHECK(!scored.empty()) << "no validation window of " << seq_len + 1 << " tokens";
  // Window w belongs to the k-th scored domain for w in [k W / K, (k+1) W / K): every domain gets
  // an equal share of the rows, spread evenly over its windows. One domain: spread over all.
  std::vector<TokenBatch> out;
  const int64_t windows = count * batch, k_domains = static_cast<int64_t>(scored.size());
  for (int64_t b = 0; b < count; ++b) {
    TokenBatch tb = EmptyBatch(batch, seq_len);
    for (int64_t row = 0; row < batch; ++row) {
      const int64_t w = b * batch + row;
      const int64_t k = w * k_domains / windows;
      const int64_t first = (k * windows + k_domains - 1) / k_domains, last = ((k + 1) * windows + k_domains - 1) / k_domains;
      const size_t d = scored[static_cast<size_t>(k)];
      const int64_t sum = cumulative[d].back();
      const int64_t r = static_cast<int64_t>((static_cast<__int128>(w - first) * sum) / (last - first));
      const size_t span = static_cast<size_t>(
          std::upper_bound(cumulative[d].begin(), cumulative[d].end(), r) - cumulative[d].begin());
      const int64_t before = span == 0 ? 0 : cumulative[d][span - 1];
      const TokenSpan& s = *by_domain[d][span];
      CopyWindow(corpus, s, r - before, seq_len, row, &tb);
      if (positions) positions->push_back({s.segment, s.start + (r - before), seq_len + 1});
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
