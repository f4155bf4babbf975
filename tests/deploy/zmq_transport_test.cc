// The ZeroMQ transport beyond the contract suite: bad frames off the network, repeated or reordered
// data frames, a member that floods or sends the wrong size evicted, data of a replaced process
// dropped. The bulk plane, the rendezvous and keys, and crashed peers have files of their own
// (zmq_bulk_plane_test.cc, zmq_rendezvous_test.cc, zmq_crash_test.cc).
#include "deploy/zmq_transport.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/group_guard.h"
#include "deploy/frame.h"
#include "tests/deploy/zmq_transport_fixture.h"

namespace narrows::deploy {
namespace {

TEST(ZmqTransportTest, BadFramesAreRejectedAndTheStreamGoesOn) {
  const int port = deploy::FreeLoopbackPort();
  auto ts = ConnectAll({Options(0, 2, port), Options(1, 2, port)});
  ASSERT_TRUE(ts[0] && ts[1]);
  zmq::context_t ctx;
  zmq::socket_t rogue(ctx, zmq::socket_type::push);
  rogue.set(zmq::sockopt::linger, 1000);
  rogue.connect(ts[1]->data_endpoint());
  const std::vector<uint8_t> payload(64, 7);
  auto good = EncodeFrameHeader(FrameType::kData, 0, 5, payload.data(), payload.size());
  auto send = [&](const std::vector<uint8_t>& header, const std::vector<uint8_t>& body) {
    rogue.send(zmq::buffer(header), zmq::send_flags::sndmore);
    rogue.send(zmq::buffer(body), zmq::send_flags::none);
  };
  auto corrupt = payload;
  corrupt[10] ^= 1;
  send(good, corrupt);                                        // checksum
  send(std::vector<uint8_t>(good.begin(), good.begin() + 20), payload);  // truncated header
  auto version = good;
  version[4] = 9;
  send(version, payload);                                     // wrong version (and checksum)
  auto oversized = EncodeFrameHeader(FrameType::kData, 0, 5, payload.data(), payload.size());
  send(oversized, std::vector<uint8_t>(32, 7));              // length disagrees with the payload
  rogue.send(zmq::buffer(std::string("garbage")), zmq::send_flags::none);  // one part only
  auto foreign = EncodeFrameHeader(FrameType::kData, 9, 5, payload.data(), payload.size());
  send(foreign, payload);                                     // no such rank
  // The real peer's message still arrives, and only it.
  ASSERT_TRUE(ts[0]->Send(1, 5, payload.data(), payload.size()).ok());
  std::vector<uint8_t> got(64);
  ASSERT_TRUE(ts[1]->Recv(0, 5, got.data(), got.size(), 5.0).ok());
  EXPECT_EQ(got, payload);
  for (int i = 0; i < 100 && ts[1]->frames_rejected() < 6; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ts[1]->frames_rejected(), 6);
  EXPECT_FALSE(ts[1]->Recv(0, 5, got.data(), got.size(), 0.2).ok());  // nothing else was queued
  rogue.close();
}

// Data frames are numbered per sender process and addressed to a receiver process. One whose
// number came already (repeated, or reordered behind a later one) is rejected and dropped, and if
// the member's current process sent it, that process is evicted; a gap is logged and the frame
// kept (a process not yet announced by a hello has its frames held for the hello); each process
// claimed has its own count, so alternating claims cannot reset it; a frame sent to another process
// of the receiver (queued for its predecessor) is dropped without a word.
TEST(ZmqTransportTest, ARepeatedOrReorderedDataFrameIsRejectedAndEvictsItsSender) {
  const int port = deploy::FreeLoopbackPort();
  std::vector<std::string> logged;
  std::mutex log_mu;
  auto one = Options(1, 2, port);
  one.log = [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(log_mu);
    logged.push_back(m);
  };
  auto ts = ConnectAll({Options(0, 2, port), one});
  ASSERT_TRUE(ts[0] && ts[1]);
  zmq::context_t ctx;
  zmq::socket_t rogue(ctx, zmq::socket_type::push);
  rogue.set(zmq::sockopt::linger, 1000);
  rogue.connect(ts[1]->data_endpoint());
  const uint64_t to = ts[1]->incarnation();
  auto send = [&](uint64_t inc, uint64_t seq, int32_t value, uint64_t to_inc) {
    const auto header = EncodeFrameHeader(FrameType::kData, 0, 6, &value, sizeof value, inc, seq, to_inc);
    rogue.send(zmq::buffer(header), zmq::send_flags::sndmore);
    rogue.send(zmq::buffer(&value, sizeof value), zmq::send_flags::none);
  };
  send(0xa, 0, 100, to);
  send(0xa, 1, 101, to);
  send(0xa, 1, 901, to);      // repeated
  send(0xb, 0, 200, to);      // another process claimed: its own count
  send(0xa, 0, 900, to);      // reordered: behind 1
  send(0xa, 2, 902, to + 1);  // for another process of rank 1: void, and not counted
  send(0xa, 3, 103, to);      // a gap: kept, logged
  // 0xa and 0xb are not rank 0's process and no hello made them so: what they sent in order is
  // held for such a hello (a restarted process's data may come before it), none of it delivered.
  int32_t none = 0;
  EXPECT_EQ(ts[1]->Recv(0, 6, &none, sizeof none, 1.0).code(), core::StatusCode::kTimeout);
  EXPECT_EQ(ts[1]->frames_rejected(), 2);
  EXPECT_EQ(ts[1]->Evicted(0), "");  // neither 0xa nor 0xb is rank 0's process: only refused
  {
    std::lock_guard<std::mutex> lock(log_mu);
    std::string all;
    for (const auto& m : logged) all += m + "\n";
    EXPECT_NE(all.find("data frame number 1 after 1 (a repeated or reordered message)"), std::string::npos) << all;
    EXPECT_NE(all.find("data frame number 0 after 1"), std::string::npos) << all;
    EXPECT_NE(all.find("messages 2 to 2 never arrived"), std::string::npos) << all;
  }
  // In the name of rank 0's own process: its message arrives, a repeat evicts it, here and (with
  // the heartbeats) at rank 0 itself, and nothing more is taken from it.
  const uint64_t zero = ts[0]->incarnation();
  send(zero, 0, 300, to);
  int32_t got = 0;
  ASSERT_TRUE(ts[1]->Recv(0, 6, &got, sizeof got, 5.0).ok());
  EXPECT_EQ(got, 300);
  send(zero, 0, 301, to);
  send(zero, 1, 302, to);
  EXPECT_EQ(ts[1]->Recv(0, 6, &got, sizeof got, 5.0).code(), core::StatusCode::kPeerUnavailable);
  EXPECT_NE(ts[1]->Evicted(0).find("by rank 1: data frame number 0 after 0 (a repeated or reordered message)"),
            std::string::npos) << ts[1]->Evicted(0);
  EXPECT_EQ(ts[1]->frames_rejected(), 3);
  for (int i = 0; i < 100 && ts[0]->Removed().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_NE(ts[0]->Removed().find("a repeated or reordered message"), std::string::npos) << ts[0]->Removed();
  rogue.close();
}

// A member that floods messages no receive takes (a tag or step nobody reads) is evicted once more
// than max_queued_bytes of them wait at a receiver; what receives take no longer counts. Over
// ZeroMQ and over the bulk plane, where messages held back behind a skipped number count too.
TEST(ZmqTransportTest, AMemberThatFloodsUnreadMessagesIsEvicted) {
  for (int streams : {0, 1}) {
    SCOPED_TRACE(streams ? "bulk plane" : "ZeroMQ");
    const int port = deploy::FreeLoopbackPort();
    std::vector<ZmqOptions> opts = {Options(0, 2, port), Options(1, 2, port)};
    for (auto& o : opts) o.bulk_streams = streams;
    opts[1].max_queued_bytes = 1 << 20;
    auto ts = ConnectAll(opts);
    ASSERT_TRUE(ts[0] && ts[1]);
    const std::vector<uint8_t> piece(64 << 10, 3);
    // 15 pieces (960 KiB) under a tag nobody reads: under the bound.
    for (int i = 0; i < 15; ++i) ASSERT_TRUE(ts[0]->Send(1, 77, piece.data(), piece.size()).ok());
    std::vector<uint8_t> got(piece.size());
    ASSERT_TRUE(ts[0]->Send(1, 5, piece.data(), piece.size()).ok());
    ASSERT_TRUE(ts[1]->Recv(0, 5, got.data(), got.size(), 5.0).ok());  // sent after them: they are all here
    EXPECT_EQ(ts[1]->Evicted(0), "");
    // Ten of them are read after all: what is read no longer counts, so ten more stay under it.
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(ts[1]->Recv(0, 77, got.data(), got.size(), 5.0).ok());
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(ts[0]->Send(1, 77, piece.data(), piece.size()).ok());
    ASSERT_TRUE(ts[0]->Send(1, 5, piece.data(), piece.size()).ok());
    ASSERT_TRUE(ts[1]->Recv(0, 5, got.data(), got.size(), 5.0).ok());
    EXPECT_EQ(ts[1]->Evicted(0), "");
    // Two more pass 1 MiB: evicted, here and at the member itself.
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(ts[0]->Send(1, 77, piece.data(), piece.size()).ok());
    for (int i = 0; i < 250 && ts[1]->Evicted(0).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_NE(ts[1]->Evicted(0).find("of its messages wait unread, more than the 1048576 a member may queue"), std::string::npos)
        << ts[1]->Evicted(0);
    for (int i = 0; i < 100 && ts[0]->Removed().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_NE(ts[0]->Removed().find("wait unread"), std::string::npos) << ts[0]->Removed();
  }
  // Over the bulk plane a member can also skip a sequence number: what it sends after it is held
  // back, unread, and counts the same.
  const int port = deploy::FreeLoopbackPort();
  std::vector<ZmqOptions> opts = {Options(0, 2, port), Options(1, 2, port)};
  opts[0].bulk_streams = opts[1].bulk_streams = 1;
  opts[1].max_queued_bytes = 1 << 20;
  auto ts = ConnectAll(opts);
  ASSERT_TRUE(ts[0] && ts[1]);
  const int fd = ConnectRaw(ts[1]->bulk_endpoint());
  ASSERT_GE(fd, 0);
  auto put = [&](const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  };
  const uint64_t from = ts[0]->incarnation(), to = ts[1]->incarnation();
  put(EncodeFrameHeader(FrameType::kBulkHello, 0, 0, nullptr, 0, from, 0, to));
  const std::vector<uint8_t> piece(64 << 10, 5);
  for (uint64_t seq = 1; seq <= 15; ++seq) {  // number 0 never comes: 960 KiB held
    auto bytes = EncodeFrameHeader(FrameType::kBulk, 0, 9, piece.data(), piece.size(), from, seq, to);
    bytes.insert(bytes.end(), piece.begin(), piece.end());
    put(bytes);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(ts[1]->Evicted(0), "");
  for (uint64_t seq = 16; seq <= 17; ++seq) {
    auto bytes = EncodeFrameHeader(FrameType::kBulk, 0, 9, piece.data(), piece.size(), from, seq, to);
    bytes.insert(bytes.end(), piece.begin(), piece.end());
    put(bytes);
  }
  for (int i = 0; i < 250 && ts[1]->Evicted(0).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_NE(ts[1]->Evicted(0).find("1114112 bytes of its messages wait unread"), std::string::npos) << ts[1]->Evicted(0);
  ::close(fd);
}

// Data that a replaced process left in flight is void: once a hello announced rank 0's new
// incarnation, frames of the old one are dropped and the new one's arrive.
TEST(ZmqTransportTest, DataOfAReplacedIncarnationIsDropped) {
  const int port = deploy::FreeLoopbackPort();
  auto ts = ConnectAll({Options(0, 2, port), Options(1, 2, port)});
  ASSERT_TRUE(ts[0] && ts[1]);
  zmq::context_t ctx;
  zmq::socket_t control(ctx, zmq::socket_type::push), data(ctx, zmq::socket_type::push);
  control.set(zmq::sockopt::linger, 1000);
  data.set(zmq::sockopt::linger, 1000);
  control.connect(ts[1]->control_endpoint());
  data.connect(ts[1]->data_endpoint());
  auto send = [](zmq::socket_t& s, const std::vector<uint8_t>& header, const void* body, size_t bytes) {
    s.send(zmq::buffer(header), zmq::send_flags::sndmore);
    s.send(zmq::buffer(body, bytes), zmq::send_flags::none);
  };
  const uint64_t successor = 0x5eed;
  const std::string hello = nlohmann::json{{"data", ts[0]->data_endpoint()}, {"control", ts[0]->control_endpoint()},
                                           {"incarnation", successor}}.dump();
  send(control, EncodeFrameHeader(FrameType::kHello, 0, 0, hello.data(), hello.size(), successor), hello.data(),
       hello.size());
  for (int i = 0; i < 100 && ts[1]->Generation(0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(ts[1]->Generation(0), 1) << "the hello of a new incarnation was not taken";
  const std::vector<uint8_t> payload(64, 7);
  ASSERT_TRUE(ts[0]->Send(1, 5, payload.data(), payload.size()).ok());  // the replaced process's
  send(data, EncodeFrameHeader(FrameType::kData, 0, 6, payload.data(), payload.size(), successor, 0, ts[1]->incarnation()),
       payload.data(), payload.size());
  std::vector<uint8_t> got(64);
  ASSERT_TRUE(ts[1]->Recv(0, 6, got.data(), got.size(), 5.0).ok());
  EXPECT_EQ(got, payload);
  EXPECT_FALSE(ts[1]->Recv(0, 5, got.data(), got.size(), 0.3).ok());
  control.close();
  data.close();
}

// A member whose message a collective cannot use (here: 5 bytes where 8 are expected) is broken or
// hostile: the receiving member evicts it, every other member drops it on its word (with the
// heartbeats), what it sent is dropped, and it hears why it was evicted.
TEST(ZmqTransportTest, AMemberThatSendsTheWrongSizeIsEvictedEverywhere) {
  const int port = deploy::FreeLoopbackPort();
  auto ts = ConnectAll({Options(0, 3, port), Options(1, 3, port), Options(2, 3, port)});
  ASSERT_TRUE(ts[0] && ts[1] && ts[2]);
  const uint64_t eight = 0x0102030405060708;
  ASSERT_TRUE(ts[2]->Send(1, 9, &eight, sizeof eight).ok());  // well-formed, queued at rank 1
  ASSERT_TRUE(ts[2]->Send(0, 7, "wrong", 5).ok());
  core::GroupGuard guard(*ts[0], {0, 1, 2}, 10.0);
  uint64_t got = 0;
  const core::Status s = guard.Recv(2, 7, &got, sizeof got);
  EXPECT_EQ(s.code(), core::StatusCode::kPeerUnavailable) << s.message();
  EXPECT_NE(s.message().find("rank 2 was evicted: message from rank 2 has 5 bytes, expected 8"), std::string::npos)
      << s.message();
  EXPECT_EQ(got, 0u) << "the wrong-size message reached the buffer";
  EXPECT_EQ(ts[0]->Members(), (std::vector<int>{0, 1}));
  EXPECT_NE(ts[0]->Evicted(2).find("by rank 0: message from rank 2 has 5 bytes"), std::string::npos) << ts[0]->Evicted(2);
  // Rank 1 drops it too, and with it what rank 2 had sent.
  for (int i = 0; i < 250 && ts[1]->Members().size() == 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ts[1]->Members(), (std::vector<int>{0, 1}));
  EXPECT_NE(ts[1]->Evicted(2).find("by rank 0"), std::string::npos) << ts[1]->Evicted(2);
  const core::Status queued = ts[1]->Recv(2, 9, &got, sizeof got, 1.0);
  EXPECT_EQ(queued.code(), core::StatusCode::kPeerUnavailable) << queued.message();
  EXPECT_NE(queued.message().find("rank 2 was evicted"), std::string::npos) << queued.message();
  // Rank 2 hears that it was evicted, and why, and stops.
  core::Status told;
  for (int i = 0; i < 250; ++i) {
    told = ts[2]->Recv(0, 8, &got, sizeof got, 0.02);
    if (told.code() == core::StatusCode::kPeerUnavailable) break;
  }
  EXPECT_EQ(told.code(), core::StatusCode::kPeerUnavailable) << told.message();
  EXPECT_NE(told.message().find("this rank was evicted by rank 0: message from rank 2 has 5 bytes"), std::string::npos)
      << told.message();
  // The members that evicted it go on between themselves.
  ASSERT_TRUE(ts[1]->Send(0, 10, &eight, sizeof eight).ok());
  ASSERT_TRUE(ts[0]->Recv(1, 10, &got, sizeof got, 5.0).ok());
  EXPECT_EQ(got, eight);
}

}  // namespace
}  // namespace narrows::deploy
