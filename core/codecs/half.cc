// bf16 and fp16: 16 bits per value, round to nearest even. Error per value: bf16 |e| <= 2^-8 |x|,
// fp16 |e| <= 2^-11 |x| within its range (|x| > 65504 saturates).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/codec.h"
#include "core/codecs/wire.h"

namespace narrows::core::codecs {
namespace {

// Round to nearest even on the 16 bits dropped; NaN stays NaN.
uint16_t ToBf16(float f) {
  const uint32_t u = Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float FromBf16(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }

// IEEE binary16, round to nearest even; beyond the largest finite value (65504) saturates, since an
// outer gradient that overflowed to infinity would poison the global parameters.
uint16_t ToFp16(float f) {
  const uint32_t u = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7bffu);  // rounds above 65504: saturate
  if (a < 6.103515625e-05f) {                                        // subnormal half: step 2^-24
    const float q = std::nearbyint(a * 16777216.0f);                  // round-to-even (default mode)
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
  }
  const uint32_t au = Bits(a);
  uint32_t exp = ((au >> 23) & 0xffu) - 127 + 15;
  uint32_t mant = au & 0x7fffffu;
  // 13 bits dropped, round to nearest even.
  const uint32_t rest = mant & 0x1fffu;
  mant >>= 13;
  if (rest > 0x1000u || (rest == 0x1000u && (mant & 1u))) {
    ++mant;
    if (mant == 0x400u) {
      mant = 0;
      ++exp;
    }
  }
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7bffu);
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}
float FromFp16(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return FromBits(sign | 0x7f800000u | (mant << 13));
  return FromBits(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

// 16 bits per value through the given conversions.
template <uint16_t (*To)(float), float (*From)(uint16_t)>
class Half final : public CodecKernel {
 public:
  int64_t EncodedBytes(int64_t count) const override { return 2 * count; }
  double BitsPerValue() const override { return 16.0; }
  void Encode(const float* in, int64_t count, uint8_t* out) const override {
    for (int64_t i = 0; i < count; ++i) Put(out, To(in[i]));
  }
  void Decode(const uint8_t* in, int64_t count, float* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = From(Get<uint16_t>(in));
  }
};

}  // namespace

NARROWS_REGISTER_CODECS(half,
                        CodecPlugin{"bf16", "bfloat16: 16 bits, fp32's range",
                                    [](OptionReader&) { return std::make_shared<const Half<ToBf16, FromBf16>>(); }},
                        CodecPlugin{"fp16", "IEEE half: 16 bits, saturating beyond 65504",
                                    [](OptionReader&) { return std::make_shared<const Half<ToFp16, FromFp16>>(); }});

}  // namespace narrows::core::codecs
