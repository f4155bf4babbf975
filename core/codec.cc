#include "core/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.h"

namespace narrows::core {
namespace {

int64_t Blocks(int64_t count, int64_t block) { return (count + block - 1) / block; }

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

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

template <typename T>
void Put(uint8_t*& out, T v) {
  std::memcpy(out, &v, sizeof(T));
  out += sizeof(T);
}
template <typename T>
T Get(const uint8_t*& in) {
  T v;
  std::memcpy(&v, in, sizeof(T));
  in += sizeof(T);
  return v;
}

// Symmetric integer quantisation with one fp32 scale per block: q = round(x / s), s = max|x| / qmax.
void EncodeInt(const float* in, int64_t count, int64_t block, int qmax, uint8_t* out) {
  const bool nibbles = qmax == 7;
  uint8_t* scales = out;
  uint8_t* values = out + 4 * Blocks(count, block);
  for (int64_t b = 0; b * block < count; ++b) {
    const int64_t begin = b * block, end = std::min(count, begin + block);
    float amax = 0.0f;
    for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(in[i]));
    const float s = amax / static_cast<float>(qmax);
    Put(scales, s);
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      const int q = std::clamp(static_cast<int>(std::lrint(in[i] * inv)), -qmax, qmax);
      if (!nibbles) {
        values[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      } else {
        const uint8_t nib = static_cast<uint8_t>(q & 0xf);
        values[i / 2] = (i % 2 == 0) ? nib : static_cast<uint8_t>(values[i / 2] | (nib << 4));
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
        const int nib = (values[i / 2] >> (4 * (i % 2))) & 0xf;
        q = nib >= 8 ? nib - 16 : nib;
      }
      out[i] = s * static_cast<float>(q);
    }
  }
}

}  // namespace

std::string CodecName(CodecFormat format) {
  switch (format) {
    case CodecFormat::kFp32: return "fp32";
    case CodecFormat::kBf16: return "bf16";
    case CodecFormat::kFp16: return "fp16";
    case CodecFormat::kInt8: return "int8";
    case CodecFormat::kInt4: return "int4";
    case CodecFormat::kTopK: return "topk";
    case CodecFormat::kSign: return "sign";
  }
  return "?";
}

double CodecBitsPerValue(const CodecSpec& spec) {
  const double scale_bits = 32.0 / static_cast<double>(spec.block);
  switch (spec.format) {
    case CodecFormat::kFp32: return 32.0;
    case CodecFormat::kBf16:
    case CodecFormat::kFp16: return 16.0;
    case CodecFormat::kInt8: return 8.0 + scale_bits;
    case CodecFormat::kInt4: return 4.0 + scale_bits;
    case CodecFormat::kTopK: return 64.0 * spec.topk_fraction;  // an index and a value per kept value
    case CodecFormat::kSign: return 1.0 + scale_bits;
  }
  return 32.0;
}

int64_t Codec::TopK(int64_t count) const {
  if (count == 0) return 0;
  const auto k = static_cast<int64_t>(std::ceil(spec_.topk_fraction * static_cast<double>(count) - 1e-9));
  return std::clamp<int64_t>(k, 1, count);
}

int64_t Codec::EncodedBytes(int64_t count) const {
  const int64_t scales = 4 * Blocks(count, spec_.block);
  switch (spec_.format) {
    case CodecFormat::kFp32: return 4 * count;
    case CodecFormat::kBf16:
    case CodecFormat::kFp16: return 2 * count;
    case CodecFormat::kInt8: return count + scales;
    case CodecFormat::kInt4: return (count + 1) / 2 + scales;
    case CodecFormat::kTopK: return 8 * TopK(count);
    case CodecFormat::kSign: return (count + 7) / 8 + scales;
  }
  return 4 * count;
}

void Codec::Encode(const float* in, int64_t count, uint8_t* out) const {
  switch (spec_.format) {
    case CodecFormat::kFp32:
      std::memcpy(out, in, static_cast<size_t>(count) * 4);
      return;
    case CodecFormat::kBf16:
      for (int64_t i = 0; i < count; ++i) Put(out, ToBf16(in[i]));
      return;
    case CodecFormat::kFp16:
      for (int64_t i = 0; i < count; ++i) Put(out, ToFp16(in[i]));
      return;
    case CodecFormat::kInt8: EncodeInt(in, count, spec_.block, 127, out); return;
    case CodecFormat::kInt4: EncodeInt(in, count, spec_.block, 7, out); return;
    case CodecFormat::kTopK: {
      // The k largest magnitudes, ties to the lower index; sent as (uint32 index, fp32 value), by index.
      const int64_t k = TopK(count);
      NARROWS_CHECK(count <= int64_t{UINT32_MAX}) << "top-k indices are 32-bit";
      std::vector<uint32_t> idx(static_cast<size_t>(count));
      std::iota(idx.begin(), idx.end(), 0u);
      auto larger = [&](uint32_t a, uint32_t b) {
        const float fa = std::fabs(in[a]), fb = std::fabs(in[b]);
        return fa > fb || (fa == fb && a < b);
      };
      std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), larger);
      std::sort(idx.begin(), idx.begin() + k);
      for (int64_t j = 0; j < k; ++j) Put(out, idx[static_cast<size_t>(j)]);
      for (int64_t j = 0; j < k; ++j) Put(out, in[idx[static_cast<size_t>(j)]]);
      return;
    }
    case CodecFormat::kSign: {
      uint8_t* scales = out;
      uint8_t* bits = out + 4 * Blocks(count, spec_.block);
      std::memset(bits, 0, static_cast<size_t>((count + 7) / 8));
      for (int64_t b = 0; b * spec_.block < count; ++b) {
        const int64_t begin = b * spec_.block, end = std::min(count, begin + spec_.block);
        double sum = 0.0;
        for (int64_t i = begin; i < end; ++i) sum += std::fabs(in[i]);
        Put(scales, static_cast<float>(sum / static_cast<double>(end - begin)));
        for (int64_t i = begin; i < end; ++i) {
          if (in[i] < 0) bits[i / 8] = static_cast<uint8_t>(bits[i / 8] | (1u << (i % 8)));
        }
      }
      return;
    }
  }
}

void Codec::Decode(const uint8_t* in, int64_t count, float* out) const {
  switch (spec_.format) {
    case CodecFormat::kFp32:
      std::memcpy(out, in, static_cast<size_t>(count) * 4);
      return;
    case CodecFormat::kBf16:
      for (int64_t i = 0; i < count; ++i) out[i] = FromBf16(Get<uint16_t>(in));
      return;
    case CodecFormat::kFp16:
      for (int64_t i = 0; i < count; ++i) out[i] = FromFp16(Get<uint16_t>(in));
      return;
    case CodecFormat::kInt8: DecodeInt(in, count, spec_.block, 127, out); return;
    case CodecFormat::kInt4: DecodeInt(in, count, spec_.block, 7, out); return;
    case CodecFormat::kTopK: {
      const int64_t k = TopK(count);
      std::fill(out, out + count, 0.0f);
      const uint8_t* values = in + 4 * k;
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t i = Get<uint32_t>(in);
        const float v = Get<float>(values);
        if (i < count) out[i] = v;  // a corrupt index is dropped, never written out of bounds
      }
      return;
    }
    case CodecFormat::kSign: {
      const uint8_t* scales = in;
      const uint8_t* bits = in + 4 * Blocks(count, spec_.block);
      for (int64_t b = 0; b * spec_.block < count; ++b) {
        const int64_t begin = b * spec_.block, end = std::min(count, begin + spec_.block);
        const float s = Get<float>(scales);
        for (int64_t i = begin; i < end; ++i) out[i] = ((bits[i / 8] >> (i % 8)) & 1u) ? -s : s;
      }
      return;
    }
  }
}

}  // namespace narrows::core
