// Helpers shared by the built-in codecs (core/codecs/): byte order is the machine's (every
// worker of a run shares one architecture). Internal to core/codecs/.
#pragma once

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
