// The ZeroMQ transport beyond the contract suite: bad frames off the network, CURVE keys, a peer
// killed with SIGKILL, a restarted peer rejoining, the rendezvous timing out.
#include "deploy/zmq_transport.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>
#include <set>
#include <thread>

#include "core/group_guard.h"
#include "deploy/addresses.h"
#include "deploy/bulk_seal.h"
#include "deploy/frame.h"

namespace narrows::deploy {
namespace {


ZmqOptions Options(int rank, int world, int port) {
  ZmqOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master = "127.0.0.1:" + std::to_string(port);
  o.bind_host = "127.0.0.1";
  o.heartbeat_s = 0.05;
  o.timeout_s = 0.5;
  o.connect_timeout_s = 10;
  o.log = [](const std::string&) {};
  return o;
}

// A raw TCP connection to a loopback endpoint ("tcp://127.0.0.1:PORT"), as a rogue peer makes
// one to a bulk plane; -1 if it fails.
int ConnectRaw(const std::string& endpoint) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<uint16_t>(PortOf(endpoint)));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// Connects ranks 0..n-1 of one world on threads; all or nothing.
std::vector<std::unique_ptr<ZmqTransport>> ConnectAll(std::vector<ZmqOptions> opts) {
  std::vector<std::unique_ptr<ZmqTransport>> out(opts.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < opts.size(); ++r) {
    threads.emplace_back([&, r] {
      auto t = ZmqTransport::Connect(opts[r]);
      if (t.ok()) out[r] = std::move(*t);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Ranks 0 and 1 of a world of two on loopback, their data over `streams` bulk connections a peer.
std::vector<std::unique_ptr<ZmqTransport>> ConnectPair(int streams) {
  const int port = deploy::FreeLoopbackPort();
  std::vector<ZmqOptions> opts = {Options(0, 2, port), Options(1, 2, port)};
  opts[0].bulk_streams = opts[1].bulk_streams = streams;
  return ConnectAll(opts);
}

// Starts tests/deploy/zmq_peer as rank 1 in `role` against the master on `port`; returns its pid.
// A process of its own, spawned rather than forked: a fork taken while another thread holds one of
// libzmq's global locks (context creation takes one) leaves the child deadlocked.
pid_t SpawnPeer(int port, const char* role) {
  const std::string port_s = std::to_string(port);
  char* argv[] = {const_cast<char*>(NARROWS_ZMQ_PEER), const_cast<char*>(port_s.c_str()), const_cast<char*>(role),
                  nullptr};
  pid_t pid = -1;
  if (::posix_spawn(&pid, NARROWS_ZMQ_PEER, nullptr, nullptr, argv, environ) != 0) return -1;
  return pid;
}

// Owns a spawned peer: a test that fails half-way still kills and reaps it, so that no stopped or
// waiting child keeps the test's output open after the binary exits.
class PeerProcess {
 public:
  PeerProcess(int port, const char* role) : pid_(SpawnPeer(port, role)) {}
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  ~PeerProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  // Waits for the peer to end on its own; returns waitpid's status.
  int Wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

// The rendezvous port a local launch picks is free, and below the ephemeral range where there is
// room, so that no outgoing connection (whose local ports come from that range) can take it first;
// two picks differ.
TEST(ZmqTransportTest, ALocalRendezvousPortIsFreeAndOutsideTheEphemeralRange) {
  const int ephemeral = deploy::EphemeralPortsFrom();
  std::set<int> ports;
  for (int i = 0; i < 8; ++i) {
    const int port = deploy::FreeLoopbackPort();
    ASSERT_GT(port, 0);
    if (ephemeral > 11'000) {
      EXPECT_GE(port, 10'000);
      EXPECT_LT(port, ephemeral);
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << "port " << port;
    ::close(fd);
    ports.insert(port);
  }
  EXPECT_GT(ports.size(), 1u);
}

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

// A process started with another scenario (another digest) is refused at the rendezvous, and
// told why.
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
  int fd = ConnectRaw(ep), fd2 = -1;
  ASSERT_GE(fd, 0);
  auto put = [&](const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  };
  auto closed = [&] {  // whether the receiver closed the connection within 5 s
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c;
    return ::recv(fd, &c, 1, 0) == 0;
  };
  // As a new process of rank 0 (its own incarnation), then frames with sequence numbers. Its
  // hello (over ZeroMQ, another connection) has not come: they are held for it, not delivered as
  // its predecessor's (a restarted process's data may come before its hello), and no Recv waits on
  // them meanwhile.
  uint64_t from = 0x5eed;
  put(EncodeFrameHeader(FrameType::kBulkHello, 0, 0, nullptr, 0, from, 0, to));
  auto frame = [&](uint64_t seq, int32_t value, bool corrupt = false) {
    std::vector<uint8_t> body(4);
    std::memcpy(body.data(), &value, 4);
    auto bytes = EncodeFrameHeader(FrameType::kBulk, 0, 8, body.data(), body.size(), from, seq, to);
    if (corrupt) body[0] ^= 1;
    bytes.insert(bytes.end(), body.begin(), body.end());
    put(bytes);
  };
  frame(0, 100);
  frame(2, 102);
  frame(1, 101);
  int32_t early = 0;
  EXPECT_EQ(ts[1]->Recv(0, 8, &early, 4, 0.3).code(), core::StatusCode::kTimeout);
  zmq::context_t ctx;
  zmq::socket_t control(ctx, zmq::socket_type::push);
  control.set(zmq::sockopt::linger, 1000);
  control.connect(ts[1]->control_endpoint());
  const std::string hello = nlohmann::json{{"data", ts[0]->data_endpoint()}, {"control", ts[0]->control_endpoint()},
                                           {"incarnation", from}}.dump();
  auto say = [&control](FrameType type, const std::string& body, uint64_t inc) {
    control.send(zmq::buffer(EncodeFrameHeader(type, 0, 0, body.data(), body.size(), inc)), zmq::send_flags::sndmore);
    control.send(zmq::buffer(body), zmq::send_flags::none);
  };
  say(FrameType::kHello, hello, from);
  // ... and its heartbeats from then on (the control socket is this thread's alone now).
  std::atomic<bool> beating{true};
  std::thread beat([&, inc = from] {
    const std::string body = nlohmann::json{{"incarnation", inc}}.dump();
    while (beating) {
      say(FrameType::kHeartbeat, body, inc);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  struct Stop {
    std::atomic<bool>& beating;
    std::thread& beat;
    ~Stop() {
      beating = false;
      beat.join();
    }
  } stop{beating, beat};
  for (int want : {100, 101, 102}) {
    int32_t got = 0;
    ASSERT_TRUE(ts[1]->Recv(0, 8, &got, 4, 5.0).ok()) << want;
    EXPECT_EQ(got, want);
  }
  // A corrupt frame read into the buffer of the Recv waiting for it is dropped, its place in the
  // order kept, and the Recv gets the next message.
  int32_t got = 0;
  std::thread receiver([&] { EXPECT_TRUE(ts[1]->Recv(0, 8, &got, 4, 5.0).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  frame(3, 103, true);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the Recv has seen the corrupt one go
  frame(4, 104);
  receiver.join();
  EXPECT_EQ(got, 104);
  EXPECT_GE(ts[1]->bulk_counts().into_receiver, 1);
  from = 0x5eee;  // a duplicate from a process that is not rank 0's current one: refused, not evicted
  fd2 = ConnectRaw(ep);
  std::swap(fd, fd2);
  ASSERT_GE(fd, 0);
  put(EncodeFrameHeader(FrameType::kBulkHello, 0, 0, nullptr, 0, from, 0, to));
  frame(0, 998);
  frame(0, 999);
  EXPECT_TRUE(closed());
  ::close(fd2);
  ::close(fd);
  int32_t none = 0;
  EXPECT_EQ(ts[1]->Recv(0, 8, &none, 4, 0.2).code(), core::StatusCode::kTimeout);
  EXPECT_EQ(ts[1]->frames_rejected(), 2);
  EXPECT_EQ(ts[1]->Evicted(0), "");
  // Opened to another process of rank 1: closed, nothing counted.
  fd = ConnectRaw(ep);
  ASSERT_GE(fd, 0);
  put(EncodeFrameHeader(FrameType::kBulkHello, 0, 0, nullptr, 0, from, 0, to + 1));
  EXPECT_TRUE(closed());
  ::close(fd);
  EXPECT_EQ(ts[1]->frames_rejected(), 2);
  // In the name of rank 0's current process: a repeat evicts it.
  from = 0x5eed;
  fd = ConnectRaw(ep);
  ASSERT_GE(fd, 0);
  put(EncodeFrameHeader(FrameType::kBulkHello, 0, 0, nullptr, 0, from, 0, to));
  frame(0, 200);
  ASSERT_TRUE(ts[1]->Recv(0, 8, &got, 4, 5.0).ok());
  EXPECT_EQ(got, 200);
  frame(0, 201);
  EXPECT_TRUE(closed());
  ::close(fd);
  EXPECT_EQ(ts[1]->Recv(0, 8, &got, 4, 5.0).code(), core::StatusCode::kPeerUnavailable);
  EXPECT_NE(ts[1]->Evicted(0).find("sequence number 0 again (a duplicated message)"), std::string::npos)
      << ts[1]->Evicted(0);
  EXPECT_EQ(ts[1]->frames_rejected(), 3);
}

// With CURVE the bulk plane is sealed: a connection whose hello is plain, sealed with another
// cluster's key, or sealed for another process of the receiver (a replay) is refused, and the
// run's own data still goes over the plane into the caller's buffer.
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

TEST(ZmqTransportTest, AProcessWithAnotherScenarioIsRefused) {
  const int port = deploy::FreeLoopbackPort();
  auto zero = Options(0, 2, port), one = Options(1, 2, port);
  zero.run_digest = "00000000000000aa";
  one.run_digest = "00000000000000bb";
  zero.connect_timeout_s = one.connect_timeout_s = 2;
  std::thread rank0([&] { (void)ZmqTransport::Connect(zero); });
  auto t = ZmqTransport::Connect(one);
  rank0.join();
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), core::StatusCode::kInvalidArgument) << t.status().message();
  EXPECT_NE(t.status().message().find("rank 1's scenario or model differs from rank 0's (digest 00000000000000bb, rank 0 has "
                                      "00000000000000aa)"),
            std::string::npos)
      << t.status().message();
}

TEST(ZmqTransportTest, CurveWithTheWrongKeyCannotJoin) {
  const int port = deploy::FreeLoopbackPort();
  auto a = Options(0, 2, port), b = Options(1, 2, port);
  a.curve = b.curve = true;
  a.keys = *GenerateCurveKeys();
  b.keys = *GenerateCurveKeys();
  a.connect_timeout_s = b.connect_timeout_s = 1.5;
  auto ts = ConnectAll({a, b});
  EXPECT_EQ(ts[0], nullptr);
  EXPECT_EQ(ts[1], nullptr);
  // Plain TCP cannot talk to a CURVE rank either.
  b.curve = false;
  b.rank = 1;
  ts = ConnectAll({a, b});
  EXPECT_EQ(ts[0], nullptr);
  EXPECT_EQ(ts[1], nullptr);
}

TEST(ZmqTransportTest, RendezvousTimesOutNamingWhatIsMissing) {
  auto o = Options(0, 3, deploy::FreeLoopbackPort());
  o.connect_timeout_s = 0.3;
  auto t = ZmqTransport::Connect(o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), core::StatusCode::kTimeout);
  EXPECT_NE(t.status().message().find("2 of 3 ranks did not register"), std::string::npos) << t.status().message();
  auto bad = Options(1, 2, deploy::FreeLoopbackPort());
  bad.master = "127.0.0.1";
  EXPECT_EQ(ZmqTransport::Connect(bad).status().code(), core::StatusCode::kInvalidArgument);
}

// A second process for a rank before every rank registered (the rank given twice, or a restart
// before the original registered) is refused with a reason; the run forms with the first.
TEST(ZmqTransportTest, ARankRegisteredTwiceBeforeTheTableIsCompleteIsRefused) {
  const int port = deploy::FreeLoopbackPort();
  std::unique_ptr<ZmqTransport> t0, first, t2;
  std::thread r0([&] { t0 = std::move(ZmqTransport::Connect(Options(0, 3, port))).value(); });
  std::thread r1([&] { first = std::move(ZmqTransport::Connect(Options(1, 3, port))).value(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto second = ZmqTransport::Connect(Options(1, 3, port));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(second.status().message().find("rank 1 is already registered by another process"), std::string::npos)
      << second.status().message();
  std::thread r2([&] { t2 = std::move(ZmqTransport::Connect(Options(2, 3, port))).value(); });
  r0.join();
  r1.join();
  r2.join();
  ASSERT_NE(first, nullptr);
  const uint8_t hello[3] = {1, 2, 3};
  ASSERT_TRUE(first->Send(0, 7, hello, sizeof hello).ok());
  uint8_t got[3] = {};
  const auto s = t0->Recv(1, 7, got, sizeof got, 5.0);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(got[2], 3);
}

// A process started again (--rejoin) before every rank registered — its predecessor was killed
// while the ranks were still starting — takes its rank's place (the predecessor, if still there,
// hears that it was replaced) and starts the run with the others; one started again after the run
// began joins it.
TEST(ZmqTransportTest, ARestartBeforeTheRunBeganTakesThePlaceAndStartsWithTheOthers) {
  const int port = deploy::FreeLoopbackPort();
  std::unique_ptr<ZmqTransport> t0, again, t2;
  core::Status first;
  std::thread r0([&] { t0 = std::move(ZmqTransport::Connect(Options(0, 3, port))).value(); });
  std::thread r1([&] { first = ZmqTransport::Connect(Options(1, 3, port)).status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ZmqOptions restarted = Options(1, 3, port);
  restarted.restarted = true;
  std::thread r1b([&] { again = std::move(ZmqTransport::Connect(restarted)).value(); });
  r1.join();
  EXPECT_EQ(first.code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(first.message().find("rank 1 was started again: this process was replaced"), std::string::npos)
      << first.message();
  std::thread r2([&] { t2 = std::move(ZmqTransport::Connect(Options(2, 3, port))).value(); });
  r0.join();
  r1b.join();
  r2.join();
  ASSERT_TRUE(t0 && again && t2);
  EXPECT_TRUE(t0->AtStart());
  EXPECT_TRUE(again->AtStart());
  EXPECT_TRUE(t2->AtStart());
  const uint8_t hello[3] = {1, 2, 3};
  ASSERT_TRUE(again->Send(0, 7, hello, sizeof hello).ok());
  uint8_t got[3] = {};
  const auto s = t0->Recv(1, 7, got, sizeof got, 5.0);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(got[2], 3);
  // Once the run began, a process started again for rank 2 is a joiner.
  ZmqOptions later = Options(2, 3, port);
  later.restarted = true;
  auto joiner = ZmqTransport::Connect(later);
  ASSERT_TRUE(joiner.ok()) << joiner.status().ToString();
  EXPECT_FALSE((*joiner)->AtStart());
}

TEST(ZmqTransportTest, KeyFilesRoundTripAndAreChecked) {
  const auto dir = std::filesystem::temp_directory_path() / ("narrows-keys-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "cluster.key").string();
  ASSERT_TRUE(WriteNewKeyFile(path).ok());
  EXPECT_FALSE(WriteNewKeyFile(path).ok());  // never overwrites
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::group_read, std::filesystem::perms::none);
  auto keys = ReadKeyFile(path);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(keys->public_key.size(), 40u);
  {
    std::ofstream(dir / "mixed.key") << "public-key = \"" << GenerateCurveKeys()->public_key << "\"\nsecret-key = \""
                                     << keys->secret_key << "\"\n";
  }
  EXPECT_NE(ReadKeyFile((dir / "mixed.key").string()).status().message().find("does not belong"), std::string::npos);
  { std::ofstream(dir / "short.key") << "public-key = \"abc\"\n"; }
  EXPECT_NE(ReadKeyFile((dir / "short.key").string()).status().message().find("short.key:1"), std::string::npos);
  EXPECT_EQ(ReadKeyFile((dir / "none.key").string()).status().code(), core::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

// A peer killed with SIGKILL is declared dead within the timeout; a new process with its rank
// rejoins, and what the dead one had sent is not delivered to anyone.
TEST(ZmqTransportTest, KilledPeerIsDetectedAndARestartRejoins) {
  const int port = deploy::FreeLoopbackPort();
  auto opts = Options(0, 2, port);
  std::unique_ptr<ZmqTransport> t0;
  core::Status connected;
  std::thread connect([&] {
    auto t = ZmqTransport::Connect(opts);
    if (t.ok()) t0 = std::move(*t);
    else connected = t.status();
  });
  PeerProcess first(port, "first");
  ASSERT_GT(first.pid(), 0);
  connect.join();
  ASSERT_NE(t0, nullptr) << connected.ToString();
  int32_t v = 0;
  ASSERT_TRUE(t0->Recv(1, 1, &v, 4, 5.0).ok());
  EXPECT_EQ(v, 1);
  const int64_t first_generation = t0->Generation(1);
  int status = first.Wait();
  ASSERT_TRUE(WIFSIGNALED(status));
  const auto killed = std::chrono::steady_clock::now();
  const core::Status s = t0->Recv(1, 3, &v, 4, 10.0);
  const double detect_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_EQ(s.code(), core::StatusCode::kPeerUnavailable) << s.ToString();
  EXPECT_LT(detect_s, 2.0);
  EXPECT_EQ(t0->Members(), std::vector<int>{0});
  EXPECT_EQ(t0->Send(1, 1, &v, 4).code(), core::StatusCode::kPeerUnavailable);

  PeerProcess second(port, "second");
  ASSERT_GT(second.pid(), 0);
  for (int i = 0; i < 200 && t0->Members().size() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_EQ(t0->Members(), (std::vector<int>{0, 1}));
  v = 42;
  ASSERT_TRUE(t0->Send(1, 4, &v, 4).ok());
  ASSERT_TRUE(t0->Recv(1, 4, &v, 4, 10.0).ok());
  EXPECT_EQ(v, 43);
  EXPECT_EQ(t0->Recv(1, 2, &v, 4, 0.2).code(), core::StatusCode::kTimeout);  // the dead incarnation's is gone
  // A collective's group formed with the first process sends nothing to its replacement (which
  // never makes that group's attempts: the message would wait in it under their tag); the group
  // of the process now does.
  ASSERT_NE(t0->Generation(1), first_generation);
  core::GroupGuard before(*t0, {0, 1}, 10.0, {0, first_generation});
  EXPECT_EQ(before.Send(1, 5, &v, 4).code(), core::StatusCode::kPeerUnavailable);
  core::GroupGuard now(*t0, {0, 1}, 10.0, {0, t0->Generation(1)});
  ASSERT_TRUE(now.Send(1, 5, &v, 4).ok());
  status = second.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A peer that stopped reading holds what was lent to it; once it is declared dead, AwaitLent drops
// those messages instead of waiting for them forever.
TEST(ZmqTransportTest, LentMessagesToAPeerFoundDeadAreDroppedNotAwaited) {
  const int port = deploy::FreeLoopbackPort();
  // Silence longer than the usual test setting: on a loaded machine the stopped peer must not be
  // declared dead before the lent send has started.
  ZmqOptions opts = Options(0, 2, port);
  opts.timeout_s = 2.0;
  std::vector<float> buffer(64 << 20, 1.0f);  // 256 MB, written now: far more than the socket buffers take
  std::unique_ptr<ZmqTransport> t0;
  std::thread connect([&] {
    auto t = ZmqTransport::Connect(opts);
    if (t.ok()) t0 = std::move(*t);
  });
  PeerProcess peer(port, "second");  // waits for tag 4
  ASSERT_GT(peer.pid(), 0);
  connect.join();
  ASSERT_NE(t0, nullptr);
  ASSERT_EQ(::kill(peer.pid(), SIGSTOP), 0);  // alive to the kernel, silent and reading nothing
  core::SendLease lease;
  const core::Status sent = t0->SendBorrowed(1, 9, buffer.data(), buffer.size() * 4, lease);
  ASSERT_TRUE(sent.ok()) << sent.ToString();
  EXPECT_EQ(lease.Outstanding(0.2), std::vector<int>{1});  // ZeroMQ still reads the buffer
  const auto start = std::chrono::steady_clock::now();
  t0->AwaitLent(lease);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(lease.Outstanding(0).empty());
  EXPECT_LT(waited, 8.0);  // declared dead after 2 s of silence
  EXPECT_EQ(t0->Members(), std::vector<int>{0});
}

// A peer that stops half-way through a message it sends over the bulk plane leaves its connection
// open: once it is declared dead, the Recv being filled from it ends with the peer unavailable
// instead of waiting for the rest of the message for ever.
// On a loaded machine (two cores, sanitizers, other tests beside it) the peer can be silent long
// enough before it begins to send that it is declared dead first: that round proves nothing about
// a half-sent message, so it is tried again with a longer silence allowed.
TEST(ZmqTransportTest, ARecvFilledFromAPeerFoundDeadEndsInsteadOfWaitingForTheRest) {
  struct Round {
    bool began = false, whole = false, ended = false;
    core::Status status;
  };
  const auto attempt = [](double timeout_s) {
    Round r;
    const int port = deploy::FreeLoopbackPort();
    ZmqOptions opts = Options(0, 2, port);
    opts.bulk_streams = 1;
    opts.timeout_s = timeout_s;
    std::vector<uint32_t> buffer(64 << 20, 0);  // the peer's 1.0f arrive as 0x3f800000
    std::unique_ptr<ZmqTransport> t0;
    std::thread connect([&] {
      auto t = ZmqTransport::Connect(opts);
      if (t.ok()) t0 = std::move(*t);
    });
    PeerProcess peer(port, "big");  // sends 256 MB as tag 7
    connect.join();
    if (peer.pid() <= 0 || t0 == nullptr) {
      r.status = core::Status::Internal("the peer did not connect");
      return r;
    }
    std::promise<core::Status> received;
    std::thread recv([&] {
      received.set_value(t0->Recv(1, 7, buffer.data(), buffer.size() * 4, 30.0 + timeout_s));
    });
    // Stopped as soon as its message has begun to land in the Recv's buffer: alive to the kernel,
    // its connection open, the rest of the message never sent.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (__atomic_load_n(&buffer[0], __ATOMIC_RELAXED) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ::kill(peer.pid(), SIGSTOP);
    r.began = __atomic_load_n(&buffer[0], __ATOMIC_RELAXED) != 0;
    r.whole = __atomic_load_n(&buffer.back(), __ATOMIC_RELAXED) != 0;
    auto done = received.get_future();
    r.ended = done.wait_for(std::chrono::duration<double>(10.0 + timeout_s)) == std::future_status::ready;
    if (!r.ended) ::kill(peer.pid(), SIGKILL);  // closes the connection, so that the Recv ends and joins
    recv.join();
    r.status = done.get();
    return r;
  };
  Round r;
  double timeout_s = 0;
  for (double t : {3.0, 8.0, 20.0}) {
    timeout_s = t;
    r = attempt(t);
    const bool dead_before_it_began = !r.began && r.ended && r.status.code() == core::StatusCode::kPeerUnavailable;
    if (!dead_before_it_began) break;
  }
  ASSERT_TRUE(r.began) << "the message never reached the Recv's buffer; the Recv "
                       << (r.ended ? "ended with " + r.status.ToString() : std::string("had not ended"));
  if (r.whole) GTEST_SKIP() << "the whole message arrived before the peer was stopped";
  EXPECT_TRUE(r.ended) << "the Recv still waited " << 10.0 + timeout_s << " s after the peer went silent (declared dead after "
                       << timeout_s << " s)";
  EXPECT_EQ(r.status.code(), core::StatusCode::kPeerUnavailable) << r.status.ToString();
}

}  // namespace
}  // namespace narrows::deploy
