// Helpers shared by the built-in codecs (core/codecs/): byte order is the machine's (every
// worker of a run shares one architecture). Internal to core/codecs/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace narrows::core::codecs {

inline int64_t Blocks(int64_t count, int64_t block) { return (count + block - 1) / block; }

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The largest magnitude among in[begin, end) (a block's scale).
inline float MaxMagnitude(const float* in, int64_t begin, int64_t end) {
  float amax = 0.0f;
  for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(in[i]));
  return amax;
}

// Value i of an array of 4-bit values, two a byte, the even one in the low nibble.
inline void PutNibble(uint8_t* values, int64_t i, uint8_t nib) {
  values[i / 2] = (i % 2 == 0) ? nib : static_cast<uint8_t>(values[i / 2] | (nib << 4));
}
inline int GetNibble(const uint8_t* values, int64_t i) { return (values[i / 2] >> (4 * (i % 2))) & 0xf; }

// The low `bits` bits of `value` at bit `at` of a bit string, least significant bit first (the
// string's bytes zeroed beforehand); and read back.
inline void PutBits(uint8_t* out, int64_t at, uint32_t value, int bits) {
  for (int b = 0; b < bits; ++b, ++at) {
    if ((value >> b) & 1u) out[at / 8] = static_cast<uint8_t>(out[at / 8] | (1u << (at % 8)));
  }
}
inline uint32_t GetBits(const uint8_t* in, int64_t at, int bits) {
  uint32_t value = 0;
  for (int b = 0; b < bits; ++b, ++at) value |= static_cast<uint32_t>((in[at / 8] >> (at % 8)) & 1u) << b;
  return value;
}

template <typename T>
inline void Put(uint8_t*& out, T v) {
  std::memcpy(out, &v, sizeof(T));
  out += sizeof(T);
}
template <typename T>
inline T Get(const uint8_t*& in) {
  T v;
  std::memcpy(&v, in, sizeof(T));
  in += sizeof(T);
  return v;
}

}  // namespace narrows::core::codecs
