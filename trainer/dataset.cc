#include "trainer/dataset.h"

#include <cmath>

namespace narrows::trainer {

core::Result<std::shared_ptr<const Dataset>> LoadDataset(const core::Scenario& sc, const std::string& root) {
  const std::string data_root = root.empty() ? DefaultDataRoot() : root;
  auto out = std::make_shared<Dataset>();
  auto corpus = LoadCorpus(sc.data, sc.data.path, data_root);
  if (!corpus.ok()) return corpus.status();
  out->corpus = std::move(corpus).value();
  out->byte_level = out->corpus.byte_level();
  out->vocab_size = out->byte_level ? 256 : sc.data.vocab_size;
  const int64_t window = sc.model.seq_len + 1;
  if (!sc.data.val_path.empty()) {
    auto val = LoadCorpus(sc.data, sc.data.val_path, data_root);
    if (!val.ok()) return val.status();
    out->val_corpus = std::move(val).value();
    out->split.train = WholeCorpus(out->corpus);
    out->split.val = WholeCorpus(*out->val_corpus);
  } else {
    out->split = SplitCorpus(out->corpus, sc.data.val_fraction, window);
  }
  auto has_window = [&](const std::vector<TokenSpan>& spans) {
    for (const auto& s : spans) {
      if (s.length >= window) return true;
    }
    return false;
  };
  if (!has_window(out->split.train) || !has_window(out->split.val)) {
    return core::Status::InvalidArgument(
        "data.path: '" + sc.data.path + "' (" + std::to_string(out->corpus.num_tokens()) +
        " tokens) is too small for train and validation windows of model.seq_len + 1 = " +
        std::to_string(window) + " tokens");
  }
  const Corpus& val_source = out->val_corpus ? *out->val_corpus : out->corpus;
  out->val_batches =
      ValidationBatches(val_source, out->split.val, sc.model.seq_len, sc.eval.batches, sc.eval.batch_size,
                        &out->val_windows);
  out->unigram_entropy = out->corpus.UnigramEntropyNats();
  out->domains = val_source.domains();
  for (const TokenSpan& w : out->val_windows) {
    out->val_row_domain.push_back(val_source.segments()[static_cast<size_t>(w.segment)].domain);
  }
  return std::shared_ptr<const Dataset>(std::move(out));
}

std::vector<double> Dataset::ByDomain(const std::vector<double>& row_values) const {
  std::vector<double> sum(domains.size(), 0.0), rows(domains.size(), 0.0);
  for (size_t i = 0; i < row_values.size() && i < val_row_domain.size(); ++i) {
    sum[static_cast<size_t>(val_row_domain[i])] += row_values[i];
    rows[static_cast<size_t>(val_row_domain[i])] += 1.0;
  }
  for (size_t d = 0; d < sum.size(); ++d) sum[d] = rows[d] > 0 ? sum[d] / rows[d] : std::nan("");
  return sum;
}

std::vector<DomainSize> DomainSizes(const Dataset& data) {
  std::vector<DomainSize> out;
  for (const auto& name : data.corpus.domains()) out.push_back({name});
  auto add = [&](const Corpus& corpus, const std::vector<TokenSpan>& spans, int64_t DomainSize::*field) {
    for (const auto& s : spans) {
      const std::string& name = corpus.domains()[static_cast<size_t>(corpus.segments()[static_cast<size_t>(s.segment)].domain)];
      for (auto& d : out) {
        if (d.name == name) d.*field += s.length;
      }
    }
  };
  for (size_t d = 0; d < out.size(); ++d) out[d].tokens = data.corpus.DomainTokens(static_cast<int>(d));
  add(data.corpus, data.split.train, &DomainSize::train_tokens);
  add(data.val_corpus ? *data.val_corpus : data.corpus, data.split.val, &DomainSize::val_tokens);
  return out;
}

}  // namespace narrows::trainer
