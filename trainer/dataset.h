// Dataset: a scenario's corpus, its train/validation split and the fixed validation batches, loaded
// and checked once and shared read-only by every worker of a process. Torch-free.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/scenario.h"
#include "trainer/corpus.h"
#include "trainer/sampler.h"

namespace narrows::trainer {

struct Dataset {
  Corpus corpus;
  std::optional<Corpus> val_corpus;  // when data.val_path is set
  CorpusSplit split;
  std::vector<TokenBatch> val_batches;
  std::vector<TokenSpan> val_windows;  // where each row of val_batches lies, batch by batch
  int64_t vocab_size = 256;
  bool byte_level = true;
  double unigram_entropy = 0.0;
  // The validation corpus's domains (one, "all", unless it has several) and each validation row's
  // domain, row by row over val_batches: every domain is scored on an equal share of the rows.
  std::vector<std::string> domains;
  std::vector<int> val_row_domain;
  // Per domain: the mean of `row_values` (one per validation row) over its rows (NaN where none).
  std::vector<double> ByDomain(const std::vector<double>& row_values) const;
};

// Per domain of the training corpus: its tokens, and how many of them are training and
// validation tokens (validation: of the validation corpus where data.val_path gives one).
struct DomainSize {
  std::string name;
  int64_t tokens = 0, train_tokens = 0, val_tokens = 0;
};
std::vector<DomainSize> DomainSizes(const Dataset& data);

// Loads data.path (and data.val_path), splits it and checks that windows of model.seq_len + 1
// tokens fit on both sides; InvalidArgument/NotFound naming the data otherwise. `data_root` "" means
// DefaultDataRoot().
core::Result<std::shared_ptr<const Dataset>> LoadDataset(const core::Scenario& scenario,
                                                         const std::string& data_root);

}  // namespace narrows::trainer
