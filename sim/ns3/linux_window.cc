// LinuxWindow: the packet-level model's congestion-window wrapper (sim/ns3/linux_window.h).
#include "sim/ns3/linux_window.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include <ns3/simulator.h>
#include <ns3/tcp-congestion-ops.h>
#include <ns3/tcp-socket-state.h>

namespace narrows::sim {
namespace {

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

ns3::Ptr<ns3::TcpCongestionOps> LinuxWindowAround(ns3::Ptr<ns3::TcpCongestionOps> inner) {
  return ns3::CreateObject<LinuxWindow>(std::move(inner));
}

}  // namespace narrows::sim
