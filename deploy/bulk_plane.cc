// The bulk data plane's io thread (bulk_plane.h describes the plane): writing each connection's
// queue to a peer's plane, and accepting connections from peers, reading their frames into a
// waiting Recv's buffer or one of ours, and handing whole messages to the mailbox in order.
#include "deploy/bulk_plane.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <utility>

namespace narrows::deploy {

using core::Status;
using State = ZmqTransport::Node::Posting::State;

int64_t TcpWindowBytes() {
  int64_t lo = 0, def = 0, hi = 0;
  std::ifstream f("/proc/sys/net/ipv4/tcp_wmem");
  return (f >> lo >> def >> hi && hi > 0) ? hi / 2 : int64_t{2} << 20;
}

// --- io thread: sending ---
void ZmqTransport::Node::Bulk::Broken(const std::shared_ptr<OutStream>& s, const std::string& why) {
  if (!s->broken && !why.empty()) node.Log("bulk connection to " + RankName(s->dst) + ": " + why);
  if (!why.empty()) s->failed = true;
  s->broken = true;
  s->fd = -1;
  boost::system::error_code ignored;
  s->sock.close(ignored);
  for (auto& w : s->queue) w.GiveBack();
  if (!s->writing) s->queue.clear();  // the write in flight gives its own back when it ends
}

void ZmqTransport::Node::Bulk::WriteNext(const std::shared_ptr<OutStream>& s) {
  if (s->writing || !s->connected || s->broken || s->queue.empty()) return;
  s->writing = true;
  Write& w = s->queue.front();
  const std::array<asio::const_buffer, 2> parts{asio::buffer(w.header), asio::buffer(w.data, w.bytes)};
  // All that is left in each call: asio's transfer_all hands the kernel 64 kB a call, 16 calls
  // (and as many wake-ups of this thread) for each 1 MiB piece.
  const size_t total = w.header.size() + w.bytes;
  auto rest = [total](const boost::system::error_code& ec, size_t done) -> size_t { return ec ? 0 : total - done; };
  asio::async_write(s->sock, parts, rest, [this, s](const boost::system::error_code& ec, size_t) {
    s->writing = false;
    s->queued -= static_cast<int64_t>(s->queue.front().bytes);
    s->queue.front().GiveBack();  // Broken leaves the write in flight queued
    s->queue.pop_front();
    if (ec) {
      Broken(s, ec == asio::error::operation_aborted ? "" : ec.message());
      s->queue.clear();
      return;
    }
    WriteNext(s);
  });
}

void ZmqTransport::Node::Bulk::Enqueue(const std::shared_ptr<OutStream>& s, Write w) {
  if (s->broken) {
    w.GiveBack();
    return;
  }
  s->queue.push_back(std::move(w));
  WriteNext(s);
}

void ZmqTransport::Node::Bulk::Open(const std::shared_ptr<OutStream>& s, tcp::endpoint at, Write hello) {
  s->queue.push_front(std::move(hello));
  s->sock.async_connect(at, [this, s](const boost::system::error_code& ec) {
    if (ec) {
      Broken(s, ec == asio::error::operation_aborted ? "" : "cannot connect: " + ec.message());
      return;
    }
    s->sock.set_option(tcp::no_delay(true));
    s->connected = true;
    s->fd = s->sock.native_handle();
    WriteNext(s);
  });
}

// --- io thread: receiving ---
void ZmqTransport::Node::Bulk::Accept() {
  auto s = std::make_shared<InStream>(io);
  acceptor.async_accept(s->sock, [this, s](const boost::system::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      boost::system::error_code ignored;
      s->sock.non_blocking(true, ignored);  // ReadSlice reads what poll said is there, never waits
      ReadHello(s);
    }
    Accept();
  });
}

void ZmqTransport::Node::Bulk::Drop(const std::shared_ptr<InStream>& s, const std::string& why) {
  if (!why.empty()) node.Reject(s->src, "bulk connection: " + why);
  boost::system::error_code ignored;
  s->sock.close(ignored);
}

void ZmqTransport::Node::Bulk::ReadHello(const std::shared_ptr<InStream>& s) {
  asio::async_read(s->sock, asio::buffer(s->header), [this, s](const boost::system::error_code& ec, size_t) {
    if (ec) return;
    auto h = DecodeFrameHeader(s->header.data(), s->header.size(), sealed ? kSealedHelloBytes : 0);
    if (!h.ok()) return Drop(s, h.status().message());
    if (h->type != FrameType::kBulkHello) return Drop(s, "it did not begin with a hello");
    if (h->src < 0 || h->src >= node.opt.world_size || h->src == node.opt.rank) {
      return Drop(s, "sender rank " + std::to_string(h->src) + " is not a peer");
    }
    if (sealed && h->length != kSealedHelloBytes) return Drop(s, "its hello carries no sealed key (this run uses CURVE)");
    // Opened to this rank's previous process, whose port this one took: void.
    if (h->to_incarnation != node.incarnation) return Drop(s, "");
    s->h = *h;
    if (h->length == 0) return Admit(s);
    s->hello.resize(h->length);
    asio::async_read(s->sock, asio::buffer(s->hello), [this, s](const boost::system::error_code& ec2, size_t) {
      if (!ec2) Admit(s);
    });
  });
}

// A connection whose hello was read: checked (and opened, sealed), then its frames.
void ZmqTransport::Node::Bulk::Admit(const std::shared_ptr<InStream>& s) {
  if (Status v = VerifyFrame(s->header.data(), s->h, s->hello.data(), s->hello.size()); !v.ok()) return Drop(s, v.message());
  if (sealed) {
    const HelloParties parties{s->h.src, s->h.incarnation, node.opt.rank, node.incarnation};
    auto key = OpenHello(hello_key, s->hello.data(), s->hello.size(), parties);
    if (!key.ok()) return Drop(s, key.status().message());
    s->key = *key;
  }
  {
    std::lock_guard<std::mutex> lock(node.mu);
    Peer& p = *node.peers[static_cast<size_t>(s->h.src)];
    if (p.Replaced(s->h.incarnation)) return Drop(s, "");  // a replaced process's late connection
    Inbound& from = in[static_cast<size_t>(s->h.src)];
    if (from.inc != s->h.incarnation) Restart(from, s->h.incarnation);
    from.streams.erase(std::remove_if(from.streams.begin(), from.streams.end(),
                                      [](const std::weak_ptr<InStream>& w) { return w.expired(); }),
                       from.streams.end());
    from.streams.push_back(s);
  }
  s->src = s->h.src;
  s->inc = s->h.incarnation;
  ReadHeader(s);
}

// A new process of the source: its predecessor's partial messages are void. REQUIRES: node.mu held.
void ZmqTransport::Node::Bulk::Restart(Inbound& from, uint64_t inc) {
  for (auto& [seq, a] : from.arrived) {
    if (a.claimed) a.claimed->state = State::kFailed;
  }
  from = Inbound{};
  from.inc = inc;
  node.cv.notify_all();
}

// Sets how many bytes the kernel holds before it wakes the io thread for `s` (SO_RCVLOWAT, which
// the kernel honours in poll and lets go of early under memory pressure or a closing window). A
// payload's reader is woken once the kernel holds kSliceBytes of it, or the rest of it: woken for
// every few segments instead, it read 65 kB a call on loopback, and the sender, whose window those
// reads opened, wrote as little (7x the system calls of ZeroMQ's engine, which is slower to wake
// and so reads more at a time).
void ZmqTransport::Node::Bulk::LowWater(InStream& s, uint64_t bytes) {
  const int v = static_cast<int>(std::max<uint64_t>(1, bytes));
  if (v == s.low_water) return;
  boost::system::error_code ignored;  // without it, reads wake for less: slower, not wrong
  s.sock.set_option(asio::socket_base::receive_low_watermark(v), ignored);
  s.low_water = v;
}

// Reads `n` bytes into `to`, then runs `then` (posted: a stream of small frames already in the
// kernel does not nest one call per frame): what the kernel holds now, then the rest once it holds
// all of it. The low-water mark is what is left to come, never more: with a header's 52 bytes set
// while part of that header was read already, a frame's last bytes (an answer of 24 after a header
// cut by a segment's end) fell short of it, and the kernel did not wake the io thread for them
// until the sender's next frame came -- if one came (asio's async_read keeps one mark for its
// every partial read).
template <class Then>
void ZmqTransport::Node::Bulk::ReadExactly(const std::shared_ptr<InStream>& s, uint8_t* to, size_t n, Then then) {
  boost::system::error_code ec;
  const size_t got = n == 0 ? 0 : s->sock.read_some(asio::buffer(to, n), ec);
  if (ec && ec != asio::error::would_block && ec != asio::error::try_again) return Lost(s, ec);
  if (got == n) return asio::post(io, std::move(then));
  LowWater(*s, n - got);
  s->sock.async_wait(tcp::socket::wait_read, [this, s, to, n, got, then = std::move(then)](const boost::system::error_code& wec) mutable {
    if (wec) return Lost(s, wec);
    ReadExactly(s, to + got, n - got, std::move(then));
  });
}

void ZmqTransport::Node::Bulk::ReadHeader(const std::shared_ptr<InStream>& s) {
  ReadExactly(s, s->header.data(), s->header.size(), [this, s] {
    auto h = DecodeFrameHeader(s->header.data(), s->header.size(), node.opt.max_message_bytes);
    if (!h.ok()) return Drop(s, h.status().message());
    if (h->type != FrameType::kBulk) return Drop(s, "a frame other than data");
    if (h->src != s->src) return Drop(s, "a frame claiming " + RankName(h->src) + " on " + RankName(s->src) + "'s");
    if (h->incarnation != s->inc) return Drop(s, "a frame of another process than its hello's");
    if (h->to_incarnation != node.incarnation) return Drop(s, "a frame for another process than this one");
    s->h = *h;
    if (!sealed) return Route(s);
    s->tags.resize(SealRecords(h->length) * kSealTagBytes);
    ReadExactly(s, s->tags.data(), s->tags.size(), [this, s] { Route(s); });
  });
}

// Whether the payload of `s`'s frame can go into the posting that waits for (source, tag).
// REQUIRES: node.mu held.
ZmqTransport::Node::Posting* ZmqTransport::Node::Bulk::Fits(const std::shared_ptr<InStream>& s) {
  auto it = node.postings.find({s->src, s->h.tag});
  if (it == node.postings.end() || it->second->state != State::kWaiting || it->second->bytes != s->h.length) return nullptr;
  if (node.mailbox.Has(s->src, s->h.tag)) return nullptr;
  // A process whose hello has not come: its messages wait for it (HandOn) in buffers of ours, so
  // that no Recv waits on them meanwhile.
  const Peer& p = *node.peers[static_cast<size_t>(s->src)];
  if (p.NotCurrent(s->inc)) return nullptr;
  const Inbound& from = in[static_cast<size_t>(s->src)];
  const uint64_t seq = s->h.seq;
  for (uint64_t q = from.next; q < seq; ++q) {
    auto b = from.begun.find(q);
    if (b == from.begun.end() || b->second == s->h.tag) return nullptr;  // an earlier one may be its
  }
  return it->second;
}

// Where the payload goes: the waiting Recv's buffer, or one of ours.
void ZmqTransport::Node::Bulk::Route(const std::shared_ptr<InStream>& s) {
  s->in_frame = true;
  s->read = 0;
  s->checksum = FrameChecksum(s->header.data());
  s->opened = 0;
  s->forged = false;
  {
    std::lock_guard<std::mutex> lock(node.mu);
    // A process evicted (or replaced) since its connection opened: nothing more is read from it.
    if (node.peers[static_cast<size_t>(s->src)]->Replaced(s->inc)) {
      boost::system::error_code ignored;
      s->sock.close(ignored);
      return;
    }
    Inbound& from = in[static_cast<size_t>(s->src)];
    const uint64_t seq = s->h.seq;
    s->duplicate = s->inc == from.inc && (seq < from.next || from.begun.count(seq) > 0);
    if (s->inc == from.inc && !s->duplicate) {
      from.begun[seq] = s->h.tag;
      if (Posting* p = Fits(s)) {
        ++node.bulk_counts.into_receiver;
        p->state = State::kFilling;
        s->claimed = p;
        s->target = static_cast<uint8_t*>(p->data);
      }
    }
  }
  if (!s->claimed) {
    s->buffer.reset(new uint8_t[std::max<uint64_t>(1, s->h.length)]);
    s->target = s->buffer.get();
  }
  ReadSlice(s);
}

// Waits until the kernel holds the next slice of the payload (LowWater), then reads what it holds.
void ZmqTransport::Node::Bulk::ReadSlice(const std::shared_ptr<InStream>& s) {
  if (s->read == s->h.length) return Finish(s);  // an empty payload
  LowWater(*s, std::min(kSliceBytes, s->h.length - s->read));
  s->sock.async_wait(tcp::socket::wait_read, [this, s](const boost::system::error_code& ec) {
    if (ec) return Lost(s, ec);
    boost::system::error_code rec;
    const size_t got = s->sock.read_some(asio::buffer(s->target + s->read, std::min(kSliceBytes, s->h.length - s->read)), rec);
    if (rec == asio::error::would_block || rec == asio::error::try_again) return ReadSlice(s);
    if (rec) return Lost(s, rec);
    if (!sealed) s->checksum.Add(s->target + s->read, got);  // while the slice is in the cache
    s->read += got;
    OpenRecords(s);
    if (s->read == s->h.length) return Finish(s);
    if (!s->claimed) {  // its Recv may have come meanwhile: the rest goes into its buffer
      Posting* p = nullptr;
      {
        std::lock_guard<std::mutex> lock(node.mu);
        if (s->inc == in[static_cast<size_t>(s->src)].inc && (p = Fits(s)) != nullptr) {
          ++node.bulk_counts.switched;
          p->state = State::kFilling;
          s->claimed = p;
        }
      }
      if (p) {
        std::memcpy(p->data, s->buffer.get(), s->read);
        s->target = static_cast<uint8_t*>(p->data);
        s->buffer.reset();
      }
    }
    ReadSlice(s);
  });
}

// Sealed: decrypts in place the records of the payload that were read whole.
void ZmqTransport::Node::Bulk::OpenRecords(const std::shared_ptr<InStream>& s) {
  if (!sealed || s->duplicate) return;
  const size_t records = SealRecords(s->h.length);
  while (!s->forged && s->opened < records) {
    const uint64_t at = s->opened * kSealRecordBytes;
    const uint64_t end = std::min<uint64_t>(s->h.length, at + kSealRecordBytes);
    if (s->read < end) return;
    s->forged = !OpenRecord(s->key, s->h.seq, s->header.data(), s->opened, s->target + at, end - at,
                            s->tags.data() + s->opened * kSealTagBytes);
    ++s->opened;
  }
}

void ZmqTransport::Node::Bulk::Finish(const std::shared_ptr<InStream>& s) {
  s->in_frame = false;
  OpenRecords(s);
  if (s->duplicate) {  // a sender never repeats a sequence number: a broken or hostile peer did
    const std::string why = "bulk frame: sequence number " + std::to_string(s->h.seq) + " again (a duplicated message)";
    s->buffer.reset();
    bool evicted = false;
    {
      std::lock_guard<std::mutex> lock(node.mu);
      if (node.peers[static_cast<size_t>(s->src)]->incarnation == s->inc) {  // the member's current process: evicted
        node.EvictSender(s->src, why);
        evicted = true;
      }
    }
    return Drop(s, evicted ? "" : why);
  }
  const bool intact = sealed ? !s->forged : s->checksum.Matches(s->h);
  if (!intact) node.Reject(s->src, sealed ? "bulk frame: fails authentication (forged or corrupt)" : "bulk frame: corrupt (checksum)");
  {
    std::lock_guard<std::mutex> lock(node.mu);
    Inbound& from = in[static_cast<size_t>(s->src)];
    Arrived a;
    a.tag = s->h.tag;
    a.claimed = std::exchange(s->claimed, nullptr);
    if (!a.claimed) ++node.bulk_counts.into_own;
    if (s->inc != from.inc) {  // its process was replaced meanwhile
      if (a.claimed) a.claimed->state = State::kFailed;
      node.cv.notify_all();
    } else {
      if (intact) {
        a.payload = a.claimed ? ZmqPayload::Placed(s->target, s->h.length) : ZmqPayload(std::move(s->buffer), s->h.length);
        if (!a.claimed) from.held += static_cast<int64_t>(s->h.length);
      }
      from.arrived.emplace(s->h.seq, std::move(a));
      HandOn(s->src);
      // Held back behind a number that has not come, they count against the sender as queued.
      node.BoundQueued(s->src, from.held);
      if (node.peers[static_cast<size_t>(s->src)]->Replaced(from.inc)) Restart(from, from.inc);  // evicted: let go
    }
  }
  s->buffer.reset();
  ReadHeader(s);
}

// The connection ended: at a process's exit (or kill) or a broken link. What it was reading is
// lost, and counted as arrived, void, so that what the source sent after it (over its other
// connections, done or under way into a Recv's buffer) is handed on and not held behind it.
void ZmqTransport::Node::Bulk::Lost(const std::shared_ptr<InStream>& s, const boost::system::error_code& ec) {
  std::lock_guard<std::mutex> lock(node.mu);
  if (s->claimed) {
    s->claimed->state = State::kFailed;
    s->claimed = nullptr;
    node.cv.notify_all();
  }
  if (s->in_frame && !s->duplicate && s->src >= 0) {
    s->in_frame = false;
    Inbound& from = in[static_cast<size_t>(s->src)];
    if (s->inc == from.inc && s->h.seq >= from.next && !from.arrived.count(s->h.seq)) {
      Arrived a;
      a.tag = s->h.tag;
      from.arrived.emplace(s->h.seq, std::move(a));
      HandOn(s->src);
    }
  }
  if (ec != asio::error::eof && ec != asio::error::operation_aborted && ec != asio::error::connection_reset) {
    node.Log("bulk connection from " + RankName(s->src) + ": " + ec.message());
  }
}

// Ends the connections from process `inc` of `src`, once it was declared dead or evicted: a
// message it was sending stops where it is (a process stopped or cut off leaves its connection
// open, and a Recv being filled from it would wait for the rest for ever); Lost then fails that
// Recv, whose message is void anyway. Connections of a newer process of `src` (its plane may
// connect before its hello comes) are left alone. REQUIRES: node.mu held.
void ZmqTransport::Node::Bulk::Close(int src, uint64_t inc) {
  Inbound& from = in[static_cast<size_t>(src)];
  if (from.inc != inc) return;  // its streams are another process's (Restart keeps them apart)
  auto streams = std::move(from.streams);
  from.streams.clear();
  if (streams.empty()) return;
  asio::post(io, [streams = std::move(streams)] {
    for (const auto& w : streams) {
      if (auto s = w.lock()) {
        boost::system::error_code ignored;
        s->sock.close(ignored);  // its pending read ends with operation_aborted: Lost
      }
    }
  });
}

// Hands the source's messages that arrived whole to the mailbox, in the order they were sent.
// REQUIRES: node.mu held.
void ZmqTransport::Node::Bulk::HandOn(int src) {
  Inbound& from = in[static_cast<size_t>(src)];
  Peer& p = *node.peers[static_cast<size_t>(src)];
  // A restarted process whose hello (over ZeroMQ) has not come yet: its messages wait for it
  // (OnControl hands them on then), neither taken for its predecessor's, which the hello
  // discards, nor dropped because the predecessor was declared dead.
  if (p.NotCurrent(from.inc) && !p.Replaced(from.inc)) return;
  for (auto it = from.arrived.find(from.next); it != from.arrived.end(); it = from.arrived.find(from.next)) {
    Arrived a = std::move(it->second);
    from.arrived.erase(it);
    if (a.payload && !a.claimed) from.held -= static_cast<int64_t>(a.payload->size());
    from.begun.erase(from.next);
    ++from.next;
    const bool void_now = p.state == PeerState::kDead || p.Replaced(from.inc);
    if (!a.payload || void_now) {
      // A corrupt message read into a Recv's buffer leaves that Recv waiting for the next one.
      if (a.claimed) a.claimed->state = void_now ? State::kFailed : State::kWaiting;
      continue;
    }
    if (a.claimed) a.claimed->state = State::kDone;
    p.last_seen = SteadySeconds();
    node.mailbox.Put(src, a.tag, std::move(*a.payload));
    if (++p.data_received == p.leaves_after && p.state == PeerState::kAlive) p.state = PeerState::kLeft;
    node.BoundQueued(src, from.held);
  }
  node.cv.notify_all();
}

}  // namespace narrows::deploy
