// The Node's side of the bulk data plane (bulk_plane.h describes the plane): binding its listening
// socket and starting its thread, opening connections to a peer's plane, queueing a send on one of
// them, and closing.
#include "deploy/bulk_plane.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <thread>

#include "deploy/addresses.h"

namespace narrows::deploy {

using core::Status;

int BulkStreamsFor(double bandwidth_bps, double rtt_s) {
  const double bdp_bytes = bandwidth_bps * rtt_s / 8.0;
  return static_cast<int>(std::clamp(std::ceil(bdp_bytes / static_cast<double>(TcpWindowBytes())), 1.0, 16.0));
}

void ZmqTransport::Node::BulkDeleter::operator()(Bulk* b) const {
  if (b->thread.joinable()) {  // a node that failed to connect was never closed
    b->io.stop();
    b->thread.join();
  }
  delete b;
}

Status ZmqTransport::Node::BindBulk() {
  if (opt.bulk_streams <= 0) return Status::Ok();
  bulk.reset(new Bulk(*this));
  if (opt.curve) {
    NARROWS_RETURN_IF_ERROR(InitSodium());
    auto key = HelloKey(opt.keys);
    if (!key.ok()) return key.status();
    bulk->sealed = true;
    bulk->hello_key = *key;
  }
  bulk->out.resize(static_cast<size_t>(opt.world_size));
  bulk->in.resize(static_cast<size_t>(opt.world_size));
  try {
    const std::string host = opt.bind_host == "*" ? "0.0.0.0" : opt.bind_host;
    const tcp::endpoint at(asio::ip::make_address(host), 0);
    bulk->acceptor.open(at.protocol());
    bulk->acceptor.set_option(tcp::acceptor::reuse_address(true));
    bulk->acceptor.bind(at);
    bulk->acceptor.listen();
    bulk_ep = TcpEndpoint(host, bulk->acceptor.local_endpoint().port());
  } catch (const std::exception& e) {
    return Status::IoError(RankName(opt.rank) + ": cannot bind its bulk data socket: " + e.what());
  }
  bulk->Accept();
  bulk->thread = std::thread([b = bulk.get()] { b->io.run(); });
  return Status::Ok();
}

bool ZmqTransport::Node::BulkTo(int r) const { return !peers[static_cast<size_t>(r)]->bulk_ep.empty(); }

void ZmqTransport::Node::ConnectBulk(int r, const std::string& endpoint, uint64_t inc) {
  if (!bulk) return;
  Bulk::Outbound& o = bulk->out[static_cast<size_t>(r)];
  if (!o.streams.empty() && o.inc == inc && o.endpoint == endpoint) return;
  DropBulk(r);
  o.inc = inc;
  o.endpoint = endpoint;
  o.next_seq = 0;
  o.over_zeromq = false;
  if (endpoint.empty()) return;
  std::vector<uint8_t> sealed_hello;  // one for all k connections
  if (bulk->sealed) {
    o.key = NewPairKey();
    sealed_hello = SealHello(bulk->hello_key, o.key, HelloParties{opt.rank, incarnation, r, inc});
  }
  const std::string hostport = endpoint.substr(endpoint.find("://") + 3);
  auto split = SplitHostPort(hostport);
  tcp::endpoint at;
  try {
    if (!split.ok()) throw std::runtime_error(split.status().message());
    tcp::resolver resolver(bulk->io);
    at = *resolver.resolve(split->first, std::to_string(split->second)).begin();
  } catch (const std::exception& e) {
    Log("bulk endpoint of " + RankName(r) + " (" + endpoint + "): " + e.what() + "; its data goes over ZeroMQ");
    return;
  }
  for (int k = 0; k < opt.bulk_streams; ++k) {
    auto s = std::make_shared<OutStream>(bulk->io, r);
    Write hello;
    hello.header = EncodeFrameHeader(FrameType::kBulkHello, opt.rank, k, sealed_hello.data(), sealed_hello.size(), incarnation,
                                     0, inc);
    if (!sealed_hello.empty()) {
      hello.owned.reset(new uint8_t[sealed_hello.size()]);
      std::memcpy(hello.owned.get(), sealed_hello.data(), sealed_hello.size());
      hello.data = hello.owned.get();
      hello.bytes = sealed_hello.size();
      s->queued += static_cast<int64_t>(hello.bytes);
    }
    asio::post(bulk->io, [b = bulk.get(), s, at, hello = std::move(hello)]() mutable { b->Open(s, at, std::move(hello)); });
    o.streams.push_back(std::move(s));
  }
}

bool ZmqTransport::Node::SendBulk(int r, int tag, const void* payload, size_t bytes, core::SendLease* lease, bool again) {
  Bulk::Outbound& o = bulk->out[static_cast<size_t>(r)];
  if (o.streams.empty() || o.over_zeromq) return false;
  // A connection to a live peer that failed took what it had queued with it: the receiver can hand
  // on nothing numbered after that (it waits for the lost numbers), so nothing more goes this way.
  // ZeroMQ reconnects by itself; the collective that lost a piece fails and is settled as usual.
  for (const auto& c : o.streams) {
    if (c->failed) {
      o.over_zeromq = true;
      Log("bulk connection to " + RankName(r) + " failed; its data goes over ZeroMQ until its next process");
      return false;
    }
  }
  const uint64_t seq = again && o.next_seq > 0 ? o.next_seq - 1 : o.next_seq++;
  // The first connection with less than a window in flight (what one TCP connection can keep in
  // flight), else the one with the least: a light load stays on one warm connection (an idle one,
  // or one that carries a piece now and then, starts each piece from a small congestion window),
  // and a heavy one spreads over as many windows as it fills.
  std::shared_ptr<OutStream> s;
  int64_t least = std::numeric_limits<int64_t>::max();
  for (const auto& c : o.streams) {
    const int64_t n = c->Outstanding();
    if (n < bulk->window) {
      s = c;
      break;
    }
    if (n < least) {
      least = n;
      s = c;
    }
  }
  Write w;
  w.dst = r;
  // Sealed, the checksum covers the header alone (the records' tags cover the payload).
  w.header = EncodeFrameHeader(FrameType::kBulk, opt.rank, tag, bulk->sealed ? nullptr : payload, bytes, incarnation, seq,
                               o.inc);
  w.bytes = bulk->sealed ? SealRecords(bytes) * kSealTagBytes + bytes : bytes;
  if (lease && !bulk->sealed) {
    lease->Lend(r);
    w.lease = lease;
    w.data = payload;
  } else {  // copied, or encrypted here on the sender's thread
    w.owned.reset(new uint8_t[std::max<size_t>(1, w.bytes)]);
    if (bulk->sealed) {
      SealPayload(o.key, seq, w.header.data(), payload, bytes, w.owned.get());
    } else if (bytes) {
      std::memcpy(w.owned.get(), payload, bytes);
    }
    w.data = w.owned.get();
  }
  s->queued += static_cast<int64_t>(w.bytes);
  asio::post(bulk->io, [b = bulk.get(), s = std::move(s), w = std::move(w)]() mutable { b->Enqueue(s, std::move(w)); });
  return true;
}

void ZmqTransport::Node::HandOnBulk(int r) {
  if (bulk) bulk->HandOn(r);
}

void ZmqTransport::Node::CloseBulkFrom(int r, uint64_t inc) {
  if (bulk) bulk->Close(r, inc);
}

void ZmqTransport::Node::DropBulk(int r) {
  if (!bulk) return;
  auto streams = std::move(bulk->out[static_cast<size_t>(r)].streams);
  bulk->out[static_cast<size_t>(r)].streams.clear();
  if (streams.empty()) return;
  asio::post(bulk->io, [b = bulk.get(), streams = std::move(streams)] {
    for (const auto& s : streams) b->Broken(s, "");
  });
}

void ZmqTransport::Node::CloseBulk() {
  if (!bulk) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {  // what is queued goes out first (the byes count it)
    std::promise<size_t> queued;
    auto counted = queued.get_future();
    asio::post(bulk->io, [b = bulk.get(), &queued] {
      size_t n = 0;
      for (const auto& o : b->out) {
        for (const auto& s : o.streams) n += s->broken ? 0 : s->queue.size();
      }
      queued.set_value(n);
    });
    if (counted.get() == 0) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  bulk->io.stop();
  if (bulk->thread.joinable()) bulk->thread.join();
}

}  // namespace narrows::deploy
