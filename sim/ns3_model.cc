#include "sim/ns3_model.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <set>

#include <ns3/core-module.h>
#include <ns3/internet-module.h>
#include <ns3/network-module.h>
#include <ns3/point-to-point-module.h>
#include <ns3/traffic-control-module.h>

#include "core/check.h"
#include "core/scenario.h"
#include "sim/network_registry.h"

namespace narrows::sim {
namespace {

constexpr uint16_t kPort = 9000;
constexpr int kTcpIpHeaderBytes = 52;  // IPv4 20 + TCP 20 + timestamp option 12
constexpr int64_t kMinQueuePackets = 100;
constexpr uint32_t kHostRingPackets = 16;  // device queue under a host's queue discipline
constexpr uint32_t kNicQueuePackets = 10000;  // a NIC's transmit queue without one
constexpr uint32_t kChunkBytes = 64 * 1024;  // bytes handed to a socket per Send call
constexpr uint32_t kBufferBytes = 1u << 30;
// Fast-forward: bytes a connection keeps written but not yet sent (refilled at each ACK), how
// closely two congestion cycles must agree to be called periodic, and the shortest interval
// between looks for a jump.
constexpr int64_t kUnsentBytes = 2 << 20;
constexpr double kCycleTolerance = 0.02;
constexpr size_t kMaxEpisodesPerCycle = 2;
constexpr int64_t kMinWindowNs = 1'000'000;

bool g_model_alive = false;

int64_t ToNs(double seconds) { return std::llround(seconds * 1e9); }

// Nodes of a Topology found from its routes: a link's two ends are variables; consecutive links on
// a route share a node, a route starts at its source worker and ends at its destination.
struct Graph {
  std::vector<int> from, to;  // node of each link's ends
  int num_nodes = 0;
};

Graph NodesOf(const Topology& t) {
  const int n = t.num_workers(), links = static_cast<int>(t.links().size());
  // Variables: workers 0..n-1, then link l's start n+2l and end n+2l+1.
  std::vector<int> parent(static_cast<size_t>(n + 2 * links));
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  auto join = [&](int a, int b) {
    a = find(a), b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);  // workers stay their own roots
  };
  for (int l = 0; l + 1 < links; l += 2) {  // links 2k and 2k+1 are the two directions of one cable
    join(n + 2 * l, n + 2 * (l + 1) + 1);
    join(n + 2 * l + 1, n + 2 * (l + 1));
  }
  std::vector<bool> used(static_cast<size_t>(links), false);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const auto& r = t.Route(i, j);
      NARROWS_CHECK(!r.empty()) << "no route from " << i << " to " << j;
      join(i, n + 2 * r.front());
      join(j, n + 2 * r.back() + 1);
      for (size_t k = 0; k + 1 < r.size(); ++k) join(n + 2 * r[k] + 1, n + 2 * r[k + 1]);
      for (int l : r) used[l] = true;
    }
  }
  Graph g;
  std::map<int, int> node_of_root;
  for (int i = 0; i < n; ++i) node_of_root[find(i)] = i;
  g.num_nodes = n;
  auto node = [&](int var) {
    auto [it, inserted] = node_of_root.emplace(find(var), g.num_nodes);
    if (inserted) ++g.num_nodes;
    return it->second;
  };
  for (int l = 0; l < links; ++l) {
    const bool cable_used = used[l] || used[l ^ 1];
    g.from.push_back(cable_used ? node(n + 2 * l) : -1);
    g.to.push_back(cable_used ? node(n + 2 * l + 1) : -1);
  }
  return g;
}

std::string TcpTypeName(const std::string& tcp) {
  if (tcp == "cubic") return "ns3::TcpCubic";
  if (tcp == "newreno") return "ns3::TcpNewReno";
  if (tcp == "bbr") return "ns3::TcpBbr";
  NARROWS_CHECK(false) << "unknown TCP variant '" << tcp << "'";
  return "";
}

// Linux's window around ns-3's NewReno and CUBIC: seven of Linux's rules that ns-3 3.37 lacks, each
// met by a training run's traffic (messages separated by compute).
// - The slow-start threshold from the window: Linux's Reno halves the window (tcp_reno_ssthresh),
//   ns-3's NewReno the bytes in flight (RFC 5681), which, after a loss found as a message starts,
//   are a fraction of the window: on home-100m DDP with workers 3% apart, a window of 10 MB fell to
//   400 kB and regrew over twenty steps (1.4 s a step where the ns-3 model had 0.8 before the loss
//   and the link emulator measures 0.78-0.86). CUBIC reads the window in both.
// - Slow start by the segments acknowledged (tcp_slow_start, RFC 3465): ns-3 adds one segment per
//   ACK, so with delayed ACKs its window grows 1.5x a round trip, not 2x. NewReno only: ns-3's
//   CUBIC grows by the segments acknowledged already (a first 4 MB transfer takes the same time).
// - Congestion avoidance by the segments acknowledged too (tcp_cong_avoid_ai: a segment more once
//   a window's worth of segments is acknowledged): ns-3's NewReno adds a segment's share per ACK
//   whatever it acknowledges, so with delayed ACKs its window grows half a segment a round trip,
//   not one. Under random loss, where the window lives in this growth, that costs up to sqrt(2)
//   of the throughput: at 1% loss the fidelity runs' ns-3 predictions went from 45-48% slower
//   than the link emulator's Linux to 15-19% faster (docs/results/fidelity.md). NewReno only
//   (ns-3's CUBIC counts the segments acknowledged already).
// - Growth only while the window is used (tcp_is_cwnd_limited, RFC 7661): in slow start while at
//   least half of it was in flight in the last window of data, after it while it was full. ns-3
//   grows on every ACK, so a flow of messages smaller than the path grew a window far past them.
// - A restart after idle (tcp_slow_start_after_idle, on by default): on sending after an idle
//   period longer than the RTO, ssthresh is kept at least 3/4 of the window and the window halved
//   once per RTO idle, down to the initial window (tcp_cwnd_restart). The RTO is Linux's, srtt +
//   max(4 rttvar, 200 ms) (RFC 6298's estimator with Linux's floor), not ns-3's 1 s minimum, which
//   stays the retransmission timer's. Idle time is read on ns-3's clock, which a fast-forward jump
//   does not move: a connection idle while others' transfers were jumped restarts as if idle for
//   that much less.
// - A timeout during fast recovery keeps the threshold the recovery set (tcp_enter_loss recomputes
//   it only from the open or disorder state, or on a loss episode's first timeout). ns-3 recomputed
//   it from the window, which the recovery had shrunk to a fraction of the one before the loss, and
//   the window then regrew by a segment a round trip: on home-100m DDP a step of 5.8 s and fifteen
//   steps to come back, where the real run took 1.12-1.29 s a step.
// - Growth by the segments each ACK delivered (tcp_cong_control's acked_sacked: acknowledged or
//   selectively acknowledged for the first time), not by how far the cumulative ACK moved. The ACK
//   that ends a fast recovery moves it past every segment selectively acknowledged during the
//   recovery, about a window's worth, and ns-3 passes them all to the window at once: with the
//   congestion-avoidance rule above, two segments of growth at the end of every recovery, where
//   Linux's window gets credit for the one or two segments that ACK delivered. Under random loss,
//   where the window lives between recoveries, ns-3 was 13% faster than the link emulator's Linux
//   on one bulk transfer (20 MB at 100 Mbit/s, 60 ms round trip, 1% loss: 60.5 s against
//   66.9-71.5 s; 71.1 s with the rule) and 14-19% faster on the fidelity runs at 1% loss.
// BBR controls its window itself (and Linux skips the restart for it), so it is not wrapped.
class LinuxWindow : public ns3::TcpCongestionOps {
 public:
  static ns3::TypeId GetTypeId() {
    static ns3::TypeId tid = ns3::TypeId("narrows::LinuxWindow").SetParent<ns3::TcpCongestionOps>().SetGroupName("Internet");
    return tid;
  }
  explicit LinuxWindow(ns3::Ptr<ns3::TcpCongestionOps> inner) : inner_(std::move(inner)), reno_(inner_->GetName() == "TcpNewReno") {}
  ~LinuxWindow() override {
    if (tcb_) tcb_->TraceDisconnectWithoutContext("BytesInFlight", ns3::MakeCallback(&LinuxWindow::OnInFlight, this));
  }

  std::string GetName() const override { return "LinuxWindow(" + inner_->GetName() + ")"; }
  void Init(ns3::Ptr<ns3::TcpSocketState> tcb) override {
    tcb_ = tcb;
    tcb->TraceConnectWithoutContext("BytesInFlight", ns3::MakeCallback(&LinuxWindow::OnInFlight, this));
    inner_->Init(tcb);
  }
  // The threshold from the window, not the bytes in flight (the first rule above). A timeout
  // during fast recovery keeps the threshold the recovery set (the fifth rule above).
  uint32_t GetSsThresh(ns3::Ptr<const ns3::TcpSocketState> tcb, uint32_t) override {
    const bool entering = entering_recovery_;
    entering_recovery_ = false;
    if (tcb->m_congState.Get() == ns3::TcpSocketState::CA_RECOVERY && !entering) return tcb->m_ssThresh.Get();
    return inner_->GetSsThresh(tcb, tcb->m_cWnd.Get());
  }
  void IncreaseWindow(ns3::Ptr<ns3::TcpSocketState> tcb, uint32_t acked) override {
    if (!CwndLimited(*tcb)) return;
    // The segments this ACK delivered, acknowledged or selectively acknowledged for the first
    // time (the seventh rule above).
    acked = (tcb->m_lastAckedSackedBytes + tcb->m_segmentSize - 1) / tcb->m_segmentSize;
    if (reno_ && tcb->m_cWnd < tcb->m_ssThresh && acked > 0) {  // Linux's tcp_slow_start
      const uint32_t grow = std::min(acked * tcb->m_segmentSize, tcb->m_ssThresh.Get() - tcb->m_cWnd.Get());
      tcb->m_cWnd = tcb->m_cWnd.Get() + grow;
      acked -= std::min(acked, (grow + tcb->m_segmentSize - 1) / tcb->m_segmentSize);
    }
    if (acked == 0) return;
    if (!reno_) {
      inner_->IncreaseWindow(tcb, acked);
      return;
    }
    // Linux's tcp_cong_avoid_ai, its window w in segments: credits past w (left from a larger
    // window) give one segment at once, then a segment per w acknowledged.
    const uint32_t mss = tcb->m_segmentSize;
    const uint32_t w = std::max<uint32_t>(1, tcb->m_cWnd.Get() / mss);
    uint32_t cwnd = tcb->m_cWnd.Get();
    if (cwnd_cnt_ >= w) {
      cwnd_cnt_ = 0;
      cwnd += mss;
    }
    cwnd_cnt_ += acked;
    if (cwnd_cnt_ >= w) {
      const uint32_t delta = cwnd_cnt_ / w;
      cwnd_cnt_ -= delta * w;
      cwnd += delta * mss;
    }
    tcb->m_cWnd = cwnd;
  }
  void PktsAcked(ns3::Ptr<ns3::TcpSocketState> tcb, uint32_t acked, const ns3::Time& rtt) override {
    if (rtt.IsStrictlyPositive()) {
      const double r = rtt.GetSeconds();
      if (srtt_s_ <= 0) {
        srtt_s_ = r;
        rttvar_s_ = r / 2;
      } else {
        rttvar_s_ = 0.75 * rttvar_s_ + 0.25 * std::abs(srtt_s_ - r);
        srtt_s_ = 0.875 * srtt_s_ + 0.125 * r;
      }
    }
    inner_->PktsAcked(tcb, acked, rtt);
  }
  void CongestionStateSet(ns3::Ptr<ns3::TcpSocketState> tcb, const ns3::TcpSocketState::TcpCongState_t state) override {
    // ns-3 enters fast recovery by setting the state, then asking for the threshold.
    entering_recovery_ = state == ns3::TcpSocketState::CA_RECOVERY;
    if (state == ns3::TcpSocketState::CA_LOSS) cwnd_cnt_ = 0;  // as tcp_enter_loss
    inner_->CongestionStateSet(tcb, state);
  }
  void CwndEvent(ns3::Ptr<ns3::TcpSocketState> tcb, const ns3::TcpSocketState::TcpCAEvent_t event) override {
    if (event == ns3::TcpSocketState::CA_EVENT_TX_START && sent_any_) Restart(*tcb);
    inner_->CwndEvent(tcb, event);
  }
  bool HasCongControl() const override { return inner_->HasCongControl(); }
  void CongControl(ns3::Ptr<ns3::TcpSocketState> tcb, const ns3::TcpRateOps::TcpRateConnection& rc,
                   const ns3::TcpRateOps::TcpRateSample& rs) override {
    inner_->CongControl(tcb, rc, rs);
  }
  ns3::Ptr<ns3::TcpCongestionOps> Fork() override { return ns3::CreateObject<LinuxWindow>(inner_->Fork()); }

 private:
  double RtoS() const { return srtt_s_ > 0 ? srtt_s_ + std::max(4 * rttvar_s_, 0.2) : 1.0; }

  // A send raises the bytes in flight: Linux's tcp_cwnd_validate, at each send.
  void OnInFlight(uint32_t before, uint32_t now) {
    if (now <= before || !tcb_) return;
    const ns3::TcpSocketState& t = *tcb_;
    last_send_ = ns3::Simulator::Now();
    sent_any_ = true;
    const bool full = now + t.m_segmentSize > t.m_cWnd.Get();
    if (t.m_lastAckedSeq >= usage_seq_ || full || (!cwnd_limited_ && now > max_in_flight_)) {
      cwnd_limited_ = full;
      max_in_flight_ = now;
      usage_seq_ = t.m_highTxMark.Get();
    }
  }
  bool CwndLimited(const ns3::TcpSocketState& t) const {
    if (cwnd_limited_) return true;
    return t.m_cWnd.Get() < t.m_ssThresh.Get() && t.m_cWnd.Get() < 2 * max_in_flight_;
  }
  void Restart(ns3::TcpSocketState& t) {
    const double idle = (ns3::Simulator::Now() - last_send_).GetSeconds();
    const double rto = RtoS();
    if (idle <= rto) return;
    uint32_t cwnd = t.m_cWnd.Get();
    const uint32_t restart = std::min(t.m_initialCWnd * t.m_segmentSize, cwnd);
    if (t.m_congState.Get() != ns3::TcpSocketState::CA_RECOVERY && t.m_congState.Get() != ns3::TcpSocketState::CA_CWR) {
      t.m_ssThresh = std::max(t.m_ssThresh.Get(), (cwnd >> 1) + (cwnd >> 2));
    }
    for (double left = idle - rto; left > 0 && cwnd > restart; left -= rto) cwnd >>= 1;
    t.m_cWnd = std::max(cwnd, restart);
    cwnd_limited_ = false;
    max_in_flight_ = 0;
  }

  ns3::Ptr<ns3::TcpCongestionOps> inner_;
  bool reno_;
  ns3::Ptr<ns3::TcpSocketState> tcb_;
  ns3::Time last_send_;
  bool sent_any_ = false;
  bool entering_recovery_ = false;
  bool cwnd_limited_ = false;
  uint32_t max_in_flight_ = 0;
  uint32_t cwnd_cnt_ = 0;  // segments acknowledged towards the next in congestion avoidance
  ns3::SequenceNumber32 usage_seq_{0};
  double srtt_s_ = 0, rttvar_s_ = 0;
};

}  // namespace

struct Ns3Model::Impl {
  struct Outgoing {  // one message waiting in or being sent from a connection
    int64_t id;
    int64_t end;  // the connection's byte offset just after this message
  };
  struct Mark {  // the start of a connection's loss episode
    int64_t ns3_ns, received;
    uint64_t generation;
    std::vector<LinkCounters::Counts> links;  // without their bins
  };
  struct Connection {
    ns3::Ptr<ns3::Socket> tx;
    ns3::Ptr<ns3::Socket> rx;   // the accepted socket at the destination
    int64_t queued = 0;         // bytes handed to the model for this pair
    int64_t written = 0;        // bytes written into the sending socket
    int64_t received = 0;       // bytes read at the receiving socket
    // Bytes of the stream that fast-forward moved without sending: the stream's byte k is the
    // socket's byte k - skipped, on both ends (the sender writes queued - skipped bytes in all).
    int64_t skipped = 0;
    ns3::SequenceNumber32 high_tx;  // the highest sequence number sent so far
    bool sent_any = false;
    std::deque<Mark> marks;  // the starts of its last few loss episodes (fast-forward)
    std::deque<Outgoing> messages;  // not yet delivered
    double rtt_s = 0.0;             // the path's propagation round trip
    bool random_loss = false;       // a link of its path (either way) drops at random: never jumped
    int64_t moved_ns = 0;           // virtual time its receiver last got bytes (or its send, if later)
  };
  // One direction of a topology link: the device that transmits on it and the device that receives.
  struct Direction {
    ns3::Ptr<ns3::PointToPointNetDevice> tx_device;
    ns3::Ptr<ns3::RateErrorModel> rx_errors;
    ns3::Ptr<ns3::PointToPointNetDevice> rx_device;
  };
  // A direction's loss over virtual time: the link's Gilbert-Elliott states (sim/network_model.h,
  // the same switches as the analytic model's) while it is up, every packet while it is down.
  struct LinkLoss {
    Direction d;
    LossStates states;
    bool up = true;
    bool armed = false;  // its next switch is scheduled
    void Apply() const { d.rx_errors->SetRate(up ? states.loss() : 1.0); }
  };
  std::vector<std::unique_ptr<LinkLoss>> link_loss;  // per topology link (null where unused)
  LinkCounters counters;

  // Schedules each bursty link's next switch. Switches are events only while something is being
  // sent (they go on for ever; a run with nothing outstanding must be able to drain): one that
  // falls while nothing is outstanding is taken when the next message starts.
  void ArmLossSwitches() {
    const double now_s = static_cast<double>(ns3::Simulator::Now().GetNanoSeconds() - offset_ns) / 1e9;
    for (auto& ll : link_loss) {
      if (!ll || ll->armed || ll->states.next_switch() == kNever) continue;
      ll->states.WalkTo(now_s);
      ll->Apply();
      ll->armed = true;
      LinkLoss* raw = ll.get();
      At(std::llround(raw->states.next_switch() * 1e9), [this, raw] {
        raw->armed = false;
        raw->states.Switch();
        raw->Apply();
        ++generation;
        if (outstanding > 0) ArmLossSwitches();
      });
    }
  }

  // Events at virtual times (a run's limit, loss switches, bandwidth changes), kept so that a
  // fast-forward jump, which moves virtual time against ns-3's, can move them with it.
  struct Timed {
    int64_t at_ns;  // virtual
    std::function<void()> fn;
    ns3::EventId id;
  };
  std::map<uint64_t, Timed> timed;
  uint64_t next_timed = 0;

  uint64_t At(int64_t at_ns, std::function<void()> fn) {
    const uint64_t key = next_timed++;
    Timed& t = timed[key];
    t.at_ns = at_ns;
    t.fn = std::move(fn);
    Arm(key, t);
    return key;
  }
  void Arm(uint64_t key, Timed& t) {
    const int64_t delay = std::max<int64_t>(0, offset_ns + t.at_ns - ns3::Simulator::Now().GetNanoSeconds());
    t.id = ns3::Simulator::Schedule(ns3::NanoSeconds(delay), [this, key] {
      auto it = timed.find(key);
      if (it == timed.end()) return;
      auto fn = std::move(it->second.fn);
      timed.erase(it);
      fn();
    });
  }
  void Cancel(uint64_t key) {
    auto it = timed.find(key);
    if (it == timed.end()) return;
    ns3::Simulator::Cancel(it->second.id);
    timed.erase(it);
  }

  Ns3Options options;
  const Topology* topology = nullptr;
  int num_workers = 0;
  int64_t offset_ns = 0;  // ns-3 time of virtual time 0 (after the connections are established)
  int64_t now_ns = 0;     // virtual time reached, in ns
  bool stopped_early = false;  // the last run stopped at a delivery: more may happen at now_ns
  bool drained = false;        // the last run ran out of events
  int64_t next_id = 0;
  int64_t outstanding = 0;
  std::vector<Connection> connections;  // src * n + dst
  std::map<uint32_t, int> worker_of_address;
  std::vector<Direction> directions;  // per topology link
  std::vector<Delivery>* sink = nullptr;
  bool stop_at_delivery = false;
  int connected = 0;

  Connection& Conn(int src, int dst) { return connections[static_cast<size_t>(src * num_workers + dst)]; }

  // Bytes written into the socket and not yet sent once.
  int64_t Unsent(const Connection& c) const {
    auto buffer = ns3::DynamicCast<ns3::TcpSocketBase>(c.tx)->GetTxBuffer();
    if (!c.sent_any) return buffer->Size();
    return std::max<int64_t>(0, buffer->TailSequence() - c.high_tx);
  }

  // Keeps the connection's socket supplied: with fast-forward, at most kUnsentBytes ahead of what
  // TCP has sent (refilled at each ACK), so that the stream's remainder can still be skipped.
  void Pump(Connection& c) {
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

  void OnReceive(ns3::Ptr<ns3::Socket> socket, Connection& c) {
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

  // Fast-forward: steady transfers advanced by whole congestion cycles. A transfer in congestion
  // avoidance cycles: its window grows until a loss episode cuts it, and grows again. The start
  // of each episode is marked (ns-3's time, the bytes received, every link's counters). Once the
  // last two cycles of every active connection agree within kCycleTolerance in length and bytes,
  // all active connections cycle with the same period, and nothing started, ended or switched
  // since the first of those marks, the transfers are periodic, and they are advanced by a whole
  // number N of cycles in one step: virtual time jumps by N periods while ns-3's clock stays put
  // (offset_ns falls), each connection's stream skips N cycles' bytes, each link's counters grow
  // by N cycles' worth. Nothing inside ns-3 is touched — windows, timers, sequence numbers, queues
  // — and a whole number of cycles brings every transfer back to the phase it left, so ns-3
  // resumes from the state it would have reached; only the mapping of ns-3's time to virtual time
  // and of socket bytes to stream bytes moves. (Holding a state measured merely as even — a flat
  // stretch of a window's growth — skips the loss episodes that set the average rate: 4.6% error
  // on a 1 GB transfer, measured.) Connections whose path has random loss (or bursts) are never
  // jumped: their cycles are draws, not a period, and two that happen to agree are biased toward
  // the long ones (timeouts): +29% on 50 MB over a WAN at 1% loss, measured. A jump ends before the next event at a virtual time (the
  // run's limit, a loss switch, a bandwidth change) and leaves each stream's last cycle of bytes,
  // plus whatever is already in its socket, to packet level, so every start, end and change runs
  // packet by packet.
  std::set<int> active;  // connections with undelivered messages
  uint64_t generation = 0;  // changes whenever the set of transfers or a link's state changes
  uint64_t sampled_generation = ~uint64_t{0};
  int64_t window_ns = kMinWindowNs;
  bool sampling = false;
  int64_t jumps = 0;
  int64_t skipped_ns = 0;

  void MarkCycle(Connection& c) {
    if (!options.fast_forward) return;
    Mark mark{ns3::Simulator::Now().GetNanoSeconds(), c.received, generation, {}};
    for (const auto& l : counters.links()) {
      mark.links.push_back(l);
      mark.links.back().bins.clear();
    }
    c.marks.push_back(std::move(mark));
    if (c.marks.size() > 2 * kMaxEpisodesPerCycle + 1) c.marks.pop_front();
  }

  // Looks for a jump every round trip of the longest active path.
  void StartSampling() {
    if (sampling) return;
    sampling = true;
    ns3::Simulator::Schedule(ns3::NanoSeconds(window_ns), [this] { SampleAndJump(); });
  }

  void SampleAndJump() {
    sampling = false;
    if (outstanding == 0) return;
    if (generation != sampled_generation) {
      sampled_generation = generation;
      double rtt = 0.0;
      for (int k : active) rtt = std::max(rtt, connections[static_cast<size_t>(k)].rtt_s);
      window_ns = std::max(kMinWindowNs, static_cast<int64_t>(std::llround(rtt * 1e9)));
    }
    Jump();
    // Only while something else can happen: a run with nothing left to do must drain.
    if (!ns3::Simulator::IsFinished()) StartSampling();
  }

  void Jump() {
    const int64_t now_virtual = ns3::Simulator::Now().GetNanoSeconds() - offset_ns;
    int64_t bound = std::numeric_limits<int64_t>::max();
    for (const auto& [key, t] : timed) bound = std::min(bound, t.at_ns - now_virtual);
    double period = 0.0;
    std::vector<int64_t> cycle_bytes;
    const Connection* reference = nullptr;
    const Mark* reference_from = nullptr;  // the reference's last cycle starts here and ends at its last mark
    for (int k : active) {
      if (connections[static_cast<size_t>(k)].random_loss) return;
    }
    for (int k : active) {
      const Connection& c = connections[static_cast<size_t>(k)];
      // A cycle of one loss episode, or of two (windows can alternate between two shapes).
      const Mark *b = nullptr, *z = nullptr;
      double t2 = 0.0, b2 = 0.0;
      for (size_t episodes = 1; episodes <= kMaxEpisodesPerCycle && b == nullptr; ++episodes) {
        if (c.marks.size() < 2 * episodes + 1) break;
        const Mark& x = c.marks[c.marks.size() - 2 * episodes - 1];
        const Mark& y = c.marks[c.marks.size() - episodes - 1];
        const Mark& w = c.marks.back();
        if (x.generation != generation) continue;  // something started, ended or switched since
        const auto t1 = static_cast<double>(y.ns3_ns - x.ns3_ns), tt = static_cast<double>(w.ns3_ns - y.ns3_ns);
        const auto b1 = static_cast<double>(y.received - x.received), bb = static_cast<double>(w.received - y.received);
        if (bb <= 0 || std::abs(tt - t1) > kCycleTolerance * tt || std::abs(bb - b1) > kCycleTolerance * bb) continue;
        if (period != 0.0 && std::abs(tt - period) > kCycleTolerance * period) continue;
        b = &y, z = &w, t2 = tt, b2 = bb;
      }
      if (b == nullptr) return;
      if (period == 0.0) {
        period = t2;
        reference = &c;
        reference_from = b;
      }
      cycle_bytes.push_back(z->received - b->received);
      // The stream may skip up to its front message's end, less what the socket already holds
      // and one more cycle.
      const double room = static_cast<double>(c.messages.front().end - c.written - c.skipped) - b2;
      bound = std::min(bound, static_cast<int64_t>(room / b2 * t2));
    }
    if (reference == nullptr || bound <= 0) return;
    const int64_t cycles = static_cast<int64_t>(static_cast<double>(bound) / period);
    if (cycles < 1) return;
    const auto delta = static_cast<int64_t>(std::floor(static_cast<double>(cycles) * period));
    size_t i = 0;
    for (int k : active) {
      Connection& moved = connections[static_cast<size_t>(k)];
      moved.skipped += cycles * cycle_bytes[i++];
      moved.moved_ns = now_virtual + delta;
    }
    const double from_s = static_cast<double>(now_virtual) / 1e9, to_s = static_cast<double>(now_virtual + delta) / 1e9;
    const Mark &a = *reference_from, &b = reference->marks.back();
    for (size_t l = 0; l < a.links.size(); ++l) {
      const auto &x = a.links[l], &y = b.links[l];
      LinkCounters::Counts& c = counters.at(l);
      counters.AddBits(l, from_s, to_s, (y.bits - x.bits) * static_cast<double>(cycles));
      c.packets += cycles * (y.packets - x.packets);
      c.dropped_loss += cycles * (y.dropped_loss - x.dropped_loss);
      c.dropped_queue += cycles * (y.dropped_queue - x.dropped_queue);
      c.queued += cycles * (y.queued - x.queued);
      c.queue_delay_sum_s += (y.queue_delay_sum_s - x.queue_delay_sum_s) * static_cast<double>(cycles);
    }
    offset_ns -= delta;
    for (auto& [key, t] : timed) {
      ns3::Simulator::Cancel(t.id);
      Arm(key, t);
    }
    ++jumps;
    skipped_ns += delta;
  }
};

namespace {

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

// Each link's queue defaults to one bandwidth-delay product of the longest path crossing it.
std::vector<double> LinkRtts(const Topology& topology) {
  const auto& links = topology.links();
  const int n = topology.num_workers();
  std::vector<double> link_rtt(links.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const double rtt = topology.PathLatency(i, j) + topology.PathLatency(j, i);
      for (int l : topology.Route(i, j)) link_rtt[l] = std::max(link_rtt[l], rtt);
    }
  }
  return link_rtt;
}

double PeakBandwidth(const Link& l) {
  double b = l.bandwidth_bps;
  for (const auto& c : l.schedule) b = std::max(b, c.bandwidth_bps);
  return b;
}

}  // namespace

// The nodes (workers, then switches), their internet stacks, the point-to-point links with their
// queues and error models, and the routes.
ns3::NodeContainer Ns3Model::BuildNetwork(Impl& m, const Topology& topology) {
  using namespace ns3;
  const Ns3Options& options = m.options;
  const int n = m.num_workers;
  const Graph g = NodesOf(topology);
  const auto& links = topology.links();
  const std::vector<double> link_rtt = LinkRtts(topology);
  Ipv4AddressGenerator::Reset();  // addresses are global too; a previous model's would collide
  // With a NIC rate, each worker reaches its links through a node of its own (its interface),
  // joined to it at that rate: a worker's packets reach its access link's queue at the NIC's pace,
  // not all at once. Nodes: workers, switches, then the NICs.
  const bool nic = options.nic_bps > 0.0;
  const int nic_base = g.num_nodes;
  auto end_node = [&](int node) { return nic && node >= 0 && node < n ? nic_base + node : node; };
  NodeContainer nodes;
  nodes.Create(static_cast<uint32_t>(g.num_nodes + (nic ? n : 0)));
  InternetStackHelper internet;
  internet.Install(nodes);
  Ipv4AddressHelper addresses;
  addresses.SetBase("10.0.0.0", "255.255.255.252");
  TrafficControlHelper tc;
  // A worker's own egress: Linux's default fq_codel over a short device ring, so the ACKs of its
  // incoming flows do not wait behind (or drop behind) its outgoing data.
  auto host_fq_codel = [&](Ptr<PointToPointNetDevice> tx) {
    TrafficControlHelper fq;
    fq.SetRootQueueDisc("ns3::FqCoDelQueueDisc");
    fq.Install(NetDeviceContainer(tx));
    tx->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, kHostRingPackets));
  };
  for (int w = 0; nic && w < n; ++w) {
    PointToPointHelper p2p;
    p2p.SetChannelAttribute("Delay", TimeValue(Seconds(0)));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(static_cast<uint16_t>(options.mtu)));
    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(options.nic_bps))));
    NetDeviceContainer devices = p2p.Install(nodes.Get(static_cast<uint32_t>(w)), nodes.Get(static_cast<uint32_t>(nic_base + w)));
    Ipv4InterfaceContainer ifaces = addresses.Assign(devices);
    addresses.NewNetwork();
    tc.Uninstall(devices);
    for (uint32_t k = 0; k < 2; ++k) {
      auto tx = DynamicCast<PointToPointNetDevice>(devices.Get(k));
      if (k == 0 && options.host_qdisc == "fq_codel") {
        host_fq_codel(tx);
      } else {
        // As a Linux interface's transmit queue (the link emulator's TUN devices: 10,000 packets).
        tx->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, kNicQueuePackets));
      }
    }
    m.worker_of_address[ifaces.GetAddress(0).Get()] = w;
  }
  m.directions.resize(links.size());
  for (size_t l = 0; l + 1 < links.size(); l += 2) {
    const size_t r = l + 1;  // the reverse direction
    if (g.from[l] < 0 && g.from[r] < 0) continue;  // a cable no route crosses
    NARROWS_CHECK(std::abs(links[l].latency_s - links[r].latency_s) < 1e-12)
        << "links " << links[l].name << " and " << links[r].name << " differ in latency";
    PointToPointHelper p2p;
    p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(ToNs(links[l].latency_s))));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(static_cast<uint16_t>(options.mtu)));
    NetDeviceContainer devices = p2p.Install(nodes.Get(static_cast<uint32_t>(end_node(g.from[l]))),
                                             nodes.Get(static_cast<uint32_t>(end_node(g.to[l]))));
    Ipv4InterfaceContainer ifaces = addresses.Assign(devices);
    addresses.NewNetwork();
    tc.Uninstall(devices);  // no default queue discipline; hosts get theirs below
    for (auto [dir, k] : {std::pair{l, 0u}, std::pair{r, 1u}}) {
      const Link& link = links[dir];
      auto tx = DynamicCast<PointToPointNetDevice>(devices.Get(k));
      auto rx = DynamicCast<PointToPointNetDevice>(devices.Get(1 - k));
      tx->SetDataRate(DataRate(static_cast<uint64_t>(std::max(1.0, PeakBandwidth(link)))));
      const bool host = !nic && (k == 0 ? g.from[l] : g.to[l]) < n;
      if (host && options.host_qdisc == "fq_codel") {
        host_fq_codel(tx);
      } else {
        if (options.queue_packets <= 0 && options.queue_s > 0.0) {
          // queue_s at the link's bandwidth in bytes, as the link emulator's queues hold them: an
          // ACK takes its 52 bytes of the queue, not a full packet's place. Counted in packets of
          // the MTU, a port carrying one flow's data and another's ACKs (every worker's uplink in
          // a ring) was full at about two thirds of its bytes and dropped data the link emulator
          // holds: rounds of a 3.4 MB ring all-reduce among 4 workers over 100 Mbit/s and 1 ms took
          // 1.08 and 0.92 s in ns-3, then 0.61 s falling to 0.53 by the 20th as the windows regrew,
          // where the link emulator's Linux took 0.45 s and dropped nothing; 0.44 s in bytes.
          const int64_t bytes = std::max<int64_t>(64 << 10, std::llround(PeakBandwidth(link) / 8 * options.queue_s));
          tx->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::BYTES, static_cast<uint32_t>(bytes)));
        } else {
          const int64_t bdp_packets = std::llround(std::ceil(PeakBandwidth(link) / 8 * link_rtt[dir] / options.mtu));
          const int64_t queue = options.queue_packets > 0 ? options.queue_packets : std::max(kMinQueuePackets, bdp_packets);
          tx->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, static_cast<uint32_t>(queue)));
        }
      }
      auto errors = CreateObject<RateErrorModel>();
      errors->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
      errors->SetRate(0.0);  // no loss while connecting; the link's own state applies from time 0
      errors->AssignStreams(static_cast<int64_t>(dir));
      rx->SetReceiveErrorModel(errors);
      m.directions[dir] = {tx, errors, rx};
    }
    for (uint32_t k = 0; k < 2 && !nic; ++k) {
      const int node = k == 0 ? g.from[l] : g.to[l];
      if (node < n) m.worker_of_address[ifaces.GetAddress(k).Get()] = node;
    }
  }
  Ipv4GlobalRoutingHelper::PopulateRoutingTables();

  return nodes;
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
        // Linux's window rules around the variant (LinuxWindow above).
        ObjectFactory variant;
        variant.SetTypeId(TcpTypeName(m.options.tcp));
        DynamicCast<TcpSocketBase>(c.tx)->SetCongestionControlAlgorithm(CreateObject<LinuxWindow>(variant.Create<TcpCongestionOps>()));
      }
      c.tx->Bind();
      c.tx->SetConnectCallback(Callback<void, Ptr<Socket>>([&m](Ptr<Socket>) {
                                 if (++m.connected == m.num_workers * (m.num_workers - 1)) Simulator::Stop();
                               }),
                               Callback<void, Ptr<Socket>>([i, j](Ptr<Socket>) {
                                 NARROWS_CHECK(false) << "ns-3: connection " << i << " -> " << j << " failed";
                               }));
      c.rtt_s = m.topology->PathLatency(i, j) + m.topology->PathLatency(j, i);
      for (const auto* route : {&m.topology->Route(i, j), &m.topology->Route(j, i)}) {
        for (int l : *route) {
          const Link& link = m.topology->links()[static_cast<size_t>(l)];
          c.random_loss = c.random_loss || link.loss > 0 || (link.burst.mean_good_s > 0 && link.burst.loss > 0);
        }
      }
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

// From virtual time 0: each link's bandwidth and loss, then its schedule (a bandwidth of 0 is a
// link that is down: every packet is lost, and TCP backs off as it would).
void Ns3Model::ApplyLinkStates(Impl& m, const Topology& topology) {
  using namespace ns3;
  const auto& links = topology.links();
  m.link_loss.resize(links.size());
  m.counters = LinkCounters(links.size());
  for (size_t l = 0; l < links.size(); ++l) {
    const Impl::Direction d = m.directions[l];
    if (!d.tx_device) continue;
    m.link_loss[l] = std::make_unique<Impl::LinkLoss>(Impl::LinkLoss{d, LossStates(links[l]), true, false});
    Impl::LinkLoss* ll = m.link_loss[l].get();
    auto set = [ll](double bps) {
      if (bps > 0) ll->d.tx_device->SetDataRate(DataRate(static_cast<uint64_t>(bps)));
      ll->up = bps > 0;
      ll->Apply();
    };
    set(links[l].bandwidth_bps);
    // Counted from virtual time 0 on (the connections' handshakes before it are not traffic).
    auto now_s = [&m] { return static_cast<double>(Simulator::Now().GetNanoSeconds() - m.offset_ns) / 1e9; };
    d.tx_device->TraceConnectWithoutContext("PhyTxEnd", Callback<void, Ptr<const Packet>>([&m, l, now_s](Ptr<const Packet> p) {
      m.counters.AddBits(l, now_s(), now_s(), 8.0 * p->GetSize());
      ++m.counters.at(l).packets;
    }));
    d.rx_device->TraceConnectWithoutContext("PhyRxDrop", Callback<void, Ptr<const Packet>>([&m, l](Ptr<const Packet>) {
      ++m.counters.at(l).dropped_loss;
    }));
    d.tx_device->GetQueue()->TraceConnectWithoutContext("Drop", Callback<void, Ptr<const Packet>>([&m, l](Ptr<const Packet>) {
      ++m.counters.at(l).dropped_queue;
    }));
    // The device queue is first in, first out (a tail drop never enters it): each dequeue is the
    // oldest enqueue.
    auto waiting = std::make_shared<std::deque<double>>();
    d.tx_device->GetQueue()->TraceConnectWithoutContext("Enqueue", Callback<void, Ptr<const Packet>>([waiting](Ptr<const Packet>) {
      waiting->push_back(static_cast<double>(Simulator::Now().GetNanoSeconds()) / 1e9);  // ns-3's time: jumps move virtual time
    }));
    d.tx_device->GetQueue()->TraceConnectWithoutContext("Dequeue", Callback<void, Ptr<const Packet>>([&m, l, waiting](Ptr<const Packet>) {
      if (waiting->empty()) return;
      const double delay = static_cast<double>(Simulator::Now().GetNanoSeconds()) / 1e9 - waiting->front();
      waiting->pop_front();
      auto& c = m.counters.at(l);
      ++c.queued;
      c.queue_delay_sum_s += delay;
      c.queue_delay_max_s = std::max(c.queue_delay_max_s, delay);
    }));
    for (const auto& c : links[l].schedule) {
      m.At(std::max<int64_t>(0, ToNs(c.at_s)), [&m, set, bps = c.bandwidth_bps] {
        set(bps);
        ++m.generation;
      });
    }
  }
  CountQueueDrops(m);
}

// The drops that a device's own queue never sees. A device is flow-controlled: while its queue is
// full ns-3's traffic-control layer holds back what IP hands it, and with no queue discipline on
// the device it drops it, with no trace in ns-3 3.37 (its TrafficControlLayer has no Drop source):
// a switch port's overflow, or a drop-tail host's, went uncounted. Such a packet is one that IP
// hands to a device whose queue is stopped at that moment (the same check, in the same call). A
// device with a queue discipline (a host's fq_codel) drops in it instead: its Drop trace.
void Ns3Model::CountQueueDrops(Impl& m) {
  using namespace ns3;
  std::map<Ptr<NetDevice>, size_t> link_of;
  for (size_t l = 0; l < m.directions.size(); ++l) {
    if (m.directions[l].tx_device) link_of[m.directions[l].tx_device] = l;
  }
  std::set<Ptr<Node>> nodes;
  for (const auto& [device, l] : link_of) nodes.insert(device->GetNode());
  for (const Ptr<Node>& node : nodes) {
    Ptr<Ipv4L3Protocol> ip = node->GetObject<Ipv4L3Protocol>();
    Ptr<TrafficControlLayer> tc = node->GetObject<TrafficControlLayer>();
    // Per interface of this node: the link its device sends on and the device's queue state, or
    // no queue where the device has a queue discipline (whose drops are traced) or carries no link.
    std::vector<std::pair<size_t, Ptr<NetDeviceQueue>>> watched(ip->GetNInterfaces());
    for (uint32_t i = 0; i < ip->GetNInterfaces(); ++i) {
      Ptr<NetDevice> device = ip->GetNetDevice(i);
      auto it = link_of.find(device);
      if (it == link_of.end()) continue;
      const size_t l = it->second;
      if (Ptr<QueueDisc> qdisc = tc->GetRootQueueDiscOnDevice(device)) {
        qdisc->TraceConnectWithoutContext("Drop", Callback<void, Ptr<const QueueDiscItem>>(
                                                      [&m, l](Ptr<const QueueDiscItem>) { ++m.counters.at(l).dropped_queue; }));
        continue;
      }
      Ptr<NetDeviceQueueInterface> queues = device->GetObject<NetDeviceQueueInterface>();
      if (!queues) continue;  // not flow-controlled: an overflow is the device queue's own Drop
      watched[i] = {l, queues->GetTxQueue(0)};
    }
    ip->TraceConnectWithoutContext("Tx", Callback<void, Ptr<const Packet>, Ptr<Ipv4>, uint32_t>(
                                             [&m, watched](Ptr<const Packet>, Ptr<Ipv4>, uint32_t i) {
                                               if (i < watched.size() && watched[i].second && watched[i].second->IsStopped()) {
                                                 ++m.counters.at(watched[i].first).dropped_queue;
                                               }
                                             }));
  }
}

Ns3Model::Ns3Model(Topology topology, Ns3Options options)
    : topology_(std::move(topology)), impl_(std::make_unique<Impl>()) {
  NARROWS_CHECK(!g_model_alive) << "only one ns-3 model may exist at a time (ns-3's simulator is global)";
  NARROWS_CHECK(options.host_qdisc == "fq_codel" || options.host_qdisc == "drop_tail")
      << "unknown host queue discipline '" << options.host_qdisc << "'";
  g_model_alive = true;
  Impl& m = *impl_;
  m.options = options;
  m.topology = &topology_;
  m.num_workers = topology_.num_workers();
  ConfigureTcp(options);
  ns3::NodeContainer nodes = BuildNetwork(m, topology_);
  ConnectEveryPair(m, nodes);
  ApplyLinkStates(m, topology_);
}

Ns3Model::~Ns3Model() {
  ns3::Simulator::Destroy();
  impl_.reset();
  g_model_alive = false;
}

uint64_t Ns3Model::events() const { return ns3::Simulator::GetEventCount(); }

int64_t Ns3Model::jumps() const { return impl_->jumps; }

double Ns3Model::skipped_s() const { return static_cast<double>(impl_->skipped_ns) / 1e9; }

NetworkModel::Stalest Ns3Model::StalestFlow() const {
  const Impl& m = *impl_;
  Stalest s;
  for (int k : m.active) {
    const Impl::Connection& c = m.connections[static_cast<size_t>(k)];
    const double since = static_cast<double>(c.moved_ns) / 1e9;
    if (!c.messages.empty() && since < s.since) s = {c.messages.front().id, since};
  }
  return s;
}

const LinkCounters* Ns3Model::counters() const { return &impl_->counters; }

int64_t Ns3Model::StartFlow(int src, int dst, int64_t bytes, double now) {
  Impl& m = *impl_;
  NARROWS_CHECK(src != dst && src >= 0 && dst >= 0 && src < m.num_workers && dst < m.num_workers)
      << "flow " << src << " -> " << dst;
  const int64_t at = ToNs(now);
  NARROWS_CHECK(at >= m.now_ns) << "flow started at " << now << " before model time " << m.now_ns / 1e9;
  if (at > m.now_ns) {
    std::vector<Delivery> skipped;
    AdvanceTo(now, &skipped);
    NARROWS_CHECK(skipped.empty()) << "StartFlow skipped deliveries; advance the model first";
  }
  const int64_t id = m.next_id++;
  Impl::Connection& c = m.Conn(src, dst);
  if (c.messages.empty()) c.moved_ns = at;
  c.queued += std::max<int64_t>(0, bytes) + m.options.frame_header_bytes;
  c.messages.push_back({id, c.queued});
  m.active.insert(src * m.num_workers + dst);
  ++m.generation;
  ++m.outstanding;
  if (m.options.fast_forward) m.StartSampling();
  m.drained = false;
  m.ArmLossSwitches();
  ns3::Simulator::Schedule(ns3::NanoSeconds(m.offset_ns + at) - ns3::Simulator::Now(), [&m, &c] { m.Pump(c); });
  return id;
}

double Ns3Model::NextEventTime() const {
  const Impl& m = *impl_;
  if (m.outstanding == 0 || m.drained) return kNever;
  // Every event up to now_ns has run, except after a run that stopped at a delivery: more may
  // happen at that very nanosecond. (In whole nanoseconds, ns-3's resolution, so that advancing to
  // any limit at or past this time makes progress.)
  return static_cast<double>(m.stopped_early ? m.now_ns : m.now_ns + 1) / 1e9;
}

void Ns3Model::AdvanceTo(double t, std::vector<Delivery>* delivered) { Run(t, RunUntil::kLimit, delivered); }

void Ns3Model::AdvanceUntilDelivery(double limit, std::vector<Delivery>* delivered) {
  if (NextEventTime() > limit) return;
  Run(limit, RunUntil::kFirstDelivery, delivered);
}

void Ns3Model::Run(double limit, RunUntil until, std::vector<Delivery>* delivered) {
  const bool stop_at_delivery = until == RunUntil::kFirstDelivery;
  using namespace ns3;
  Impl& m = *impl_;
  const int64_t limit_ns = limit < kNever ? ToNs(limit) : std::numeric_limits<int64_t>::max();
  if (limit_ns < m.now_ns || (limit_ns == m.now_ns && !m.stopped_early)) return;
  m.sink = delivered;
  m.stop_at_delivery = stop_at_delivery;
  const size_t before = delivered->size();
  bool reached_limit = false;
  uint64_t stop = ~uint64_t{0};
  if (limit_ns != std::numeric_limits<int64_t>::max()) {
    stop = m.At(limit_ns, [&reached_limit] {
      reached_limit = true;
      Simulator::Stop();
    });
  }
  Simulator::Run();
  m.Cancel(stop);
  m.sink = nullptr;
  const bool delivered_some = delivered->size() > before;
  m.stopped_early = stop_at_delivery && delivered_some && !reached_limit;
  m.drained = !reached_limit && !m.stopped_early;  // the run ended because no events were left
  const int64_t reached = Simulator::Now().GetNanoSeconds() - m.offset_ns;
  if (m.stopped_early) {
    m.now_ns = reached;
  } else if (limit_ns != std::numeric_limits<int64_t>::max()) {
    m.now_ns = limit_ns;
  } else {
    m.now_ns = std::max(m.now_ns, reached);
  }
}

}  // namespace narrows::sim

namespace narrows::sim {
namespace {

const core::KeyBlock kNs3Keys("network.ns3", "ns-3's packet-level TCP (network.model: ns3; docs/explanation/network-models.md).");
const core::EnumKey<std::string> kTcp(kNs3Keys, "tcp", {{"cubic", "cubic"}, {"newreno", "newreno"}, {"bbr", "bbr"}}, "cubic",
                                      core::Doc("congestion control"));
const core::IntKey kQueuePackets(kNs3Keys, "queue_packets", 0, 0, 1'000'000,
                                 core::Doc("every switch port's drop-tail queue; 0: queue_ms where set, else one "
                                           "bandwidth-delay product of the longest path crossing it, at least 100",
                                           "packets"));
const core::BoolKey kFastForward(kNs3Keys, "fast_forward", true,
                                 core::Doc("skip whole loss cycles of transfers that cycle steadily; false runs every packet"));
const core::EnumKey<std::string> kHostQdisc(kNs3Keys, "host_qdisc", {{"fq_codel", "fq_codel"}, {"drop_tail", "drop_tail"}},
                                            "fq_codel",
                                            core::Doc("a worker's own egress: fq_codel over a 16-packet ring (Linux's), or "
                                                      "a drop-tail queue like a switch port's"));
const core::EnumKey<bool> kWindow(kNs3Keys, "window", {{"linux", true}, {"ns3", false}}, true,
                                  core::Doc("Linux's window rules around NewReno and CUBIC, or ns-3 3.37's own"));
const core::EnumKey<bool> kRto(kNs3Keys, "rto", {{"linux", true}, {"rfc6298", false}}, true,
                               core::Doc("linux: srtt + max(4 rttvar, 200 ms), delayed ACKs 40 ms; rfc6298: at least 1 s, "
                                         "delayed ACKs 200 ms"));

NetworkModelPlugin Ns3Plugin() {
  NetworkModelPlugin p;
  p.parser.name = "ns3";
  p.parser.parse = [](core::OptionReader& r, const core::Scenario&) {
    auto o = std::make_shared<Ns3ScenarioOptions>();
    o->tcp = r.Enum(kTcp);
    o->queue_packets = r.Int(kQueuePackets);
    o->fast_forward = r.Bool(kFastForward);
    o->host_qdisc = r.Enum(kHostQdisc);
    o->linux_window = r.Enum(kWindow);
    o->linux_rto = r.Enum(kRto);
    return std::shared_ptr<const core::PluginOptions>(std::move(o));
  };
  p.make = [](Topology topology, const core::Scenario& sc) -> std::unique_ptr<NetworkModel> {
    const auto& own = sc.network.ModelOptions<Ns3ScenarioOptions>();
    Ns3Options o;
    o.tcp = own.tcp;
    o.mtu = sc.network.mtu;
    o.queue_packets = own.queue_packets;
    o.queue_s = sc.network.queue_ms / 1000.0;
    o.fast_forward = own.fast_forward;
    o.host_qdisc = own.host_qdisc;
    o.linux_window = own.linux_window;
    o.linux_rto = own.linux_rto;
    o.nic_bps = sc.network.nic_bps;
    o.seed = static_cast<uint32_t>(sc.seed % 0xffffffffu) + 1;
    return std::make_unique<Ns3Model>(std::move(topology), o);
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_NETWORK_MODEL(ns3_model, Ns3Plugin());

}  // namespace narrows::sim
