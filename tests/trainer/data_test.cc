#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/scenario.h"
#include "trainer/corpus.h"
#include "trainer/dataset.h"
#include "trainer/algorithms/dipaco_routing.h"
#include "trainer/sampler.h"

namespace narrows::trainer {
namespace {
namespace fs = std::filesystem;

void PutInt(std::string* s, int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  s->push_back(static_cast<char>(u >> 24));
  s->push_back(static_cast<char>(u >> 16));
  s->push_back(static_cast<char>(u >> 8));
  s->push_back(static_cast<char>(u));
}

// One R lazy-load object holding a character vector, as janeaustenr ships it.
std::string RdbObject(const std::vector<std::string>& strings, bool with_na = false) {
  std::string raw = "X\n";
  PutInt(&raw, 3);
  PutInt(&raw, 0x040201);
  PutInt(&raw, 0x030500);
  PutInt(&raw, 5);
  raw += "UTF-8";
  PutInt(&raw, 16);  // STRSXP
  PutInt(&raw, static_cast<int32_t>(strings.size() + (with_na ? 1 : 0)));
  for (const auto& s : strings) {
    PutInt(&raw, 0x00040009);  // CHARSXP, ASCII
    PutInt(&raw, static_cast<int32_t>(s.size()));
    raw += s;
  }
  if (with_na) {
    PutInt(&raw, 9);
    PutInt(&raw, -1);
  }
  uLongf zlen = compressBound(raw.size());
  std::string z(zlen, '\0');
  compress(reinterpret_cast<Bytef*>(z.data()), &zlen, reinterpret_cast<const Bytef*>(raw.data()), raw.size());
  z.resize(zlen);
  std::string out;
  PutInt(&out, static_cast<int32_t>(raw.size()));
  return out + z;
}

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("narrows_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(RdataTest, DecodesCharacterVectorsAndSkipsNA) {
  const std::string rdb = RdbObject({"EMMA", "", "By Jane Austen"}, true) + RdbObject({"PERSUASION"});
  auto text = DecodeRdataText(rdb, "test.rdb");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "EMMA\n\nBy Jane Austen\n\n\nPERSUASION\n");
}

TEST(RdataTest, RejectsCorruptInput) {
  std::string rdb = RdbObject({"abc"});
  auto truncated = DecodeRdataText(rdb.substr(0, rdb.size() - 3), "t.rdb");
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("t.rdb: object at byte 0"), std::string::npos);
  std::string wrong_len = rdb;
  wrong_len[3] = static_cast<char>(wrong_len[3] + 1);
  EXPECT_FALSE(DecodeRdataText(wrong_len, "t.rdb").ok());
  EXPECT_FALSE(DecodeRdataText("", "t.rdb").ok());
}

TEST(RdataTest, DecodesTheInstalledAustenCorpus) {
  core::DataSpec spec;
  auto corpus = LoadCorpus(spec, "austen", DefaultDataRoot());
  ASSERT_TRUE(corpus.ok()) << corpus.status().ToString() << " (run tools/setup)";
  // Six novels, ~4.0 MB of text; the first line of the first (alphabetical) novel is its title.
  EXPECT_GT(corpus->num_tokens(), 3'900'000);
  EXPECT_LT(corpus->num_tokens(), 4'300'000);
  const auto& seg = corpus->segments()[0];
  std::string head(seg.data, seg.data + 4);
  EXPECT_EQ(head, "EMMA");
  // English text: ~4.3-4.6 bits of unigram byte entropy.
  EXPECT_GT(corpus->UnigramEntropyNats(), 2.8);
  EXPECT_LT(corpus->UnigramEntropyNats(), 3.3);
}

TEST(CorpusTest, TextFolderIsReadInNameOrder) {
  const fs::path dir = TempDir("text");
  std::ofstream(dir / "b.txt") << "second";
  std::ofstream(dir / "a.txt") << "first";
  std::ofstream(dir / ".hidden") << "never";
  core::DataSpec spec;
  auto corpus = LoadCorpus(spec, dir.string(), "");
  ASSERT_TRUE(corpus.ok()) << corpus.status().ToString();
  ASSERT_EQ(corpus->segments().size(), 2u);
  EXPECT_EQ(corpus->num_tokens(), 11);
  EXPECT_EQ(corpus->segments()[0].data[0], 'f');
  EXPECT_TRUE(corpus->byte_level());
  EXPECT_FALSE(LoadCorpus(spec, (dir / "missing.txt").string(), "").ok());
  fs::remove_all(dir);
}

// A folder of folders is a corpus with a domain per folder (files directly in it: one more, named
// after it); domain_tokens keeps the first tokens of each domain; the split holds out validation
// in every domain, even one shorter than k blocks.
TEST(CorpusTest, FolderOfFoldersIsACorpusOfDomains) {
  const fs::path dir = TempDir("domains");
  fs::create_directories(dir / "code");
  fs::create_directories(dir / "prose");
  std::ofstream(dir / "code" / "a.txt") << std::string(30000, 'x');
  std::ofstream(dir / "code" / "b.txt") << std::string(30000, 'y');
  std::ofstream(dir / "prose" / "a.txt") << std::string(3000, 'p');
  std::ofstream(dir / "loose.txt") << std::string(20000, 'l');
  core::DataSpec spec;
  auto corpus = LoadCorpus(spec, dir.string(), "");
  ASSERT_TRUE(corpus.ok()) << corpus.status().ToString();
  const std::vector<std::string> names = {"code", dir.filename().string(), "prose"};
  EXPECT_EQ(corpus->domains(), names);  // in path order: code/, loose.txt, prose/
  EXPECT_EQ(corpus->DomainTokens(0), 60000);
  EXPECT_EQ(corpus->DomainTokens(1), 20000);
  EXPECT_EQ(corpus->DomainTokens(2), 3000);
  for (const auto& seg : corpus->segments()) {
    EXPECT_EQ(static_cast<char>(seg.data[0]), seg.domain == 0 ? (seg.source.find("a.txt") != std::string::npos ? 'x' : 'y')
                                              : seg.domain == 1 ? 'l' : 'p');
  }
  const CorpusSplit split = SplitCorpus(*corpus, 0.1, 65);
  std::set<int> with_val;
  for (const auto& v : split.val) with_val.insert(corpus->segments()[static_cast<size_t>(v.segment)].domain);
  EXPECT_EQ(with_val, (std::set<int>{0, 1, 2}));

  spec.domain_tokens = 40000;
  auto capped = LoadCorpus(spec, dir.string(), "");
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->DomainTokens(0), 40000);  // all of a.txt, the first 10000 of b.txt
  EXPECT_EQ(capped->DomainTokens(1), 20000);
  EXPECT_EQ(capped->DomainTokens(2), 3000);
  EXPECT_EQ(capped->segments()[1].size, 10000);
  // A folder of files alone stays one domain.
  auto one = LoadCorpus(core::DataSpec{}, (dir / "code").string(), "");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->domains(), std::vector<std::string>{"all"});
  fs::remove_all(dir);
}

// The installed multi-domain corpus: Austen and the Debian domains at least (the two npm ones
// where the registry could be reached when tools/setup ran).
TEST(CorpusTest, TheMultiDomainCorpusHoldsItsDomains) {
  core::DataSpec spec;
  spec.domain_tokens = 100000;
  auto corpus = LoadCorpus(spec, "multi", DefaultDataRoot());
  ASSERT_TRUE(corpus.ok()) << corpus.status().ToString() << " (run tools/setup)";
  const auto& d = corpus->domains();
  for (const char* name : {"austen", "bible", "kernel-docs", "python-docs"}) {
    EXPECT_NE(std::find(d.begin(), d.end(), name), d.end()) << name;
  }
  for (int i = 0; i < static_cast<int>(d.size()); ++i) EXPECT_EQ(corpus->DomainTokens(i), 100000) << d[static_cast<size_t>(i)];
  EXPECT_FALSE(LoadCorpus(spec, "multi", "/nonexistent").ok());
}

// by-domain: worker w draws from domain w mod D alone without a mixture, and about the mixture's
// share from elsewhere with one; validation gives every domain an equal share of its rows however
// unequal their sizes, and Dataset::ByDomain averages per domain.
TEST(SamplerTest, ByDomainWorkersDrawFromTheirHomeDomain) {
  Corpus corpus;
  corpus.BeginDomain("big");
  corpus.AddSegment(std::vector<uint16_t>(40000, 1), "big");
  corpus.BeginDomain("small");
  corpus.AddSegment(std::vector<uint16_t>(8000, 2), "small");
  const CorpusSplit split = SplitCorpus(corpus, 0.1, 65);
  for (int w = 0; w < 4; ++w) {
    BatchSampler sampler(corpus, split.train, 64, 5, w, 4, core::Sampling::kByDomain, 0.0);
    const TokenBatch b = sampler.Next(64);
    for (int64_t v : b.inputs) ASSERT_EQ(v, w % 2 == 0 ? 1 : 2) << "worker " << w;
  }
  BatchSampler mixed(corpus, split.train, 64, 5, 1, 4, core::Sampling::kByDomain, 0.5);
  int foreign = 0;
  const int rows = 2000;
  const TokenBatch b = mixed.Next(rows);
  for (int r = 0; r < rows; ++r) foreign += b.inputs[static_cast<size_t>(r * 64)] == 1 ? 1 : 0;
  // Half the rows come from the whole corpus, where 5/6 of the windows are the big domain's.
  EXPECT_NEAR(foreign / static_cast<double>(rows), 0.5 * 40000 / 48000, 0.05);
  // i.i.d. on the same corpus: by token count.
  BatchSampler iid(corpus, split.train, 64, 5, 1, 4, core::Sampling::kIid);
  const TokenBatch c = iid.Next(rows);
  int big = 0;
  for (int r = 0; r < rows; ++r) big += c.inputs[static_cast<size_t>(r * 64)] == 1 ? 1 : 0;
  EXPECT_NEAR(big / static_cast<double>(rows), 40000.0 / 48000, 0.05);

  std::vector<TokenSpan> where;
  const auto val = ValidationBatches(corpus, split.val, 64, 3, 10, &where);
  ASSERT_EQ(where.size(), 30u);
  int small_rows = 0;
  for (size_t i = 0; i < where.size(); ++i) {
    const int d = corpus.segments()[static_cast<size_t>(where[i].segment)].domain;
    small_rows += d;
    EXPECT_EQ(val[i / 10].inputs[(i % 10) * 64], d == 0 ? 1 : 2);
  }
  EXPECT_EQ(small_rows, 15);
  Dataset data;
  data.domains = corpus.domains();
  for (const auto& w : where) data.val_row_domain.push_back(corpus.segments()[static_cast<size_t>(w.segment)].domain);
  std::vector<double> losses(30);
  for (size_t i = 0; i < 30; ++i) losses[i] = data.val_row_domain[i] == 0 ? 1.0 + static_cast<double>(i % 2) : 5.0;
  const std::vector<double> by = data.ByDomain(losses);
  ASSERT_EQ(by.size(), 2u);
  EXPECT_NEAR(by[0], 1.5, 0.04);  // 15 rows alternating 1 and 2
  EXPECT_DOUBLE_EQ(by[1], 5.0);
}

TEST(CorpusTest, ReadsLlmcAndNanoGptShards) {
  const fs::path dir = TempDir("shards");
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 37 % 50000);
  {  // llm.c: int32 header[256] = {20240520, 1, n}
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520;
    header[1] = 1;
    header[2] = static_cast<int32_t>(tokens.size());
    std::ofstream f(dir / "train_000.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    f.write(reinterpret_cast<const char*>(tokens.data()), 2000);
  }
  {  // nanoGPT: raw uint16
    std::ofstream f(dir / "train_001.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(tokens.data()), 2000);
  }
  core::DataSpec spec;
  spec.vocab_size = 50257;
  auto corpus = LoadCorpus(spec, (dir / "train_*.bin").string(), "");
  ASSERT_TRUE(corpus.ok()) << corpus.status().ToString();
  ASSERT_EQ(corpus->segments().size(), 2u);
  EXPECT_FALSE(corpus->byte_level());
  for (const auto& seg : corpus->segments()) {
    ASSERT_EQ(seg.size, 1000);
    EXPECT_EQ(seg.data[999], tokens[999]);
  }
  // The folder works too, and tokens beyond the vocabulary are rejected with their position.
  EXPECT_TRUE(LoadCorpus(spec, dir.string(), "").ok());
  spec.vocab_size = 30000;
  auto bad = LoadCorpus(spec, (dir / "train_000.bin").string(), "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("outside data.vocab_size 30000"), std::string::npos);
  {  // header promises more tokens than the file holds
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520;
    header[1] = 1;
    header[2] = 5000;
    std::ofstream f(dir / "short.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  spec.vocab_size = 50257;
  auto short_shard = LoadCorpus(spec, (dir / "short.bin").string(), "");
  ASSERT_FALSE(short_shard.ok());
  EXPECT_NE(short_shard.status().message().find("header says 5000 tokens"), std::string::npos);
  fs::remove_all(dir);
}

std::string SyntheticText(size_t n) {
  std::string s(n, ' ');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7919 % 26));
  return s;
}

TEST(SplitTest, TrainAndValidationAreDisjointAndCoverTheCorpus) {
  Corpus corpus = Corpus::FromText(SyntheticText(1'000'000), "synthetic");
  const CorpusSplit split = SplitCorpus(corpus, 0.05, 129);
  ASSERT_FALSE(split.val.empty());
  std::vector<int> owner(1'000'000, 0);
  int64_t val_tokens = 0;
  for (const auto& s : split.train) for (int64_t i = 0; i < s.length; ++i) owner[s.start + i] += 1;
  for (const auto& s : split.val) {
    val_tokens += s.length;
    for (int64_t i = 0; i < s.length; ++i) owner[s.start + i] += 2;
  }
  for (int o : owner) ASSERT_TRUE(o == 1 || o == 2) << "token in both or neither side";
  EXPECT_NEAR(static_cast<double>(val_tokens) / 1e6, 0.05, 0.02);
  // The split does not depend on anything but the corpus and the fraction.
  const CorpusSplit again = SplitCorpus(corpus, 0.05, 129);
  ASSERT_EQ(again.val.size(), split.val.size());
  EXPECT_EQ(again.val[0].start, split.val[0].start);
}

TEST(SamplerTest, WindowsAreShiftedByOneAndInsideTrainSpans) {
  Corpus corpus = Corpus::FromText(SyntheticText(200'000), "synthetic");
  const CorpusSplit split = SplitCorpus(corpus, 0.1, 65);
  BatchSampler sampler(corpus, split.train, 64, 1, 0, 1, core::Sampling::kIid);
  const TokenBatch b = sampler.Next(8);
  ASSERT_EQ(b.inputs.size(), 8u * 64u);
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t i = 0; i + 1 < 64; ++i) EXPECT_EQ(b.targets[r * 64 + i], b.inputs[r * 64 + i + 1]);
  }
  // Same seed, same stream; another worker, another stream.
  BatchSampler same(corpus, split.train, 64, 1, 0, 1, core::Sampling::kIid);
  EXPECT_EQ(same.Next(8).inputs, b.inputs);
  BatchSampler other(corpus, split.train, 64, 1, 1, 2, core::Sampling::kIid);
  EXPECT_NE(other.Next(8).inputs, b.inputs);
}

TEST(SamplerTest, NonIidWorkersOwnDisjointContiguousRegions) {
  Corpus corpus = Corpus::FromText(SyntheticText(400'000), "synthetic");
  const CorpusSplit split = SplitCorpus(corpus, 0.05, 65);
  std::vector<std::pair<int64_t, int64_t>> regions;
  int64_t covered = 0, train_total = 0;
  for (const auto& s : split.train) train_total += s.length;
  for (int w = 0; w < 4; ++w) {
    BatchSampler sampler(corpus, split.train, 64, 3, w, 4, core::Sampling::kNonIid);
    for (const auto& s : sampler.spans()) {
      regions.emplace_back(s.start, s.start + s.length);
      covered += s.length;
    }
  }
  EXPECT_EQ(covered, train_total);
  std::sort(regions.begin(), regions.end());
  for (size_t i = 1; i < regions.size(); ++i) EXPECT_LE(regions[i - 1].second, regions[i].first);
  // Worker 0's spans start at the beginning of the corpus, worker 3's end at its end.
  BatchSampler first(corpus, split.train, 64, 3, 0, 4, core::Sampling::kNonIid);
  BatchSampler last(corpus, split.train, 64, 3, 3, 4, core::Sampling::kNonIid);
  EXPECT_EQ(first.spans().front().start, split.train.front().start);
  EXPECT_EQ(last.spans().back().start + last.spans().back().length,
            split.train.back().start + split.train.back().length);
}

TEST(SamplerTest, ValidationBatchesAreFixed) {
  Corpus corpus = Corpus::FromText(SyntheticText(200'000), "synthetic");
  const CorpusSplit split = SplitCorpus(corpus, 0.1, 33);
  const auto a = ValidationBatches(corpus, split.val, 32, 3, 4);
  const auto b = ValidationBatches(corpus, split.val, 32, 3, 4);
  ASSERT_EQ(a.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].inputs, b[i].inputs);
  EXPECT_NE(a[0].inputs, a[2].inputs);
}

// Each validation row knows where it lies (DiPaCo routes it by the tokens before it), and rows can
// be regrouped into smaller batches.
TEST(SamplerTest, ValidationRowsKnowWhereTheyLieAndCanBeSelected) {
  Corpus corpus = Corpus::FromText(SyntheticText(200'000), "synthetic");
  const CorpusSplit split = SplitCorpus(corpus, 0.1, 33);
  std::vector<TokenSpan> where;
  const auto batches = ValidationBatches(corpus, split.val, 32, 3, 4, &where);
  ASSERT_EQ(where.size(), 12u);
  for (size_t i = 0; i < where.size(); ++i) {
    EXPECT_EQ(where[i].length, 33);
    const uint16_t* t = corpus.segments()[static_cast<size_t>(where[i].segment)].data + where[i].start;
    const TokenBatch& b = batches[i / 4];
    for (int64_t j = 0; j < 32; ++j) {
      ASSERT_EQ(b.inputs[static_cast<size_t>((static_cast<int64_t>(i) % 4) * 32 + j)], t[j]) << i;
      ASSERT_EQ(b.targets[static_cast<size_t>((static_cast<int64_t>(i) % 4) * 32 + j)], t[j + 1]) << i;
    }
  }
  const auto picked = SelectRows(batches, {1, 5, 11}, 2);
  ASSERT_EQ(picked.size(), 2u);
  EXPECT_EQ(picked[0].batch, 2);
  EXPECT_EQ(picked[1].batch, 1);
  EXPECT_TRUE(std::equal(picked[0].inputs.begin() + 32, picked[0].inputs.begin() + 64, batches[1].inputs.begin() + 32));
  EXPECT_TRUE(std::equal(picked[1].targets.begin(), picked[1].targets.end(), batches[2].targets.begin() + 96));
}


// DiPaCo's routing: documents of two unmistakable kinds (prose vs digits) go to two paths, one
// kind each; held-out documents follow their kind; the same inputs route the same way every time.
TEST(RoutingTest, KMeansSeparatesDocumentKindsAndRoutesHeldOutDocumentsAlike) {
  std::string text;
  for (int d = 0; d < 40; ++d) {
    std::string doc;
    while (doc.size() < 200) doc += d % 2 == 0 ? "the quiet hours of the evening passed. " : "0123 4567 89 ";
    text += doc.substr(0, 200);
  }
  const Corpus corpus = Corpus::FromText(text, "kinds");
  std::vector<TokenSpan> train, val;
  for (int d = 0; d < 30; ++d) train.push_back({0, d * 200, 200});
  // Validation windows of 65 tokens in the last ten documents, each 100 tokens in: its context (the
  // 64 tokens before it) lies in the same document.
  for (int d = 30; d < 40; ++d) val.push_back({0, d * 200 + 100, 65});
  RoutingOptions o;
  o.paths = 2;
  o.doc_tokens = 200;
  o.feature_tokens = 64;
  o.seed = 7;
  auto r = RouteDocuments(corpus, train, corpus, val, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Each path holds one kind only (document d is prose when d is even).
  for (int p = 0; p < 2; ++p) {
    std::set<int> kinds;
    for (const auto& d : r->train[static_cast<size_t>(p)]) kinds.insert(static_cast<int>(d.start / 200) % 2);
    for (size_t i : r->val[static_cast<size_t>(p)]) kinds.insert(static_cast<int>(val[i].start / 200) % 2);
    EXPECT_EQ(kinds.size(), 1u) << "path " << p;
  }
  EXPECT_EQ(r->train_tokens[0] + r->train_tokens[1], 30 * 200);
  EXPECT_EQ(r->val_tokens[0] + r->val_tokens[1], 10 * 64);  // the windows' targets
  EXPECT_EQ(r->val[0].size() + r->val[1].size(), 10u);
  EXPECT_EQ(r->train[0].size(), 15u);
  auto again = RouteDocuments(corpus, train, corpus, val, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->model.centroids, r->model.centroids);
  for (int p = 0; p < 2; ++p) EXPECT_EQ(again->train[static_cast<size_t>(p)].size(), r->train[static_cast<size_t>(p)].size());
  o.paths = 31;  // more paths than documents
  EXPECT_FALSE(RouteDocuments(corpus, train, corpus, val, o).ok());
}

// The confusion table of a routing against domains: two domains of unmistakable kinds land each
// on its own path, training tokens and validation windows alike.
TEST(RoutingTest, RoutingByDomainCountsEachDomainsTokensPerPath) {
  Corpus corpus;
  for (int kind = 0; kind < 2; ++kind) {
    corpus.BeginDomain(kind == 0 ? "prose" : "digits");
    std::string text;
    while (text.size() < 8000) text += kind == 0 ? "the quiet hours of the evening passed. " : "0123 4567 89 ";
    text.resize(8000);
    corpus.AddSegment(std::vector<uint16_t>(text.begin(), text.end()), corpus.domains().back());
  }
  std::vector<TokenSpan> train = {{0, 0, 6000}, {1, 0, 6000}}, val;
  std::vector<int> val_domain;
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < 5; ++i) {
      val.push_back({s, 6200 + i * 300, 65});
      val_domain.push_back(s);
    }
  }
  RoutingOptions o;
  o.paths = 2;
  o.doc_tokens = 200;
  o.feature_tokens = 64;
  auto r = RouteDocuments(corpus, train, corpus, val, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const DomainRouting by = RoutingByDomain(corpus, *r, val_domain, 2);
  ASSERT_EQ(by.train_tokens.size(), 2u);
  for (int d = 0; d < 2; ++d) {
    const auto& t = by.train_tokens[static_cast<size_t>(d)];
    const auto& v = by.val_windows[static_cast<size_t>(d)];
    EXPECT_EQ(t[0] + t[1], 6000);
    EXPECT_TRUE((t[0] == 0) != (t[1] == 0)) << "domain " << d << ": " << t[0] << " / " << t[1];
    EXPECT_EQ(v[0] + v[1], 5);
    EXPECT_EQ(t[0] == 0, v[0] == 0) << "domain " << d;
  }
  EXPECT_NE(by.train_tokens[0][0] == 0, by.train_tokens[1][0] == 0);  // different paths
}

TEST(RoutingTest, DocumentsCoverTheSpansAndFeaturesAreUnitLength) {
  const Corpus corpus = Corpus::FromText(std::string(1000, 'a') + std::string(500, 'b'), "t");
  const auto docs = CutDocuments({{0, 0, 1000}, {0, 1000, 130}}, 300);
  ASSERT_EQ(docs.size(), 4u);  // 300, 300, 400 (the short tail joins), and a short span alone
  EXPECT_EQ(docs[2].length, 400);
  EXPECT_EQ(docs[3].length, 130);
  const auto f = DocumentFeature(corpus, docs[0], 50);
  double norm = 0.0;
  for (float v : f) norm += static_cast<double>(v) * v;
  EXPECT_NEAR(norm, 1.0, 1e-6);
  EXPECT_EQ(DocumentFeature(corpus, docs[0], 50), DocumentFeature(corpus, docs[1], 50));  // all 'a'
  EXPECT_NE(DocumentFeature(corpus, docs[0], 50), DocumentFeature(corpus, {0, 1000, 300}, 50));
}

}  // namespace
}  // namespace narrows::trainer
