// topk: the k = ceil(topk * count) values of largest magnitude (ties to the lower index), sent as
// (uint32 index, fp32 value) pairs by index; exact on those, 0 elsewhere.
// With `chunk: C` (SparseLoCo's chunked top-k) the buffer is cut into chunks of C values and each
// keeps its own k = ceil(topk * its length); a chunk's indices are coded in ceil(log2 C) bits each,
// packed (low bits first, the chunk's bits padded to a byte), then its values: fp32, or with
// `value_bits: b` (2, 4 or 8) quantised as SparseLoCo's reference code does: shifted by their mean,
// binned into 2^b bins of range_sigmas·σ / 2^b around it, each bin decoded as the mean of the
// values in it (the shift and the 2^b bin means travel as fp32, then the codes, packed). The bin
// means keep each chunk's sum of kept values, to float rounding.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/codec.h"
#include "core/codecs/wire.h"

namespace narrows::core::codecs {
namespace {

// The indices of the k largest magnitudes of in[0, count), ascending (ties to the lower index).
std::vector<uint32_t> Largest(const float* in, int64_t count, int64_t k) {
  NARROWS_CHECK(count <= int64_t{UINT32_MAX}) << "top-k indices are 32-bit";
  std::vector<uint32_t> idx(static_cast<size_t>(count));
  std::iota(idx.begin(), idx.end(), 0u);
  auto larger = [&](uint32_t a, uint32_t b) {
    const float fa = std::fabs(in[a]), fb = std::fabs(in[b]);
    return fa > fb || (fa == fb && a < b);
  };
  std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), larger);
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

// SparseLoCo's statistical quantiser over one chunk's kept values.
struct BinQuantiser {
  int bits;
  double range_sigmas;
  int64_t Bins() const { return int64_t{1} << bits; }
  int64_t Bytes(int64_t k) const { return 4 * (1 + Bins()) + (k * bits + 7) / 8; }

  void Encode(const std::vector<float>& v, uint8_t* out) const {
    const auto k = static_cast<int64_t>(v.size());
    double mean = 0.0;
    for (float x : v) mean += x;
    mean /= static_cast<double>(std::max<int64_t>(1, k));
    double var = 0.0;
    for (float x : v) var += (x - mean) * (x - mean);
    const double sd = k > 1 ? std::sqrt(var / static_cast<double>(k - 1)) : 0.0;
    double scale = range_sigmas * sd / static_cast<double>(Bins());
    if (!(scale > 0) || !std::isfinite(scale)) scale = 1.0;
    std::vector<int> codes(static_cast<size_t>(k));
    std::vector<double> sums(static_cast<size_t>(Bins()), 0.0), counts(static_cast<size_t>(Bins()), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const double centred = v[static_cast<size_t>(j)] - mean;
      const double q = std::nearbyint(centred / scale + static_cast<double>(Bins() / 2));
      const int code = static_cast<int>(std::clamp(q, 0.0, static_cast<double>(Bins() - 1)));
      codes[static_cast<size_t>(j)] = code;
      sums[static_cast<size_t>(code)] += centred;
      counts[static_cast<size_t>(code)] += 1.0;
    }
    Put(out, static_cast<float>(mean));
    for (int64_t b = 0; b < Bins(); ++b) {
      const auto i = static_cast<size_t>(b);
      Put(out, static_cast<float>(counts[i] > 0 ? sums[i] / counts[i] : 0.0));
    }
    const int64_t code_bytes = (k * bits + 7) / 8;
    std::fill(out, out + code_bytes, uint8_t{0});
    for (int64_t j = 0; j < k; ++j) PutBits(out, j * bits, static_cast<uint32_t>(codes[static_cast<size_t>(j)]), bits);
  }
  void Decode(const uint8_t* in, int64_t k, std::vector<float>* v) const {
    const float shift = Get<float>(in);
    std::vector<float> means(static_cast<size_t>(Bins()));
    for (auto& m : means) m = Get<float>(in);
    v->resize(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) (*v)[static_cast<size_t>(j)] = means[GetBits(in, j * bits, bits)] + shift;
  }
};

class TopK final : public CodecKernel {
 public:
  TopK(double fraction, int64_t chunk, int value_bits, double range_sigmas)
      : fraction_(fraction), chunk_(chunk), quantiser_{value_bits, range_sigmas} {
    while (chunk_ > 0 && (int64_t{1} << index_bits_) < chunk_) ++index_bits_;
  }
  int64_t EncodedBytes(int64_t count) const override {
    if (chunk_ == 0) return 8 * Kept(count);
    int64_t bytes = 0;
    for (int64_t begin = 0; begin < count; begin += chunk_) bytes += ChunkBytes(Kept(std::min(chunk_, count - begin)));
    return bytes;
  }
  // An index and a value per kept value (the quantiser's shift and bin means aside).
  double BitsPerValue() const override {
    return fraction_ * (chunk_ == 0 ? 64.0 : index_bits_ + (Quantised() ? quantiser_.bits : 32.0));
  }
  bool sparse() const override { return true; }
  void Encode(const float* in, int64_t count, uint8_t* out) const override {
    if (chunk_ == 0) {
      const int64_t k = Kept(count);
      if (k == 0) return;
      const std::vector<uint32_t> idx = Largest(in, count, k);
      for (uint32_t i : idx) Put(out, i);
      for (uint32_t i : idx) Put(out, in[i]);
      return;
    }
    for (int64_t begin = 0; begin < count; begin += chunk_) {
      const int64_t len = std::min(chunk_, count - begin), k = Kept(len);
      const std::vector<uint32_t> idx = Largest(in + begin, len, k);
      const int64_t index_bytes = (k * index_bits_ + 7) / 8;
      std::fill(out, out + index_bytes, uint8_t{0});
      for (int64_t j = 0; j < k; ++j) PutBits(out, j * index_bits_, idx[static_cast<size_t>(j)], index_bits_);
      out += index_bytes;
      if (Quantised()) {
        std::vector<float> kept;
        for (uint32_t i : idx) kept.push_back(in[begin + i]);
        quantiser_.Encode(kept, out);
        out += quantiser_.Bytes(k);
      } else {
        for (uint32_t i : idx) Put(out, in[begin + i]);
      }
    }
  }
  void Decode(const uint8_t* in, int64_t count, float* out) const override {
    std::fill(out, out + count, 0.0f);
    if (chunk_ == 0) {
      const int64_t k = Kept(count);
      const uint8_t* values = in + 4 * k;
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t i = Get<uint32_t>(in);
        const float v = Get<float>(values);
        if (i < count) out[i] = v;  // a corrupt index is dropped, never written out of bounds
      }
      return;
    }
    for (int64_t begin = 0; begin < count; begin += chunk_) {
      const int64_t len = std::min(chunk_, count - begin), k = Kept(len);
      const uint8_t* indices = in;
      const uint8_t* values = in + (k * index_bits_ + 7) / 8;
      std::vector<float> kept;
      if (Quantised()) quantiser_.Decode(values, k, &kept);
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t i = GetBits(indices, j * index_bits_, index_bits_);
        const float v = Quantised() ? kept[static_cast<size_t>(j)] : Get<float>(values);
        if (i < len) out[begin + i] = v;  // a corrupt index is dropped
      }
      in += ChunkBytes(k);
    }
  }

 private:
  bool Quantised() const { return quantiser_.bits < 32; }
  int64_t ChunkBytes(int64_t k) const { return (k * index_bits_ + 7) / 8 + (Quantised() ? quantiser_.Bytes(k) : 4 * k); }
  int64_t Kept(int64_t count) const {
    if (count == 0) return 0;
    const auto k = static_cast<int64_t>(std::ceil(fraction_ * static_cast<double>(count) - 1e-9));
    return std::clamp<int64_t>(k, 1, count);
  }
  double fraction_;
  int64_t chunk_;       // 0: one chunk, 32-bit indices
  int index_bits_ = 0;  // chunked: ceil(log2 chunk)
  BinQuantiser quantiser_;  // bits 32: fp32 values
};

const KeyBlock kTopkKeys("a codec: topk", "The largest magnitudes as index and value; chunked, SparseLoCo's top-k.");
const NumberKey kFraction(kTopkKeys, "topk", 0.1, 0.0, 1.0, Doc("the share of values sent (of each chunk, when chunked)"),
                          Bound::kExclusive);
const IntKey kChunk(kTopkKeys, "chunk", 0, 0, int64_t{1} << 31,
                    Doc("values per chunk, indices in ceil(log2 chunk) bits; 0: one chunk, 32-bit indices", "values"));
const IntKey kValueBits(kTopkKeys, "value_bits", 32, 2, 32, Doc("bits per value: 2, 4 or 8 (chunked only), or 32 (fp32)"));
const NumberKey kRangeSigmas(kTopkKeys, "range_sigmas", 6.0, 0.0, 100.0,
                             Doc("quantised values: the range, in standard deviations of the chunk's values"), Bound::kExclusive);

}  // namespace

NARROWS_REGISTER_CODECS(topk, CodecPlugin{"topk", "the `topk` share (default 0.1) of largest magnitudes, as index + value; "
                                          "per `chunk` values with compact indices if given",
                                          [](OptionReader& r) -> std::shared_ptr<const CodecKernel> {
                                            const double fraction = r.Double(kFraction);
                                            const int64_t chunk = r.Int(kChunk);
                                            const auto bits = static_cast<int>(r.Int(kValueBits));
                                            const double sigmas = r.Double(kRangeSigmas);
                                            if (bits != 2 && bits != 4 && bits != 8 && bits != 32) {
                                              r.ErrorAt("value_bits", "expected 2, 4, 8 or 32");
                                            } else if (bits != 32 && chunk == 0) {
                                              r.ErrorAt("value_bits", "quantised values need chunk: (SparseLoCo's chunked top-k)");
                                            }
                                            return std::make_shared<const TopK>(fraction, chunk, bits, sigmas);
                                          }});

}  // namespace narrows::core::codecs
