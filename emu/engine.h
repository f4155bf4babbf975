// Engine: the emulator. M workers run in one process, each as an actor thread with its own virtual
// clock; their messages are real bytes whose delivery times come from a sim::NetworkModel.
//
// Conservative discrete-event scheduling: exactly one actor runs at a time, and an actor's
// transport call executes only after every event earlier in virtual time (other actors' calls,
// deliveries, link changes) has been processed; ties go to the network, then to the lower rank.
// Computation is charged to an actor's clock (Clock::ChargeCompute) and does not interact with
// anything, so the actor computes for real, under the baton, before its next call. Results are
// therefore independent of host timing whenever compute time is modelled. The baton passes from
// actor to actor directly: the thread that gives it up processes the network's due events and
// wakes the next actor (Dispatch), one thread switch per hand-over. The next actor and the next
// deadline come from ordered indexes (O(log n), no scan of the actors). An actor running a
// size-only plan (Transport::RunSizeOnly) has its steps taken by Dispatch in its place, each when
// its own call would have run, and its thread is woken once, when the plan is over.
//
// A worker waiting for a message that can never come (every other actor finished or waiting too)
// gets PeerUnavailable instead of hanging. With a stall timeout, a message in transit none of whose
// bytes has moved for that long (a link down for good, a connection stuck in retransmission
// timeouts) fails the whole run: every actor's transport calls return Aborted, naming the message
// and the links of its route. Transport::Start adds an actor for the same rank whose
// clock starts at its starter's, so communication can overlap computation in virtual time.
// Run() blocks until every actor's function returns.
#pragma once

#include <condition_variable>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/mailbox.h"
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
  double clock_of(int rank) const;
  // Fails the run when a message in transit moves no byte for `seconds` of virtual time (0: never).
  void SetStallTimeout(double seconds);
  // Why the run failed (the stall), or OK.
  core::Status failure() const;
  const sim::NetworkModel& network() const { return *network_; }

 private:
  class Endpoint;
  class VirtualClock;
  class EmulatedWork;
  enum class State { kRunning, kReady, kBlocked, kDone };
  enum class Wake { kNone, kMessage, kTimeout, kDeadlock, kFailed };
  static constexpr int kNoTag = std::numeric_limits<int>::min();
  using Message = core::Envelope<std::vector<uint8_t>>;
  // An actor: a rank's main worker (actor id = rank) or an operation it started.
  struct Actor {
    int rank = 0;
    State state = State::kReady;
    double clock = 0.0;
    // While blocked: in Recv on (wait_src, wait_tag) (wait_src may be core::kAnySource), or in
    // Work::Wait on actor `wait_actor` (wait_tag kNoTag: no message wakes it).
    int wait_src = -1, wait_tag = kNoTag, wait_actor = -1;
    double deadline = sim::kNever;
    Wake wake = Wake::kNone;
    std::condition_variable cv;
    std::unique_ptr<Endpoint> endpoint;
    core::Status result;  // of a started operation
    std::thread thread;
    // While it runs a size-only plan in the scheduler (RunSizeOnly): the plan, its next step, the
    // receives' timeout, whether it waits in a receive, and the plan's outcome.
    const std::vector<core::SizeOnlyStep>* plan = nullptr;
    size_t plan_next = 0;
    double plan_timeout_s = 0.0;
    bool plan_waits = false;
    core::Status plan_status;
  };

  // Called by an actor: give up the baton until every earlier event has happened.
  void Yield(int actor, std::unique_lock<std::mutex>& lock);
  // Why nothing more can happen (set when every remaining actor is found waiting forever): the
  // links the network's schedule has down then, if any.
  std::string deadlock_reason_;
  // Called by an actor: block until woken (a message, a finished operation, a deadline, deadlock).
  Wake Block(int actor, double deadline, std::unique_lock<std::mutex>& lock);
  // Gives the baton to whoever runs next, processing the network's events and deadlines due before
  // it; called by the thread that gives it up (`self`: its actor, -1 for Run). REQUIRES: mu_ held.
  void Dispatch(int self);
  void Deliver(const std::vector<sim::Delivery>& deliveries);
  // At the stall check's time `now`: fails the run if the stalest message has not moved for the
  // stall timeout, else sets the next check. REQUIRES: mu_ held.
  void CheckStall(double now);
  // Message `m` reaches rank `dst` at `time`: the first of its endpoints waiting for it wakes.
  void Arrive(int dst, Message m, double time);
  int AddActor(int rank, double clock);  // REQUIRES: mu_ held
  // State changes, each keeping the scheduler's indexes (ready_, deadlines_) in step. REQUIRES: mu_ held.
  void MakeReady(int actor, Wake wake, double clock);  // from kBlocked (or new: kReady already)
  void MakeBlocked(int actor, double deadline);        // from kRunning (or kReady: a plan's step)
  void MakeRunning(int actor);                         // from kReady
  void StartThread(int actor, std::function<void()> body);  // REQUIRES: mu_ held
  std::unique_ptr<core::Work> Start(int parent, core::AsyncOp op);
  // An actor's message leaves at its clock (`bytes_in` null: size-only). REQUIRES: mu_ held, the
  // actor holding the baton or run by the scheduler.
  void SendAt(int actor, int dst, int tag, const uint8_t* bytes_in, int64_t bytes);
  // Why a receive from `src` ended without its message.
  core::Status ReceiveFailed(Wake wake, int src, double timeout_s) const;
  // Transport::RunSizeOnly for `actor`: the scheduler takes the plan's steps in its place, each when
  // the actor's own call would have run (after every earlier event; ties as for the actor), and
  // hands the actor its baton when the plan is over. StepPlan takes one step (or completes a
  // receive); true once the plan is over.
  core::Status RunSizeOnly(int actor, const std::vector<core::SizeOnlyStep>& steps, double timeout_s);
  bool StepPlan(int actor);  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  std::condition_variable scheduler_cv_;
  int running_ = -1;
  int num_workers_;
  std::unique_ptr<sim::NetworkModel> network_;
  std::vector<std::unique_ptr<Actor>> actors_;  // by id; finished ones stay (their Work may ask)
  // The scheduler's indexes, so that finding the next event never scans the actors: the ready
  // actors by (clock, id), the blocked ones with a deadline by (deadline, id), the blocked count;
  // and each rank's live actors, ascending (a message or a finished operation wakes one of them).
  std::set<std::pair<double, int>> ready_, deadlines_;
  int blocked_ = 0;
  std::vector<std::vector<int>> rank_actors_;
  std::set<int> live_;         // ids of the actors not finished
  std::vector<int> finished_;  // finished since the scheduler last ran: their threads to join
  std::vector<core::Mailbox<std::vector<uint8_t>>> mailboxes_;  // per rank: delivered, not yet received
  std::vector<core::TransportStats> sent_;                      // per rank
  struct InFlight {
    int dst;
    int64_t bytes;  // on the network (a size-only message carries none of them)
    Message message;
  };
  std::map<int64_t, InFlight> in_flight_;  // by flow
  double stall_s_ = 0.0;          // 0: no stall watchdog
  double stall_check_at_ = 0.0;   // while messages are in transit: when to look next
  core::Status failure_;          // set once: every transport call returns it
  const bool step_by_step_;       // NARROWS_EMULATOR_STEP_BY_STEP: no plans (Endpoint::RunSizeOnly)
};

}  // namespace narrows::emu
