// Codecs for outer gradients on the wire, as plug-ins: each codec is one file under core/codecs/
// that registers itself by name with NARROWS_REGISTER_CODECS and reads its own options from the
// scenario's `outer_gradient:` block. The build lists the files (NARROWS_CODECS in
// core/CMakeLists.txt) and generates a reference to each, so that a static link keeps them all.
// Built in: fp32 (none), bf16, fp16, int8 and int4 with a per-block scale, top-k (magnitude
// pruning) and scaled sign.
//
// Encode writes exactly EncodedBytes(count) bytes; Decode reads them back into `count` floats.
// Codecs hold no state (thread-safe) and allocate nothing inside Encode/Decode (but top-k, its index).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/option_reader.h"
#include "core/status.h"

namespace narrows::core {

// One codec with its options.
class CodecKernel {
 public:
  virtual ~CodecKernel() = default;
  virtual bool lossless() const { return false; }
  // Whether it keeps some values exactly and drops the rest (top-k): sparse sets are all-gathered
  // and summed densely, never re-encoded (core/collectives.h).
  virtual bool sparse() const { return false; }
  // Exact bytes of `count` encoded values (scales and indices included).
  virtual int64_t EncodedBytes(int64_t count) const = 0;
  // Bits per value on the wire for a long buffer, scales included (the planner's "bits").
  virtual double BitsPerValue() const = 0;
  virtual void Encode(const float* in, int64_t count, uint8_t* out) const = 0;
  virtual void Decode(const uint8_t* in, int64_t count, float* out) const = 0;
};

struct CodecPlugin {
  std::string name;     // as scenarios spell it (`outer_gradient: int8`)
  std::string summary;  // one line for `narrows algorithms`
  // The codec, its own keys read from `r` (the outer_gradient block; empty for a bare name).
  std::function<std::shared_ptr<const CodecKernel>(OptionReader& r)> make;
};

bool RegisterCodecs(std::vector<CodecPlugin> plugins);
const CodecPlugin* FindCodec(const std::string& name);
std::vector<const CodecPlugin*> RegisteredCodecs();

#define NARROWS_REGISTER_CODECS(id, ...) \
  extern const bool kCodecRegistered_##id; \
  const bool kCodecRegistered_##id = ::narrows::core::RegisterCodecs({__VA_ARGS__})

// How the owner of a chunk sends its sum back in the all-reduce of a dense lossy codec (the second
// phase): re-encoded with the same codec (as INTELLECT-1's int8 ring does; the default), or in
// bf16 or fp32.
enum class AllGather { kSame, kBf16, kFp32 };

// How outer gradients travel: a registered codec with its options, the second phase of a dense
// codec's all-reduce, and error feedback (what encoding lost is added to the next all-reduce of the
// same buffer; core/collectives.h keeps it).
struct CodecSpec {
  std::string format = "fp32";
  std::shared_ptr<const CodecKernel> kernel;  // null: fp32
  AllGather all_gather = AllGather::kSame;
  bool error_feedback = false;
  // What is kept of a contribution's residual from one all-reduce to the next: 1 keeps it all (the
  // sum of what was sent and the residuals is conserved); SparseLoCo's accumulator decays it (0.95).
  double error_feedback_decay = 1.0;
};

// `key` of `r`: a codec's name, or a block {format, error_feedback, and the codec's own keys}.
CodecSpec ReadCodec(OptionReader& r, const ChoiceKey& key);
// A codec from YAML text ("int8", "{format: topk, topk: 0.05}"): tests, benchmarks, the planner.
Result<CodecSpec> ParseCodec(const std::string& yaml_text);

class Codec {
 public:
  explicit Codec(CodecSpec spec);
  const CodecSpec& spec() const { return spec_; }
  bool lossless() const { return kernel_->lossless(); }
  bool sparse() const { return kernel_->sparse(); }
  // The first phase's codec (every contribution) and the second's (the owners' sums).
  const CodecKernel& kernel() const { return *kernel_; }
  const CodecKernel& gather() const { return *gather_; }
  int64_t EncodedBytes(int64_t count) const { return kernel_->EncodedBytes(count); }
  double BitsPerValue() const { return kernel_->BitsPerValue(); }
  void Encode(const float* in, int64_t count, uint8_t* out) const { kernel_->Encode(in, count, out); }
  void Decode(const uint8_t* in, int64_t count, float* out) const { kernel_->Decode(in, count, out); }

 private:
  CodecSpec spec_;
  std::shared_ptr<const CodecKernel> kernel_, gather_;
};

}  // namespace narrows::core
