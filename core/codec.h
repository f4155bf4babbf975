// Codecs for outer gradients on the wire: fp32 (none), bf16, fp16, int8 and int4 with a per-block
// scale, top-k (magnitude pruning) and scaled sign. Torch-free; no allocation inside Encode/Decode.
//
// Encode writes exactly EncodedBytes(count) bytes; Decode reads them back into `count` floats.
// Error bounds per value (tested): bf16 |e| <= 2^-8 |x|, fp16 |e| <= 2^-11 |x| within its range
// (|x| > 65504 saturates), int8 |e| <= s/2 with s = max|x|/127 of the block, int4 |e| <= s/2 with
// s = max|x|/7, top-k exact on the k kept values and 0 elsewhere, sign: s·sign(x) with s =
// mean|x| of the block. Thread-safe (no state); only top-k allocates (its index).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace narrows::core {

enum class CodecFormat { kFp32, kBf16, kFp16, kInt8, kInt4, kTopK, kSign };

struct CodecSpec {
  CodecFormat format = CodecFormat::kFp32;
  int64_t block = 128;         // int8, int4, sign: values per fp32 scale
  double topk_fraction = 0.1;  // top-k: the share of values kept, k = ceil(fraction * count)
  bool error_feedback = false;  // the sender adds what the codec lost last time (used by the trainer)
};

// The format's name as scenarios spell it (fp32, bf16, fp16, int8, int4, topk, sign).
std::string CodecName(CodecFormat format);
// Bits per value on the wire, scales included, for a long buffer (the planner's "bits").
double CodecBitsPerValue(const CodecSpec& spec);

class Codec {
 public:
  explicit Codec(CodecSpec spec) : spec_(spec) {}
  const CodecSpec& spec() const { return spec_; }
  bool lossless() const { return spec_.format == CodecFormat::kFp32; }
  // Values top-k keeps of `count`.
  int64_t TopK(int64_t count) const;
  // Exact bytes of `count` encoded values (scales and indices included).
  int64_t EncodedBytes(int64_t count) const;
  void Encode(const float* in, int64_t count, uint8_t* out) const;
  void Decode(const uint8_t* in, int64_t count, float* out) const;

 private:
  CodecSpec spec_;
};

}  // namespace narrows::core
