// e3m0: a 4-bit float with a sign and a 3-bit exponent and no mantissa (E3M0), one fp32 scale per
// `block` values (default 128): the format Streaming DiLoCo sends its outer gradients in. The
// scale is the block's max |x|; a value is ±scale·2^-k for k in 0..6, or zero. Each value is
// rounded to the nearest of these in linear terms, so the error is at most a third of its
// magnitude, or 2^-7 of the scale for values below 2^-7 of it (which become zero).
// Wire: the blocks' fp32 scales, then two values per byte (low nibble first), each
// sign << 3 | code, code 0 = zero, code c in 1..7 = 2^(c - 7).
#include <algorithm>
#include <cmath>

#include "core/codec.h"
#include "core/codecs/wire.h"

namespace narrows::core::codecs {
namespace {

// The code of |x| / scale = r in [0, 1]: the nearest of 0 and 2^-6 ... 2^0.
uint8_t Code(float r) {
  if (!(r >= 0.0078125f)) return 0;  // below 2^-7, halfway to 2^-6 (NaN too)
  int e = 0;
  const float m = std::frexp(r, &e);  // r = m · 2^e, m in [0.5, 1)
  // r lies between 2^(e-1) and 2^e; the nearer in linear terms (the midpoint is 0.75 · 2^e).
  const int k = m >= 0.75f ? e : e - 1;
  return static_cast<uint8_t>(std::clamp(k + 7, 1, 7));
}

class E3M0 final : public CodecKernel {
 public:
  explicit E3M0(int64_t block) : block_(block) {}
  int64_t EncodedBytes(int64_t count) const override { return (count + 1) / 2 + 4 * Blocks(count, block_); }
  double BitsPerValue() const override { return 4.0 + 32.0 / static_cast<double>(block_); }

  void Encode(const float* in, int64_t count, uint8_t* out) const override {
    uint8_t* scales = out;
    uint8_t* values = out + 4 * Blocks(count, block_);
    for (int64_t b = 0; b * block_ < count; ++b) {
      const int64_t begin = b * block_, end = std::min(count, begin + block_);
      const float amax = MaxMagnitude(in, begin, end);
      Put(scales, amax);
      const float inv = amax > 0 ? 1.0f / amax : 0.0f;
      for (int64_t i = begin; i < end; ++i) {
        PutNibble(values, i, static_cast<uint8_t>((std::signbit(in[i]) ? 8 : 0) | Code(std::fabs(in[i]) * inv)));
      }
    }
  }

  void Decode(const uint8_t* in, int64_t count, float* out) const override {
    const uint8_t* scales = in;
    const uint8_t* values = in + 4 * Blocks(count, block_);
    for (int64_t b = 0; b * block_ < count; ++b) {
      const int64_t begin = b * block_, end = std::min(count, begin + block_);
      const float s = Get<float>(scales);
      for (int64_t i = begin; i < end; ++i) {
        const int nib = GetNibble(values, i);
        const int code = nib & 7;
        const float magnitude = code == 0 ? 0.0f : std::ldexp(s, code - 7);
        out[i] = (nib & 8) ? -magnitude : magnitude;
      }
    }
  }

 private:
  int64_t block_;
};

const KeyBlock kE3m0Keys("a codec: e3m0", "4-bit floats (a sign and a 3-bit exponent), one fp32 scale per block.");
const IntKey kBlock(kE3m0Keys, "block", 128, 1, 1 << 24, Doc("values per scale (the block's largest magnitude)", "values"));

}  // namespace

NARROWS_REGISTER_CODECS(e3m0, CodecPlugin{"e3m0", "4-bit floats: a sign and a 3-bit exponent, one fp32 scale per `block` values",
                                          [](OptionReader& r) {
                                            return std::make_shared<const E3M0>(r.Int(kBlock));
                                          }});

}  // namespace narrows::core::codecs
