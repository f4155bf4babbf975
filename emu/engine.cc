#include "emu/engine.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace narrows::emu {

class Engine::VirtualClock : public core::Clock {
 public:
  VirtualClock(Engine* engine, int rank) : engine_(engine), rank_(rank) {}
  double Now() const override { return engine_->clock_of(rank_); }
  void ChargeCompute(double seconds) override {
    std::lock_guard<std::mutex> lock(engine_->mu_);
    engine_->actors_[rank_]->clock += std::max(0.0, seconds);
  }
  bool is_virtual() const override { return true; }

 private:
  Engine* engine_;
  int rank_;
};

class Engine::Endpoint : public core::Transport {
 public:
  Endpoint(Engine* engine, int rank) : engine_(engine), rank_(rank), clock_(engine, rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return static_cast<int>(engine_->actors_.size()); }

  core::Status Send(int dst, int tag, const void* data, size_t bytes) override {
    if (dst < 0 || dst >= world_size() || dst == rank_) {
      return core::Status::InvalidArgument("send to invalid rank " + std::to_string(dst));
    }
    std::unique_lock<std::mutex> lock(engine_->mu_);
    engine_->Yield(rank_, lock);
    Message m{rank_, tag, std::vector<uint8_t>(bytes)};
    if (bytes) std::memcpy(m.payload.data(), data, bytes);
    const double now = engine_->actors_[rank_]->clock;
    std::vector<sim::Delivery> delivered;
    engine_->network_->AdvanceTo(now, &delivered);
    engine_->Deliver(delivered);
    const int64_t flow = engine_->network_->StartFlow(rank_, dst, static_cast<int64_t>(bytes), now);
    engine_->in_flight_.emplace(flow, std::make_pair(dst, std::move(m)));
    stats_.bytes_sent += static_cast<int64_t>(bytes);
    ++stats_.messages_sent;
    return core::Status::Ok();
  }

  core::Status Recv(int src, int tag, void* data, size_t bytes, double timeout_s) override {
    std::unique_lock<std::mutex> lock(engine_->mu_);
    engine_->Yield(rank_, lock);
    Actor& me = *engine_->actors_[rank_];
    auto take = [&]() -> std::optional<core::Status> {
      for (auto it = me.mailbox.begin(); it != me.mailbox.end(); ++it) {
        if (it->src != src || it->tag != tag) continue;
        const size_t got = it->payload.size();
        if (got != bytes) {
          me.mailbox.erase(it);
          return core::Status::InvalidArgument("message from rank " + std::to_string(src) + " has " +
                                               std::to_string(got) + " bytes, expected " +
                                               std::to_string(bytes));
        }
        if (bytes) std::memcpy(data, it->payload.data(), bytes);
        me.mailbox.erase(it);
        stats_.bytes_received += static_cast<int64_t>(bytes);
        ++stats_.messages_received;
        return core::Status::Ok();
      }
      return std::nullopt;
    };
    if (auto s = take()) return *s;
    if (!engine_->alive_[src]) {
      return core::Status::PeerUnavailable("rank " + std::to_string(src) + " has left");
    }
    const Wake wake = engine_->Block(rank_, src, tag, me.clock + timeout_s, lock);
    if (auto s = take()) return *s;
    if (wake == Wake::kTimeout) {
      return core::Status::Timeout("no message from rank " + std::to_string(src) + " within " +
                                   std::to_string(timeout_s) + " s of virtual time");
    }
    return core::Status::PeerUnavailable("rank " + std::to_string(src) +
                                         " will never send (it finished, left or waits too)");
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
  core::TransportStats stats() const override { return stats_; }

 private:
  Engine* engine_;
  int rank_;
  VirtualClock clock_;
  core::TransportStats stats_;
};

Engine::Engine(int num_workers, std::unique_ptr<sim::NetworkModel> network)
    : network_(std::move(network)), alive_(num_workers, true) {
  NARROWS_CHECK(network_->topology().num_workers() == num_workers)
      << "topology has " << network_->topology().num_workers() << " workers, engine " << num_workers;
  for (int r = 0; r < num_workers; ++r) {
    actors_.push_back(std::make_unique<Actor>());
    endpoints_.push_back(std::make_unique<Endpoint>(this, r));
  }
}

Engine::~Engine() = default;

core::Transport& Engine::endpoint(int rank) { return *endpoints_[rank]; }

double Engine::clock_of(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return actors_[rank]->clock;
}

void Engine::SetAlive(int rank, bool alive) {
  std::lock_guard<std::mutex> lock(mu_);
  alive_[rank] = alive;
}

void Engine::Yield(int rank, std::unique_lock<std::mutex>& lock) {
  Actor& a = *actors_[rank];
  a.state = State::kReady;
  running_ = -1;
  scheduler_cv_.notify_one();
  a.cv.wait(lock, [&] { return running_ == rank; });
}

Engine::Wake Engine::Block(int rank, int src, int tag, double deadline, std::unique_lock<std::mutex>& lock) {
  Actor& a = *actors_[rank];
  a.state = State::kBlocked;
  a.wait_src = src;
  a.wait_tag = tag;
  a.deadline = deadline;
  a.wake = Wake::kNone;
  running_ = -1;
  scheduler_cv_.notify_one();
  a.cv.wait(lock, [&] { return running_ == rank; });
  a.wait_src = a.wait_tag = -1;
  return a.wake;
}

void Engine::Deliver(const std::vector<sim::Delivery>& deliveries) {
  for (const auto& d : deliveries) {
    auto it = in_flight_.find(d.flow);
    NARROWS_CHECK(it != in_flight_.end()) << "unknown flow " << d.flow;
    const int dst = it->second.first;
    Actor& a = *actors_[dst];
    if (a.state == State::kBlocked && Matches(a, it->second.second)) {
      a.state = State::kReady;
      a.wake = Wake::kMessage;
      a.clock = std::max(a.clock, d.time);
    }
    a.mailbox.push_back(std::move(it->second.second));
    in_flight_.erase(it);
  }
}

void Engine::Schedule(std::unique_lock<std::mutex>& lock) {
  std::vector<sim::Delivery> delivered;
  while (true) {
    scheduler_cv_.wait(lock, [&] { return running_ == -1; });
    int next = -1, deadline_rank = -1, blocked = 0, done = 0;
    for (int r = 0; r < static_cast<int>(actors_.size()); ++r) {
      const Actor& a = *actors_[r];
      if (a.state == State::kDone) ++done;
      if (a.state == State::kReady && (next < 0 || a.clock < actors_[next]->clock)) next = r;
      if (a.state == State::kBlocked) {
        ++blocked;
        if (deadline_rank < 0 || a.deadline < actors_[deadline_rank]->deadline) deadline_rank = r;
      }
    }
    if (done == static_cast<int>(actors_.size())) return;
    const double t_actor = next >= 0 ? actors_[next]->clock : sim::kNever;
    const double t_net = network_->NextEventTime();
    const double t_deadline = deadline_rank >= 0 ? actors_[deadline_rank]->deadline : sim::kNever;
    if (t_net < sim::kNever && t_net <= t_actor && t_net <= t_deadline) {
      delivered.clear();
      network_->AdvanceTo(t_net, &delivered);
      Deliver(delivered);
      continue;
    }
    if (t_deadline < sim::kNever && t_deadline < t_actor) {
      Actor& a = *actors_[deadline_rank];
      a.state = State::kReady;
      a.wake = Wake::kTimeout;
      a.clock = std::max(a.clock, a.deadline);
      continue;
    }
    if (next >= 0) {
      actors_[next]->state = State::kRunning;
      running_ = next;
      actors_[next]->cv.notify_one();
      continue;
    }
    // Nothing can happen: every remaining actor waits for a message nobody will send.
    NARROWS_CHECK(blocked > 0);
    for (auto& a : actors_) {
      if (a->state == State::kBlocked) {
        a->state = State::kReady;
        a->wake = Wake::kDeadlock;
      }
    }
  }
}

void Engine::Run(const std::function<void(int rank)>& body) {
  std::vector<std::thread> threads;
  std::unique_lock<std::mutex> lock(mu_);
  for (auto& a : actors_) a->state = State::kReady;
  running_ = -1;
  for (int r = 0; r < static_cast<int>(actors_.size()); ++r) {
    threads.emplace_back([this, r, &body] {
      {
        std::unique_lock<std::mutex> l(mu_);
        actors_[r]->cv.wait(l, [&] { return running_ == r; });
      }
      body(r);
      std::lock_guard<std::mutex> l(mu_);
      actors_[r]->state = State::kDone;
      running_ = -1;
      scheduler_cv_.notify_one();
    });
  }
  Schedule(lock);
  lock.unlock();
  for (auto& t : threads) t.join();
}

}  // namespace narrows::emu
