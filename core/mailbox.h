// Mailbox and MailboxTransport: what every transport does with a message once it has arrived —
// queue it, match a receive to it by (source, tag) or from any source in arrival order, check its
// size, hand its bytes over in the three ways Transport offers, and count it — written once for
// the loopback, emulated and ZeroMQ transports. How a transport waits for an arrival (a condition
// variable on the wall clock, the emulator's baton in virtual time) stays its own.
//
// Payload is the transport's buffer type: std::vector<uint8_t>, or zmq::message_t so that bytes
// are read where the socket put them; it needs data(), size() and moves.
//
// A Mailbox is not thread-safe: its transport guards it with its own lock.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/transport.h"

namespace narrows::core {

constexpr size_t kAnySize = static_cast<size_t>(-1);

template <typename Payload>
struct Envelope {
  int src = 0;
  int tag = 0;
  Payload payload;
};

template <typename Payload>
class Mailbox {
 public:
  // The mailbox of rank `owner` in a world of `world_size` ranks.
  Mailbox(int owner, int world_size) : owner_(owner), world_size_(world_size) {}

  void Put(int src, int tag, Payload payload) {
    queued_bytes_[src] += static_cast<int64_t>(payload.size());
    queues_[{src, tag}].push_back(Arrival{arrivals_++, std::move(payload)});
  }

  // The bytes of the messages from `src` queued and not yet taken.
  int64_t QueuedBytes(int src) const {
    auto it = queued_bytes_.find(src);
    return it == queued_bytes_.end() ? 0 : it->second;
  }

  // Removes and returns the earliest arrival with `tag` from `src` (kAnySource: from any rank);
  // nullopt if none has arrived. It counts as received unless the owner sent it to itself or it
  // is not `expected_bytes` long (a receive that rejects it).
  std::optional<Envelope<Payload>> Take(int src, int tag, size_t expected_bytes = kAnySize) {
    std::deque<Arrival>* earliest = nullptr;
    int from = -1;
    const int first = src == kAnySource ? 0 : src, last = src == kAnySource ? world_size_ : src + 1;
    for (int r = first; r < last; ++r) {
      auto it = queues_.find({r, tag});
      if (it == queues_.end() || it->second.empty()) continue;
      if (earliest == nullptr || it->second.front().seq < earliest->front().seq) {
        earliest = &it->second;
        from = r;
      }
    }
    if (earliest == nullptr) return std::nullopt;
    Envelope<Payload> out{from, tag, std::move(earliest->front().payload)};
    earliest->pop_front();
    queued_bytes_[from] -= static_cast<int64_t>(out.payload.size());
    if (from != owner_ && (expected_bytes == kAnySize || out.payload.size() == expected_bytes)) {
      received_.bytes_received += static_cast<int64_t>(out.payload.size());
      ++received_.messages_received;
    }
    return out;
  }

  // Whether a message with `tag` from `src` is queued.
  bool Has(int src, int tag) const {
    auto it = queues_.find({src, tag});
    return it != queues_.end() && !it->second.empty();
  }

  // Drops every message queued from `src` (a restarted process: its previous incarnation's
  // messages are void).
  void Discard(int src) {
    for (auto it = queues_.begin(); it != queues_.end();) {
      it = it->first.first == src ? queues_.erase(it) : std::next(it);
    }
    queued_bytes_.erase(src);
  }

  // Drops every queued message for which stale(src, tag) holds; returns how many.
  template <typename Stale>
  int64_t DiscardIf(const Stale& stale) {
    int64_t dropped = 0;
    for (auto it = queues_.begin(); it != queues_.end();) {
      if (stale(it->first.first, it->first.second)) {
        dropped += static_cast<int64_t>(it->second.size());
        for (const Arrival& a : it->second) queued_bytes_[it->first.first] -= static_cast<int64_t>(a.payload.size());
        it = queues_.erase(it);
      } else {
        ++it;
      }
    }
    return dropped;
  }

  // bytes_received and messages_received of what Take handed out (the sent fields stay 0).
  const TransportStats& received() const { return received_; }

 private:
  struct Arrival {
    uint64_t seq;
    Payload payload;
  };
  int owner_, world_size_;
  std::map<std::pair<int, int>, std::deque<Arrival>> queues_;  // (source, tag) -> arrival order
  uint64_t arrivals_ = 0;                                      // orders arrivals across sources
  std::map<int, int64_t> queued_bytes_;                        // per source, of what is queued
  TransportStats received_;
};

// The receive half of Transport over one primitive, Await: argument checks, the size check, and
// the three ways of handing the bytes over. Send, membership, clock and Start stay the transport's.
template <typename Payload>
class MailboxTransport : public Transport {
 public:
  Status Recv(int src, int tag, void* data, size_t bytes, double timeout_s = kForever) final {
    if (src < 0 || src >= world_size()) return Status::InvalidArgument("receive from invalid rank " + std::to_string(src));
    return Deliver(Await(src, tag, bytes, timeout_s, bytes ? data : nullptr), src, bytes, [&](const void* in) {
      if (bytes && in != data) std::memcpy(data, in, bytes);  // in == data: the transport received into it
    });
  }

  // `consume` runs without the transport's lock, on the bytes as they arrived.
  Status RecvInPlace(int src, int tag, size_t bytes, const std::function<void(const void*)>& consume,
                     double timeout_s = kForever) final {
    if (src < 0 || src >= world_size()) return Status::InvalidArgument("receive from invalid rank " + std::to_string(src));
    return Deliver(Await(src, tag, bytes, timeout_s, nullptr), src, bytes, consume);
  }

  Result<int> RecvMessage(int src, int tag, std::vector<uint8_t>* out, double timeout_s = kForever) final {
    if (src != kAnySource && (src < 0 || src >= world_size())) {
      return Status::InvalidArgument("receive from invalid rank " + std::to_string(src));
    }
    Result<Envelope<Payload>> got = Await(src, tag, kAnySize, timeout_s, nullptr);
    if (!got.ok()) return got.status();
    if constexpr (std::is_same_v<Payload, std::vector<uint8_t>>) {
      *out = std::move(got->payload);
    } else {
      const auto* begin = static_cast<const uint8_t*>(got->payload.data());
      out->assign(begin, begin + got->payload.size());
    }
    return got->src;
  }

 protected:
  // The earliest message with `tag` from `src` (or kAnySource), taken from this rank's mailbox
  // (Mailbox::Take with `expected_bytes`) once it has arrived; Timeout after `timeout_s` of this
  // endpoint's clock, PeerUnavailable when it can no longer come. `src` has been checked to be
  // kAnySource or a rank of the world. `into` (Recv's buffer of `expected_bytes`, or null) is where
  // the caller will copy the bytes: a transport may receive them there itself and hand back a
  // payload whose data() is `into`, which is then not copied again.
  virtual Result<Envelope<Payload>> Await(int src, int tag, size_t expected_bytes, double timeout_s, void* into) = 0;

 private:
  template <typename Consume>
  static Status Deliver(Result<Envelope<Payload>> got, int src, size_t bytes, const Consume& consume) {
    if (!got.ok()) return got.status();
    const Payload& m = got->payload;
    if (m.size() != bytes) {
      return Status::InvalidArgument("message from rank " + std::to_string(src) + " has " + std::to_string(m.size()) +
                                     " bytes, expected " + std::to_string(bytes));
    }
    consume(m.data());
    return Status::Ok();
  }
};

}  // namespace narrows::core
