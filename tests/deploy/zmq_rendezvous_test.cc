// The ZeroMQ transport's rendezvous and keys: the port a local launch picks, a process with
// another scenario or the wrong CURVE key refused, a rank registered twice, a restart before the
// run began, key files.
#include "deploy/zmq_transport.h"

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "deploy/addresses.h"
#include "tests/deploy/zmq_transport_fixture.h"

namespace narrows::deploy {
namespace {

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

// A process started with another scenario (another digest) is refused at the rendezvous, and
// told why.
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

}  // namespace
}  // namespace narrows::deploy
