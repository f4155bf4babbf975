// The link emulator: real IP packets between worker namespaces (deploy/netns.h), each worker's TUN
// device joined to one Boost.Asio event loop that forwards every packet across the links of its
// route (a worker's access links, islands' WAN links: the topology the virtual-time emulator uses)
// with each link's bandwidth (a drop-tail byte queue of configurable depth), propagation latency,
// random and bursty loss and bandwidth schedule (0: the link is down, its packets are dropped). The kernels'
// own TCP runs end to end through it, so latency and loss act on real connections, which this
// kernel's missing netem cannot give. A link serialises its packets in order: a packet starts when
// the link is free, takes size / bandwidth, and arrives latency later at the next link's queue or
// at its destination. Worker w's address is `subnet` + w + 1. One thread runs the loop; Stats may
// be read from another.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/loss_states.h"
#include "core/status.h"
#include "deploy/netns.h"

namespace narrows::deploy {

struct EmulatedLink {
  std::string name;
  double bandwidth_bps = 1e9;
  double latency_s = 0.0;  // one-way propagation delay
  double loss = 0.0;       // probability that a packet is dropped, independently (the good state's)
  core::Burst burst;       // bursty loss (core/loss_states.h): the same episodes as the emulator's
  int64_t queue_bytes = 0; // drop-tail depth; 0: the bandwidth-delay product at 100 ms, at least 64 KiB
  struct Change {
    double at_s;  // from the emulator's start
    double bandwidth_bps;
  };
  std::vector<Change> schedule;  // sorted by time
};

struct LinkEmulatorOptions {
  int workers = 0;
  std::vector<EmulatedLink> links;
  std::vector<std::vector<int>> routes;  // [src * workers + dst]: the links a packet crosses
  uint32_t subnet = 0;                   // worker w is subnet + w + 1
  uint64_t seed = 0;                     // of the loss draws
  // Each worker's interface rate (bits/s): a packet read from its device reaches the first link of
  // its route when the interface has sent it, one after another at this rate (a NIC's, behind an
  // unbounded host queue), not at the moment the loop read it; 0: at once. It fixes the pace at
  // which a burst reaches a queue, which otherwise is the pace of the loop's reads.
  double nic_bps = 0.0;
  // A file to log every packet's fate on every link to ("": none), as CSV with a header:
  // time_s,link,src,dst,sport,dport,event,bytes,wait_s. Per link a packet reaches: `sent` at the
  // time it reached the link's queue (wait_s: how long it waited there for the link), or `queue`,
  // `loss`, `down` where it was dropped; at its destination `delivered` at the time it was written
  // (wait_s: how late). Times from the emulator's start; ports 0 for a packet neither TCP nor UDP.
  std::string packet_log;
};

// What a link did, in the form of the emulator's per-link statistics.
struct LinkStats {
  std::string name;
  int64_t packets = 0, bytes = 0;          // forwarded
  int64_t dropped_loss = 0, dropped_queue = 0, dropped_down = 0;
  double queue_delay_sum_s = 0.0, queue_delay_max_s = 0.0;  // waiting for the link, per forwarded packet
  // Packets handed to their destination over this link (the last of their route), and how long
  // after they were due the forwarding loop wrote each: its own delay (a wake-up late, a CPU
  // taken by the processes it connects), which lengthens every round trip beyond the path's and
  // which no network model has. late_over_1ms counts those written more than
  // a millisecond late.
  int64_t delivered = 0, late_over_1ms = 0;
  double late_sum_s = 0.0, late_max_s = 0.0;

  // Bits per second forwarded over `seconds`, the mean wait for the link and the mean lateness.
  double MeanBps(double seconds) const { return seconds > 0 ? 8.0 * static_cast<double>(bytes) / seconds : 0.0; }
  double MeanQueueDelayS() const { return packets > 0 ? queue_delay_sum_s / static_cast<double>(packets) : 0.0; }
  double MeanLateS() const { return delivered > 0 ? late_sum_s / static_cast<double>(delivered) : 0.0; }
};

class LinkEmulator {
 public:
  // Forwards between `tuns` (tuns[w] is worker w's device; the emulator owns their descriptors).
  static core::Result<std::unique_ptr<LinkEmulator>> Create(LinkEmulatorOptions options, std::vector<TunDevice> tuns);
  ~LinkEmulator();
  // Runs the loop on a thread of its own until Stop (or destruction).
  void Start();
  void Stop();
  std::vector<LinkStats> Stats() const;
  // Cuts (or heals) `worker` off from every other: the first link of each of its routes out and
  // the last of each route in (its access links, whatever the topology) drop every packet, counted
  // as dropped_down. Thread-safe; takes effect for the next packet.
  void Partition(int worker, bool cut);
  // CPU seconds the forwarding loop used, after Stop (the share of the machine it took from the
  // processes it connects).
  double cpu_s() const;

 private:
  struct Impl;
  explicit LinkEmulator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace narrows::deploy
