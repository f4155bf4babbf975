#include "core/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace narrows::core {
namespace {

std::vector<float> Gradient(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  v[7] = 0.05f;  // an outlier in the first block
  v[static_cast<size_t>(n - 1)] = -0.02f;
  return v;
}

std::vector<float> RoundTrip(const Codec& c, const std::vector<float>& v) {
  std::vector<uint8_t> wire(static_cast<size_t>(c.EncodedBytes(static_cast<int64_t>(v.size()))));
  c.Encode(v.data(), static_cast<int64_t>(v.size()), wire.data());
  std::vector<float> out(v.size(), 123.0f);
  c.Decode(wire.data(), static_cast<int64_t>(v.size()), out.data());
  return out;
}

Codec Make(CodecFormat f, int64_t block = 64, double topk = 0.1) {
  CodecSpec s;
  s.format = f;
  s.block = block;
  s.topk_fraction = topk;
  return Codec(s);
}

TEST(CodecTest, BytesOnTheWireFollowTheFormula) {
  const int64_t n = 1001;  // not a multiple of the block, odd
  EXPECT_EQ(Make(CodecFormat::kFp32).EncodedBytes(n), 4 * n);
  EXPECT_EQ(Make(CodecFormat::kBf16).EncodedBytes(n), 2 * n);
  EXPECT_EQ(Make(CodecFormat::kFp16).EncodedBytes(n), 2 * n);
  EXPECT_EQ(Make(CodecFormat::kInt8, 64).EncodedBytes(n), n + 4 * 16);        // 16 blocks of 64
  EXPECT_EQ(Make(CodecFormat::kInt4, 64).EncodedBytes(n), 501 + 4 * 16);
  EXPECT_EQ(Make(CodecFormat::kSign, 64).EncodedBytes(n), 126 + 4 * 16);
  EXPECT_EQ(Make(CodecFormat::kTopK, 64, 0.1).EncodedBytes(n), 8 * 101);       // ceil(100.1)
  EXPECT_DOUBLE_EQ(CodecBitsPerValue(Make(CodecFormat::kInt4, 128).spec()), 4.25);
}

TEST(CodecTest, RoundTripErrorWithinEachFormatsBound) {
  const int64_t n = 1001, block = 64;
  const auto v = Gradient(n, 1);
  for (CodecFormat f : {CodecFormat::kFp32, CodecFormat::kBf16, CodecFormat::kFp16, CodecFormat::kInt8,
                        CodecFormat::kInt4}) {
    const auto d = RoundTrip(Make(f, block), v);
    for (int64_t i = 0; i < n; ++i) {
      const float x = v[static_cast<size_t>(i)];
      float amax = 0.0f;
      for (int64_t j = i / block * block; j < std::min(n, (i / block + 1) * block); ++j) {
        amax = std::max(amax, std::fabs(v[static_cast<size_t>(j)]));
      }
      double bound = 0.0;
      switch (f) {
        case CodecFormat::kBf16: bound = std::ldexp(std::fabs(x), -8); break;
        case CodecFormat::kFp16: bound = std::max<double>(std::ldexp(std::fabs(x), -11), std::ldexp(1.0, -25)); break;
        case CodecFormat::kInt8: bound = amax / 127 / 2 * (1 + 1e-6); break;
        case CodecFormat::kInt4: bound = amax / 7 / 2 * (1 + 1e-6); break;
        default: break;
      }
      ASSERT_LE(std::fabs(d[static_cast<size_t>(i)] - x), bound) << CodecName(f) << " value " << i << " = " << x;
    }
  }
}

TEST(CodecTest, Fp16SaturatesInsteadOfOverflowing) {
  const auto d = RoundTrip(Make(CodecFormat::kFp16), {1e6f, -7e4f, 65504.0f, 1.0f / 3});
  EXPECT_EQ(d[0], 65504.0f);
  EXPECT_EQ(d[1], -65504.0f);
  EXPECT_EQ(d[2], 65504.0f);
  EXPECT_NEAR(d[3], 1.0 / 3, 1.0 / 3 / 2048);
}

TEST(CodecTest, TopKKeepsExactlyTheKLargestMagnitudes) {
  const int64_t n = 1000;
  const auto v = Gradient(n, 2);
  const Codec c = Make(CodecFormat::kTopK, 64, 0.05);
  ASSERT_EQ(c.TopK(n), 50);
  const auto d = RoundTrip(c, v);
  std::vector<float> mags;
  for (float x : v) mags.push_back(std::fabs(x));
  std::sort(mags.rbegin(), mags.rend());
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float x = v[static_cast<size_t>(i)], y = d[static_cast<size_t>(i)];
    if (y != 0.0f) {
      ++kept;
      EXPECT_EQ(y, x);                      // kept values are exact
      EXPECT_GE(std::fabs(x), mags[49]);    // and among the 50 largest
    } else {
      EXPECT_LE(std::fabs(x), mags[49]);
    }
  }
  EXPECT_EQ(kept, 50);
}

TEST(CodecTest, SignKeepsSignsAndTheBlocksMeanMagnitude) {
  const std::vector<float> v = {0.5f, -1.5f, 2.0f, -0.0f, 1.0f};
  const auto d = RoundTrip(Make(CodecFormat::kSign, 4), v);
  EXPECT_FLOAT_EQ(d[0], 1.0f);  // mean |x| of the first block of 4 is 1.0
  EXPECT_FLOAT_EQ(d[1], -1.0f);
  EXPECT_FLOAT_EQ(d[2], 1.0f);
  EXPECT_FLOAT_EQ(d[4], 1.0f);  // a block of one
}

TEST(CodecTest, CorruptTopKIndicesAreDroppedNotWritten) {
  const Codec c = Make(CodecFormat::kTopK, 64, 0.5);
  std::vector<uint8_t> wire(static_cast<size_t>(c.EncodedBytes(4)), 0xff);  // indices 0xffffffff
  std::vector<float> out(4, 1.0f);
  c.Decode(wire.data(), 4, out.data());
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace narrows::core
