// The wire frame: round trip, and every kind of bad frame rejected with a reason, never a crash;
// the bulk plane's sealed frames and hellos (bulk_seal.h).
#include "deploy/frame.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "deploy/bulk_seal.h"

namespace narrows::deploy {
namespace {

std::vector<uint8_t> Payload(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 31 + 7);
  return p;
}

std::string Error(const core::Status& s) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
  return s.message();
}

TEST(FrameTest, RoundTrip) {
  const auto payload = Payload(1000);
  const auto h = EncodeFrameHeader(FrameType::kData, 3, -7, payload.data(), payload.size(), 0x0123456789abcdefull, 41,
                                   0xfedcba9876543210ull);
  ASSERT_EQ(h.size(), kFrameHeaderBytes);
  auto d = DecodeFrameHeader(h.data(), h.size(), 1 << 20);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->type, FrameType::kData);
  EXPECT_EQ(d->src, 3);
  EXPECT_EQ(d->tag, -7);
  EXPECT_EQ(d->length, 1000u);
  EXPECT_EQ(d->incarnation, 0x0123456789abcdefull);
  EXPECT_EQ(d->seq, 41u);
  EXPECT_EQ(d->to_incarnation, 0xfedcba9876543210ull);
  EXPECT_TRUE(VerifyFrame(h.data(), *d, payload.data(), payload.size()).ok());
  const auto empty = EncodeFrameHeader(FrameType::kHeartbeat, 0, 0, nullptr, 0);
  auto e = DecodeFrameHeader(empty.data(), empty.size(), 0);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(VerifyFrame(empty.data(), *e, nullptr, 0).ok());
}

TEST(FrameTest, BadHeadersAreRejectedWithAReason) {
  const auto payload = Payload(64);
  const auto good = EncodeFrameHeader(FrameType::kData, 1, 2, payload.data(), payload.size());
  EXPECT_NE(Error(DecodeFrameHeader(good.data(), 27, 1 << 20).status()).find("truncated"), std::string::npos);
  auto bad = good;
  bad[0] ^= 1;
  EXPECT_NE(Error(DecodeFrameHeader(bad.data(), bad.size(), 1 << 20).status()).find("magic"), std::string::npos);
  bad = good;
  bad[4] = 9;
  EXPECT_NE(Error(DecodeFrameHeader(bad.data(), bad.size(), 1 << 20).status()).find("protocol version 9"),
            std::string::npos);
  bad = good;
  bad[6] = 99;
  EXPECT_NE(Error(DecodeFrameHeader(bad.data(), bad.size(), 1 << 20).status()).find("unknown frame type 99"),
            std::string::npos);
  EXPECT_NE(Error(DecodeFrameHeader(good.data(), good.size(), 63).status()).find("oversized"), std::string::npos);
}

TEST(FrameTest, CorruptionAnywhereIsCaughtByTheChecksum) {
  auto payload = Payload(256);
  const auto h = EncodeFrameHeader(FrameType::kData, 1, 2, payload.data(), payload.size());
  auto d = DecodeFrameHeader(h.data(), h.size(), 1 << 20);
  ASSERT_TRUE(d.ok());
  payload[100] ^= 0x10;
  EXPECT_NE(Error(VerifyFrame(h.data(), *d, payload.data(), payload.size())).find("checksum"), std::string::npos);
  payload[100] ^= 0x10;
  auto tagged = h;
  tagged[12] ^= 1;  // the tag: the header still decodes, the checksum does not match
  auto t = DecodeFrameHeader(tagged.data(), tagged.size(), 1 << 20);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(VerifyFrame(tagged.data(), *t, payload.data(), payload.size()).ok());
  auto reborn = h;
  reborn[24] ^= 1;  // the incarnation is under the checksum too
  auto r = DecodeFrameHeader(reborn.data(), reborn.size(), 1 << 20);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(VerifyFrame(reborn.data(), *r, payload.data(), payload.size()).ok());
  auto renumbered = h;
  renumbered[32] ^= 1;  // and the sequence number
  auto n = DecodeFrameHeader(renumbered.data(), renumbered.size(), 1 << 20);
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(VerifyFrame(renumbered.data(), *n, payload.data(), payload.size()).ok());
  EXPECT_NE(Error(VerifyFrame(h.data(), *d, payload.data(), 255)).find("header says 256"), std::string::npos);
}

// The bulk plane checksums a payload piece by piece as it arrives: in any split it agrees with the
// whole-payload check, and one flipped bit anywhere is caught.
TEST(FrameTest, AChecksumTakenPieceByPieceAgreesWithTheWholeOne) {
  const auto payload = Payload(100000);
  const auto h = EncodeFrameHeader(FrameType::kBulk, 1, 9, payload.data(), payload.size(), 5, 2, 6);
  auto d = DecodeFrameHeader(h.data(), h.size(), 1 << 20);
  ASSERT_TRUE(d.ok());
  std::mt19937 rng(3);
  for (int split = 0; split < 5; ++split) {
    FrameChecksum c(h.data());
    for (size_t at = 0; at < payload.size();) {
      const size_t n = std::min<size_t>(payload.size() - at, 1 + rng() % 40000);
      c.Add(payload.data() + at, n);
      at += n;
    }
    EXPECT_TRUE(c.Matches(*d)) << "split " << split;
  }
  auto bad = payload;
  bad[77777] ^= 0x10;
  FrameChecksum c(h.data());
  c.Add(bad.data(), 50000);
  c.Add(bad.data() + 50000, bad.size() - 50000);
  EXPECT_FALSE(c.Matches(*d));
  FrameChecksum empty(h.data());  // a header alone: the checksum of a frame with no payload differs
  EXPECT_FALSE(empty.Matches(*d));
}

TEST(FrameTest, RandomBytesNeverPassAndNeverCrash) {
  // A bounded sweep of random and bit-flipped frames (tests/fuzz/frame_fuzzer.cc goes further).
  std::mt19937 rng(1);
  const auto payload = Payload(128);
  const auto good = EncodeFrameHeader(FrameType::kData, 5, 6, payload.data(), payload.size());
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> f = good;
    std::vector<uint8_t> p = payload;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t bit = rng() % ((f.size() + p.size()) * 8);
      auto& byte = bit / 8 < f.size() ? f[bit / 8] : p[bit / 8 - f.size()];
      byte ^= static_cast<uint8_t>(1u << (bit % 8));
    }
    const size_t size = rng() % 8 == 0 ? rng() % kFrameHeaderBytes : f.size();
    auto d = DecodeFrameHeader(f.data(), size, 1 << 20);
    const bool changed = f != good || p != payload || size != f.size();  // a bit flipped twice is no change
    if (changed && d.ok() && VerifyFrame(f.data(), *d, p.data(), std::min<uint64_t>(d->length, p.size())).ok()) {
      ++accepted;
    }
  }
  // The IEEE CRC-32 has Hamming distance 5 at this frame length (1,376 bits): every error of up to
  // 4 bits is caught, wherever it falls.
  EXPECT_EQ(accepted, 0);
}

// A sealed payload opens record by record in place, only with its key, sequence number, header
// and record order; its bytes on the wire are not the plaintext.
TEST(BulkSealTest, SealedPayloadsOpenRecordByRecordOnlyAsSent) {
  ASSERT_TRUE(InitSodium().ok());
  const SealKey key = NewPairKey();
  for (const size_t n : {size_t{0}, size_t{1}, kSealRecordBytes - 1, kSealRecordBytes, 2 * kSealRecordBytes + 5}) {
    SCOPED_TRACE(n);
    const auto plain = Payload(n);
    const auto header = EncodeFrameHeader(FrameType::kBulk, 1, 9, nullptr, n, 0x5eed, 7);
    auto d = DecodeFrameHeader(header.data(), header.size(), uint64_t{1} << 30);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->length, n);
    EXPECT_TRUE(VerifyFrame(header.data(), *d, nullptr, n).ok());  // the checksum covers the header alone
    const size_t records = SealRecords(n);
    EXPECT_EQ(records, std::max<size_t>(1, (n + kSealRecordBytes - 1) / kSealRecordBytes));
    std::vector<uint8_t> wire(records * kSealTagBytes + n);
    SealPayload(key, 7, header.data(), plain.data(), n, wire.data());
    uint8_t* cipher = wire.data() + records * kSealTagBytes;
    size_t same = 0;
    for (size_t i = 0; i < n; ++i) same += cipher[i] == plain[i];
    EXPECT_LE(same, n / 64 + 1);  // a byte matches by chance 1 time in 256
    auto attempt = [&](uint64_t seq, const std::vector<uint8_t>& h, size_t i, size_t from) {
      const size_t at = from * kSealRecordBytes, len = std::min(kSealRecordBytes, n - std::min(n, at));
      std::vector<uint8_t> copy(cipher + at, cipher + at + len);
      return OpenRecord(key, seq, h.data(), i, copy.data(), len, wire.data() + from * kSealTagBytes);
    };
    const auto other_tag = EncodeFrameHeader(FrameType::kBulk, 1, 10, nullptr, n, 0x5eed, 7);
    EXPECT_FALSE(attempt(8, header, 0, 0));          // another sequence number
    EXPECT_FALSE(attempt(7, other_tag, 0, 0));       // another header
    if (records > 1) {
      EXPECT_FALSE(attempt(7, header, 1, 0));  // a record in another place
    }
    for (size_t i = 0; i < records; ++i) {
      const size_t at = i * kSealRecordBytes, len = std::min(kSealRecordBytes, n - std::min(n, at));
      ASSERT_TRUE(OpenRecord(key, 7, header.data(), i, cipher + at, len, wire.data() + i * kSealTagBytes)) << i;
    }
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), cipher));
    if (n > kSealRecordBytes) {  // one changed byte fails its own record only
      SealPayload(key, 7, header.data(), plain.data(), n, wire.data());
      cipher[kSealRecordBytes + 3] ^= 0x40;
      EXPECT_TRUE(OpenRecord(key, 7, header.data(), 0, cipher, kSealRecordBytes, wire.data()));
      EXPECT_FALSE(OpenRecord(key, 7, header.data(), 1, cipher + kSealRecordBytes, kSealRecordBytes, wire.data() + kSealTagBytes));
    }
  }
}

// A hello opens only with the cluster's key, and only for the sender and receiver it names.
TEST(BulkSealTest, HellosOpenOnlyWithTheClusterKeyForTheirReceiver) {
  ASSERT_TRUE(InitSodium().ok());
  auto cluster = GenerateCurveKeys(), stranger = GenerateCurveKeys();
  ASSERT_TRUE(cluster.ok() && stranger.ok());
  const SealKey mine = *HelloKey(*cluster), theirs = *HelloKey(*stranger);
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(mine, *HelloKey(*cluster));  // every process of the run derives the same
  const SealKey pair_key = NewPairKey();
  const HelloParties parties{0, 11, 1, 22};
  const auto hello = SealHello(mine, pair_key, parties);
  ASSERT_EQ(hello.size(), kSealedHelloBytes);
  auto opened = OpenHello(mine, hello.data(), hello.size(), parties);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(*opened, pair_key);
  EXPECT_NE(SealHello(mine, pair_key, parties), hello);  // a fresh nonce each time
  auto refused = [&](const SealKey& k, std::vector<uint8_t> bytes, HelloParties expect) {
    auto r = OpenHello(k, bytes.data(), bytes.size(), expect);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(refused(theirs, hello, parties).find("does not open with the cluster key"), std::string::npos);
  EXPECT_NE(refused(mine, hello, {0, 11, 1, 23}).find("sealed for another process (a replay)"), std::string::npos);
  EXPECT_NE(refused(mine, hello, {2, 11, 1, 22}).find("names another sender"), std::string::npos);
  auto flipped = hello;
  flipped[50] ^= 1;
  EXPECT_NE(refused(mine, flipped, parties).find("does not open"), std::string::npos);
  EXPECT_NE(refused(mine, std::vector<uint8_t>(hello.begin(), hello.end() - 1), parties).find("this one 95"),
            std::string::npos);
  CurveKeys bad = *cluster;
  bad.secret_key.pop_back();
  EXPECT_FALSE(HelloKey(bad).ok());
}

}  // namespace
}  // namespace narrows::deploy
