// The wire frame of the ZeroMQ transport: every message between processes is one frame,
// a fixed header followed by its payload. The header carries a magic number, the protocol version,
// the frame type, the sender's rank, the tag, the payload length, the sender's incarnation (its
// process: a receiver drops data that a replaced process left in flight), the message's sequence
// number (data: from this sender process to that receiver process, from 0, so that a receiver
// rejects a repeated or reordered message), the receiver's incarnation (data: the process it was
// sent to, so that what was queued for a replaced receiver is dropped by its successor, even on
// the same port) and a CRC-32 (zlib) over the header and the payload. A receiver decodes the header first (rejecting truncated, foreign,
// wrong-version, unknown-type and oversized frames before reading or allocating the payload),
// then checks the checksum over header and payload. Little-endian on the wire.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace narrows::deploy {

constexpr uint32_t kFrameMagic = 0x5357524e;  // "NRWS" read little-endian
constexpr uint16_t kProtocolVersion = 4;
constexpr size_t kFrameHeaderBytes = 52;

enum class FrameType : uint16_t {
  kData = 1,       // a Transport message: tag and payload
  kHeartbeat = 2,  // membership: "I am alive"
  kHello = 3,      // a process announces its rank on connecting
  kBye = 4,        // a process leaves cleanly
  // The bulk data plane (zmq_node.h): raw TCP connections beside ZeroMQ. A connection opens with
  // one kBulkHello (tag: the connection's index, no payload); then kBulk frames, each with its
  // sequence number to that receiver (over all k connections).
  // In a run with CURVE both are sealed (bulk_seal.h): the hello carries a sealed pair key.
  kBulkHello = 5,
  kBulk = 6,
};

struct FrameHeader {
  FrameType type = FrameType::kData;
  int32_t src = 0;
  int32_t tag = 0;
  uint64_t length = 0;  // payload bytes
  uint64_t incarnation = 0;  // the sending process's
  uint64_t seq = 0;     // data and bulk frames: the message's number from this process to that one
  uint64_t to_incarnation = 0;  // data and bulk frames: the receiving process's
  uint32_t crc = 0;     // CRC-32 of the header's first 48 bytes, then the payload
};

// The header for `payload` (of `length` bytes), checksum included. A null `payload` with a length:
// the checksum covers the header alone (a sealed bulk frame, whose payload its AEAD tags cover).
std::vector<uint8_t> EncodeFrameHeader(FrameType type, int32_t src, int32_t tag, const void* payload, uint64_t length,
                                       uint64_t incarnation = 0, uint64_t seq = 0, uint64_t to_incarnation = 0);

// Decodes and validates a header; `max_payload` bounds the length a receiver will accept.
// InvalidArgument naming what is wrong: truncated, bad magic, version, type, or oversized.
core::Result<FrameHeader> DecodeFrameHeader(const uint8_t* data, size_t size, uint64_t max_payload);

// Checks the checksum over the encoded header bytes and the payload (InvalidArgument if corrupt).
core::Status VerifyFrame(const uint8_t* header, const FrameHeader& decoded, const void* payload, uint64_t length);

// The same checksum taken as a payload arrives: begun over the encoded header, extended by each
// piece while it is still in the cache, compared with the header's once the payload is whole.
class FrameChecksum {
 public:
  explicit FrameChecksum(const uint8_t* header = nullptr);
  void Add(const void* bytes, uint64_t n);
  bool Matches(const FrameHeader& decoded) const { return crc_ == decoded.crc; }

 private:
  uint32_t crc_ = 0;
};

}  // namespace narrows::deploy
