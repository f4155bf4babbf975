#include "emu/engine.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace narrows::emu {

class Engine::VirtualClock : public core::Clock {
 public:
  VirtualClock(Engine* engine, int actor) : engine_(engine), actor_(actor) {}
  double Now() const override {
    std::lock_guard<std::mutex> lock(engine_->mu_);
    return engine_->actors_[actor_]->clock;
  }
  void ChargeCompute(double seconds) override {
    std::lock_guard<std::mutex> lock(engine_->mu_);
    engine_->actors_[actor_]->clock += std::max(0.0, seconds);
  }
  bool is_virtual() const override { return true; }

 private:
  Engine* engine_;
  int actor_;
};

class Engine::Endpoint : public core::Transport {
 public:
  Endpoint(Engine* engine, int actor, int rank) : engine_(engine), actor_(actor), rank_(rank), clock_(engine, actor) {}
  int rank() const override { return rank_; }
  int world_size() const override { return engine_->num_workers_; }

  core::Status Send(int dst, int tag, const void* data, size_t bytes) override {
    if (dst < 0 || dst >= world_size()) {
      return core::Status::InvalidArgument("send to invalid rank " + std::to_string(dst));
    }
    std::unique_lock<std::mutex> lock(engine_->mu_);
    engine_->Yield(actor_, lock);
    const auto* bytes_in = static_cast<const uint8_t*>(data);
    Message m{rank_, tag, std::vector<uint8_t>(bytes_in, bytes_in + bytes)};  // one pass: no zeroing first
    const double now = engine_->actors_[actor_]->clock;
    if (dst == rank_) {  // between two endpoints of this rank: at once, off the network
      engine_->Arrive(dst, std::move(m), now);
      return core::Status::Ok();
    }
    std::vector<sim::Delivery> delivered;
    engine_->network_->AdvanceTo(now, &delivered);
    engine_->Deliver(delivered);
    const int64_t flow = engine_->network_->StartFlow(rank_, dst, static_cast<int64_t>(bytes), now);
    engine_->in_flight_.emplace(flow, std::make_pair(dst, std::move(m)));
    engine_->stats_[rank_].bytes_sent += static_cast<int64_t>(bytes);
    ++engine_->stats_[rank_].messages_sent;
    return core::Status::Ok();
  }

  core::Status Recv(int src, int tag, void* data, size_t bytes, double timeout_s) override {
    return RecvInPlace(src, tag, bytes, [&](const void* in) {
      if (bytes) std::memcpy(data, in, bytes);
    }, timeout_s);
  }

  core::Status RecvInPlace(int src, int tag, size_t bytes, const std::function<void(const void*)>& consume,
                           double timeout_s) override {
    if (src < 0 || src >= world_size()) return core::Status::InvalidArgument("receive from invalid rank " + std::to_string(src));
    auto got = Receive(src, tag, timeout_s, [&](Message& m) {
      if (m.payload.size() != bytes) {
        return core::Status::InvalidArgument("message from rank " + std::to_string(src) + " has " +
                                             std::to_string(m.payload.size()) + " bytes, expected " +
                                             std::to_string(bytes));
      }
      consume(m.payload.data());
      return core::Status::Ok();
    });
    return got.ok() ? core::Status::Ok() : got.status();
  }

  core::Result<int> RecvMessage(int src, int tag, std::vector<uint8_t>* out, double timeout_s) override {
    if (src != core::kAnySource && (src < 0 || src >= world_size())) {
      return core::Status::InvalidArgument("receive from invalid rank " + std::to_string(src));
    }
    return Receive(src, tag, timeout_s, [&](Message& m) {
      *out = std::move(m.payload);
      return core::Status::Ok();
    });
  }

  std::vector<int> Members() override {
    std::lock_guard<std::mutex> lock(engine_->mu_);
    std::vector<int> out;
    for (int r = 0; r < world_size(); ++r) {
      if (engine_->alive_[r]) out.push_back(r);
    }
    return out;
  }
  core::Clock& clock() override { return clock_; }
  core::TransportStats stats() const override {
    std::lock_guard<std::mutex> lock(engine_->mu_);
    return engine_->stats_[rank_];
  }
  std::unique_ptr<core::Work> Start(core::AsyncOp op) override { return engine_->Start(actor_, std::move(op)); }

 private:
  // The next message with `tag` from `src` (or any source) handed to `accept`, or why none came.
  core::Result<int> Receive(int src, int tag, double timeout_s, const std::function<core::Status(Message&)>& accept) {
    std::unique_lock<std::mutex> lock(engine_->mu_);
    engine_->Yield(actor_, lock);
    auto& box = engine_->mailboxes_[rank_];
    auto take = [&]() -> std::optional<core::Result<int>> {
      for (auto it = box.begin(); it != box.end(); ++it) {
        if (it->tag != tag || (src != core::kAnySource && it->src != src)) continue;
        Message m = std::move(*it);
        box.erase(it);
        const auto size = static_cast<int64_t>(m.payload.size());
        const core::Status s = accept(m);
        if (!s.ok()) return core::Result<int>(s);
        if (m.src != rank_) {
          engine_->stats_[rank_].bytes_received += size;
          ++engine_->stats_[rank_].messages_received;
        }
        return core::Result<int>(m.src);
      }
      return std::nullopt;
    };
    if (auto got = take()) return std::move(*got);
    const std::string who = src == core::kAnySource ? "any rank" : "rank " + std::to_string(src);
    if (src != core::kAnySource && !engine_->alive_[src]) return core::Status::PeerUnavailable(who + " has left");
    Actor& me = *engine_->actors_[actor_];
    me.wait_src = src;
    me.wait_tag = tag;
    const Wake wake = engine_->Block(actor_, me.clock + timeout_s, lock);
    if (auto got = take()) return std::move(*got);
    if (wake == Wake::kTimeout) {
      return core::Status::Timeout("no message from " + who + " within " + std::to_string(timeout_s) +
                                   " s of virtual time");
    }
    return core::Status::PeerUnavailable(who + " will never send (it finished, left or waits too)");
  }

  Engine* engine_;
  int actor_, rank_;
  VirtualClock clock_;
};

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
      if (wake == Wake::kDeadlock) return core::Status::PeerUnavailable("operation can never finish");
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
      mailboxes_(static_cast<size_t>(num_workers)),
      stats_(static_cast<size_t>(num_workers)),
      alive_(static_cast<size_t>(num_workers), true) {
  NARROWS_CHECK(network_->topology().num_workers() == num_workers)
      << "topology has " << network_->topology().num_workers() << " workers, engine " << num_workers;
  std::lock_guard<std::mutex> lock(mu_);
  for (int r = 0; r < num_workers; ++r) AddActor(r, 0.0);
}

Engine::~Engine() = default;

int Engine::AddActor(int rank, double clock) {
  const int id = static_cast<int>(actors_.size());
  auto a = std::make_unique<Actor>();
  a->rank = rank;
  a->clock = clock;
  a->endpoint = std::make_unique<Endpoint>(this, id, rank);
  actors_.push_back(std::move(a));
  live_.push_back(id);
  return id;
}

core::Transport& Engine::endpoint(int rank) { return *actors_[rank]->endpoint; }

double Engine::clock_of(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return actors_[rank]->clock;
}

void Engine::SetAlive(int rank, bool alive) {
  std::lock_guard<std::mutex> lock(mu_);
  alive_[rank] = alive;
}

void Engine::Yield(int actor, std::unique_lock<std::mutex>& lock) {
  // If Dispatch picks this actor again it keeps the baton: no thread switch.
  Actor& a = *actors_[actor];
  a.state = State::kReady;
  Dispatch(actor);
  a.cv.wait(lock, [&] { return running_ == actor; });
}

Engine::Wake Engine::Block(int actor, double deadline, std::unique_lock<std::mutex>& lock) {
  Actor& a = *actors_[actor];
  a.state = State::kBlocked;
  a.deadline = deadline;
  a.wake = Wake::kNone;
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
    Arrive(it->second.first, std::move(it->second.second), d.time);
    in_flight_.erase(it);
  }
}

void Engine::Arrive(int dst, Message m, double time) {
  for (int id : live_) {  // wake the first endpoint of `dst` waiting for this (src, tag)
    Actor* a = actors_[static_cast<size_t>(id)].get();
    if (a->rank == dst && a->state == State::kBlocked && a->wait_tag == m.tag &&
        (a->wait_src == m.src || a->wait_src == core::kAnySource)) {
      a->state = State::kReady;
      a->wake = Wake::kMessage;
      a->clock = std::max(a->clock, time);
      break;
    }
  }
  mailboxes_[dst].push_back(std::move(m));
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
    live_.erase(std::find(live_.begin(), live_.end(), actor));
    finished_.push_back(actor);
    for (int id : live_) {  // whoever waits for this operation resumes at the later clock
      Actor& a = *actors_[static_cast<size_t>(id)];
      if (a.state == State::kBlocked && a.wait_actor == actor) {
        a.state = State::kReady;
        a.wake = Wake::kMessage;
        a.clock = std::max(a.clock, me.clock);
      }
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
    int next = -1, deadline_actor = -1, blocked = 0;
    for (int i : live_) {  // ascending ids: ties go to the lower one
      const Actor& a = *actors_[static_cast<size_t>(i)];
      if (a.state == State::kReady && (next < 0 || a.clock < actors_[next]->clock)) next = i;
      if (a.state == State::kBlocked) {
        ++blocked;
        if (deadline_actor < 0 || a.deadline < actors_[deadline_actor]->deadline) deadline_actor = i;
      }
    }
    const double t_actor = next >= 0 ? actors_[next]->clock : sim::kNever;
    const double t_net = network_->NextEventTime();
    const double t_deadline = deadline_actor >= 0 ? actors_[deadline_actor]->deadline : sim::kNever;
    if (t_net < sim::kNever && t_net <= t_actor && t_net <= t_deadline) {
      delivered.clear();
      network_->AdvanceUntilDelivery(std::min(t_actor, t_deadline), &delivered);
      Deliver(delivered);
      continue;
    }
    if (t_deadline < sim::kNever && t_deadline < t_actor) {
      Actor& a = *actors_[deadline_actor];
      a.state = State::kReady;
      a.wake = Wake::kTimeout;
      a.clock = std::max(a.clock, a.deadline);
      continue;
    }
    if (next >= 0) {  // hand the baton straight to it (no scheduler thread in between)
      actors_[next]->state = State::kRunning;
      running_ = next;
      if (next != self) actors_[next]->cv.notify_one();
      return;
    }
    // Nothing can happen: every remaining actor waits for something that will never come.
    NARROWS_CHECK(blocked > 0);
    for (int i : live_) {
      Actor& a = *actors_[static_cast<size_t>(i)];
      if (a.state == State::kBlocked) {
        a.state = State::kReady;
        a.wake = Wake::kDeadlock;
      }
    }
  }
}

void Engine::Run(const std::function<void(int rank)>& body) {
  std::unique_lock<std::mutex> lock(mu_);
  for (int r = 0; r < num_workers_; ++r) {
    actors_[r]->state = State::kReady;
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
