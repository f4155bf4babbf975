#include "emu/engine.h"

#include "emu/emulated_endpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace narrows::emu {

class Engine::EmulatedWork : public core::Work {
 public:
  EmulatedWork(Engine* engine, int parent, int child) : engine_(engine), parent_(parent), child_(child) {}
  ~EmulatedWork() override {
    if (!waited_) (void)Wait(core::kForever);
  }

  core::Status Wait(double timeout_s) override {
    std::unique_lock<std::mutex> lock(engine_->mu_);
    engine_->Yield(parent_, lock);
    Actor& me = *engine_->actors_[parent_];
    const Actor& child = *engine_->actors_[child_];
    if (child.state == State::kDone) {  // finished, perhaps later in virtual time: wait until then
      if (child.clock > me.clock + timeout_s) {
        me.clock += timeout_s;
        return core::Status::Timeout("operation not finished within " + std::to_string(timeout_s) +
                                     " s of virtual time");
      }
      me.clock = std::max(me.clock, child.clock);
    } else {
      me.wait_actor = child_;
      const Wake wake = engine_->Block(parent_, me.clock + timeout_s, lock);
      if (wake == Wake::kTimeout) {
        return core::Status::Timeout("operation not finished within " + std::to_string(timeout_s) +
                                     " s of virtual time");
      }
      if (wake == Wake::kDeadlock) return core::Status::PeerUnavailable("operation can never finish" + engine_->deadlock_reason_);
      if (wake == Wake::kFailed) return engine_->failure_;
    }
    waited_ = true;
    return child.result;
  }

  bool Done() override {
    std::unique_lock<std::mutex> lock(engine_->mu_);
    engine_->Yield(parent_, lock);  // let everything before the caller's time happen first
    const Actor& child = *engine_->actors_[child_];
    return child.state == State::kDone && child.clock <= engine_->actors_[parent_]->clock;
  }

 private:
  Engine* engine_;
  int parent_, child_;
  bool waited_ = false;
};

Engine::Engine(int num_workers, std::unique_ptr<sim::NetworkModel> network)
    : num_workers_(num_workers),
      network_(std::move(network)),
      sent_(static_cast<size_t>(num_workers)),
      step_by_step_(std::getenv("NARROWS_EMULATOR_STEP_BY_STEP") != nullptr) {
  NARROWS_CHECK(network_->topology().num_workers() == num_workers)
      << "topology has " << network_->topology().num_workers() << " workers, engine " << num_workers;
  std::lock_guard<std::mutex> lock(mu_);
  for (int r = 0; r < num_workers; ++r) {
    mailboxes_.emplace_back(r, num_workers);
    AddActor(r, 0.0);
  }
}

Engine::~Engine() = default;

int Engine::AddActor(int rank, double clock) {
  const int id = static_cast<int>(actors_.size());
  auto a = std::make_unique<Actor>();
  a->rank = rank;
  a->clock = clock;
  a->endpoint = std::make_unique<Endpoint>(this, id, rank);
  actors_.push_back(std::move(a));
  live_.insert(id);
  if (rank_actors_.size() <= static_cast<size_t>(rank)) rank_actors_.resize(static_cast<size_t>(rank) + 1);
  rank_actors_[static_cast<size_t>(rank)].push_back(id);
  ready_.insert({clock, id});
  return id;
}

void Engine::MakeReady(int actor, Wake wake, double clock) {
  Actor& a = *actors_[static_cast<size_t>(actor)];
  if (a.state == State::kReady && a.clock == clock) {  // where it is in ready_ already
    a.wake = wake;
    return;
  }
  if (a.state == State::kBlocked) {
    --blocked_;
    if (a.deadline < sim::kNever) deadlines_.erase({a.deadline, actor});
  } else if (a.state == State::kReady) {
    ready_.erase({a.clock, actor});
  }
  a.state = State::kReady;
  a.wake = wake;
  a.clock = clock;
  ready_.insert({a.clock, actor});
}

void Engine::MakeBlocked(int actor, double deadline) {
  Actor& a = *actors_[static_cast<size_t>(actor)];
  if (a.state == State::kReady) ready_.erase({a.clock, actor});  // a plan's receive (StepPlan)
  a.state = State::kBlocked;
  a.deadline = deadline;
  a.wake = Wake::kNone;
  ++blocked_;
  if (deadline < sim::kNever) deadlines_.insert({deadline, actor});
}

void Engine::MakeRunning(int actor) {
  Actor& a = *actors_[static_cast<size_t>(actor)];
  ready_.erase({a.clock, actor});
  a.state = State::kRunning;
}

core::Transport& Engine::endpoint(int rank) { return *actors_[rank]->endpoint; }

void Engine::SetStallTimeout(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  stall_s_ = std::max(0.0, seconds);
}

core::Status Engine::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

double Engine::clock_of(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return actors_[rank]->clock;
}

void Engine::Yield(int actor, std::unique_lock<std::mutex>& lock) {
  // If Dispatch picks this actor again it keeps the baton: no thread switch.
  Actor& a = *actors_[actor];
  MakeReady(actor, a.wake, a.clock);
  Dispatch(actor);
  a.cv.wait(lock, [&] { return running_ == actor; });
}

Engine::Wake Engine::Block(int actor, double deadline, std::unique_lock<std::mutex>& lock) {
  if (!failure_.ok()) return Wake::kFailed;
  Actor& a = *actors_[actor];
  MakeBlocked(actor, deadline);
  Dispatch(actor);
  a.cv.wait(lock, [&] { return running_ == actor; });
  a.wait_src = a.wait_actor = -1;
  a.wait_tag = kNoTag;
  return a.wake;
}

void Engine::Deliver(const std::vector<sim::Delivery>& deliveries) {
  for (const auto& d : deliveries) {
    auto it = in_flight_.find(d.flow);
    NARROWS_CHECK(it != in_flight_.end()) << "unknown flow " << d.flow;
    Arrive(it->second.dst, std::move(it->second.message), d.time);
    in_flight_.erase(it);
  }
}

void Engine::Arrive(int dst, Message m, double time) {
  for (int id : rank_actors_[static_cast<size_t>(dst)]) {  // wake the first waiting for this (src, tag)
    Actor* a = actors_[static_cast<size_t>(id)].get();
    if (a->state == State::kBlocked && a->wait_tag == m.tag &&
        (a->wait_src == m.src || a->wait_src == core::kAnySource)) {
      MakeReady(id, Wake::kMessage, std::max(a->clock, time));
      break;
    }
  }
  mailboxes_[dst].Put(m.src, m.tag, std::move(m.payload));
}

void Engine::StartThread(int actor, std::function<void()> body) {
  actors_[actor]->thread = std::thread([this, actor, body = std::move(body)] {
    {
      std::unique_lock<std::mutex> l(mu_);
      actors_[actor]->cv.wait(l, [&] { return running_ == actor; });
    }
    body();
    std::lock_guard<std::mutex> l(mu_);
    Actor& me = *actors_[actor];
    me.state = State::kDone;
    live_.erase(actor);
    auto& mine = rank_actors_[static_cast<size_t>(me.rank)];
    mine.erase(std::find(mine.begin(), mine.end(), actor));
    finished_.push_back(actor);
    for (int id : mine) {  // whoever waits for this operation (its rank's) resumes at the later clock
      Actor& a = *actors_[static_cast<size_t>(id)];
      if (a.state == State::kBlocked && a.wait_actor == actor) MakeReady(id, Wake::kMessage, std::max(a.clock, me.clock));
    }
    Dispatch(actor);
  });
}

std::unique_ptr<core::Work> Engine::Start(int parent, core::AsyncOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  const int child = AddActor(actors_[parent]->rank, actors_[parent]->clock);
  StartThread(child, [this, child, op = std::move(op)] {
    core::Status s = op(*actors_[child]->endpoint);
    std::lock_guard<std::mutex> l(mu_);
    actors_[child]->result = std::move(s);
  });
  return std::make_unique<EmulatedWork>(this, parent, child);
}

namespace {

// Why a deadlock is for good, as a suffix of its error: the links the schedule leaves down for
// ever (at most eight named), or "" if none is.
std::string LinksDownForGood(const sim::Topology& topology) {
  std::string reason;
  const auto down = sim::LinksDownAt(topology, sim::kNever);
  if (!down.empty()) {
    reason = "; the network cannot deliver it: link";
    if (down.size() > 1) reason += "s";
    for (size_t k = 0; k < down.size() && k < 8; ++k) {
      char since[32];
      std::snprintf(since, sizeof since, "%g", down[k].since_s);
      reason += (k == 0 ? " " : ", ") + down[k].name + " (down from " + since + " s)";
    }
    if (down.size() > 8) reason += " and " + std::to_string(down.size() - 8) + " more";
    reason += down.size() > 1 ? ", and the schedule never brings them back" : ", and the schedule never brings it back";
  }
  return reason;
}

}  // namespace

void Engine::Dispatch(int self) {
  // Threads of finished actors hold nothing any more (they released the lock; the caller's own
  // thread, if it is finishing, is joined by a later dispatch): join them, so that a long run's
  // thousands of started operations do not accumulate.
  const auto me = std::this_thread::get_id();
  size_t kept = 0;
  for (int id : finished_) {
    std::thread& t = actors_[static_cast<size_t>(id)]->thread;
    if (t.get_id() == me) {
      finished_[kept++] = id;
    } else {
      t.join();
    }
  }
  finished_.resize(kept);
  std::vector<sim::Delivery> delivered;
  while (true) {
    if (live_.empty()) {
      running_ = -1;
      scheduler_cv_.notify_one();  // Run: every actor finished
      return;
    }
    // The earliest ready actor and the earliest deadline, ties to the lower id.
    const int next = ready_.empty() ? -1 : ready_.begin()->second;
    const int deadline_actor = deadlines_.empty() ? -1 : deadlines_.begin()->second;
    const double t_actor = next >= 0 ? actors_[next]->clock : sim::kNever;
    const double t_net = network_->NextEventTime();
    const double t_deadline = deadline_actor >= 0 ? actors_[deadline_actor]->deadline : sim::kNever;
    const bool watch = stall_s_ > 0 && !in_flight_.empty() && failure_.ok();
    const double t_check = watch ? stall_check_at_ : sim::kNever;
    if (t_check < sim::kNever && t_check < t_net && t_check <= t_actor && t_check <= t_deadline) {
      delivered.clear();
      network_->AdvanceTo(t_check, &delivered);
      Deliver(delivered);
      CheckStall(t_check);
      continue;
    }
    if (t_net < sim::kNever && t_net <= t_actor && t_net <= t_deadline) {
      delivered.clear();
      network_->AdvanceUntilDelivery(std::min({t_actor, t_deadline, t_check}), &delivered);
      Deliver(delivered);
      continue;
    }
    if (t_deadline < sim::kNever && t_deadline < t_actor) {
      const Actor& a = *actors_[deadline_actor];
      MakeReady(deadline_actor, Wake::kTimeout, std::max(a.clock, a.deadline));
      continue;
    }
    if (next >= 0) {  // hand the baton straight to it (no scheduler thread in between)
      // An actor running a size-only plan has its step taken here, until the plan is over.
      if (actors_[static_cast<size_t>(next)]->plan != nullptr && !StepPlan(next)) continue;
      MakeRunning(next);
      running_ = next;
      if (next != self) actors_[next]->cv.notify_one();
      return;
    }
    // Nothing can happen: every remaining actor waits for something that will never come.
    NARROWS_CHECK(blocked_ > 0);
    if (deadlock_reason_.empty()) deadlock_reason_ = LinksDownForGood(network_->topology());
    for (int i : live_) {
      const Actor& a = *actors_[static_cast<size_t>(i)];
      if (a.state == State::kBlocked) MakeReady(i, Wake::kDeadlock, a.clock);
    }
  }
}

core::Status Engine::RunSizeOnly(int actor, const std::vector<core::SizeOnlyStep>& steps, double timeout_s) {
  if (steps.empty()) return core::Status::Ok();
  std::unique_lock<std::mutex> lock(mu_);
  Actor& me = *actors_[static_cast<size_t>(actor)];
  me.plan = &steps;
  me.plan_next = 0;
  me.plan_timeout_s = timeout_s;
  me.plan_waits = false;
  me.plan_status = core::Status::Ok();
  // As the first step's own call would: ready at its clock, after every earlier event.
  MakeReady(actor, me.wake, me.clock);
  Dispatch(actor);
  me.cv.wait(lock, [&] { return running_ == actor; });
  me.plan = nullptr;
  return me.plan_status;
}

bool Engine::StepPlan(int actor) {
  Actor& a = *actors_[static_cast<size_t>(actor)];
  const auto& steps = *a.plan;
  auto& box = mailboxes_[static_cast<size_t>(a.rank)];
  if (a.plan_waits) {  // woken in a receive: as Await after Block
    a.plan_waits = false;
    const int src = steps[a.plan_next].peer;
    a.wait_src = a.wait_actor = -1;
    a.wait_tag = kNoTag;
    auto m = box.Take(src, steps[a.plan_next].tag, 0);
    if (!m) {
      a.plan_status = ReceiveFailed(a.wake, src, a.plan_timeout_s);
    } else if (!m->payload.empty()) {
      a.plan_status = core::Status::InvalidArgument("message from rank " + std::to_string(src) + " has " +
                                                    std::to_string(m->payload.size()) + " bytes, expected 0");
    }
    if (!a.plan_status.ok() || ++a.plan_next == steps.size()) return true;
    MakeReady(actor, a.wake, a.clock);  // the next step's call
    return false;
  }
  const core::SizeOnlyStep& step = steps[a.plan_next];
  if (step.peer < 0 || step.peer >= num_workers_) {
    a.plan_status = core::Status::InvalidArgument(std::string(step.send ? "send to" : "receive from") +
                                                  " invalid rank " + std::to_string(step.peer));
    return true;
  }
  if (!failure_.ok()) {
    a.plan_status = failure_;
    return true;
  }
  if (step.send) {
    SendAt(actor, step.peer, step.tag, nullptr, std::max<int64_t>(0, step.bytes));
  } else if (auto m = box.Take(step.peer, step.tag, 0)) {
    if (!m->payload.empty()) {
      a.plan_status = core::Status::InvalidArgument("message from rank " + std::to_string(step.peer) + " has " +
                                                    std::to_string(m->payload.size()) + " bytes, expected 0");
      return true;
    }
  } else {  // as Await's Block
    a.wait_src = step.peer;
    a.wait_tag = step.tag;
    a.plan_waits = true;
    MakeBlocked(actor, a.clock + a.plan_timeout_s);
    return false;
  }
  if (++a.plan_next == steps.size()) return true;
  MakeReady(actor, a.wake, a.clock);
  return false;
}

void Engine::CheckStall(double now) {
  const sim::NetworkModel::Stalest s = network_->StalestFlow();
  if (s.flow < 0) {
    stall_check_at_ = now + stall_s_;
    return;
  }
  if (s.since + stall_s_ > now) {
    stall_check_at_ = s.since + stall_s_;
    return;
  }
  const auto it = in_flight_.find(s.flow);
  NARROWS_CHECK(it != in_flight_.end()) << "stalled flow " << s.flow << " is not in flight";
  const int src = it->second.message.src, dst = it->second.dst;
  const sim::Topology& topology = network_->topology();
  const std::vector<sim::DownLink> down = sim::LinksDownAt(topology, now);
  char head[256];
  std::snprintf(head, sizeof head,
                "the network made no progress for %g s of virtual time (network.stall_timeout_s): a message "
                "of %lld bytes from worker %d to worker %d has moved no byte since %.3f s (now %.3f s); its route:",
                stall_s_, static_cast<long long>(it->second.bytes), src, dst, s.since, now);
  std::string message = head;
  const sim::Path route = topology.Route(src, dst);
  for (size_t k = 0; k < route.size(); ++k) {
    const sim::Link& l = topology.links()[static_cast<size_t>(route[k])];
    message += (k == 0 ? " " : ", ") + l.name;
    char state[96] = "";
    const auto d = std::find_if(down.begin(), down.end(), [&](const sim::DownLink& x) { return x.name == l.name; });
    if (d != down.end()) {
      std::snprintf(state, sizeof state, " (down since %g s)", d->since_s);
    } else if (l.loss > 0 || l.burst.mean_good_s > 0) {
      std::snprintf(state, sizeof state, " (loss %g%%%s)", 100 * l.loss, l.burst.mean_good_s > 0 ? ", with bursts" : "");
    }
    message += state;
  }
  failure_ = core::Status::Aborted(message);
  for (int i : live_) {
    const Actor& a = *actors_[static_cast<size_t>(i)];
    if (a.state == State::kBlocked) MakeReady(i, Wake::kFailed, std::max(a.clock, now));
  }
}

void Engine::Run(const std::function<void(int rank)>& body) {
  std::unique_lock<std::mutex> lock(mu_);
  for (int r = 0; r < num_workers_; ++r) {
    MakeReady(r, Wake::kNone, actors_[r]->clock);
    StartThread(r, [&body, r] { body(r); });
  }
  Dispatch(-1);
  scheduler_cv_.wait(lock, [&] { return live_.empty(); });
  lock.unlock();
  for (auto& a : actors_) {
    if (a->thread.joinable()) a->thread.join();
  }
}

}  // namespace narrows::emu
