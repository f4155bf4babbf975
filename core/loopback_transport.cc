#include "core/loopback_transport.h"

#include <chrono>
#include <numeric>

#include "core/thread_work.h"
#include "core/wall_clock.h"

namespace narrows::core {

class LoopbackHub::Endpoint : public MailboxTransport<std::vector<uint8_t>> {
 public:
  Endpoint(LoopbackHub* hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return static_cast<int>(hub_->mailboxes_.size()); }

  Status Send(int dst, int tag, const void* data, size_t bytes) override {
    if (dst < 0 || dst >= world_size()) {
      return Status::InvalidArgument("send to invalid rank " + std::to_string(dst));
    }
    const auto* bytes_in = static_cast<const uint8_t*>(data);
    std::vector<uint8_t> payload(bytes_in, bytes_in + bytes);  // one pass: no zeroing first
    {
      std::lock_guard<std::mutex> lock(hub_->mu_);
      hub_->mailboxes_[dst].Put(rank_, tag, std::move(payload));
      if (dst != rank_) {
        hub_->sent_[rank_].bytes_sent += static_cast<int64_t>(bytes);
        ++hub_->sent_[rank_].messages_sent;
      }
    }
    hub_->cv_.notify_all();
    return Status::Ok();
  }

  std::vector<int> Members() override {
    std::vector<int> out(static_cast<size_t>(world_size()));
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  Clock& clock() override { return clock_; }
  TransportStats stats() const override {
    std::lock_guard<std::mutex> lock(hub_->mu_);
    TransportStats s = hub_->mailboxes_[rank_].received();
    s.bytes_sent = hub_->sent_[rank_].bytes_sent;
    s.messages_sent = hub_->sent_[rank_].messages_sent;
    return s;
  }
  int64_t DiscardQueued(const std::function<bool(int, int)>& stale) override {
    std::lock_guard<std::mutex> lock(hub_->mu_);
    return hub_->mailboxes_[rank_].DiscardIf(stale);
  }
  std::unique_ptr<Work> Start(AsyncOp op) override {
    auto child = std::make_shared<Endpoint>(hub_, rank_);
    return std::make_unique<ThreadWork>([child, op = std::move(op)] { return op(*child); });
  }

 protected:
  Result<Envelope<std::vector<uint8_t>>> Await(int src, int tag, size_t expected_bytes, double timeout_s, void* /*into*/) override {
    std::unique_lock<std::mutex> lock(hub_->mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::min(timeout_s, 1e6));
    while (true) {
      if (auto m = hub_->mailboxes_[rank_].Take(src, tag, expected_bytes)) return std::move(*m);
      if (hub_->cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        const std::string who = src == kAnySource ? "any rank" : "rank " + std::to_string(src);
        return Status::Timeout("no message from " + who + " within " + std::to_string(timeout_s) + " s");
      }
    }
  }

 private:
  LoopbackHub* hub_;
  int rank_;
  WallClock clock_;
};

LoopbackHub::LoopbackHub(int world_size) : sent_(static_cast<size_t>(world_size)) {
  for (int r = 0; r < world_size; ++r) {
    mailboxes_.emplace_back(r, world_size);
    endpoints_.push_back(std::make_unique<Endpoint>(this, r));
  }
}

LoopbackHub::~LoopbackHub() = default;

Transport& LoopbackHub::endpoint(int rank) { return *endpoints_[rank]; }

}  // namespace narrows::core
