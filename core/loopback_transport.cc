#include "core/loopback_transport.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "core/thread_work.h"

namespace narrows::core {
namespace {
double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

WallClock::WallClock() : start_(SteadySeconds()) {}
void WallClock::Reset() { start_ = SteadySeconds(); }
double WallClock::Now() const { return SteadySeconds() - start_; }

class LoopbackHub::Endpoint : public Transport {
 public:
  Endpoint(LoopbackHub* hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return static_cast<int>(hub_->mailboxes_.size()); }

  Status Send(int dst, int tag, const void* data, size_t bytes) override {
    if (dst < 0 || dst >= world_size()) {
      return Status::InvalidArgument("send to invalid rank " + std::to_string(dst));
    }
    const auto* bytes_in = static_cast<const uint8_t*>(data);
    Message m{rank_, tag, std::vector<uint8_t>(bytes_in, bytes_in + bytes)};  // one pass: no zeroing first
    {
      std::lock_guard<std::mutex> lock(hub_->mu_);
      if (!hub_->alive_[dst]) return Status::PeerUnavailable("rank " + std::to_string(dst) + " has left");
      hub_->mailboxes_[dst].push_back(std::move(m));
      if (dst != rank_) {
        hub_->stats_[rank_].bytes_sent += static_cast<int64_t>(bytes);
        ++hub_->stats_[rank_].messages_sent;
      }
    }
    hub_->cv_.notify_all();
    return Status::Ok();
  }

  Status Recv(int src, int tag, void* data, size_t bytes, double timeout_s) override {
    if (src < 0 || src >= world_size()) return Status::InvalidArgument("receive from invalid rank " + std::to_string(src));
    auto got = Receive(src, tag, timeout_s, [&](Message& m) {
      if (m.payload.size() != bytes) {
        return Status::InvalidArgument("message from rank " + std::to_string(src) + " has " +
                                       std::to_string(m.payload.size()) + " bytes, expected " + std::to_string(bytes));
      }
      if (bytes) std::memcpy(data, m.payload.data(), bytes);
      return Status::Ok();
    });
    return got.ok() ? Status::Ok() : got.status();
  }

  Result<int> RecvMessage(int src, int tag, std::vector<uint8_t>* out, double timeout_s) override {
    if (src != kAnySource && (src < 0 || src >= world_size())) {
      return Status::InvalidArgument("receive from invalid rank " + std::to_string(src));
    }
    return Receive(src, tag, timeout_s, [&](Message& m) {
      *out = std::move(m.payload);
      return Status::Ok();
    });
  }

  std::vector<int> Members() override {
    std::lock_guard<std::mutex> lock(hub_->mu_);
    std::vector<int> out;
    for (int r = 0; r < world_size(); ++r) {
      if (hub_->alive_[r]) out.push_back(r);
    }
    return out;
  }
  Clock& clock() override { return clock_; }
  TransportStats stats() const override {
    std::lock_guard<std::mutex> lock(hub_->mu_);
    return hub_->stats_[rank_];
  }
  std::unique_ptr<Work> Start(AsyncOp op) override {
    auto child = std::make_shared<Endpoint>(hub_, rank_);
    return std::make_unique<ThreadWork>([child, op = std::move(op)] { return op(*child); });
  }

 private:
  Result<int> Receive(int src, int tag, double timeout_s, const std::function<Status(Message&)>& accept) {
    std::unique_lock<std::mutex> lock(hub_->mu_);
    auto& box = hub_->mailboxes_[rank_];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::min(timeout_s, 1e6));
    const std::string who = src == kAnySource ? "any rank" : "rank " + std::to_string(src);
    while (true) {
      for (auto it = box.begin(); it != box.end(); ++it) {
        if (it->tag != tag || (src != kAnySource && it->src != src)) continue;
        Message m = std::move(*it);
        box.erase(it);
        const auto size = static_cast<int64_t>(m.payload.size());
        NARROWS_RETURN_IF_ERROR(accept(m));
        if (m.src != rank_) {
          hub_->stats_[rank_].bytes_received += size;
          ++hub_->stats_[rank_].messages_received;
        }
        return m.src;
      }
      if (src != kAnySource && !hub_->alive_[src]) return Status::PeerUnavailable(who + " has left");
      if (hub_->cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        return Status::Timeout("no message from " + who + " within " + std::to_string(timeout_s) + " s");
      }
    }
  }

  LoopbackHub* hub_;
  int rank_;
  WallClock clock_;
};

LoopbackHub::LoopbackHub(int world_size)
    : mailboxes_(world_size), alive_(world_size, true), stats_(world_size) {
  for (int r = 0; r < world_size; ++r) endpoints_.push_back(std::make_unique<Endpoint>(this, r));
}

void LoopbackHub::Leave(int rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    alive_[rank] = false;
  }
  cv_.notify_all();
}

}  // namespace narrows::core

namespace narrows::core {
LoopbackHub::~LoopbackHub() = default;
Transport& LoopbackHub::endpoint(int rank) { return *endpoints_[rank]; }
}  // namespace narrows::core
