// Corpus: the token stream a run trains on, and its deterministic train/validation split.
//
// Sources: the Jane Austen novels from Debian's r-cran-janeaustenr (an R lazy-load database we
// decode ourselves), the multi-domain corpus tools/setup builds (Austen and a folder per domain),
// any text file or folder of text files (byte-level tokens, vocab 256; a folder of folders is a
// corpus with a domain per folder), and
// pre-tokenised uint16 shards in the llm.c format (256 int32 header, magic 20240520) or the plain
// nanoGPT format (headerless uint16). Shards are memory-mapped, so corpora larger than memory work.
// A Corpus is immutable after loading and safe to read from many threads. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/scenario.h"
#include "core/status.h"

namespace narrows::trainer {

// A contiguous run of tokens owned by the Corpus.
struct TokenSegment {
  const uint16_t* data = nullptr;
  int64_t size = 0;
  std::string source;  // file it came from
  int domain = 0;      // index into Corpus::domains()
};

// A [start, start+length) range of one segment.
struct TokenSpan {
  int segment = 0;
  int64_t start = 0;
  int64_t length = 0;
};

class Corpus {
 public:
  Corpus() = default;
  Corpus(Corpus&&) = default;
  Corpus& operator=(Corpus&&) = default;

  // Byte-level corpus from text held in memory (one segment).
  static Corpus FromText(std::string text, std::string source);
  // Adds the tokens of `tokens` as a new segment.
  void AddSegment(std::vector<uint16_t> tokens, std::string source);
  // Adds a memory-mapped region as a segment; `mapping` keeps it alive.
  void AddMapped(std::shared_ptr<void> mapping, const uint16_t* data, int64_t size, std::string source);
  // Segments added from now on belong to the domain `name` (made on first use). A corpus that
  // never names one is a single domain, "all".
  void BeginDomain(const std::string& name);
  // The domains' names, at least one; a segment's `domain` indexes them.
  const std::vector<std::string>& domains() const { return domains_; }
  int64_t DomainTokens(int domain) const;
  // Keeps the first `max_tokens` tokens of every domain (its segments in order); 0 keeps all.
  void CapDomains(int64_t max_tokens);

  const std::vector<TokenSegment>& segments() const { return segments_; }
  int64_t num_tokens() const;
  int64_t vocab_size() const { return vocab_size_; }
  void set_vocab_size(int64_t v) { vocab_size_ = v; }
  bool byte_level() const { return byte_level_; }
  void set_byte_level(bool b) { byte_level_ = b; }
  // Shannon entropy (nats) of the unigram token distribution: the loss of the best model that
  // ignores context.
  double UnigramEntropyNats() const;

 private:
  std::vector<TokenSegment> segments_;
  std::vector<std::shared_ptr<void>> storage_;
  std::vector<std::string> domains_{"all"};
  int current_domain_ = 0;
  bool named_domain_ = false;
  int64_t vocab_size_ = 256;
  bool byte_level_ = true;
};

// Train and validation spans. Every segment is cut into blocks; every k-th block (k =
// round(1 / val_fraction)) of each domain is validation, the rest train. Depends only on the corpus and
// val_fraction, never on the seed or the model, so validation losses are comparable across runs.
struct CorpusSplit {
  std::vector<TokenSpan> train;
  std::vector<TokenSpan> val;
  int64_t block_tokens = 0;
};
CorpusSplit SplitCorpus(const Corpus& corpus, double val_fraction, int64_t min_span);
// All of a corpus as one split side (used when data.val_path gives validation separately).
std::vector<TokenSpan> WholeCorpus(const Corpus& corpus);

// Decodes the character vectors of an R lazy-load database (Rdata.rdb: objects, each a 4-byte
// big-endian length and a zlib stream of an XDR-serialised STRSXP) into text: strings joined by
// '\n', objects separated by a blank line. InvalidArgument names the offset of a malformed object.
core::Result<std::string> DecodeRdataText(const std::string& rdb_bytes, const std::string& source);

// Loads the corpus described by `data`. `data_root` is where tools/setup put the Austen package.
// Text sources are byte-level (vocab 256); shards are checked against data.vocab_size.
core::Result<Corpus> LoadCorpus(const core::DataSpec& data, const std::string& path,
                                const std::string& data_root);

// Where the default data lives: $NARROWS_DATA_DIR, else the data/ folder beside the build folder
// of the running executable, else ./data.
std::string DefaultDataRoot();

}  // namespace narrows::trainer
