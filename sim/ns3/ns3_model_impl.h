// Ns3Model::Impl: the packet-level model's state, shared by its parts: the connections and their
// sockets (sim/ns3/connections.cc), the network (sim/ns3/network.cc), the links' states and counters
// (sim/ns3/link_states.cc) and fast-forward (sim/ns3/fast_forward.cc). Events at virtual times are
// kept here. Used from one thread at a time, as Ns3Model is.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <ns3/error-model.h>
#include <ns3/event-id.h>
#include <ns3/point-to-point-net-device.h>
#include <ns3/sequence-number.h>
#include <ns3/simulator.h>
#include <ns3/socket.h>

#include "sim/ns3_model.h"

namespace narrows::sim {

// Fast-forward: bytes a connection keeps written but not yet sent (refilled at each ACK), how
// closely two congestion cycles must agree to be called periodic, and the shortest interval
// between looks for a jump.
constexpr int64_t kUnsentBytes = 2 << 20;
constexpr double kCycleTolerance = 0.02;
constexpr size_t kMaxEpisodesPerCycle = 2;
constexpr int64_t kMinWindowNs = 1'000'000;

inline int64_t ToNs(double seconds) { return std::llround(seconds * 1e9); }

// ns-3's TCP defaults for every socket of the model (sim/ns3/connections.cc).
void ConfigureTcp(const Ns3Options& options);

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
  void ArmLossSwitches();

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
  int64_t Unsent(const Connection& c) const;

  // Keeps the connection's socket supplied: with fast-forward, at most kUnsentBytes ahead of what
  // TCP has sent (refilled at each ACK), so that the stream's remainder can still be skipped.
  void Pump(Connection& c);
  // Reads what reached the connection's receiving socket and delivers the messages it completes.
  void OnReceive(ns3::Ptr<ns3::Socket> socket, Connection& c);

  // Fast-forward: steady transfers advanced by whole congestion cycles (sim/ns3/fast_forward.cc).
  std::set<int> active;  // connections with undelivered messages
  uint64_t generation = 0;  // changes whenever the set of transfers or a link's state changes
  uint64_t sampled_generation = ~uint64_t{0};
  int64_t window_ns = kMinWindowNs;
  bool sampling = false;
  int64_t jumps = 0;
  int64_t skipped_ns = 0;

  // Marks the start of a loss episode of `c`.
  void MarkCycle(Connection& c);
  // Looks for a jump every round trip of the longest active path.
  void StartSampling();
  void SampleAndJump();
  // Advances every active transfer by a whole number of cycles, where they are periodic.
  void Jump();
  // One connection's last congestion cycle: from the mark `from` to its last mark, `ns` of ns-3's
  // time and `bytes` received.
  struct Cycle {
    const Mark* from = nullptr;
    const Mark* to = nullptr;
    double ns = 0.0, bytes = 0.0;
  };
  // Whether the last cycle of `c` repeats the one before it (of one loss episode or two) and,
  // where `period` is set (not 0), lasts it; if so, that cycle.
  bool LastCycle(const Connection& c, double period, Cycle* cycle) const;
  // Each link's counters grow by `cycles` times what they grew from mark `a` to mark `b`, spread
  // over virtual time from `from_s` to `to_s`.
  void AddCycles(const Mark& a, const Mark& b, int64_t cycles, double from_s, double to_s);
};

}  // namespace narrows::sim
