#include "deploy/bulk_seal.h"

#include <sodium.h>
#include <zmq.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "deploy/frame.h"
#include "deploy/little_endian.h"

namespace narrows::deploy {
namespace {

constexpr char kHelloContext[] = "narrows bulk plane hello key v1";


// Record i of message seq: the sequence number, then the record's index (little-endian).
std::array<uint8_t, crypto_aead_chacha20poly1305_ietf_NPUBBYTES> Nonce(uint64_t seq, uint64_t i) {
  std::array<uint8_t, crypto_aead_chacha20poly1305_ietf_NPUBBYTES> n{};
  PutLittleEndian<uint64_t>(n.data(), seq);
  PutLittleEndian<uint32_t>(n.data() + 8, static_cast<uint32_t>(i));
  return n;
}

constexpr size_t kHelloPlain = 32 + 4 + 8 + 4 + 8;
static_assert(kSealedHelloBytes == crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + kHelloPlain);
static_assert(kSealTagBytes == crypto_aead_chacha20poly1305_ietf_ABYTES);

}  // namespace

core::Status InitSodium() {
  if (sodium_init() < 0) return core::Status::Internal("libsodium failed to initialise");
  return core::Status::Ok();
}

core::Result<SealKey> HelloKey(const CurveKeys& keys) {
  uint8_t secret[32];
  if (keys.secret_key.size() != 40 || zmq_z85_decode(secret, keys.secret_key.c_str()) == nullptr) {
    return core::Status::InvalidArgument("the cluster secret key is not 40 Z85 characters");
  }
  SealKey k;
  crypto_generichash(k.data(), k.size(), reinterpret_cast<const uint8_t*>(kHelloContext), sizeof kHelloContext - 1,
                     secret, sizeof secret);
  sodium_memzero(secret, sizeof secret);
  return k;
}

SealKey NewPairKey() {
  SealKey k;
  crypto_aead_chacha20poly1305_ietf_keygen(k.data());
  return k;
}

std::vector<uint8_t> SealHello(const SealKey& hello_key, const SealKey& pair_key, const HelloParties& parties) {
  uint8_t plain[kHelloPlain];
  std::memcpy(plain, pair_key.data(), 32);
  PutLittleEndian<uint32_t>(plain + 32, static_cast<uint32_t>(parties.from_rank));
  PutLittleEndian<uint64_t>(plain + 36, parties.from_incarnation);
  PutLittleEndian<uint32_t>(plain + 44, static_cast<uint32_t>(parties.to_rank));
  PutLittleEndian<uint64_t>(plain + 48, parties.to_incarnation);
  std::vector<uint8_t> out(kSealedHelloBytes);
  randombytes_buf(out.data(), crypto_secretbox_NONCEBYTES);
  crypto_secretbox_easy(out.data() + crypto_secretbox_NONCEBYTES, plain, sizeof plain, out.data(), hello_key.data());
  sodium_memzero(plain, sizeof plain);
  return out;
}

core::Result<SealKey> OpenHello(const SealKey& hello_key, const uint8_t* data, size_t size, const HelloParties& expected) {
  if (size != kSealedHelloBytes) {
    return core::Status::InvalidArgument("a sealed hello has " + std::to_string(kSealedHelloBytes) + " bytes, this one " +
                                         std::to_string(size));
  }
  uint8_t plain[kHelloPlain];
  if (crypto_secretbox_open_easy(plain, data + crypto_secretbox_NONCEBYTES, size - crypto_secretbox_NONCEBYTES, data,
                                 hello_key.data()) != 0) {
    return core::Status::InvalidArgument("its hello does not open with the cluster key");
  }
  HelloParties got;
  got.from_rank = static_cast<int32_t>(GetLittleEndian<uint32_t>(plain + 32));
  got.from_incarnation = GetLittleEndian<uint64_t>(plain + 36);
  got.to_rank = static_cast<int32_t>(GetLittleEndian<uint32_t>(plain + 44));
  got.to_incarnation = GetLittleEndian<uint64_t>(plain + 48);
  SealKey k;
  std::memcpy(k.data(), plain, 32);
  sodium_memzero(plain, sizeof plain);
  if (got.from_rank != expected.from_rank || got.from_incarnation != expected.from_incarnation) {
    return core::Status::InvalidArgument("its sealed hello names another sender than its header");
  }
  if (got.to_rank != expected.to_rank || got.to_incarnation != expected.to_incarnation) {
    return core::Status::InvalidArgument("its hello was sealed for another process (a replay)");
  }
  return k;
}

size_t SealRecords(uint64_t bytes) {
  return static_cast<size_t>(std::max<uint64_t>(1, (bytes + kSealRecordBytes - 1) / kSealRecordBytes));
}

void SealPayload(const SealKey& key, uint64_t seq, const uint8_t* header, const void* payload, uint64_t bytes, uint8_t* out) {
  const size_t records = SealRecords(bytes);
  uint8_t* cipher = out + records * kSealTagBytes;
  const auto* plain = static_cast<const uint8_t*>(payload);
  for (size_t i = 0; i < records; ++i) {
    const uint64_t at = i * kSealRecordBytes;
    const uint64_t n = std::min<uint64_t>(kSealRecordBytes, bytes - std::min(bytes, at));
    const auto nonce = Nonce(seq, i);
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(cipher + at, out + i * kSealTagBytes, nullptr, n ? plain + at : nullptr,
                                                       n, header, kFrameHeaderBytes, nullptr, nonce.data(), key.data());
  }
}

bool OpenRecord(const SealKey& key, uint64_t seq, const uint8_t* header, uint64_t i, uint8_t* data, size_t n,
                const uint8_t* tag) {
  const auto nonce = Nonce(seq, i);
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(data, nullptr, data, n, tag, header, kFrameHeaderBytes,
                                                            nonce.data(), key.data()) == 0;
}

}  // namespace narrows::deploy
