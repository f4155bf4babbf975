// Engine: the emulator. M workers run in one process, each as an actor thread with its own virtual
// clock; their messages are real bytes whose delivery times come from a sim::NetworkModel.
//
// Conservative discrete-event scheduling: exactly one actor runs at a time, and an actor's
// transport call executes only after every event earlier in virtual time (other actors' calls,
// deliveries, link changes) has been processed; ties go to the network, then to the lower rank.
// Computation is charged to an actor's clock (Clock::ChargeCompute) and does not interact with
// anything, so the actor computes for real, under the baton, before its next call. Results are
// therefore independent of host timing whenever compute time is modelled.
//
// A worker waiting for a message that can never come (every other actor finished or waiting too)
// gets PeerUnavailable instead of hanging. Run() blocks until every actor's function returns.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/transport.h"
#include "sim/network_model.h"

namespace narrows::emu {

class Engine {
 public:
  Engine(int num_workers, std::unique_ptr<sim::NetworkModel> network);
  ~Engine();

  // The transport endpoint of `rank` (valid for the engine's lifetime; use it from that rank's actor).
  core::Transport& endpoint(int rank);
  // Runs body(rank) for every rank, each in its own actor thread, until all return.
  void Run(const std::function<void(int rank)>& body);
  // Marks a rank as gone (it stays out of Members(); receives from it fail). Callable from actors.
  void SetAlive(int rank, bool alive);
  double clock_of(int rank) const;
  const sim::NetworkModel& network() const { return *network_; }

 private:
  class Endpoint;
  class VirtualClock;
  enum class State { kRunning, kReady, kBlocked, kDone };
  enum class Wake { kNone, kMessage, kTimeout, kDeadlock };
  struct Message {
    int src, tag;
    std::vector<uint8_t> payload;
  };
  struct Actor {
    State state = State::kReady;
    double clock = 0.0;
    // While blocked in Recv:
    int wait_src = -1, wait_tag = -1;
    double deadline = sim::kNever;
    Wake wake = Wake::kNone;
    std::deque<Message> mailbox;  // delivered, not yet received
    std::condition_variable cv;
  };

  // Called by an actor: give up the baton until every earlier event has happened.
  void Yield(int rank, std::unique_lock<std::mutex>& lock);
  // Called by an actor: block until a message from (src, tag) arrives, a deadline, or deadlock.
  Wake Block(int rank, int src, int tag, double deadline, std::unique_lock<std::mutex>& lock);
  void Schedule(std::unique_lock<std::mutex>& lock);
  void Deliver(const std::vector<sim::Delivery>& deliveries);
  bool Matches(const Actor& a, const Message& m) const { return m.src == a.wait_src && m.tag == a.wait_tag; }

  mutable std::mutex mu_;
  std::condition_variable scheduler_cv_;
  int running_ = -1;
  std::unique_ptr<sim::NetworkModel> network_;
  std::vector<std::unique_ptr<Actor>> actors_;
  std::vector<bool> alive_;
  std::map<int64_t, std::pair<int, Message>> in_flight_;  // flow -> (dst, message)
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

}  // namespace narrows::emu
