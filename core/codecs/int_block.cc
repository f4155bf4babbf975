// int8 and int4: symmetric integers with one fp32 scale per `block` values (default 128).
// Error per value: |e| <= s/2 with s = max|x| / qmax of the block (qmax 127 or 7).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/codec.h"
#include "core/codecs/wire.h"

namespace narrows::core::codecs {
namespace {

// Symmetric integer quantisation with one fp32 scale per block: q = round(x / s), s = max|x| / qmax.
void EncodeInt(const float* in, int64_t count, int64_t block, int qmax, uint8_t* out) {
  const bool nibbles = qmax == 7;
  uint8_t* scales = out;
  uint8_t* values = out + 4 * Blocks(count, block);
  for (int64_t b = 0; b * block < count; ++b) {
    const int64_t begin = b * block, end = std::min(count, begin + block);
    const float s = MaxMagnitude(in, begin, end) / static_cast<float>(qmax);
    Put(scales, s);
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      const int q = std::clamp(static_cast<int>(std::lrint(in[i] * inv)), -qmax, qmax);
      if (!nibbles) {
        values[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      } else {
        PutNibble(values, i, static_cast<uint8_t>(q & 0xf));
      }
    }
  }
}
void DecodeInt(const uint8_t* in, int64_t count, int64_t block, int qmax, float* out) {
  const bool nibbles = qmax == 7;
  const uint8_t* scales = in;
  const uint8_t* values = in + 4 * Blocks(count, block);
  for (int64_t b = 0; b * block < count; ++b) {
    const int64_t begin = b * block, end = std::min(count, begin + block);
    const float s = Get<float>(scales);
    for (int64_t i = begin; i < end; ++i) {
      int q;
      if (!nibbles) {
        q = static_cast<int8_t>(values[i]);
      } else {
        const int nib = GetNibble(values, i);
        q = nib >= 8 ? nib - 16 : nib;
      }
      out[i] = s * static_cast<float>(q);
    }
  }
}

class IntBlock final : public CodecKernel {
 public:
  IntBlock(int qmax, int64_t block) : qmax_(qmax), block_(block) {}
  int64_t EncodedBytes(int64_t count) const override {
    const int64_t values = qmax_ == 7 ? (count + 1) / 2 : count;
    return values + 4 * Blocks(count, block_);
  }
  double BitsPerValue() const override { return (qmax_ == 7 ? 4.0 : 8.0) + 32.0 / static_cast<double>(block_); }
  void Encode(const float* in, int64_t count, uint8_t* out) const override { EncodeInt(in, count, block_, qmax_, out); }
  void Decode(const uint8_t* in, int64_t count, float* out) const override { DecodeInt(in, count, block_, qmax_, out); }

 private:
  int qmax_;
  int64_t block_;
};

const KeyBlock kIntKeys("a codec: int8, int4", "Symmetric integers with one fp32 scale per block of values.");
const IntKey kBlock(kIntKeys, "block", 128, 1, 1 << 24, Doc("values per scale", "values"));

CodecPlugin IntPlugin(const char* name, const char* summary, int qmax) {
  return {name, summary, [qmax](OptionReader& r) {
            return std::make_shared<const IntBlock>(qmax, r.Int(kBlock));
          }};
}

}  // namespace

NARROWS_REGISTER_CODECS(int_block, IntPlugin("int8", "8-bit integers, one fp32 scale per `block` values", 127),
                        IntPlugin("int4", "4-bit integers, one fp32 scale per `block` values", 7));

}  // namespace narrows::core::codecs
