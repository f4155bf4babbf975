// HostWork: a network model's messages with the hosts' own work on them — framing, the integrity
// check, the copies into and out of the transport, the reduction of what arrives — which costs CPU
// time per byte outside the network. Each worker's host handles one message at a time, at
// `bytes_per_s`: a message leaves for the network once its sender's host has prepared it (after the
// messages that host prepared before it), and it is delivered once its receiver's host has taken it
// in (after the messages that host took in before it). The sender is not blocked meanwhile, as a
// transport's I/O thread does not block its caller. Wraps any NetworkModel.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "sim/network_model.h"

namespace narrows::sim {

class HostWork : public NetworkModel {
 public:
  HostWork(std::unique_ptr<NetworkModel> network, double bytes_per_s);
  int64_t StartFlow(int src, int dst, int64_t bytes, double now) override;
  double NextEventTime() const override;
  void AdvanceTo(double t, std::vector<Delivery>* delivered) override;
  void AdvanceUntilDelivery(double limit, std::vector<Delivery>* delivered) override;
  const Topology& topology() const override { return network_->topology(); }
  const LinkCounters* counters() const override { return network_->counters(); }
  Stalest StalestFlow() const override;

 private:
  struct Message {
    int src = 0, dst = 0;
    int64_t bytes = 0;
    int64_t flow = -1;  // its flow in network_, once it left
  };
  double Seconds(int64_t bytes) const { return static_cast<double>(bytes) / bytes_per_s_; }
  // One step: the network runs until its first delivery or the earliest of `limit` and this
  // model's own next event (a message prepared, one taken in), whichever comes first; then what it
  // delivered queues at its receivers' hosts, what was prepared by then enters the network, and
  // what was taken in by then is delivered. True where anything entered or was delivered.
  bool Step(double limit, std::vector<Delivery>* delivered);

  std::unique_ptr<NetworkModel> network_;
  double bytes_per_s_;
  std::vector<double> send_free_, receive_free_;  // per worker: when its host is next free
  std::map<int64_t, Message> messages_;           // by id, until delivered
  std::map<int64_t, int64_t> by_flow_;            // network_'s flow -> id
  std::multimap<double, int64_t> leaving_;        // prepared at key: enters the network then
  std::multimap<double, int64_t> arriving_;       // taken in at key: delivered then
  double now_ = 0.0;
  int64_t next_id_ = 0;
};

}  // namespace narrows::sim
