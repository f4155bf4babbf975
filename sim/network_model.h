// Network models: given a topology and messages with virtual send times, when does each arrive?
//
// A NetworkModel is driven incrementally by the emulator's scheduler, in non-decreasing virtual
// time: StartFlow at the sender's clock, NextEventTime to learn when something may next happen,
// AdvanceUntilDelivery to move time forward to the next delivery (or a limit), AdvanceTo to move it
// to a given time collecting everything delivered by then. It never runs ahead of the time it is
// advanced to, so messages started later can still share links with earlier ones.
// Implementations: AnalyticModel (alpha-beta per link, max-min fair sharing of concurrent flows)
// and Ns3Model (packet-level TCP). Not thread-safe: the scheduler owns it.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/loss_states.h"

namespace narrows::sim {

constexpr double kNever = std::numeric_limits<double>::infinity();

// A directed link. Bandwidth may change over time (a value of 0 is a link that is down).
struct Link {
  std::string name;
  double bandwidth_bps = 1e9;
  double latency_s = 0.0;   // one-way propagation delay
  double loss = 0.0;        // packet loss probability (in the good state, with bursts)
  // Bursty loss (core/loss_states.h): with both means > 0 the link alternates between a good state
  // (loss above) and a bad one (the burst's loss).
  using Burst = core::Burst;
  Burst burst;
  struct Change {
    double at_s;
    double bandwidth_bps;
  };
  std::vector<Change> schedule;  // sorted by time
};

// A link's loss over time: constant, or its Gilbert-Elliott states (core/loss_states.h).
class LossStates : public core::LossStates {
 public:
  explicit LossStates(const Link& link) : core::LossStates(link.loss, link.burst) {}
};

// n links with the same bandwidth, one-way latency and loss (a uniform star's access links).
std::vector<Link> UniformLinks(int n, double bandwidth_bps, double latency_s, double loss = 0.0);

// The links a message crosses, in order: a view into its topology's table of routes (valid while
// the topology lives; no copy per message).
class Path {
 public:
  Path() = default;
  Path(const int* first, const int* last) : first_(first), last_(last) {}
  const int* begin() const { return first_; }
  const int* end() const { return last_; }
  size_t size() const { return static_cast<size_t>(last_ - first_); }
  bool empty() const { return first_ == last_; }
  int front() const { return *first_; }
  int back() const { return *(last_ - 1); }
  int operator[](size_t k) const { return first_[k]; }

 private:
  const int* first_ = nullptr;
  const int* last_ = nullptr;
};

// Nodes are workers 0..num_workers-1; a route is the list of links a message crosses. Links 2k and
// 2k+1 are the two directions of one cable.
class Topology {
 public:
  int num_workers() const { return num_workers_; }
  const std::vector<Link>& links() const { return links_; }
  std::vector<Link>& mutable_links() { return links_; }
  Path Route(int src, int dst) const {
    const size_t k = static_cast<size_t>(src) * static_cast<size_t>(num_workers_) + static_cast<size_t>(dst);
    return Path(route_links_.data() + route_start_[k], route_links_.data() + route_start_[k + 1]);
  }
  // Index of the link named `name`, or -1.
  int FindLink(const std::string& name) const;
  double PathLatency(int src, int dst) const;

  // Each worker behind its own access link pair ("up:i", "down:i") to one switch; a message from i to
  // j crosses up:i then down:j. `access[i]` gives both directions' bandwidth, half the one-way
  // latency each, and loss.
  static Topology Star(const std::vector<Link>& access);
  // Islands of workers. Inside an island, the star above with `access` links; between islands each
  // island has a WAN pair ("wan-up:k", "wan-down:k") to a core switch. i -> j across islands
  // crosses up:i, wan-up:I, wan-down:J, down:j.
  static Topology Islands(const std::vector<Link>& access, const std::vector<std::vector<int>>& islands,
                          const std::vector<Link>& wan);

 private:
  int num_workers_ = 0;
  std::vector<Link> links_;
  // Every ordered pair's route, one after another (pair src * num_workers + dst from
  // route_start_[pair] to route_start_[pair + 1]): two arrays, not a vector per pair, so that
  // thousands of workers (millions of pairs) cost a few bytes a pair.
  std::vector<int> route_links_;
  std::vector<int64_t> route_start_;
};

struct Delivery {
  int64_t flow = 0;
  double time = 0.0;
};

// Per-link traffic over virtual time, kept by a network model as it runs: bits on the wire as a
// histogram over time (its bins double in width to stay within kMaxBins), packets dropped by loss
// and by full queues, and the queueing delay of forwarded packets where the model has queues.
class LinkCounters {
 public:
  static constexpr size_t kMaxBins = 512;
  struct Counts {
    double bits = 0.0;
    int64_t packets = 0, dropped_loss = 0, dropped_queue = 0;
    // Time packets waited in the link's queue: over `queued` packets (0 where the model has none).
    int64_t queued = 0;
    double queue_delay_sum_s = 0.0, queue_delay_max_s = 0.0;
    std::vector<double> bins;  // bits sent in [i·bin_s, (i+1)·bin_s)
  };
  explicit LinkCounters(size_t links = 0) : links_(links) {}
  // `bits` sent evenly over [from_s, to_s].
  void AddBits(size_t link, double from_s, double to_s, double bits);
  Counts& at(size_t link) { return links_[link]; }
  const std::vector<Counts>& links() const { return links_; }
  double bin_s() const { return bin_s_; }

 private:
  void Coarsen();  // halves the resolution: bins merge in pairs
  std::vector<Counts> links_;
  double bin_s_ = 0.01;
};

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  // A message of `bytes` from src to dst, sent at `now` (>= the last AdvanceTo). Returns its id.
  virtual int64_t StartFlow(int src, int dst, int64_t bytes, double now) = 0;
  // A lower bound on the time of the next delivery or change of state; kNever if nothing can happen.
  virtual double NextEventTime() const = 0;
  // Moves time to t (>= the current time), appending the flows delivered at or before t.
  virtual void AdvanceTo(double t, std::vector<Delivery>* delivered) = 0;
  // Moves time forward to the first time <= limit at which something is delivered, appending what
  // is delivered then, or to limit if nothing is. Guarantees progress: afterwards either something
  // was delivered or NextEventTime() > limit. The default steps through NextEventTime.
  virtual void AdvanceUntilDelivery(double limit, std::vector<Delivery>* delivered);
  virtual const Topology& topology() const = 0;
  // What each link carried so far (null where the model keeps no counters).
  virtual const LinkCounters* counters() const { return nullptr; }
  // The message in transit whose bytes moved least recently, and the last time any of its bytes
  // moved (its send time if none has): what a stall watchdog needs. A message waiting behind an
  // earlier one of its pair is not in transit yet; one whose last byte is on its way is done.
  struct Stalest {
    int64_t flow = -1;  // -1: nothing in transit, or the model does not track progress
    double since = kNever;
  };
  virtual Stalest StalestFlow() const { return {}; }
};

// The links whose bandwidth schedule has them down (0) at time `t`, and since when: for an error
// that names why messages cannot arrive.
struct DownLink {
  std::string name;
  double since_s;
};
std::vector<DownLink> LinksDownAt(const Topology& topology, double t);

// One message of a batch given to SimulateMessages.
struct Message {
  int src = 0, dst = 0;
  int64_t bytes = 0;
  double send_time = 0.0;
};
// Delivery time of each message when all of them are sent at their send times (no dependencies).
std::vector<double> SimulateMessages(NetworkModel& model, const std::vector<Message>& messages);

}  // namespace narrows::sim
