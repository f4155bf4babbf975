// sign: one bit per value and one fp32 scale per `block` values (default 128): s·sign(x), s the
// block's mean magnitude.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/codec.h"
#include "core/codecs/wire.h"

namespace narrows::core::codecs {
namespace {

class Sign final : public CodecKernel {
 public:
  explicit Sign(int64_t block) : block_(block) {}
  int64_t EncodedBytes(int64_t count) const override { return (count + 7) / 8 + 4 * Blocks(count, block_); }
  double BitsPerValue() const override { return 1.0 + 32.0 / static_cast<double>(block_); }
  void Encode(const float* in, int64_t count, uint8_t* out) const override {
    uint8_t* scales = out;
    uint8_t* bits = out + 4 * Blocks(count, block_);
    std::memset(bits, 0, static_cast<size_t>((count + 7) / 8));
    for (int64_t b = 0; b * block_ < count; ++b) {
      const int64_t begin = b * block_, end = std::min(count, begin + block_);
      double sum = 0.0;
      for (int64_t i = begin; i < end; ++i) sum += std::fabs(in[i]);
      Put(scales, static_cast<float>(sum / static_cast<double>(end - begin)));
      for (int64_t i = begin; i < end; ++i) {
        if (in[i] < 0) bits[i / 8] = static_cast<uint8_t>(bits[i / 8] | (1u << (i % 8)));
      }
    }
  }
  void Decode(const uint8_t* in, int64_t count, float* out) const override {
    const uint8_t* scales = in;
    const uint8_t* bits = in + 4 * Blocks(count, block_);
    for (int64_t b = 0; b * block_ < count; ++b) {
      const int64_t begin = b * block_, end = std::min(count, begin + block_);
      const float s = Get<float>(scales);
      for (int64_t i = begin; i < end; ++i) out[i] = ((bits[i / 8] >> (i % 8)) & 1u) ? -s : s;
    }
  }

 private:
  int64_t block_;
};

const KeyBlock kSignKeys("a codec: sign", "One bit per value, and the block's mean magnitude.");
const IntKey kBlock(kSignKeys, "block", 128, 1, 1 << 24, Doc("values per magnitude", "values"));

}  // namespace

NARROWS_REGISTER_CODECS(sign, CodecPlugin{"sign", "1 bit per value and the block's mean magnitude per `block` values",
                                          [](OptionReader& r) {
                                            return std::make_shared<const Sign>(r.Int(kBlock));
                                          }});

}  // namespace narrows::core::codecs
