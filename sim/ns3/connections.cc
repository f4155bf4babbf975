// The packet-level model's TCP: ns-3's defaults for its sockets, one persistent connection per
// ordered pair of workers, and the bytes written into and read from each (sim/ns3/ns3_model_impl.h).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <ns3/core-module.h>
#include <ns3/internet-module.h>
#include <ns3/network-module.h>

#include "core/check.h"
#include "sim/ns3/linux_window.h"
#include "sim/ns3/ns3_model_impl.h"

namespace narrows::sim {
namespace {

constexpr uint16_t kPort = 9000;
constexpr int kTcpIpHeaderBytes = 52;  // IPv4 20 + TCP 20 + timestamp option 12
constexpr uint32_t kChunkBytes = 64 * 1024;  // bytes handed to a socket per Send call
constexpr uint32_t kBufferBytes = 1u << 30;

std::string TcpTypeName(const std::string& tcp) {
  if (tcp == "cubic") return "ns3::TcpCubic";
  if (tcp == "newreno") return "ns3::TcpNewReno";
  if (tcp == "bbr") return "ns3::TcpBbr";
  NARROWS_CHECK(false) << "unknown TCP variant '" << tcp << "'";
  return "";
}

// Whether a link of the path between workers i and j, either way, drops at random (a loss rate or
// bursts): fast-forward never jumps such a connection.
bool PathHasRandomLoss(const Topology& topology, int i, int j) {
  bool random_loss = false;
  for (const Path& route : {topology.Route(i, j), topology.Route(j, i)}) {
    for (int l : route) {
      const Link& link = topology.links()[static_cast<size_t>(l)];
      random_loss = random_loss || link.loss > 0 || (link.burst.mean_good_s > 0 && link.burst.loss > 0);
    }
  }
  return random_loss;
}

}  // namespace

// ns-3's TCP defaults for every socket of the model: the variant, the segment size of the MTU,
// buffers that never limit a window, Linux's retries, delayed ACKs and (by default) retransmission
// timeout, no Nagle.
void ConfigureTcp(const Ns3Options& options) {
  using namespace ns3;
  RngSeedManager::SetSeed(std::max<uint32_t>(1, options.seed));
  RngSeedManager::SetRun(1);
  Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue(TcpTypeName(options.tcp)));
  Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(static_cast<uint32_t>(options.mtu - kTcpIpHeaderBytes)));
  // Windows are limited by congestion control alone, never by a buffer: with a flow limited by
  // its receive window, ns-3 3.37 (Debian 12) sends zero-length segments (TcpTxBuffer::NextSeg),
  // which crashes with TCP_NODELAY and stalls the flow for hours without it. 1 GiB is the largest
  // window TCP's scale option allows; the bytes are virtual, so the size costs nothing.
  Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(kBufferBytes));
  Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(kBufferBytes));
  Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
  Config::SetDefault("ns3::TcpSocket::DataRetries", UintegerValue(15));  // Linux tcp_retries2
  Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(2));
  if (options.linux_rto) {
    // Linux's timeout (tcp_set_rto): the smoothed RTT plus four mean deviations, the deviation
    // term at least tcp_rto_min (200 ms). ns-3 computes max(MinRto, srtt + max(G, 4 rttvar)), so
    // a clock granularity G of 200 ms is Linux's floor on that term. A bare 200 ms MinRto is not
    // Linux's: with it (and ns-3's 200 ms delayed ACKs) an all-reduce after an idle compute phase
    // backed off spuriously for ~45 s. Delayed ACKs wait at most Linux's TCP_ATO_MIN, 40 ms.
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(40)));
  } else {  // ns-3's own defaults (the process may have set Linux's for an earlier model)
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MilliSeconds(1)));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(Seconds(1)));  // RFC 6298
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(200)));
  }
  Config::SetDefault("ns3::TcpSocket::TcpNoDelay", BooleanValue(true));  // as ZeroMQ sets it
}

// One persistent TCP connection per ordered pair of workers, established before virtual time 0.
void Ns3Model::ConnectEveryPair(Impl& m, ns3::NodeContainer& nodes) {
  using namespace ns3;
  const int n = m.num_workers;
  m.connections.resize(static_cast<size_t>(n * n));
  for (int w = 0; w < n; ++w) {
    Ptr<Socket> listener = Socket::CreateSocket(nodes.Get(static_cast<uint32_t>(w)), TcpSocketFactory::GetTypeId());
    listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), kPort));
    listener->Listen();
    listener->SetAcceptCallback(
        Callback<bool, Ptr<Socket>, const Address&>([](Ptr<Socket>, const Address&) { return true; }),
        Callback<void, Ptr<Socket>, const Address&>([&m, w](Ptr<Socket> s, const Address& from) {
          const int src = m.worker_of_address.at(InetSocketAddress::ConvertFrom(from).GetIpv4().Get());
          Impl::Connection& c = m.Conn(src, w);
          c.rx = s;
          s->SetRecvCallback(Callback<void, Ptr<Socket>>([&m, &c](Ptr<Socket> sock) { m.OnReceive(sock, c); }));
        }));
  }
  std::vector<Ipv4Address> address_of(static_cast<size_t>(n));
  for (const auto& [a, w] : m.worker_of_address) address_of[static_cast<size_t>(w)] = Ipv4Address(a);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      Impl::Connection& c = m.Conn(i, j);
      c.tx = Socket::CreateSocket(nodes.Get(static_cast<uint32_t>(i)), TcpSocketFactory::GetTypeId());
      if (m.options.linux_window && m.options.tcp != "bbr") {
        // Linux's window rules around the variant (sim/ns3/linux_window.cc).
        ObjectFactory variant;
        variant.SetTypeId(TcpTypeName(m.options.tcp));
        DynamicCast<TcpSocketBase>(c.tx)->SetCongestionControlAlgorithm(LinuxWindowAround(variant.Create<TcpCongestionOps>()));
      }
      c.tx->Bind();
      c.tx->SetConnectCallback(Callback<void, Ptr<Socket>>([&m](Ptr<Socket>) {
                                 if (++m.connected == m.num_workers * (m.num_workers - 1)) Simulator::Stop();
                               }),
                               Callback<void, Ptr<Socket>>([i, j](Ptr<Socket>) {
                                 NARROWS_CHECK(false) << "ns-3: connection " << i << " -> " << j << " failed";
                               }));
      c.rtt_s = m.topology->PathLatency(i, j) + m.topology->PathLatency(j, i);
      c.random_loss = PathHasRandomLoss(*m.topology, i, j);
      c.tx->TraceConnectWithoutContext("HighestSequence", Callback<void, SequenceNumber32, SequenceNumber32>(
                                                              [&c](SequenceNumber32, SequenceNumber32 high) {
                                                                c.high_tx = high;
                                                                c.sent_any = true;
                                                              }));
      using State = TcpSocketState::TcpCongState_t;
      c.tx->TraceConnectWithoutContext("CongState", Callback<void, State, State>([&m, &c](State from, State to) {
                                         const bool was_open = from == TcpSocketState::CA_OPEN || from == TcpSocketState::CA_DISORDER;
                                         if (was_open && (to == TcpSocketState::CA_RECOVERY || to == TcpSocketState::CA_LOSS)) m.MarkCycle(c);
                                       }));
      c.tx->SetSendCallback(Callback<void, Ptr<Socket>, uint32_t>(
          [&m, &c](Ptr<Socket>, uint32_t) { Simulator::ScheduleNow([&m, &c] { m.Pump(c); }); }));
      Simulator::ScheduleNow([sock = c.tx, to = address_of[static_cast<size_t>(j)]] {
        sock->Connect(InetSocketAddress(to, kPort));
      });
    }
  }
  if (n > 1) {
    Simulator::Run();
    NARROWS_CHECK(m.connected == n * (n - 1)) << "ns-3: only " << m.connected << " of " << n * (n - 1)
                                              << " connections were established";
  }
  m.offset_ns = Simulator::Now().GetNanoSeconds();
}

int64_t Ns3Model::Impl::Unsent(const Connection& c) const {
  auto buffer = ns3::DynamicCast<ns3::TcpSocketBase>(c.tx)->GetTxBuffer();
  if (!c.sent_any) return buffer->Size();
  return std::max<int64_t>(0, buffer->TailSequence() - c.high_tx);
}

void Ns3Model::Impl::Pump(Connection& c) {
  while (c.written + c.skipped < c.queued) {
    int64_t room = c.tx->GetTxAvailable();
    if (options.fast_forward) room = std::min(room, kUnsentBytes - Unsent(c));
    if (room <= 0) return;
    const auto n = static_cast<uint32_t>(std::min<int64_t>({c.queued - c.skipped - c.written, room, kChunkBytes}));
    const int sent = c.tx->Send(ns3::Create<ns3::Packet>(n));
    if (sent <= 0) return;
    c.written += sent;
  }
}

void Ns3Model::Impl::OnReceive(ns3::Ptr<ns3::Socket> socket, Connection& c) {
  const int64_t before = c.received;
  while (ns3::Ptr<ns3::Packet> p = socket->Recv(kChunkBytes, 0)) c.received += p->GetSize();
  const int64_t now_virtual = ns3::Simulator::Now().GetNanoSeconds() - offset_ns;
  if (c.received > before) c.moved_ns = now_virtual;
  const double t = static_cast<double>(now_virtual) / 1e9;
  bool any = false;
  while (!c.messages.empty() && c.messages.front().end <= c.received + c.skipped) {
    sink->push_back({c.messages.front().id, t});
    c.messages.pop_front();
    --outstanding;
    any = true;
  }
  if (any) {
    ++generation;
    if (c.messages.empty()) active.erase(static_cast<int>(&c - connections.data()));
  }
  if (any && stop_at_delivery) ns3::Simulator::Stop();
}

}  // namespace narrows::sim
