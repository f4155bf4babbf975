// topk: the k = ceil(topk * count) values of largest magnitude (ties to the lower index), sent as
// (uint32 index, fp32 value) pairs by index; exact on those, 0 elsewhere.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/codec.h"
#include "core/codecs/wire.h"

namespace narrows::core::codecs {
namespace {

class TopK final : public CodecKernel {
 public:
  explicit TopK(double fraction) : fraction_(fraction) {}
  int64_t EncodedBytes(int64_t count) const override { return 8 * Kept(count); }
  double BitsPerValue() const override { return 64.0 * fraction_; }  // an index and a value per kept value
  bool sparse() const override { return true; }
  void Encode(const float* in, int64_t count, uint8_t* out) const override {
    const int64_t k = Kept(count);
    if (k == 0) return;
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
  }
  void Decode(const uint8_t* in, int64_t count, float* out) const override {
    const int64_t k = Kept(count);
    std::fill(out, out + count, 0.0f);
    const uint8_t* values = in + 4 * k;
    for (int64_t j = 0; j < k; ++j) {
      const uint32_t i = Get<uint32_t>(in);
      const float v = Get<float>(values);
      if (i < count) out[i] = v;  // a corrupt index is dropped, never written out of bounds
    }
  }

 private:
  int64_t Kept(int64_t count) const {
    if (count == 0) return 0;
    const auto k = static_cast<int64_t>(std::ceil(fraction_ * static_cast<double>(count) - 1e-9));
    return std::clamp<int64_t>(k, 1, count);
  }
  double fraction_;
};

}  // namespace

NARROWS_REGISTER_CODECS(topk, CodecPlugin{"topk", "the `topk` share (default 0.1) of largest magnitudes, as index + value",
                                          [](OptionReader& r) {
                                            return std::make_shared<const TopK>(
                                                r.Double("topk", 0.1, 0.0, 1.0, Bound::kExclusive));
                                          }});

}  // namespace narrows::core::codecs
