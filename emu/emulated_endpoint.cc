#include "emu/emulated_endpoint.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace narrows::emu {

double Engine::VirtualClock::Now() const {
  std::lock_guard<std::mutex> lock(engine_->mu_);
  return engine_->actors_[actor_]->clock;
}

void Engine::VirtualClock::ChargeCompute(double seconds) {
  std::lock_guard<std::mutex> lock(engine_->mu_);
  engine_->actors_[actor_]->clock += std::max(0.0, seconds);
}

core::Status Engine::Endpoint::Send(int dst, int tag, const void* data, size_t bytes) {
  const auto* bytes_in = static_cast<const uint8_t*>(data);
  return Transmit(dst, tag, bytes_in != nullptr ? bytes_in : reinterpret_cast<const uint8_t*>(""),
                  static_cast<int64_t>(bytes));
}

core::Status Engine::Endpoint::SendSizeOnly(int dst, int tag, int64_t bytes) {
  return Transmit(dst, tag, nullptr, std::max<int64_t>(0, bytes));
}

core::Status Engine::Endpoint::Transmit(int dst, int tag, const uint8_t* bytes_in, int64_t bytes) {
  if (dst < 0 || dst >= world_size()) {
    return core::Status::InvalidArgument("send to invalid rank " + std::to_string(dst));
  }
  std::unique_lock<std::mutex> lock(engine_->mu_);
  engine_->Yield(actor_, lock);
  if (!engine_->failure_.ok()) return engine_->failure_;
  engine_->SendAt(actor_, dst, tag, bytes_in, bytes);
  return core::Status::Ok();
}

void Engine::SendAt(int actor, int dst, int tag, const uint8_t* bytes_in, int64_t bytes) {
  const int rank = actors_[static_cast<size_t>(actor)]->rank;
  Message m{rank, tag, bytes_in == nullptr ? std::vector<uint8_t>() : std::vector<uint8_t>(bytes_in, bytes_in + bytes)};
  const double now = actors_[static_cast<size_t>(actor)]->clock;
  if (dst == rank) {
    Arrive(dst, std::move(m), now);
    return;
  }
  std::vector<sim::Delivery> delivered;
  network_->AdvanceTo(now, &delivered);
  Deliver(delivered);
  const int64_t flow = network_->StartFlow(rank, dst, bytes, now);
  if (in_flight_.empty()) stall_check_at_ = now + stall_s_;
  in_flight_.emplace(flow, InFlight{dst, bytes, std::move(m)});
  sent_[rank].bytes_sent += bytes;
  ++sent_[rank].messages_sent;
}

std::vector<int> Engine::Endpoint::Members() {
  std::vector<int> out(static_cast<size_t>(world_size()));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

core::TransportStats Engine::Endpoint::stats() const {
  std::lock_guard<std::mutex> lock(engine_->mu_);
  core::TransportStats s = engine_->mailboxes_[rank_].received();
  s.bytes_sent = engine_->sent_[rank_].bytes_sent;
  s.messages_sent = engine_->sent_[rank_].messages_sent;
  return s;
}

core::Result<core::Envelope<std::vector<uint8_t>>> Engine::Endpoint::Await(int src, int tag, size_t expected_bytes, double timeout_s, void* /*into*/) {
  std::unique_lock<std::mutex> lock(engine_->mu_);
  engine_->Yield(actor_, lock);
  if (!engine_->failure_.ok()) return engine_->failure_;
  auto& box = engine_->mailboxes_[rank_];
  if (auto m = box.Take(src, tag, expected_bytes)) return std::move(*m);
  Actor& me = *engine_->actors_[actor_];
  me.wait_src = src;
  me.wait_tag = tag;
  const Wake wake = engine_->Block(actor_, me.clock + timeout_s, lock);
  if (auto m = box.Take(src, tag, expected_bytes)) return std::move(*m);
  return engine_->ReceiveFailed(wake, src, timeout_s);
}

core::Status Engine::ReceiveFailed(Wake wake, int src, double timeout_s) const {
  const std::string who = src == core::kAnySource ? "any rank" : "rank " + std::to_string(src);
  if (wake == Wake::kFailed) return failure_;
  if (wake == Wake::kTimeout) {
    return core::Status::Timeout("no message from " + who + " within " + std::to_string(timeout_s) +
                                 " s of virtual time");
  }
  if (wake == Wake::kDeadlock && !deadlock_reason_.empty()) {
    return core::Status::PeerUnavailable(who + " will never send" + deadlock_reason_);
  }
  return core::Status::PeerUnavailable(who + " will never send (it finished, left or waits too)");
}

}  // namespace narrows::emu
