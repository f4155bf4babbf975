// ZmqTransport: core::Transport between processes, over ZeroMQ TCP sockets (cppzmq).
//
// Each rank binds two PULL sockets — data (Transport messages) and control (hello, heartbeat,
// bye) — and connects a PUSH socket of each kind to every peer, so that heartbeats never wait
// behind a large tensor on the data connection. Every message is one wire frame (deploy/frame.h):
// a receiver checks version, type, length and CRC-32 before a payload reaches a mailbox, logs the
// reason for each rejected frame and drops it.
//
// Rendezvous (torchrun's MASTER_ADDR:MASTER_PORT): rank 0 binds a ROUTER at `master`; every rank
// registers its two ports there and receives the table of all ranks' endpoints once all
// `world_size` ranks have registered. Rank 0 keeps answering for the whole run, so that a restarted
// rank can register again and rejoin.
//
// Membership: heartbeats every `heartbeat_s`; a peer not heard from for `timeout_s` is declared
// dead (Recv from it returns PeerUnavailable once its queued messages are read, Send to it fails),
// and a peer that says bye has left. A restarted process (new incarnation) says hello and is a
// member again. A rank that learns it was declared dead by a peer stops: its calls return
// PeerUnavailable. So does a rank that declares rank 0 dead: rank 0 hosts the rendezvous and
// writes the results, so the side of a partition without it stops (and may rejoin once healed)
// instead of training on as a second group.
//
// Security: with `curve` set, every socket uses ZeroMQ's CURVE (authenticated encryption) with
// one cluster key pair read from a key file, and a ZAP handler admits only clients that prove they
// hold that key pair; without it, plain TCP.
//
// Files: zmq_node.h (the sockets, membership, the rendezvous), zmq_node_receive.cc (the receiving
// thread), zmq_node_bulk.cc and bulk_plane.{h,cc} (the bulk plane), curve_keys.h, addresses.h; this file's .cc is the
// Transport API.
//
// The bulk plane (ZmqOptions::bulk_streams): ZeroMQ keeps the rendezvous, hellos, heartbeats and
// byes; every data message to a peer that has the plane goes over its raw TCP connections, framed
// as on ZeroMQ (CRC-32 included; sealed with CURVE, bulk_seal.h) with a per-receiver sequence number so that the receiver hands
// messages on in the order they were sent whichever connection carried them (one that repeats a
// sequence number is a duplicate: rejected and dropped). A message whose Recv
// is waiting is read straight into that Recv's buffer; one whose Recv comes while it is being read
// goes on into it (what was read so far copied over); the rest into buffers of the plane's, which
// a RecvInPlace reads in place. A connection that fails while its peer lives (a reset, a refused
// connect) loses what it carried: the receiver counts the message it was reading as arrived, void,
// and the sender sends that peer's data over ZeroMQ from then on, so nothing is held behind the
// lost numbers (the collective that lost a piece fails and is settled like any other failure).
//
// Large messages: collectives should send them in pieces (core::CollectiveOptions::pipeline_bytes,
// about 1 MiB), so that copying, checksumming, the wire and the reduction overlap and buffers are
// reused from the heap (Connect raises glibc's mmap threshold to 32 MiB for the process).
//
// Thread-safety: an endpoint is used by one thread (Start gives another endpoint of the same rank
// to another thread); the endpoints of one rank share the sockets behind mutexes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/mailbox.h"
#include "core/transport.h"
#include "core/wall_clock.h"
#include "deploy/addresses.h"
#include "deploy/curve_keys.h"

namespace zmq {
class message_t;
}

namespace narrows::deploy {

// A received payload where it was received: ZeroMQ's message, a buffer of the bulk plane's, or
// the receiver's own buffer (the bulk plane received a Recv's bytes into it). Collectives read it
// in place.
class ZmqPayload {
 public:
  explicit ZmqPayload(zmq::message_t message);
  ZmqPayload(std::unique_ptr<uint8_t[]> buffer, size_t bytes);
  // Bytes already in a receiver's buffer: data() is `at`, and nothing is owned.
  static ZmqPayload Placed(const void* at, size_t bytes);
  ZmqPayload(ZmqPayload&&) noexcept;
  ZmqPayload& operator=(ZmqPayload&&) noexcept;
  ~ZmqPayload();
  const void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  ZmqPayload() = default;
  std::unique_ptr<zmq::message_t> message_;
  std::unique_ptr<uint8_t[]> buffer_;
  const void* data_ = nullptr;
  size_t size_ = 0;
};

struct ZmqOptions {
  int rank = 0;
  int world_size = 1;
  std::string master = "127.0.0.1:29500";  // host:port of rank 0's rendezvous
  std::string bind_host = "*";             // interface for this rank's data and control sockets
  std::string advertise;                   // host peers reach this rank at ("": as rank 0 saw it)
  bool restarted = false;                  // started again after its predecessor was killed (--rejoin)
  double heartbeat_s = 0.5;
  double timeout_s = 5.0;            // silence after which a peer is declared dead
  double connect_timeout_s = 60.0;   // waiting for the rendezvous to complete
  uint64_t max_message_bytes = uint64_t{1} << 36;
  // A sender whose messages queued here unread exceed this many bytes is evicted (it floods
  // messages no receive takes: wrong tags or steps); 0: no bound.
  uint64_t max_queued_bytes = 0;
  bool curve = false;
  CurveKeys keys;                    // with curve: the cluster key pair
  // Where reasons are logged (rejected frames, peers declared dead or rejoining); default stderr.
  std::function<void(const std::string&)> log;
  // Called before each message to another rank leaves, from the sending thread (the deployment's
  // fault layer counts them to crash a process inside a collective); says how many of its bytes to
  // send — fewer than `bytes` only for a deployment's `corrupt` fault, never more — and whether to
  // send it a second time under the same sequence number (a `repeat` fault). Both make this
  // process a hostile member, which its peers evict.
  struct SendPlan {
    size_t bytes;
    bool twice = false;
  };
  std::function<SendPlan(int dst, int tag, size_t bytes)> before_send;
  // Data messages over k raw TCP connections per peer (the bulk plane, Boost.Asio) instead of
  // ZeroMQ's data socket: a message is received straight into the buffer of the Recv that waits
  // for it, and each message takes the first connection with less than a TCP window in flight
  // (k > 1 stripes a peer's traffic over several windows once one cannot keep up: long fat links). 0: ZeroMQ
  // carries the data. With `curve` the plane is sealed (bulk_seal.h: ChaCha20-Poly1305 under
  // pair keys sent in hellos sealed with the cluster key). A peer uses it with this rank only if
  // both have it.
  int bulk_streams = 0;
  // What every process of the run must agree on (a deployment passes core::RunDigest of its
  // scenario): rank 0 refuses a registration, a restart's included, whose digest differs.
  std::string run_digest;
};

// Connections a bulk plane needs to fill a path of `bandwidth_bps` and round trip `rtt_s`: one TCP
// connection keeps at most about half its send buffer's limit (net.ipv4.tcp_wmem's maximum, read
// from /proc; 4 MiB if unreadable) in flight, so k = ceil(bandwidth-delay product / that), 1 to 16.
int BulkStreamsFor(double bandwidth_bps, double rtt_s);

// Where the bulk plane put the payloads it received (messages).
struct BulkCounts {
  int64_t into_receiver = 0;  // wholly into a waiting Recv's buffer
  int64_t switched = 0;       // begun in a buffer of the plane's, the rest into a Recv's that came meanwhile
  int64_t into_own = 0;       // wholly into a buffer of the plane's (a RecvInPlace reads it there; a Recv copies it)
};

class ZmqTransport : public core::MailboxTransport<ZmqPayload> {
 public:
  // Binds, registers at the rendezvous and connects to every peer. Fails with Timeout if the
  // rendezvous does not complete within `connect_timeout_s` (for example with a wrong key).
  static core::Result<std::unique_ptr<ZmqTransport>> Connect(const ZmqOptions& options);
  // Says bye to every peer and closes.
  ~ZmqTransport() override;

  int rank() const override;
  int world_size() const override;
  core::Status Send(int dst, int tag, const void* data, size_t bytes) override;
  // Pieces of at least kMinBorrowedBytes go out from the caller's buffer (ZeroMQ's zero-copy
  // messages); smaller ones are copied as by Send.
  core::Status SendBorrowed(int dst, int tag, const void* data, size_t bytes, core::SendLease& lease) override;
  // Messages lent to a peer that is found dead or gone are dropped (its data socket is closed
  // and opened again if it rejoins), so this returns once the rest are written.
  void AwaitLent(core::SendLease& lease) override;
  std::vector<int> Members() override;
  int64_t Generation(int rank) override;
  int64_t DiscardQueued(const std::function<bool(int src, int tag)>& stale) override;
  // Drops `rank` here, tells every member with the next heartbeats (each drops it too; see
  // zmq_node.h), and refuses its current incarnation's frames from now on.
  core::Status Evict(int rank, const std::string& why) override;
  std::string Evicted(int rank) override;
  // Why this process was removed from the run (evicted, or declared dead by a member), or "".
  std::string Removed();
  // Whether this process was registered when every rank first was, so that it starts the run with
  // the others: a process started again (--rejoin) before its predecessor ever registered is one
  // of them, not a joiner of a run in progress.
  bool AtStart() const { return at_start_; }
  core::Clock& clock() override;
  core::TransportStats stats() const override;
  std::unique_ptr<core::Work> Start(core::AsyncOp op) override;

  // Time 0 of this endpoint's clock is now.
  void ResetClock();
  // The data socket's endpoint as bound ("tcp://127.0.0.1:41234").
  std::string data_endpoint() const;
  std::string control_endpoint() const;
  // Frames dropped because they failed validation, since Connect.
  int64_t frames_rejected() const;
  BulkCounts bulk_counts() const;
  // The bulk plane's listening endpoint as bound ("tcp://127.0.0.1:41234"); empty without it.
  std::string bulk_endpoint() const;
  // This process's incarnation (random, fixed for its life): peers address their data to it.
  uint64_t incarnation() const;

  static constexpr size_t kMinBorrowedBytes = 64 * 1024;

  struct Node;  // the sockets, the receiving thread and the mailbox; shared by endpoints (zmq_node.h)

 protected:
  core::Result<core::Envelope<ZmqPayload>> Await(int src, int tag, size_t expected_bytes, double timeout_s, void* into) override;

 private:
  explicit ZmqTransport(std::shared_ptr<Node> node);
  core::Status SendTo(int dst, int tag, const void* data, size_t bytes, core::SendLease* lease);
  std::shared_ptr<Node> node_;
  std::shared_ptr<core::WallClock> clock_;  // shared with the endpoints Start makes
  bool owner_ = false;  // the endpoint Connect returned: its destruction closes the node
  bool at_start_ = false;  // (AtStart)
};

}  // namespace narrows::deploy
