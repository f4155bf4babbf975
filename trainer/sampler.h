// BatchSampler: the training stream of one worker, and the fixed validation batches.
//
// A window is seq_len + 1 consecutive tokens of one span (inputs, and targets shifted by one).
// With `iid` sampling each of M workers draws windows uniformly from all training spans with its
// own random stream; with `non-iid` worker w draws only from the w-th contiguous 1/M of the
// training tokens, so workers see distinct regions of the corpus (DiLoCo's non-i.i.d. regime).
// With `by-domain`, worker w's home is domain w mod D of the corpus's D domains: each of its
// sequences comes from the whole corpus with probability `domain_mix`, else from its home domain.
// Deterministic for (seed, worker, num_workers). Not thread-safe; one per worker.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/scenario.h"
#include "trainer/corpus.h"

namespace narrows::trainer {

// Token ids of a batch, row-major [batch, seq_len], as int64 for LibTorch.
struct TokenBatch {
  int64_t batch = 0, seq_len = 0;
  std::vector<int64_t> inputs, targets;
};

class BatchSampler {
 public:
  BatchSampler(const Corpus& corpus, const std::vector<TokenSpan>& train_spans, int64_t seq_len,
               uint64_t seed, int worker, int num_workers, core::Sampling sampling, double domain_mix = 0.0);
  TokenBatch Next(int64_t batch);
  // Back to the start of this worker's random stream, as a new process's sampler would be (the
  // spans it draws from stay).
  void Restart() { rng_ = first_rng_; }
  // The spans this worker draws from (all of them for iid; its home domain's for by-domain).
  const std::vector<TokenSpan>& spans() const { return own_.spans; }
  // Draws from `spans` alone from now on (DiPaCo: the documents routed to this worker's path); the
  // random stream goes on. REQUIRES: they hold a window of seq_len + 1 tokens.
  void UseSpans(std::vector<TokenSpan> spans, int worker);

 private:
  // Spans and the prefix sums of their valid window starts.
  struct Pool {
    std::vector<TokenSpan> spans;
    std::vector<int64_t> cumulative_starts;
  };
  static Pool Index(std::vector<TokenSpan> spans, int64_t seq_len, int worker);
  void Draw(const Pool& pool, int64_t row, TokenBatch* out);

  const Corpus& corpus_;
  int64_t seq_len_;
  Pool own_;
  Pool mixed_;         // by-domain: the whole corpus, drawn with probability mix_
  double mix_ = 0.0;
  std::mt19937_64 rng_;
  std::mt19937_64 first_rng_;  // rng_ as constructed
};

// `count` batches of `batch` windows spread evenly over the validation spans (no randomness). With
// `positions`, where each row lies (seq_len + 1 tokens of its segment), batch by batch.
std::vector<TokenBatch> ValidationBatches(const Corpus& corpus, const std::vector<TokenSpan>& spans,
                                          int64_t seq_len, int64_t count, int64_t batch,
                                          std::vector<TokenSpan>* positions = nullptr);
// The rows `rows` (indices over the rows of `batches`, batch by batch) in batches of at most
// `batch` rows, in that order.
std::vector<TokenBatch> SelectRows(const std::vector<TokenBatch>& batches, const std::vector<size_t>& rows,
                                   int64_t batch);

// The sub-spans covering [begin, end) of the concatenation of `spans`.
std::vector<TokenSpan> SliceSpans(const std::vector<TokenSpan>& spans, int64_t begin, int64_t end);

}  // namespace narrows::trainer
