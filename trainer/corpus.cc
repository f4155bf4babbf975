#include "trainer/corpus.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <tuple>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace narrows::trainer {
namespace fs = std::filesystem;
using core::Result;
using core::Status;

namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr int64_t kLlmcHeaderInts = 256;
constexpr const char* kAustenRdb = "janeaustenr/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb";

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return Status::IoError(path + ": read failed");
  return out.str();
}

// Big-endian XDR reader over an in-memory buffer.
class XdrReader {
 public:
  explicit XdrReader(const std::string& bytes) : bytes_(bytes) {}
  bool Int(int32_t* out) {
    if (pos_ + 4 > bytes_.size()) return false;
    const auto* b = reinterpret_cast<const unsigned char*>(bytes_.data() + pos_);
    *out = static_cast<int32_t>((uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) |
                                (uint32_t{b[2]} << 8) | uint32_t{b[3]});
    pos_ += 4;
    return true;
  }
  bool Bytes(size_t n, std::string* out) {
    if (pos_ + n > bytes_.size()) return false;
    out->append(bytes_, pos_, n);
    pos_ += n;
    return true;
  }
  bool Skip(size_t n) {
    if (pos_ + n > bytes_.size()) return false;
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
};

// One serialised R object: 'X\n', version ints, then a STRSXP of CHARSXPs.
Status AppendCharacterVector(const std::string& raw, const std::string& where, std::string* text) {
  constexpr int kStrSxp = 16, kCharSxp = 9;
  if (raw.size() < 2 || raw[0] != 'X' || raw[1] != '\n') {
    return Status::InvalidArgument(where + ": not an XDR serialisation (no 'X\\n' header)");
  }
  XdrReader r(raw);
  r.Skip(2);
  int32_t version = 0, writer = 0, reader = 0, flags = 0, length = 0;
  if (!r.Int(&version) || !r.Int(&writer) || !r.Int(&reader)) {
    return Status::InvalidArgument(where + ": truncated header");
  }
  if (version == 3) {
    int32_t enc_len = 0;
    if (!r.Int(&enc_len) || enc_len < 0 || !r.Skip(static_cast<size_t>(enc_len))) {
      return Status::InvalidArgument(where + ": truncated native-encoding field");
    }
  } else if (version != 2) {
    return Status::InvalidArgument(where + ": unsupported serialisation version " + std::to_string(version));
  }
  if (!r.Int(&flags) || !r.Int(&length)) return Status::InvalidArgument(where + ": truncated object");
  if ((flags & 0xFF) != kStrSxp) return Status::Ok();  // not a character vector: not text, skip it
  if (length < 0) return Status::InvalidArgument(where + ": long vectors are not supported");
  if (!text->empty()) text->append("\n\n");
  for (int32_t i = 0; i < length; ++i) {
    int32_t cflags = 0, clen = 0;
    if (!r.Int(&cflags) || (cflags & 0xFF) != kCharSxp || !r.Int(&clen)) {
      return Status::InvalidArgument(where + ": string " + std::to_string(i) + " at byte " +
                                     std::to_string(r.pos()) + " is not a CHARSXP");
    }
    if (clen == -1) continue;  // NA_character_
    if (clen < 0 || !r.Bytes(static_cast<size_t>(clen), text)) {
      return Status::InvalidArgument(where + ": string " + std::to_string(i) + " is truncated");
    }
    text->push_back('\n');
  }
  return Status::Ok();
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && !name.empty() && name[0] != '.') files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

struct Mapping {
  void* addr = MAP_FAILED;
  size_t length = 0;
  ~Mapping() {
    if (addr != MAP_FAILED) munmap(addr, length);
  }
};

Status AddShard(const std::string& path, int64_t vocab_size, Corpus* corpus) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::NotFound(path + ": cannot open shard: " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  auto mapping = std::make_shared<Mapping>();
  mapping->length = static_cast<size_t>(st.st_size);
  if (mapping->length > 0) {
    mapping->addr = ::mmap(nullptr, mapping->length, PROT_READ, MAP_PRIVATE, fd, 0);
  }
  ::close(fd);
  if (mapping->length == 0 || mapping->addr == MAP_FAILED) {
    return Status::InvalidArgument(path + ": empty or unreadable shard");
  }
  const auto* bytes = static_cast<const unsigned char*>(mapping->addr);
  const uint16_t* tokens = reinterpret_cast<const uint16_t*>(bytes);
  int64_t count = static_cast<int64_t>(mapping->length / 2);
  int32_t header[3] = {0, 0, 0};
  if (mapping->length >= kLlmcHeaderInts * 4) std::memcpy(header, bytes, sizeof(header));
  if (header[0] == kLlmcMagic) {  // llm.c: int32 header[256] = {magic, version, num_tokens, ...}
    if (header[1] != 1) {
      return Status::InvalidArgument(path + ": llm.c shard version " + std::to_string(header[1]) +
                                     " (only version 1, uint16 tokens, is supported)");
    }
    const int64_t expected = kLlmcHeaderInts * 4 + int64_t{header[2]} * 2;
    if (header[2] < 0 || static_cast<int64_t>(mapping->length) != expected) {
      return Status::InvalidArgument(path + ": header says " + std::to_string(header[2]) +
                                     " tokens but the file has " + std::to_string(mapping->length) +
                                     " bytes (expected " + std::to_string(expected) + ")");
    }
    tokens += kLlmcHeaderInts * 2;
    count = header[2];
  } else if (mapping->length % 2 != 0) {
    return Status::InvalidArgument(path + ": odd byte count: not a uint16 token shard");
  }
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] >= vocab_size) {
      return Status::InvalidArgument(path + ": token " + std::to_string(tokens[i]) + " at index " +
                                     std::to_string(i) + " is outside data.vocab_size " +
                                     std::to_string(vocab_size));
    }
  }
  corpus->AddMapped(mapping, tokens, count, path);
  return Status::Ok();
}

// Text as byte-level tokens (each byte's unsigned value).
std::vector<uint16_t> ByteTokens(const std::string& text) {
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

// Byte-level tokens of one text file, as a segment of the current domain.
Status AddTextFile(const std::string& file, Corpus* corpus) {
  auto text = ReadFile(file);
  if (!text.ok()) return text.status();
  if (!text->empty()) corpus->AddSegment(ByteTokens(*text), file);
  return Status::Ok();
}

// Every text file under `dir`, in path order. Where some lie in sub-folders, each sub-folder is a
// domain (named after it) and the files directly in `dir` are one more, named after `dir`.
Status AddTextFolder(const std::string& dir, Corpus* corpus) {
  const std::vector<std::string> files = FilesUnder(dir);
  const bool by_folder = std::any_of(files.begin(), files.end(), [&](const std::string& f) {
    return fs::path(f).lexically_relative(dir).has_parent_path();
  });
  for (const auto& f : files) {
    if (by_folder) {
      const fs::path rel = fs::path(f).lexically_relative(dir);
      corpus->BeginDomain(rel.has_parent_path() ? rel.begin()->string() : fs::path(dir).filename().string());
    }
    NARROWS_RETURN_IF_ERROR(AddTextFile(f, corpus));
  }
  return Status::Ok();
}

Result<Corpus> LoadAusten(const std::string& data_root) {
  const std::string rdb_path = data_root + "/" + kAustenRdb;
  auto bytes = ReadFile(rdb_path);
  if (!bytes.ok()) return Status::NotFound(rdb_path + ": the Austen corpus is missing; run tools/setup");
  auto text = DecodeRdataText(*bytes, rdb_path);
  if (!text.ok()) return text.status();
  Corpus corpus;
  corpus.BeginDomain("austen");
  corpus.AddSegment(ByteTokens(*text), "austen");
  return corpus;
}

}  // namespace

Corpus Corpus::FromText(std::string text, std::string source) {
  Corpus c;
  c.AddSegment(ByteTokens(text), std::move(source));
  return c;
}

void Corpus::AddSegment(std::vector<uint16_t> tokens, std::string source) {
  auto owned = std::make_shared<std::vector<uint16_t>>(std::move(tokens));
  segments_.push_back({owned->data(), static_cast<int64_t>(owned->size()), std::move(source), current_domain_});
  storage_.push_back(owned);
}

void Corpus::BeginDomain(const std::string& name) {
  if (!named_domain_ && segments_.empty()) {
    domains_[0] = name;
    named_domain_ = true;
    return;
  }
  named_domain_ = true;
  const auto it = std::find(domains_.begin(), domains_.end(), name);
  current_domain_ = static_cast<int>(it - domains_.begin());
  if (it == domains_.end()) domains_.push_back(name);
}

int64_t Corpus::DomainTokens(int domain) const {
  int64_t n = 0;
  for (const auto& s : segments_) n += s.domain == domain ? s.size : 0;
  return n;
}

void Corpus::CapDomains(int64_t max_tokens) {
  if (max_tokens <= 0) return;
  std::vector<int64_t> kept(domains_.size(), 0);
  std::vector<TokenSegment> out;
  for (auto& s : segments_) {
    int64_t& k = kept[static_cast<size_t>(s.domain)];
    s.size = std::min(s.size, max_tokens - k);
    k += s.size;
    if (s.size > 0) out.push_back(std::move(s));
  }
  segments_ = std::move(out);
}

void Corpus::AddMapped(std::shared_ptr<void> mapping, const uint16_t* data, int64_t size,
                       std::string source) {
  segments_.push_back({data, size, std::move(source), current_domain_});
  storage_.push_back(std::move(mapping));
}

int64_t Corpus::num_tokens() const {
  int64_t n = 0;
  for (const auto& s : segments_) n += s.size;
  return n;
}

double Corpus::UnigramEntropyNats() const {
  std::vector<int64_t> counts(static_cast<size_t>(vocab_size_), 0);
  for (const auto& s : segments_) {
    for (int64_t i = 0; i < s.size; ++i) ++counts[s.data[i]];
  }
  const double total = static_cast<double>(num_tokens());
  double h = 0.0;
  for (int64_t c : counts) {
    if (c > 0) h -= (c / total) * std::log(c / total);
  }
  return h;
}

CorpusSplit SplitCorpus(const Corpus& corpus, double val_fraction, int64_t min_span) {
  CorpusSplit split;
  const int64_t k = std::max<int64_t>(2, std::llround(1.0 / val_fraction));
  const int64_t total = corpus.num_tokens();
  // 64 Ki-token blocks; small corpora get smaller blocks so that both sides hold several.
  split.block_tokens = std::max<int64_t>(min_span, std::min<int64_t>(1 << 16, total / (4 * k)));
  int64_t block_index = 0;
  const auto& segments = corpus.segments();
  for (int s = 0; s < static_cast<int>(segments.size()); ++s) {
    if (s > 0 && segments[s].domain != segments[s - 1].domain) block_index = 0;  // each domain its own share
    const int64_t size = segments[s].size;
    for (int64_t start = 0; start < size; start += split.block_tokens, ++block_index) {
      const int64_t length = std::min(split.block_tokens, size - start);
      const bool is_val = block_index % k == k - 1;
      auto& side = is_val ? split.val : split.train;
      if (!side.empty() && side.back().segment == s &&
          side.back().start + side.back().length == start) {
        side.back().length += length;  // merge contiguous blocks of one side
      } else {
        side.push_back({s, start, length});
      }
    }
  }
  // A domain shorter than k blocks gets the end of its last training span as validation.
  for (int d = 0; d < static_cast<int>(corpus.domains().size()); ++d) {
    auto in_domain = [&](const TokenSpan& span) { return segments[static_cast<size_t>(span.segment)].domain == d; };
    if (std::any_of(split.val.begin(), split.val.end(), in_domain)) continue;
    const auto last = std::find_if(split.train.rbegin(), split.train.rend(), in_domain);
    if (last == split.train.rend() || last->length <= min_span) continue;
    const int64_t take = std::max(min_span, last->length / k);
    const TokenSpan held{last->segment, last->start + last->length - take, take};
    last->length -= take;
    split.val.insert(std::upper_bound(split.val.begin(), split.val.end(), held,
                                      [](const TokenSpan& a, const TokenSpan& b) {
                                        return std::tie(a.segment, a.start) < std::tie(b.segment, b.start);
                                      }),
                     held);
  }
  auto too_short = [&](const TokenSpan& span) { return span.length < min_span; };
  split.train.erase(std::remove_if(split.train.begin(), split.train.end(), too_short), split.train.end());
  split.val.erase(std::remove_if(split.val.begin(), split.val.end(), too_short), split.val.end());
  return split;
}

std::vector<TokenSpan> WholeCorpus(const Corpus& corpus) {
  std::vector<TokenSpan> spans;
  for (int s = 0; s < static_cast<int>(corpus.segments().size()); ++s) {
    spans.push_back({s, 0, corpus.segments()[s].size});
  }
  return spans;
}

Result<std::string> DecodeRdataText(const std::string& rdb, const std::string& source) {
  std::string text;
  size_t offset = 0;
  while (offset < rdb.size()) {
    const std::string where = source + ": object at byte " + std::to_string(offset);
    if (offset + 4 > rdb.size()) return Status::InvalidArgument(where + ": truncated length");
    const auto* b = reinterpret_cast<const unsigned char*>(rdb.data() + offset);
    const uLong raw_len = (uLong{b[0]} << 24) | (uLong{b[1]} << 16) | (uLong{b[2]} << 8) | uLong{b[3]};
    std::string raw(raw_len, '\0');
    z_stream zs{};
    if (inflateInit(&zs) != Z_OK) return Status::Internal("zlib inflateInit failed");
    zs.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(rdb.data() + offset + 4));
    zs.avail_in = static_cast<uInt>(rdb.size() - offset - 4);
    zs.next_out = reinterpret_cast<Bytef*>(raw.data());
    zs.avail_out = static_cast<uInt>(raw.size());
    const int rc = inflate(&zs, Z_FINISH);
    const size_t consumed = zs.total_in;
    const size_t produced = zs.total_out;
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || produced != raw_len) {
      return Status::InvalidArgument(where + ": zlib stream does not hold the " +
                                     std::to_string(raw_len) + " bytes its length promises");
    }
    NARROWS_RETURN_IF_ERROR(AppendCharacterVector(raw, where, &text));
    offset += 4 + consumed;
  }
  if (text.empty()) return Status::InvalidArgument(source + ": holds no character vectors");
  return text;
}

std::string DefaultDataRoot() {
  if (const char* env = std::getenv("NARROWS_DATA_DIR"); env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      if (fs::exists(dir / "data" / kAustenRdb, ec)) return (dir / "data").string();
    }
  }
  return "data";
}

namespace {

// The whole corpus `path` names, before data.domain_tokens.
Result<Corpus> LoadWhole(const core::DataSpec& data, const std::string& path, const std::string& data_root) {
  core::DataFormat format = data.format;
  std::vector<std::string> shard_files;
  const bool is_glob = path.find_first_of("*?[") != std::string::npos;
  if (format == core::DataFormat::kAuto) {
    if (path == "austen") {
      format = core::DataFormat::kAusten;
    } else if (path == "multi") {
      format = core::DataFormat::kMulti;
    } else if (is_glob || EndsWith(path, ".bin")) {
      format = core::DataFormat::kShards;
    } else if (fs::is_directory(path)) {
      const auto files = FilesUnder(path);
      const bool all_bin = !files.empty() && std::all_of(files.begin(), files.end(),
                                                         [](const auto& f) { return EndsWith(f, ".bin"); });
      format = all_bin ? core::DataFormat::kShards : core::DataFormat::kText;
    } else {
      format = core::DataFormat::kText;
    }
  }

  switch (format) {
    case core::DataFormat::kAusten:
      return LoadAusten(data_root);
    case core::DataFormat::kMulti: {
      const std::string dir = data_root + "/multi";
      if (!fs::exists(dir + "/.complete")) {
        return Status::NotFound(dir + ": the multi-domain corpus is missing; run tools/setup");
      }
      auto austen = LoadAusten(data_root);
      if (!austen.ok()) return austen.status();
      Corpus corpus = std::move(austen).value();
      NARROWS_RETURN_IF_ERROR(AddTextFolder(dir, &corpus));
      return corpus;
    }
    case core::DataFormat::kText: {
      if (!fs::exists(path)) return Status::NotFound("data.path: '" + path + "' does not exist");
      Corpus corpus;
      if (fs::is_directory(path)) {
        NARROWS_RETURN_IF_ERROR(AddTextFolder(path, &corpus));
      } else {
        NARROWS_RETURN_IF_ERROR(AddTextFile(path, &corpus));
      }
      if (corpus.num_tokens() == 0) return Status::InvalidArgument("data.path: '" + path + "' holds no text");
      return corpus;
    }
    case core::DataFormat::kShards: {
      if (is_glob) {
        glob_t g{};
        if (::glob(path.c_str(), 0, nullptr, &g) == 0) {
          for (size_t i = 0; i < g.gl_pathc; ++i) shard_files.emplace_back(g.gl_pathv[i]);
        }
        globfree(&g);
      } else if (fs::is_directory(path)) {
        for (const auto& f : FilesUnder(path)) {
          if (EndsWith(f, ".bin")) shard_files.push_back(f);
        }
      } else if (fs::exists(path)) {
        shard_files.push_back(path);
      }
      if (shard_files.empty()) return Status::NotFound("data.path: no shard files match '" + path + "'");
      std::sort(shard_files.begin(), shard_files.end());
      Corpus corpus;
      corpus.set_byte_level(false);
      corpus.set_vocab_size(data.vocab_size);
      for (const auto& f : shard_files) NARROWS_RETURN_IF_ERROR(AddShard(f, data.vocab_size, &corpus));
      return corpus;
    }
    case core::DataFormat::kAuto: break;
  }
  return Status::Internal("unreachable data format");
}

}  // namespace

Result<Corpus> LoadCorpus(const core::DataSpec& data, const std::string& path, const std::string& data_root) {
  auto corpus = LoadWhole(data, path, data_root);
  if (corpus.ok()) corpus->CapDomains(data.domain_tokens);
  return corpus;
}

}  // namespace narrows::trainer
