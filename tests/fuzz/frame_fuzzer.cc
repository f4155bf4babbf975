// libFuzzer target for the wire frame decoder: any bytes off the network, split as a receiver
// splits them (52-byte header part, the rest as the payload part), must be decoded or rejected
// with a reason — never crash, never read past the input, never accept a frame whose checksum or
// length disagrees. Built by tools/fuzz with clang (-fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "deploy/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using narrows::deploy::kFrameHeaderBytes;
  const size_t header_size = size < kFrameHeaderBytes ? size : kFrameHeaderBytes;
  auto header = narrows::deploy::DecodeFrameHeader(data, header_size, 1 << 20);
  if (!header.ok()) {
    if (header.status().message().empty()) std::abort();  // every rejection names a reason
    return 0;
  }
  const uint8_t* payload = data + kFrameHeaderBytes;
  const size_t payload_size = size - kFrameHeaderBytes;
  if (header->length > (1u << 20)) std::abort();  // the bound was enforced
  if (header->length != payload_size) return 0;    // the receiver checks this before verifying
  const auto verified = narrows::deploy::VerifyFrame(data, *header, payload, payload_size);
  if (verified.ok()) {
    // An accepted frame re-encodes to the same header: nothing outside the checksum was accepted.
    const auto again = narrows::deploy::EncodeFrameHeader(header->type, header->src, header->tag, payload, payload_size,
                                                        header->incarnation, header->seq, header->to_incarnation);
    for (size_t i = 0; i < kFrameHeaderBytes; ++i) {
      if (again[i] != data[i]) std::abort();
    }
  }
  return 0;
}
