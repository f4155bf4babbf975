// The link emulator (deploy/link_emulator.h) between two network namespaces: a round trip takes
// twice the path's latency, a TCP transfer runs at the link's bandwidth, random loss drops its
// share, an outage drops everything while it lasts. Needs root and /dev/net/tun: skipped otherwise,
// with the reason.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "deploy/link_emulator.h"
#include "deploy/netns.h"

namespace narrows::deploy {
namespace {

using Clock = std::chrono::steady_clock;
const uint32_t kSubnet = Ipv4(10, 77, 0, 0);

double Seconds(Clock::time_point from) { return std::chrono::duration<double>(Clock::now() - from).count(); }

sockaddr_in Address(uint32_t ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

class LinkEmulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const core::Status ok = CheckNetworkPrivileges();
    if (!ok.ok()) GTEST_SKIP() << ok.message();
  }

  // Two workers behind access links up:w / down:w, each direction of a path crossing up:src then
  // down:dst (links 2w and 2w + 1).
  void Make(double bandwidth_bps, double link_latency_s, double loss = 0.0,
            std::vector<EmulatedLink::Change> up0_schedule = {}, core::Burst up0_burst = {},
            const std::string& packet_log = "") {
    std::vector<TunDevice> tuns;
    for (int w = 0; w < 2; ++w) {
      auto ns = NetNamespace::Create();
      ASSERT_TRUE(ns.ok()) << ns.status().ToString();
      auto tun = CreateTun(*ns, "tun0", kSubnet + static_cast<uint32_t>(w) + 1, 24, 1500);
      ASSERT_TRUE(tun.ok()) << tun.status().ToString();
      tuns.push_back(*tun);
      namespaces_.push_back(std::move(*ns));
    }
    LinkEmulatorOptions o;
    o.workers = 2;
    o.subnet = kSubnet;
    for (int w = 0; w < 2; ++w) {
      for (const char* dir : {"up:", "down:"}) {
        EmulatedLink l;
        l.name = dir + std::to_string(w);
        l.bandwidth_bps = bandwidth_bps;
        l.latency_s = link_latency_s;
        l.queue_bytes = queue_bytes_;
        o.links.push_back(l);
      }
    }
    o.links[0].loss = loss;
    o.links[0].schedule = std::move(up0_schedule);
    o.links[0].burst = up0_burst;
    o.routes = {{}, {0, 3}, {2, 1}, {}};
    o.packet_log = packet_log;
    o.nic_bps = nic_bps_;
    auto emu = LinkEmulator::Create(o, tuns);
    ASSERT_TRUE(emu.ok()) << emu.status().ToString();
    emu_ = std::move(*emu);
    emu_->Start();
  }

  // A socket of `type` opened inside worker w's namespace.
  int Socket(int w, int type) {
    int fd = -1;
    EXPECT_TRUE(namespaces_[static_cast<size_t>(w)].Run([&]() -> core::Status {
      fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
      return fd >= 0 ? core::Status::Ok() : core::Status::Internal("socket");
    }).ok());
    return fd;
  }

  // Sends `count` datagrams of `bytes` from worker 0 to worker 1's `port`, ten a millisecond
  // (`paced`) or as fast as the socket takes them, and returns how many arrived: read as they come
  // (a full socket buffer would drop them too), until none has come for 300 ms.
  int SendDatagrams(int port, int count, size_t bytes = 1, bool paced = true) {
    const int server = Socket(1, SOCK_DGRAM), client = Socket(0, SOCK_DGRAM);
    const sockaddr_in at = Address(kSubnet + 2, port);
    EXPECT_EQ(::bind(server, reinterpret_cast<const sockaddr*>(&at), sizeof at), 0);
    timeval tv{0, 300000};
    ::setsockopt(server, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int received = 0;
    std::thread sink([&] {
      std::vector<char> buf(std::max<size_t>(bytes, 8));
      while (::recv(server, buf.data(), buf.size(), 0) > 0) ++received;
    });
    const std::vector<char> data(bytes, 'x');
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(::sendto(client, data.data(), bytes, 0, reinterpret_cast<const sockaddr*>(&at), sizeof at),
                static_cast<ssize_t>(bytes));
      if (paced && i % 10 == 9) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    sink.join();
    ::close(server);
    ::close(client);
    return received;
  }

  // Sends `total` bytes over TCP from worker 0 to worker 1's `port`, split over `streams`
  // connections; the bytes received, and the seconds from when the connections are made to the
  // receives that completed a quarter and three quarters of `total` (with the bytes received by
  // then).
  struct Received {
    int64_t bytes = 0;
    int64_t mark_bytes[2] = {0, 0};
    double mark_s[2] = {-1, -1};
  };
  Received TcpTransfer(int port, int64_t total, int streams = 1) {
    const int listener = Socket(1, SOCK_STREAM);
    const sockaddr_in at = Address(kSubnet + 2, port);
    Received r;
    std::mutex mu;
    EXPECT_EQ(::bind(listener, reinterpret_cast<const sockaddr*>(&at), sizeof at), 0);
    EXPECT_EQ(::listen(listener, streams), 0);
    std::vector<int> clients;
    for (int s = 0; s < streams; ++s) {
      clients.push_back(Socket(0, SOCK_STREAM));
      EXPECT_EQ(::connect(clients.back(), reinterpret_cast<const sockaddr*>(&at), sizeof at), 0);
    }
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int s = 0; s < streams; ++s) {
      threads.emplace_back([&] {
        const int c = ::accept(listener, nullptr, nullptr);
        std::vector<char> buf(1 << 16);
        for (ssize_t n; (n = ::recv(c, buf.data(), buf.size(), 0)) > 0;) {
          std::lock_guard<std::mutex> lock(mu);
          r.bytes += n;
          for (int m = 0; m < 2; ++m) {
            if (r.mark_s[m] < 0 && r.bytes >= total * (1 + 2 * m) / 4) {
              r.mark_s[m] = Seconds(t0);
              r.mark_bytes[m] = r.bytes;
            }
          }
        }
        ::close(c);
      });
    }
    for (int s = 0; s < streams; ++s) {
      const int client = clients[static_cast<size_t>(s)];
      const int64_t share = total / streams + (s < total % streams ? 1 : 0);
      threads.emplace_back([client, share] {
        std::vector<char> data(1 << 16, 'x');
        for (int64_t sent = 0; sent < share;) {
          const ssize_t n = ::send(client, data.data(), static_cast<size_t>(std::min<int64_t>(share - sent, 1 << 16)), 0);
          EXPECT_GT(n, 0);
          if (n <= 0) break;
          sent += n;
        }
        ::close(client);
      });
    }
    for (auto& t : threads) t.join();
    ::close(listener);
    return r;
  }

  // A fresh pair of namespaces and emulator (for a test that compares two settings).
  void Remake() {
    emu_.reset();
    namespaces_.clear();
  }

  double nic_bps_ = 0.0;       // LinkEmulatorOptions::nic_bps of the next Make
  int64_t queue_bytes_ = 0;    // every link's queue_bytes of the next Make
  std::vector<NetNamespace> namespaces_;
  std::unique_ptr<LinkEmulator> emu_;
};

TEST_F(LinkEmulatorTest, ARoundTripTakesTwiceThePathLatency) {
  Make(1e9, 0.005);  // 10 ms each way
  const int server = Socket(1, SOCK_DGRAM), client = Socket(0, SOCK_DGRAM);
  const sockaddr_in at = Address(kSubnet + 2, 7000);
  ASSERT_EQ(::bind(server, reinterpret_cast<const sockaddr*>(&at), sizeof at), 0);
  std::thread echo([&] {
    char buf[64];
    for (int i = 0; i < 21; ++i) {
      sockaddr_in from{};
      socklen_t len = sizeof from;
      const ssize_t n = ::recvfrom(server, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n > 0) ::sendto(server, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), len);
    }
  });
  timeval tv{2, 0};
  ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<double> rtts;
  for (int i = 0; i < 21; ++i) {
    const auto t0 = Clock::now();
    ASSERT_EQ(::sendto(client, "ping", 4, 0, reinterpret_cast<const sockaddr*>(&at), sizeof at), 4);
    char buf[64];
    ASSERT_EQ(::recv(client, buf, sizeof buf, 0), 4) << "ping " << i << " lost";
    rtts.push_back(Seconds(t0));
  }
  echo.join();
  std::nth_element(rtts.begin(), rtts.begin() + 10, rtts.end());
  EXPECT_NEAR(rtts[10], 0.020, 0.001);
  // Each ping was delivered over down:1, the last link of its route, each echo over down:0, and the
  // forwarding loop's lateness in writing them was counted there (never on an uplink, which hands
  // its packets on to the next link at their due time, whenever the loop gets to them).
  const std::vector<LinkStats> stats = emu_->Stats();
  for (int l : {1, 3}) {
    EXPECT_EQ(stats[static_cast<size_t>(l)].delivered, stats[static_cast<size_t>(l)].packets) << stats[l].name;
    EXPECT_GE(stats[static_cast<size_t>(l)].delivered, 21) << stats[l].name;
    EXPECT_GT(stats[static_cast<size_t>(l)].MeanLateS(), 0.0) << stats[l].name;  // a timer never fires early
    EXPECT_GE(stats[static_cast<size_t>(l)].late_max_s, stats[static_cast<size_t>(l)].MeanLateS());
  }
  for (int l : {0, 2}) EXPECT_EQ(stats[static_cast<size_t>(l)].delivered, 0) << stats[l].name;
  ::close(server);
  ::close(client);
}

// A bulk transfer keeps the link busy at its bandwidth. Four streams, timed over the middle half of
// the bytes: one stream over this 10 ms round trip leaves the queue empty for a few ms at a time
// (the sending kernel sets its ssthresh and keeps less in flight than its window with no loss:
// 0.90-0.99 of the link over 30 runs of one stream, timed first byte to last), and the handshakes,
// slow start and the last stream's tail are TCP's, not the link's. The queue holds the four
// windows: nothing is dropped.
TEST_F(LinkEmulatorTest, ATcpTransferRunsAtTheLinksBandwidth) {
  const double bandwidth = 20e6;
  queue_bytes_ = 4 << 20;
  Make(bandwidth, 0.005);
  const int64_t total = 6 << 20;
  const Received r = TcpTransfer(7001, total, 4);
  ASSERT_EQ(r.bytes, total);
  // The payload's share of what crossed up:0 (IP and TCP headers, the handshakes): the goodput the
  // link's bandwidth allows.
  const LinkStats up = emu_->Stats()[0];
  const double expected = bandwidth / 8.0 * static_cast<double>(total) / static_cast<double>(up.bytes);
  const double goodput = static_cast<double>(r.mark_bytes[1] - r.mark_bytes[0]) / (r.mark_s[1] - r.mark_s[0]);
  EXPECT_NEAR(goodput / expected, 1.0, 0.03) << goodput * 8 / 1e6 << " Mbit/s of payload";
  EXPECT_EQ(up.dropped_queue, 0);
}

// The kernel's TCP counters are each namespace's own: a transfer from worker 0 with 5% loss on its
// uplink makes worker 0's kernel send and retransmit segments, and worker 1's (which only ACKs)
// retransmit none.
TEST_F(LinkEmulatorTest, TheKernelsTcpCountersAreEachNamespacesOwn) {
  Make(20e6, 0.002, 0.05);
  ASSERT_EQ(TcpTransfer(7003, 1 << 20).bytes, 1 << 20);
  auto sender = TcpCounters(namespaces_[0]), receiver = TcpCounters(namespaces_[1]);
  ASSERT_TRUE(sender.ok() && receiver.ok()) << sender.status().ToString() << receiver.status().ToString();
  EXPECT_GT((*sender)["OutSegs"], (1 << 20) / 1448);
  EXPECT_GT((*sender)["RetransSegs"], 0);
  EXPECT_EQ((*receiver)["RetransSegs"], 0);
  EXPECT_GT((*receiver)["InSegs"], (1 << 20) / 1448);
}

TEST_F(LinkEmulatorTest, RandomLossDropsItsShare) {
  Make(1e9, 0.001, 0.2);
  const int sent = 3000;
  const int received = SendDatagrams(7002, sent);
  const LinkStats up = emu_->Stats()[0];
  EXPECT_EQ(up.dropped_loss + received, sent);  // nothing else lost them
  EXPECT_NEAR(static_cast<double>(up.dropped_loss) / sent, 0.2, 0.03);  // 4 standard deviations
}

// The packet log has a line for every packet on every link it reached, with the link's own
// counts: on up:0 each datagram sent or lost, on down:1 each one that crossed up:0, then delivered;
// with its source, destination and ports.
TEST_F(LinkEmulatorTest, ThePacketLogHasEveryPacketsFateOnEveryLink) {
  const std::string log = ::testing::TempDir() + "/packets.csv";
  Make(1e9, 0.001, 0.2, {}, {}, log);
  const int sent = 500;
  const int received = SendDatagrams(7004, sent);
  emu_->Stop();  // the log is complete once the loop stopped
  const std::vector<LinkStats> stats = emu_->Stats();
  std::ifstream in(log);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, "time_s,link,src,dst,sport,dport,event,bytes,wait_s");
  std::map<std::string, int> count;  // "link event"
  double last_sent = 0.0;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 9u) << line;
    ++count[f[1] + " " + f[6]];
    EXPECT_EQ(f[2], "0") << line;
    EXPECT_EQ(f[3], "1") << line;
    EXPECT_EQ(f[5], "7004") << line;
    EXPECT_EQ(f[7], "29") << line;  // 20 bytes of IP header, 8 of UDP, 1 of data
    EXPECT_GE(std::stod(f[8]), 0.0) << line;
    if (f[1] == "up:0" && f[6] == "sent") {
      EXPECT_GE(std::stod(f[0]), last_sent) << line;  // read in order
      last_sent = std::stod(f[0]);
    }
  }
  EXPECT_EQ(count["up:0 loss"], stats[0].dropped_loss);
  EXPECT_EQ(count["up:0 sent"], stats[0].packets);
  EXPECT_EQ(count["up:0 sent"] + count["up:0 loss"], sent);
  EXPECT_EQ(count["down:1 sent"], stats[0].packets);
  EXPECT_EQ(count["down:1 delivered"], received);
  EXPECT_EQ(count.size(), 4u);  // nothing else: no queue drops, no outage, nothing the other way
}

// Bursts: no loss while good, all lost while bad, stays of 80 ms on average. Which datagrams are lost
// follows the seeded walk the virtual-time emulator takes (core::LossStates): each one sent well
// inside a stay (10 ms from its edges) is lost exactly when the walk is bad then.
TEST_F(LinkEmulatorTest, BurstyLossDropsWhatIsSentInBadStays) {
  const core::Burst burst{0.08, 0.08, 1.0, 12345};
  Make(1e9, 0.001, 0.0, {}, burst);
  const auto t0 = Clock::now();  // the emulator started just before
  const int server = Socket(1, SOCK_DGRAM), client = Socket(0, SOCK_DGRAM);
  const sockaddr_in at = Address(kSubnet + 2, 7004);
  ASSERT_EQ(::bind(server, reinterpret_cast<const sockaddr*>(&at), sizeof at), 0);
  std::vector<double> sent_at;
  for (int i = 0; i < 400; ++i) {
    sent_at.push_back(Seconds(t0));
    const uint32_t seq = static_cast<uint32_t>(i);
    ASSERT_EQ(::sendto(client, &seq, sizeof seq, 0, reinterpret_cast<const sockaddr*>(&at), sizeof at), 4);
    std::this_thread::sleep_for(std::chrono::milliseconds(4));
  }
  timeval tv{0, 200000};
  ::setsockopt(server, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<bool> arrived(sent_at.size(), false);
  uint32_t seq = 0;
  while (::recv(server, &seq, sizeof seq, 0) == 4) arrived.at(seq) = true;
  core::LossStates walk(0.0, burst);
  std::vector<std::pair<double, bool>> stays;  // (end, bad)
  while (walk.next_switch() < sent_at.back() + 1.0) {
    stays.push_back({walk.next_switch(), walk.bad()});
    walk.Switch();
  }
  stays.push_back({1e9, walk.bad()});
  int judged = 0, agree = 0, lost = 0;
  for (size_t i = 0; i < sent_at.size(); ++i) {
    lost += arrived[i] ? 0 : 1;
    double begin = 0;
    for (const auto& [end, bad] : stays) {
      if (sent_at[i] < end) {
        if (sent_at[i] > begin + 0.010 && sent_at[i] < end - 0.010) {
          ++judged;
          agree += (!arrived[i]) == bad ? 1 : 0;
        }
        break;
      }
      begin = end;
    }
  }
  const LinkStats up = emu_->Stats()[0];
  EXPECT_EQ(up.dropped_loss, lost);
  EXPECT_GT(lost, 40);
  EXPECT_LT(lost, 360);
  EXPECT_GT(judged, 150);
  EXPECT_GE(agree, judged - 2) << agree << " of " << judged;  // a scheduling hiccup may blur one
  ::close(server);
  ::close(client);
}

TEST_F(LinkEmulatorTest, AnOutageDropsWhatIsSentWhileItLasts) {
  Make(1e9, 0.001, 0.0, {{0.3, 0.0}, {0.6, 1e9}});
  const int server = Socket(1, SOCK_DGRAM), client = Socket(0, SOCK_DGRAM);
  const sockaddr_in at = Address(kSubnet + 2, 7003);
  ASSERT_EQ(::bind(server, reinterpret_cast<const sockaddr*>(&at), sizeof at), 0);
  const auto t0 = Clock::now();  // the emulator started just before
  int during = 0, outside = 0;
  for (int i = 0; i < 90; ++i) {
    const double t = Seconds(t0);
    // Within 20 ms of an edge a packet may fall either side of it.
    if (t > 0.32 && t < 0.58) ++during;
    if (t < 0.28 || t > 0.62) ++outside;
    ASSERT_EQ(::sendto(client, "x", 1, 0, reinterpret_cast<const sockaddr*>(&at), sizeof at), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  timeval tv{0, 200000};
  ::setsockopt(server, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int received = 0;
  char buf[8];
  while (::recv(server, buf, sizeof buf, 0) > 0) ++received;
  const LinkStats up = emu_->Stats()[0];
  EXPECT_GE(up.dropped_down, during);
  EXPECT_LE(up.dropped_down, 90 - outside);
  EXPECT_EQ(up.dropped_down + received, 90);
  ::close(server);
  ::close(client);
}

// A worker's interface rate paces a burst into its uplink's queue. 100 datagrams of 1,000 bytes
// (1,028 on the wire) sent at once to a 10 Mbit/s link with a 10-packet queue: read by the loop
// as fast as it can, all but the queue's worth are dropped; through an interface at the link's
// rate none is, and every one arrives; at twice the link's rate the queue fills half as fast as
// they come (one packet in two is left waiting), so it overflows after about 20 and about 40 are
// dropped.
TEST_F(LinkEmulatorTest, AnInterfaceRatePacesABurstIntoTheLinksQueue) {
  constexpr int kCount = 100;
  constexpr double kLink = 10e6;
  queue_bytes_ = 10 * 1028;
  auto burst = [&](double nic_bps) {
    Remake();
    nic_bps_ = nic_bps;
    Make(kLink, 0.001);
    const int received = SendDatagrams(7006, kCount, 1000, false);
    const LinkStats up = emu_->Stats()[0];
    EXPECT_EQ(up.dropped_queue + received, kCount) << "nic_bps " << nic_bps;  // nothing else lost them
    return up.dropped_queue;
  };
  EXPECT_GE(burst(0.0), 80);
  EXPECT_EQ(burst(kLink), 0);
  const int64_t half = burst(2 * kLink);
  EXPECT_GE(half, 30);
  EXPECT_LE(half, 50);
}

// A worker cut off by Partition loses what it sends and what is sent to it; healed, both pass again.
TEST_F(LinkEmulatorTest, APartitionCutsBothWaysUntilHealed) {
  Make(1e9, 0.001);
  const int a = Socket(0, SOCK_DGRAM), b = Socket(1, SOCK_DGRAM);
  const sockaddr_in at_a = Address(kSubnet + 1, 7004), at_b = Address(kSubnet + 2, 7005);
  ASSERT_EQ(::bind(a, reinterpret_cast<const sockaddr*>(&at_a), sizeof at_a), 0);
  ASSERT_EQ(::bind(b, reinterpret_cast<const sockaddr*>(&at_b), sizeof at_b), 0);
  timeval tv{0, 200000};
  ::setsockopt(a, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto exchange = [&](int count) {  // datagrams each way; how many arrived in all
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(::sendto(a, "x", 1, 0, reinterpret_cast<const sockaddr*>(&at_b), sizeof at_b), 1);
      EXPECT_EQ(::sendto(b, "y", 1, 0, reinterpret_cast<const sockaddr*>(&at_a), sizeof at_a), 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    int received = 0;
    char buf[8];
    while (::recv(a, buf, sizeof buf, MSG_DONTWAIT) > 0) ++received;
    while (::recv(b, buf, sizeof buf, MSG_DONTWAIT) > 0) ++received;
    return received;
  };
  emu_->Partition(1, true);
  EXPECT_EQ(exchange(10), 0);
  const auto stats = emu_->Stats();
  EXPECT_EQ(stats[2].dropped_down, 10);  // up:1, worker 1's sends
  EXPECT_EQ(stats[3].dropped_down, 10);  // down:1, worker 0's sends to it
  emu_->Partition(1, false);
  EXPECT_EQ(exchange(10), 20);
  ::close(a);
  ::close(b);
}

}  // namespace
}  // namespace narrows::deploy
