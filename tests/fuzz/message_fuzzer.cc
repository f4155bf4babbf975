// libFuzzer target for what a peer's outer-gradient message becomes: any bytes, of the size the
// codec expects, decoded by every codec as a receiver of an encoded all-reduce decodes them, added
// to a worker's own values and encoded again as the ring forwards a partial sum (so NaN, infinity
// and huge values from a hostile peer pass through each quantiser), then decoded once more. Must
// never crash, read or write out of bounds, or meet undefined behaviour (float-to-integer overflow
// in a quantiser included); the values may be garbage or non-finite (the outer step refuses those).
// Input: byte 0 picks the codec, bytes 1-2 the value count (1 to 4096), the rest the payload (cut
// or zero-padded to the codec's size). Built by tools/fuzz with clang (-fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/codec.h"

namespace {

const std::vector<narrows::core::Codec>& Codecs() {
  static const std::vector<narrows::core::Codec> codecs = [] {
    std::vector<narrows::core::Codec> out;
    for (const char* spec : {"fp32", "bf16", "fp16", "int8", "int4", "e3m0", "sign", "{format: int8, block: 7}",
                             "{format: topk, topk: 0.1}", "{format: topk, topk: 0.05, chunk: 64}"}) {
      auto parsed = narrows::core::ParseCodec(spec);
      if (!parsed.ok()) std::abort();
      out.emplace_back(*parsed);
    }
    return out;
  }();
  return codecs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const auto& codecs = Codecs();
  const narrows::core::Codec& codec = codecs[data[0] % codecs.size()];
  const int64_t count = 1 + ((int64_t{data[1]} << 8) | data[2]) % 4096;
  const auto bytes = static_cast<size_t>(codec.EncodedBytes(count));
  std::vector<uint8_t> wire(bytes, 0);  // exactly the size a receiver accepts
  std::memcpy(wire.data(), data + 3, std::min(bytes, size - 3));
  std::vector<float> theirs(static_cast<size_t>(count));  // exactly count: ASan sees one more
  codec.Decode(wire.data(), count, theirs.data());
  // A worker's own values (finite, from the input) plus the peer's, forwarded encoded.
  std::vector<float> sum(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    sum[static_cast<size_t>(i)] = theirs[static_cast<size_t>(i)] + static_cast<float>(data[static_cast<size_t>(i) % size] % 17) * 0.25f;
  }
  std::vector<uint8_t> forwarded(bytes);
  codec.Encode(sum.data(), count, forwarded.data());
  codec.Decode(forwarded.data(), count, theirs.data());
  return 0;
}
