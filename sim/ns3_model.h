// Ns3Model: packet-level network model. The topology becomes ns-3 nodes joined by point-to-point
// links (each direction with its own data rate, a shared propagation delay, a packet error model
// for loss; switch ports have drop-tail queues, workers fq_codel over a short ring, as Linux); every ordered pair of workers has one persistent TCP connection,
// established before virtual time 0 (as a rendezvous would). A message is its bytes (plus a frame
// header) appended to the pair's connection at its virtual send time; it is delivered when its last
// byte reaches the receiving socket. ns-3 runs in virtual time, step by step with the emulator
// (repeated Simulator::Run ended by a stop event), keeping congestion windows and queues across
// messages, and never past the time it is advanced to. Deterministic for a given seed.
//
// ns-3's simulator is a process-wide singleton: at most one Ns3Model exists at a time, and it must
// be used from one thread at a time (the emulator's scheduler lock provides that).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/block_plugins.h"
#include "sim/network_model.h"

namespace ns3 {
class NodeContainer;
}

namespace narrows::sim {

struct Ns3Options {
  std::string tcp = "cubic";     // cubic, newreno or bbr (ns-3 3.37 has TcpBbr)
  int mtu = 1500;                // bytes per IP packet; 9000 = jumbo frames
  int64_t queue_packets = 0;     // switch ports (drop-tail); 0 = queue_s, else one bandwidth-delay product, at least 100
  double queue_s = 0.0;          // switch ports: bytes for this many seconds at the link's bandwidth (at least 64 KiB), if queue_packets is 0
  std::string host_qdisc = "fq_codel";  // workers' egress: fq_codel (Linux's default) or drop_tail
  // Workers' interface rate (bits/s, the scenario's network.nic_bps): a worker's packets reach its
  // access link's queue at this pace; 0: at once.
  double nic_bps = 0.0;
  uint32_t seed = 1;             // ns-3 random streams (loss)
  int frame_header_bytes = 52;   // per message, as the real transport's frame header (deploy/frame.h)
  // Skip whole loss cycles of transfers that cycle steadily (sim/ns3/fast_forward.cc).
  bool fast_forward = true;
  // Linux's window rules around NewReno and CUBIC: growth only while the window is used, a restart
  // after idle (sim/ns3/linux_window.cc); false: ns-3's own.
  bool linux_window = true;
  // Retransmission timeout: Linux's (the smoothed RTT plus at least 200 ms, as tcp_set_rto) or
  // RFC 6298's (at least 1 s, ns-3's default).
  bool linux_rto = true;
};

// What the model reads from a scenario's own block, network.ns3 (the MTU and seed are the
// scenario's): the TCP variant, the switch ports' queue length and the workers' egress queue.
struct Ns3ScenarioOptions : core::PluginOptions {
  std::string tcp = "cubic";  // cubic, newreno or bbr (ns-3 3.37 has TcpBbr)
  int64_t queue_packets = 0;  // 0 = one bandwidth-delay product, at least 100
  bool fast_forward = true;   // false: every packet of every transfer
  std::string host_qdisc = "fq_codel";  // or drop_tail (a switch port's queue: as the link emulator's links)
  bool linux_window = true;   // window: linux (growth while used, restart after idle) or ns3
  bool linux_rto = true;      // rto: linux (srtt + max(4 rttvar, 200 ms)) or rfc6298 (at least 1 s)
};

class Ns3Model : public NetworkModel {
 public:
  Ns3Model(Topology topology, Ns3Options options);
  ~Ns3Model() override;
  Ns3Model(const Ns3Model&) = delete;
  Ns3Model& operator=(const Ns3Model&) = delete;

  int64_t StartFlow(int src, int dst, int64_t bytes, double now) override;
  double NextEventTime() const override;
  void AdvanceTo(double t, std::vector<Delivery>* delivered) override;
  void AdvanceUntilDelivery(double limit, std::vector<Delivery>* delivered) override;
  const Topology& topology() const override { return topology_; }
  // Bits each direction transmitted over virtual time (counted as each packet leaves its device),
  // packets its error model dropped (loss, bursts, a down link) and its device queue dropped.
  const LinkCounters* counters() const override;
  Stalest StalestFlow() const override;

  // ns-3 events executed so far (for benchmarks).
  uint64_t events() const;
  // Fast-forward's jumps so far and the virtual time they advanced in all.
  int64_t jumps() const;
  double skipped_s() const;

 private:
  struct Impl;
  // Whether Run returns at the first delivery or only at its time limit.
  enum class RunUntil { kLimit, kFirstDelivery };
  void Run(double limit, RunUntil until, std::vector<Delivery>* delivered);
  // The constructor's stages: the network (nodes, stacks, links, queues, routes), then a TCP
  // connection per ordered pair of workers, then the links' states from virtual time 0.
  static ns3::NodeContainer BuildNetwork(Impl& m, const Topology& topology);
  static void ConnectEveryPair(Impl& m, ns3::NodeContainer& nodes);
  static void ApplyLinkStates(Impl& m, const Topology& topology);
  static void CountQueueDrops(Impl& m);

  Topology topology_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace narrows::sim
