// ZmqTransport::Node: one rank's sockets, its receiving thread, its peers' membership and its
// mailbox, shared by every endpoint of the rank (the one Connect returns and those Start makes).
// Internal to deploy/; zmq_transport.h says what the transport promises, this says how.
//
// The receiving thread polls the data and control PULL sockets (and rank 0's rendezvous ROUTER and
// the ZAP socket), validates every frame (deploy/frame.h) before it reaches the mailbox, and sends
// heartbeats; a peer silent for `timeout_s` is declared dead. Everything below `mu` is guarded by
// it; a peer's PUSH sockets by that peer's `send_mu`.
#pragma once

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/mailbox.h"
#include "deploy/frame.h"
#include "deploy/zmq_transport.h"

namespace narrows::deploy {

using Json = nlohmann::json;

struct ZmqTransport::Node {
  enum class PeerState { kAlive, kLeft, kDead };
  struct Peer {
    std::string data_ep, control_ep;
    std::string bulk_ep;  // its bulk plane's endpoint; empty if it has none (or this rank has none)
    uint64_t incarnation = 0;  // its current process's (written under mu and send_mu)
    int64_t generation = 0;  // new incarnations seen
    std::vector<uint64_t> retired;  // its incarnations replaced so far
    bool Replaced(uint64_t inc) const { return std::find(retired.begin(), retired.end(), inc) != retired.end(); }
    // Whether `inc` is a process other than its current one (before the first, any is taken as it).
    bool NotCurrent(uint64_t inc) const { return incarnation != 0 && inc != incarnation; }
    std::unique_ptr<zmq::socket_t> data, control;  // PUSH, guarded by send_mu
    std::mutex send_mu;
    uint64_t data_seq = 0;  // the next data frame's number to its current process (send_mu)
    // Data frames from it (mu): the number expected next from each of its processes (a new one
    // numbers from 0; kept per process so that alternating claims cannot reset the count).
    std::map<uint64_t, uint64_t> in_next;
    PeerState state = PeerState::kAlive;
    double last_seen = 0.0;
    // Data frames sent to it and received from it (this incarnation); a bye says how many it sent,
    // and the peer has left only once all of them arrived (they travel on another connection).
    int64_t data_sent = 0, data_received = 0, leaves_after = -1;
    std::string evicted;  // why its current incarnation was evicted (it is then dead); empty if not
    // Data frames from a new process of it whose hello has not come yet (its hello and its data
    // travel on different connections): held until the hello makes it the current process, then
    // delivered in order; what its predecessor left is discarded then, these are not.
    struct Early {
      uint64_t incarnation;
      int tag;
      zmq::message_t payload;
    };
    std::vector<Early> early;
    size_t early_bytes = 0;  // bounded by deploy.max_queued_mb: beyond it they are refused
  };
  // Where a frame was read: what it may carry depends on it.
  enum class Inbox { kData, kControl, kRendezvous };

  ZmqOptions opt;
  uint64_t incarnation;
  zmq::context_t ctx{1};
  zmq::socket_t data_pull{ctx, zmq::socket_type::pull};
  zmq::socket_t control_pull{ctx, zmq::socket_type::pull};
  zmq::socket_t zap{ctx, zmq::socket_type::rep};
  std::unique_ptr<zmq::socket_t> router;  // rank 0: the rendezvous
  std::string data_ep, control_ep;         // this rank's, as bound
  std::thread thread;
  std::atomic<bool> stop{false};

  mutable std::mutex mu;  // everything below
  std::condition_variable cv;
  std::vector<std::unique_ptr<Peer>> peers;
  core::Mailbox<ZmqPayload> mailbox;
  core::TransportStats sent;  // the sent fields; the mailbox counts what was received
  int64_t rejected = 0;
  std::string evicted;  // non-empty: why this rank stopped
  // Every eviction this rank made or heard of: (rank, incarnation, why), sent with each heartbeat
  // so that every member drops the same process (an eviction of an incarnation no longer current
  // is ignored by its receivers).
  std::vector<std::tuple<int, uint64_t, std::string>> evictions;
  // A Recv waiting with its own buffer for the next message from (source, tag), which the bulk plane
  // may read the payload into. Filling: it has begun to, and only its connection's handlers end
  // that (done: the message is in the mailbox; failed: it was dropped), so the waiting receive
  // stays until then.
  struct Posting {
    enum class State { kWaiting, kFilling, kDone, kFailed };
    void* data = nullptr;
    size_t bytes = 0;
    State state = State::kWaiting;
  };
  std::map<std::pair<int, int>, Posting*> postings;
  // Rendezvous (rank 0): the registered ranks' endpoints and the identities waiting for the table.
  std::vector<Json> table;
  std::vector<std::pair<int, std::string>> waiting;  // (rank, identity)
  bool table_complete = false;

  explicit Node(const ZmqOptions& o);
  void Log(const std::string& m) const;

  // --- set-up (zmq_node.cc) ------------------------------------------------------------------
  // Binds the data and control sockets (and, on rank 0, the rendezvous at `master_port`).
  core::Status Bind(int master_port);
  // The table of every rank's endpoints, once every rank has registered: rank 0 registers with
  // itself and waits; the others register at `master` and wait for the answer.
  core::Result<Json> Rendezvous(const std::string& master_host, int master_port);
  // Connects to every peer in `table` and says hello.
  void ConnectAll(const Json& table);
  // Says bye to every live peer, stops the receiving thread and closes every socket.
  void Close();

  // --- sending -------------------------------------------------------------------------------
  enum class CurveRole { kServer, kClient };
  // With `curve`: the socket authenticates as the cluster (server) or proves it holds its keys (client).
  void Secure(zmq::socket_t& s, CurveRole role);
  std::unique_ptr<zmq::socket_t> Push(const std::string& endpoint, int linger_ms);
  // The header, then the payload: copied into the message, or lent to it when `lease` is given
  // (ZeroMQ returns it to `lease` for `dst` once written or dropped). Data frames: `seq` and
  // `to_incarnation` (the receiving process).
  bool SendFrame(zmq::socket_t& s, FrameType type, int src, int tag, const void* payload, size_t bytes,
                 core::SendLease* lease = nullptr, int dst = -1, uint64_t seq = 0, uint64_t to_incarnation = 0) const;
  // Closes the data socket to `r` without lingering: what it still queued (lent messages
  // included) is dropped. The next hello from `r` opens a new one.
  void DropQueued(int r);
  void SendControl(int dst, FrameType type, const Json& body);
  // This rank's hello: its endpoints as `listed` (its entry in the rendezvous table: the host rank
  // 0 saw it at, or --advertise) says, and its incarnation.
  Json Hello(const Json& listed) const;
  // Connects to a peer's endpoints (again, for a restarted peer); `b`: its bulk plane's, or "".
  // REQUIRES: mu held.
  void ConnectPeer(int r, const std::string& d, const std::string& c, const std::string& b, uint64_t inc);
  // Why sending to or receiving from `r` can no longer succeed; empty while it can. REQUIRES: mu held.
  std::string Unavailable(int r) const;
  // Evicts `r`'s current incarnation: dead here, its queued data dropped, its later frames refused,
  // the eviction passed on with the heartbeats. REQUIRES: mu held.
  void EvictPeer(int r, const std::string& why);
  // Evicts `r`'s current incarnation for a frame it sent (counted as rejected), naming this rank
  // and `why`. REQUIRES: mu held.
  void EvictSender(int r, const std::string& why);
  // Evicts `r` if more than opt.max_queued_bytes of its messages wait unread, in the mailbox and
  // `held` more elsewhere (the bulk plane's, behind a missing sequence number): a member that
  // floods tags or steps no receive takes. REQUIRES: mu held.
  void BoundQueued(int r, int64_t held = 0);

  // --- the bulk plane (zmq_node_bulk.cc), with opt.bulk_streams > 0 ---------------------------
  struct Bulk;  // Boost.Asio's io_context and its thread, the listening socket and the connections
  struct BulkDeleter {
    void operator()(Bulk* b) const;  // stops its thread if it runs
  };
  std::unique_ptr<Bulk, BulkDeleter> bulk;
  std::string bulk_ep;  // this rank's, as bound; empty without the plane
  BulkCounts bulk_counts;  // guarded by mu
  // Binds the plane's listening socket (in Bind) and starts its thread.
  core::Status BindBulk();
  // Opens `bulk_streams` connections to `r`'s plane at `endpoint` for its process `inc` (again
  // after a restart; none if `endpoint` is empty). REQUIRES: r's send_mu held.
  void ConnectBulk(int r, const std::string& endpoint, uint64_t inc);
  // Whether data to `r` goes over the plane (both ends have it: ConnectPeer keeps r's bulk
  // endpoint only then). REQUIRES: r's send_mu held.
  bool BulkTo(int r) const;
  // Queues a data message to `r` on its next connection: lent (given back to `lease` once written
  // or dropped) when `lease` is given, copied otherwise. False if its connections are gone, or one
  // of them failed (the message is then the caller's to send over ZeroMQ, as is every later one).
  // REQUIRES: r's send_mu held.
  // `again`: under the previous message's sequence number (a hostile member's repeat, for tests
  // and the `repeat` fault).
  bool SendBulk(int r, int tag, const void* payload, size_t bytes, core::SendLease* lease, bool again = false);
  // Closes the connections to `r`; what they still queued is dropped and given back. REQUIRES: r's send_mu held.
  void DropBulk(int r);
  // Hands on what `r`'s current process sent over the plane before its hello came. REQUIRES: mu held.
  void HandOnBulk(int r);
  // Ends the plane's connections from process `inc` of `r` (declared dead or evicted): what it was
  // sending is void, and a Recv being filled from it fails. REQUIRES: mu held.
  void CloseBulkFrom(int r, uint64_t inc);
  // Writes what is queued (for up to 2 s), closes every connection and stops the thread.
  void CloseBulk();

  // --- receiving thread (zmq_node_receive.cc) ------------------------------------------------
  void Loop();
  void Beat();
  void AnswerZap();
  void Reject(int src_hint, const std::string& why);
  // Reads one multipart frame [header][payload] (a ROUTER's has the identity first); false if
  // none was waiting.
  bool ReadFrame(zmq::socket_t& s, Inbox inbox);
  // A data frame: numbered `h.seq` by the sender process `h.incarnation` for the process
  // `h.to_incarnation` (another than this one: dropped). One whose number came already (repeated,
  // or overtaken) is rejected, and evicts the member if its current process sent it.
  void OnData(int src, const FrameHeader& h, zmq::message_t payload);
  // The JSON body of a control frame, or false (the frame rejected) if it is not JSON.
  bool ParseBody(int src, const zmq::message_t& payload, const char* what, Json* body);
  void OnControl(int src, FrameType type, const zmq::message_t& payload);
  // Rank 0: a rank registers its endpoints (at start, or again after a restart).
  void OnRegister(int src, const std::string& identity, const std::string& peer_address, const zmq::message_t& payload);
  // A rendezvous answer to the registering process `identity`. REQUIRES: mu held.
  void SendHello(const std::string& identity, const std::string& text);
  // Sends the table to every waiting rank once every rank has registered. REQUIRES: mu held.
  void AnswerRegistrations();
};

// "rank 3".
std::string RankName(int r);
// Seconds of the steady clock (membership's timestamps).
double SteadySeconds();
// The parts of the next multipart message on `s` (none if `flags` is dontwait and none waits).
std::vector<zmq::message_t> RecvParts(zmq::socket_t& s, zmq::recv_flags flags);

}  // namespace narrows::deploy
