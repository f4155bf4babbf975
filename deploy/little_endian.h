// Little-endian integers in byte buffers: the wire frame (frame.cc) and the sealed hello
// (bulk_seal.cc). Internal to deploy/.
#pragma once

#include <cstddef>
#include <cstdint>

namespace narrows::deploy {

template <typename T>
void PutLittleEndian(uint8_t* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i));
}

template <typename T>
T GetLittleEndian(const uint8_t* in) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace narrows::deploy
