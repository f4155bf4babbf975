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

// How outer gradients travel: a registered codec with its options, and error feedback (the sender
// adds what the codec lost last time; applied by the trainer).
struct CodecSpec {
  std::string format = "fp32";
  std::shared_ptr<const CodecKernel> kernel;  // null: fp32
  bool error_feedback = false;
};

// `key` of `r`: a codec's name, or a block {format, error_feedback, and the codec's own keys}.
CodecSpec ReadCodec(OptionReader& r, const std::string& key);
// A codec from YAML text ("int8", "{format: topk, topk: 0.05}"): tests, benchmarks, the planner.
Result<CodecSpec> ParseCodec(const std::string& yaml_text);

class Codec {
 public:
  explicit Codec(CodecSpec spec);
  const CodecSpec& spec() const { return spec_; }
  bool lossless() const { return kernel_->lossless(); }
  int64_t EncodedBytes(int64_t count) const { return kernel_->EncodedBytes(count); }
  double BitsPerValue() const { return kernel_->BitsPerValue(); }
  void Encode(const float* in, int64_t count, uint8_t* out) const { kernel_->Encode(in, count, out); }
  void Decode(const uint8_t* in, int64_t count, float* out) const { kernel_->Decode(in, count, out); }

 private:
  CodecSpec spec_;
  std::shared_ptr<const CodecKernel> kernel_;
};

}  // namespace narrows::core
