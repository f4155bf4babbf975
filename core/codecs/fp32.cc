// fp32: the values as they are (4 bytes each); the plain all-reduce.
#include <cstring>

#include "core/codec.h"

namespace narrows::core::codecs {
namespace {

class Fp32 final : public CodecKernel {
 public:
  bool lossless() const override { return true; }
  int64_t EncodedBytes(int64_t count) const override { return 4 * count; }
  double BitsPerValue() const override { return 32.0; }
  void Encode(const float* in, int64_t count, uint8_t* out) const override {
    std::memcpy(out, in, static_cast<size_t>(count) * 4);
  }
  void Decode(const uint8_t* in, int64_t count, float* out) const override {
    std::memcpy(out, in, static_cast<size_t>(count) * 4);
  }
};

}  // namespace

NARROWS_REGISTER_CODECS(fp32, CodecPlugin{"fp32", "32-bit floats as they are (lossless)",
                                          [](OptionReader&) { return std::make_shared<const Fp32>(); }});

}  // namespace narrows::core::codecs
