// The ZeroMQ transport's bulk plane: into the caller's buffer beside ZeroMQ, frames in sequence
// order and duplicates refused, a failed connection's data left to ZeroMQ, the sealed plane's
// hellos, a frame that arrives in pieces.
#include "deploy/zmq_transport.h"

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "deploy/addresses.h"
#include "deploy/bulk_seal.h"
#include "deploy/frame.h"
#include "tests/deploy/zmq_transport_fixture.h"

namespace narrows::deploy {
namespace {

// The bulk plane between the ranks that have it, ZeroMQ with one that does not: a large message
// whose Recv waits is received into the caller's buffer; messages to and from the rank without
// the plane arrive over ZeroMQ; and what a rank's plane has left to write goes out before it leaves.
TEST(ZmqTransportTest, TheBulkPlaneReceivesIntoTheCallersBufferBesideZeroMq) {
  const int port = deploy::FreeLoopbackPort();
  std::vector<ZmqOptions> opts = {Options(0, 3, port), Options(1, 3, port), Options(2, 3, port)};
  opts[0].bulk_streams = 2;
  opts[1].bulk_streams = 2;
  auto ts = ConnectAll(opts);
  ASSERT_TRUE(ts[0] && ts[1] && ts[2]);
  const size_t count = 512 * 1024;
  std::vector<float> sent(count);
  std::iota(sent.begin(), sent.end(), 0.5f);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 1's Recv waits first
    core::SendLease lease;
    EXPECT_TRUE(ts[0]->SendBorrowed(1, 9, sent.data(), count * 4, lease).ok());
    EXPECT_TRUE(ts[0]->Send(2, 9, sent.data(), 64).ok());
    ts[0]->AwaitLent(lease);
  });
  std::vector<float> got(count, -1.0f);
  ASSERT_TRUE(ts[1]->Recv(0, 9, got.data(), count * 4, 10).ok());
  EXPECT_EQ(got, sent);
  const BulkCounts at1 = ts[1]->bulk_counts();
  EXPECT_EQ(at1.into_receiver, 1);
  EXPECT_EQ(at1.into_own, 0);
  std::vector<float> small(16);
  ASSERT_TRUE(ts[2]->Recv(0, 9, small.data(), 64, 10).ok());
  EXPECT_EQ(small[15], 15.5f);
  ASSERT_TRUE(ts[2]->Send(1, 9, small.data(), 64).ok());
  ASSERT_TRUE(ts[1]->Recv(2, 9, small.data(), 64, 10).ok());
  EXPECT_EQ(ts[2]->bulk_counts().into_own + ts[2]->bulk_counts().into_receiver, 0);
  sender.join();
  // Sent and gone at once: rank 1 still gets the message, and sees rank 0 leave only after it.
  ASSERT_TRUE(ts[0]->Send(1, 10, sent.data(), count * 4).ok());
  ts[0].reset();
  ASSERT_TRUE(ts[1]->Recv(0, 10, got.data(), count * 4, 10).ok());
  EXPECT_EQ(got, sent);
  EXPECT_EQ(ts[1]->Recv(0, 10, got.data(), count * 4, 10).code(), core::StatusCode::kPeerUnavailable);
}

// A raw connection to rank 1's bulk plane in the name of process `from` of rank 0, for rank 1's
// process `to`: a hello, then frames of tag 8 that carry one int32 each.
struct RawBulkConnection {
  int fd;
  uint64_t from, to;
  void Put(const std::vector<uint8_t>& bytes) const {
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  }
  void Hello(uint64_t to_incarnation) const {
    Put(EncodeFrameHeader(FrameType::kBulkHello, 0, 0, nullptr, 0, from, 0, to_incarnation));
  }
  void Frame(uint64_t seq, int32_t value, bool corrupt = false) const {
    std::vector<uint8_t> body(4);
    std::memcpy(body.data(), &value, 4);
    auto bytes = EncodeFrameHeader(FrameType::kBulk, 0, 8, body.data(), body.size(), from, seq, to);
    if (corrupt) body[0] ^= 1;
    bytes.insert(bytes.end(), body.begin(), body.end());
    Put(bytes);
  }
  bool Closed() const {  // whether the receiver closed the connection within 5 s
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c;
    return ::recv(fd, &c, 1, 0) == 0;
  }
};

// Process `inc` of rank 0 (at `sender`'s endpoints) as `receiver` hears of it over its control
// socket: its hello, then its heartbeats until this is destroyed (the control socket is the
// heartbeat thread's alone from then on).
class AnnouncedProcess {
 public:
  AnnouncedProcess(const ZmqTransport& sender, const ZmqTransport& receiver, uint64_t inc)
      : control_(ctx_, zmq::socket_type::push) {
    control_.set(zmq::sockopt::linger, 1000);
    control_.connect(receiver.control_endpoint());
    const std::string hello = nlohmann::json{{"data", sender.data_endpoint()}, {"control", sender.control_endpoint()},
                                             {"incarnation", inc}}.dump();
    Say(FrameType::kHello, hello, inc);
    beat_ = std::thread([this, inc] {
      const std::string body = nlohmann::json{{"incarnation", inc}}.dump();
      while (beating_) {
        Say(FrameType::kHeartbeat, body, inc);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  AnnouncedProcess(const AnnouncedProcess&) = delete;
  AnnouncedProcess& operator=(const AnnouncedProcess&) = delete;
  ~AnnouncedProcess() {
    beating_ = false;
    beat_.join();
  }

 private:
  void Say(FrameType type, const std::string& body, uint64_t inc) {
    control_.send(zmq::buffer(EncodeFrameHeader(type, 0, 0, body.data(), body.size(), inc)), zmq::send_flags::sndmore);
    control_.send(zmq::buffer(body), zmq::send_flags::none);
  }
  zmq::context_t ctx_;
  zmq::socket_t control_;
  std::atomic<bool> beating_{true};
  std::thread beat_;
};

// A new process of rank 0 (its own incarnation) says hello on `c`, then sends frames numbered 0, 2,
// 1. Its hello over ZeroMQ (another connection) has not come: they are held for it, not delivered
// as its predecessor's (a restarted process's data may come before its hello), and no Recv waits
// on them meanwhile.
void FramesWaitForTheHelloOfTheirProcess(ZmqTransport& receiver, const RawBulkConnection& c) {
  c.Hello(c.to);
  c.Frame(0, 100);
  c.Frame(2, 102);
  c.Frame(1, 101);
  int32_t early = 0;
  EXPECT_EQ(receiver.Recv(0, 8, &early, 4, 0.3).code(), core::StatusCode::kTimeout);
}

// A corrupt frame read into the buffer of the Recv waiting for it is dropped, its place in the
// order kept, and the Recv gets the next message.
void ACorruptFrameLeavesItsRecvTheNext(ZmqTransport& receiver, const RawBulkConnection& c) {
  int32_t got = 0;
  std::thread waiting([&] { EXPECT_TRUE(receiver.Recv(0, 8, &got, 4, 5.0).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  c.Frame(3, 103, true);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the Recv has seen the corrupt one go
  c.Frame(4, 104);
  waiting.join();
  EXPECT_EQ(got, 104);
  EXPECT_GE(receiver.bulk_counts().into_receiver, 1);
}

// A duplicate from a process that is not rank 0's current one is refused, not evicted; a
// connection opened to another process of rank 1 is closed, nothing counted.
void ConnectionsOfOtherProcessesAreClosed(ZmqTransport& receiver, RawBulkConnection& c, const std::string& ep) {
  c.from = 0x5eee;
  const int earlier = c.fd;
  c.fd = ConnectRaw(ep);
  ASSERT_GE(c.fd, 0);
  c.Hello(c.to);
  c.Frame(0, 998);
  c.Frame(0, 999);
  EXPECT_TRUE(c.Closed());
  ::close(earlier);
  ::close(c.fd);
  int32_t none = 0;
  EXPECT_EQ(receiver.Recv(0, 8, &none, 4, 0.2).code(), core::StatusCode::kTimeout);
  EXPECT_EQ(receiver.frames_rejected(), 2);
  EXPECT_EQ(receiver.Evicted(0), "");
  c.fd = ConnectRaw(ep);
  ASSERT_GE(c.fd, 0);
  c.Hello(c.to + 1);
  EXPECT_TRUE(c.Closed());
  ::close(c.fd);
  EXPECT_EQ(receiver.frames_rejected(), 2);
}

// In the name of rank 0's current process (0x5eed, announced): a repeat evicts it.
void ARepeatFromTheCurrentProcessEvictsIt(ZmqTransport& receiver, RawBulkConnection& c, const std::string& ep) {
  c.from = 0x5eed;
  c.fd = ConnectRaw(ep);
  ASSERT_GE(c.fd, 0);
  c.Hello(c.to);
  c.Frame(0, 200);
  int32_t got = 0;
  ASSERT_TRUE(receiver.Recv(0, 8, &got, 4, 5.0).ok());
  EXPECT_EQ(got, 200);
  c.Frame(0, 201);
  EXPECT_TRUE(c.Closed());
  ::close(c.fd);
  EXPECT_EQ(receiver.Recv(0, 8, &got, 4, 5.0).code(), core::StatusCode::kPeerUnavailable);
  EXPECT_NE(receiver.Evicted(0).find("sequence number 0 again (a duplicated message)"), std::string::npos)
      << receiver.Evicted(0);
  EXPECT_EQ(receiver.frames_rejected(), 3);
}

// A bulk connection's frames are handed on in their sequence order (sent 0, 2, 1: received 0, 1,
// 2), a corrupt frame is rejected while the frames after it still arrive (into the buffer of a Recv
// that the corrupt one was read into), a repeated sequence number is rejected with its connection
// (and evicts the member if its current process sent it), and a connection opened to another
// process of the receiver (its predecessor on the same port) is closed without a word.
TEST(ZmqTransportTest, BulkFramesGoInSequenceOrderAndDuplicatesAreRefused) {
  auto ts = ConnectPair(1);
  ASSERT_TRUE(ts[0] && ts[1]);
  const std::string ep = ts[1]->bulk_endpoint();
  ASSERT_FALSE(ep.empty());
  const uint64_t to = ts[1]->incarnation();
  // Rank 0's own connection says hello first (a message over it has arrived), so that the one
  // below is the newer process.
  int32_t first = 7;
  ASSERT_TRUE(ts[0]->Send(1, 8, &first, 4).ok());
  ASSERT_TRUE(ts[1]->Recv(0, 8, &first, 4, 5.0).ok());
  RawBulkConnection c{ConnectRaw(ep), 0x5eed, to};
  ASSERT_GE(c.fd, 0);
  FramesWaitForTheHelloOfTheirProcess(*ts[1], c);
  AnnouncedProcess announced(*ts[0], *ts[1], c.from);
  for (int want : {100, 101, 102}) {
    int32_t got = 0;
    ASSERT_TRUE(ts[1]->Recv(0, 8, &got, 4, 5.0).ok()) << want;
    EXPECT_EQ(got, want);
  }
  ACorruptFrameLeavesItsRecvTheNext(*ts[1], c);
  ASSERT_NO_FATAL_FAILURE(ConnectionsOfOtherProcessesAreClosed(*ts[1], c, ep));
  ARepeatFromTheCurrentProcessEvictsIt(*ts[1], c, ep);
}

// A bulk connection that fails while both processes live (here shut down under the sender) loses
// what it carried and nothing after it: the sender sees the failure at its next write and sends that
// peer's data over ZeroMQ from then on. (Before, every later message went into the failed connection
// and was dropped, while heartbeats kept both alive: a receive that waited forever.)
TEST(ZmqTransportTest, AFailedBulkConnectionToALivePeerLeavesItsDataToZeroMq) {
  auto ts = ConnectPair(1);
  ASSERT_TRUE(ts[0] && ts[1]);
  int32_t sent = 1, got = 0;
  ASSERT_TRUE(ts[0]->Send(1, 3, &sent, sizeof sent).ok());
  ASSERT_TRUE(ts[1]->Recv(0, 3, &got, sizeof got, 5.0).ok());
  auto over_plane = [](const ZmqTransport& t) {
    const BulkCounts c = t.bulk_counts();
    return c.into_receiver + c.switched + c.into_own;
  };
  EXPECT_EQ(over_plane(*ts[1]), 1);
  // Rank 0's connection to rank 1's plane (this process holds both ends): shut down.
  const int bulk_port = PortOf(ts[1]->bulk_endpoint());
  int shut = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET) continue;
    if (ntohs(peer.sin_port) != bulk_port) continue;
    ASSERT_EQ(::shutdown(fd, SHUT_RDWR), 0);
    ++shut;
  }
  ASSERT_EQ(shut, 1);
  // What is sent before the sender sees the failure is lost; what is sent after arrives.
  int first = -1;
  for (int i = 0; i < 50 && first < 0; ++i) {
    sent = 100 + i;
    ASSERT_TRUE(ts[0]->Send(1, 100 + i, &sent, sizeof sent).ok());
    if (ts[1]->Recv(0, 100 + i, &got, sizeof got, 0.2).ok()) first = i;
  }
  ASSERT_GE(first, 0) << "nothing arrived after the bulk connection failed";
  EXPECT_EQ(got, 100 + first);
  const int64_t plane_before = over_plane(*ts[1]);
  for (int i = 0; i < 5; ++i) {
    sent = 1000 + i;
    ASSERT_TRUE(ts[0]->Send(1, 7, &sent, sizeof sent).ok());
    ASSERT_TRUE(ts[1]->Recv(0, 7, &got, sizeof got, 5.0).ok()) << i;
    EXPECT_EQ(got, 1000 + i);
  }
  EXPECT_EQ(over_plane(*ts[1]), plane_before);  // over ZeroMQ
  // Neither was taken for dead or evicted; the other direction keeps its plane.
  EXPECT_EQ(ts[1]->Evicted(0), "");
  EXPECT_EQ(ts[0]->Removed(), "");
  const int64_t back_before = over_plane(*ts[0]);
  ASSERT_TRUE(ts[1]->Send(0, 8, &sent, sizeof sent).ok());
  ASSERT_TRUE(ts[0]->Recv(1, 8, &got, sizeof got, 5.0).ok());
  EXPECT_EQ(over_plane(*ts[0]), back_before + 1);
}

// With CURVE the bulk plane is sealed: a connection whose hello is plain, sealed with another
// cluster's key, or sealed for another process of the receiver (a replay) is refused, and the
// run's own data still goes over the plane into the caller's buffer.
TEST(ZmqTransportTest, TheSealedBulkPlaneAdmitsOnlyTheClustersHellos) {
  const int port = deploy::FreeLoopbackPort();
  std::vector<ZmqOptions> opts = {Options(0, 2, port), Options(1, 2, port)};
  const CurveKeys cluster = *GenerateCurveKeys();
  for (auto& o : opts) {
    o.curve = true;
    o.keys = cluster;
    o.bulk_streams = 2;
  }
  auto ts = ConnectAll(opts);
  ASSERT_TRUE(ts[0] && ts[1]);
  const std::string ep = ts[1]->bulk_endpoint();
  ASSERT_FALSE(ep.empty());
  ASSERT_TRUE(InitSodium().ok());
  std::vector<int> fds;
  auto knock = [&](const std::vector<uint8_t>& payload) {
    const int fd = ConnectRaw(ep);
    ASSERT_GE(fd, 0);
    auto bytes = EncodeFrameHeader(FrameType::kBulkHello, 0, 0, payload.data(), payload.size(), 0x5eed, 0,
                                   ts[1]->incarnation());
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    fds.push_back(fd);
  };
  const HelloParties other_process{0, 0x5eed, 1, 12345};  // not rank 1's incarnation
  knock({});                                                                              // plain
  knock(SealHello(*HelloKey(*GenerateCurveKeys()), NewPairKey(), other_process));     // a stranger's key
  knock(SealHello(*HelloKey(cluster), NewPairKey(), other_process));                  // another process's
  for (int i = 0; i < 100 && ts[1]->frames_rejected() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ts[1]->frames_rejected(), 3);
  const size_t count = 600 * 1024;  // over two records
  std::vector<float> sent(count), got(count, -1.0f);
  std::iota(sent.begin(), sent.end(), 0.25f);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_TRUE(ts[0]->Send(1, 5, sent.data(), count * 4).ok());
    EXPECT_TRUE(ts[0]->Send(1, 5, sent.data(), 0).ok());
  });
  ASSERT_TRUE(ts[1]->Recv(0, 5, got.data(), count * 4, 10).ok());
  EXPECT_EQ(got, sent);
  ASSERT_TRUE(ts[1]->Recv(0, 5, got.data(), 0, 10).ok());
  sender.join();
  EXPECT_EQ(ts[1]->bulk_counts().into_receiver + ts[1]->bulk_counts().into_own, 2);
  EXPECT_EQ(ts[1]->frames_rejected(), 3);
  for (int fd : fds) ::close(fd);
}

// A small frame whose bytes arrive in two pieces, cut anywhere (inside the header, between the
// header and a sealed frame's tags, inside them, inside the payload), is read when its last piece
// comes, with nothing sent after it. A cut inside the header once left the frame's last bytes
// unread until the sender's next frame: the kernel was to wake the reader once it held a whole
// header's 52 bytes, and the rest of that frame was fewer (a 24-byte answer after a partition).
TEST(ZmqTransportTest, AFrameThatArrivesInPiecesIsReadWhenItsLastPieceComes) {
  for (const bool sealed : {false, true}) {
    SCOPED_TRACE(sealed ? "sealed" : "plain");
    const int port = deploy::FreeLoopbackPort();
    std::vector<ZmqOptions> opts = {Options(0, 2, port), Options(1, 2, port)};
    const CurveKeys cluster = *GenerateCurveKeys();
    for (auto& o : opts) {
      o.bulk_streams = 1;
      o.curve = sealed;
      if (sealed) o.keys = cluster;
    }
    auto ts = ConnectAll(opts);
    ASSERT_TRUE(ts[0] && ts[1]);
    ASSERT_TRUE(InitSodium().ok());
    // As rank 0's own process (it sends nothing itself), one connection with its hello.
    const int fd = ConnectRaw(ts[1]->bulk_endpoint());
    ASSERT_GE(fd, 0);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const uint64_t from = ts[0]->incarnation(), to = ts[1]->incarnation();
    const SealKey pair = NewPairKey();
    std::vector<uint8_t> hello;
    if (sealed) hello = SealHello(*HelloKey(cluster), pair, HelloParties{0, from, 1, to});
    auto bytes = EncodeFrameHeader(FrameType::kBulkHello, 0, 0, hello.data(), hello.size(), from, 0, to);
    bytes.insert(bytes.end(), hello.begin(), hello.end());
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    const size_t header = kFrameHeaderBytes, tags = sealed ? kSealTagBytes : 0;
    std::vector<size_t> cuts = {1, 30, header - 1, header, header + 2};
    if (sealed) cuts.push_back(header + tags + 2);
    uint64_t seq = 0;
    auto frame = [&](int32_t value) {
      auto f = EncodeFrameHeader(FrameType::kBulk, 0, 9, sealed ? nullptr : &value, sizeof value, from, seq, to);
      std::vector<uint8_t> body(tags + sizeof value);
      if (sealed) {
        SealPayload(pair, seq, f.data(), &value, sizeof value, body.data());
      } else {
        std::memcpy(body.data(), &value, sizeof value);
      }
      f.insert(f.end(), body.begin(), body.end());
      ++seq;
      return f;
    };
    for (size_t cut : cuts) {
      SCOPED_TRACE("cut at byte " + std::to_string(cut));
      // A whole frame, then the first piece of the next, together (so that the reader, woken for the
      // first, reads the piece too), and the rest of it after a while.
      const int32_t lead = 2000 + static_cast<int32_t>(seq), value = 1000 + static_cast<int32_t>(seq);
      auto first = frame(lead), second = frame(value);
      ASSERT_LT(cut, second.size());
      first.insert(first.end(), second.begin(), second.begin() + static_cast<std::ptrdiff_t>(cut));
      ASSERT_EQ(::send(fd, first.data(), first.size(), 0), static_cast<ssize_t>(first.size()));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ASSERT_EQ(::send(fd, second.data() + cut, second.size() - cut, 0), static_cast<ssize_t>(second.size() - cut));
      int32_t got = 0;
      ASSERT_TRUE(ts[1]->Recv(0, 9, &got, sizeof got, 3.0).ok());
      EXPECT_EQ(got, lead);
      ASSERT_TRUE(ts[1]->Recv(0, 9, &got, sizeof got, 3.0).ok());
      EXPECT_EQ(got, value);
    }
    EXPECT_EQ(ts[1]->frames_rejected(), 0);
    ::close(fd);
  }
}

}  // namespace
}  // namespace narrows::deploy
