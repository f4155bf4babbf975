// Encryption of the bulk data plane (bulk_plane.cc) in a run with CURVE: libsodium's
// ChaCha20-Poly1305 (the IETF construction, 96-bit nonces).
//
// Keys. Every process of the run holds the cluster's CURVE key pair (curve_keys.h). A connection's
// hello is sealed (crypto_secretbox: XSalsa20-Poly1305, random nonce) under a key derived from the
// cluster secret key (BLAKE2b, keyed), so only a holder of the key file can open one or make one;
// it carries a fresh random pair key for that sender process and that receiver process, and
// names both (rank and incarnation), so it cannot be replayed to another process or by another.
// The sender draws a new pair key whenever it opens connections to a new process of the
// receiver, and numbers its messages to it from 0: (pair key, sequence number) never repeats.
//
// Frames. A sealed data frame is the plane's header (its checksum over the header alone), then a
// Poly1305 tag for each record of the payload, then the payload encrypted. A record is 1 MiB of the
// payload (the last one shorter; an empty payload is one empty record); record i of message `seq`
// has the nonce (seq, i) and authenticates the frame's header as well, so a receiver decrypts each
// record in place as soon as its bytes are in, and a changed header, payload, order or sequence
// number fails authentication.
//
// Why ChaCha20-Poly1305 rather than AES-256-GCM: it needs no CPU instructions that one machine of a
// cluster may lack (libsodium's AES-GCM needs AES-NI and PCLMUL on both ends, which would need a
// negotiation), at 1.6 GB/s against AES-GCM's 2.4 GB/s on one core of this host.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "deploy/curve_keys.h"

namespace narrows::deploy {

using SealKey = std::array<uint8_t, 32>;

constexpr size_t kSealTagBytes = 16;
constexpr size_t kSealRecordBytes = size_t{1} << 20;
// A sealed hello: nonce (24), MAC (16), pair key (32), from rank (4) and incarnation (8), to
// rank (4) and incarnation (8).
constexpr size_t kSealedHelloBytes = 24 + 16 + 32 + 4 + 8 + 4 + 8;

// Initialises libsodium (once per process; safe to call again).
core::Status InitSodium();
// The key that seals hellos, derived from the cluster's secret key.
core::Result<SealKey> HelloKey(const CurveKeys& keys);
// A fresh random pair key.
SealKey NewPairKey();

// Who a hello is from and to.
struct HelloParties {
  int32_t from_rank = 0;
  uint64_t from_incarnation = 0;
  int32_t to_rank = 0;
  uint64_t to_incarnation = 0;
};
// kSealedHelloBytes bytes carrying `pair_key` from and to `parties`.
std::vector<uint8_t> SealHello(const SealKey& hello_key, const SealKey& pair_key, const HelloParties& parties);
// The pair key of a sealed hello, if it opens under `hello_key` and names `expected`'s parties;
// InvalidArgument saying which check failed otherwise.
core::Result<SealKey> OpenHello(const SealKey& hello_key, const uint8_t* data, size_t size, const HelloParties& expected);

// Records of a payload of `bytes` (at least 1).
size_t SealRecords(uint64_t bytes);
// Writes the tags (16 bytes per record), then the encrypted payload, to `out` (SealRecords(bytes)
// * kSealTagBytes + bytes bytes). `header`: the frame's kFrameHeaderBytes.
void SealPayload(const SealKey& key, uint64_t seq, const uint8_t* header, const void* payload, uint64_t bytes, uint8_t* out);
// Decrypts record `i` of message `seq` (its `n` bytes at `data`) in place against its tag; false
// (the bytes left as they were) if it does not authenticate.
bool OpenRecord(const SealKey& key, uint64_t seq, const uint8_t* header, uint64_t i, uint8_t* data, size_t n,
                const uint8_t* tag);

}  // namespace narrows::deploy
