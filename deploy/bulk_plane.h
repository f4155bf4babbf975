// The bulk data plane of a ZmqTransport::Node: raw TCP connections on one Boost.Asio io_context
// (its own thread), beside ZeroMQ's sockets. zmq_transport.h says what it promises.
//
// Sending: each peer has `bulk_streams` outgoing connections; a message takes the first with less
// than a TCP window not yet acknowledged (queued here, and SIOCOUTQ in the kernel), with its sequence number (per receiver, from 0 for each process of the receiver) and waits in that
// connection's queue; the io thread writes header and payload with one gathered write and gives a
// lent payload back once written. Each connection carries one direction only, so a socket is only
// ever written (sender) or only read (receiver), each from the io thread.
//
// Receiving: each accepted connection says which rank and process it comes from, then carries
// frames. The io thread reads a frame's header, then its payload as it arrives (at most 1 MiB a
// read, each piece checksummed as it lands, while it is in the cache): into the buffer of a
// waiting Recv (a Posting) when the message is the next one that Recv can get (nothing of its
// (source, tag) queued or in flight before it, every earlier message of the source at least
// begun), otherwise into a buffer of its own — and where that Recv comes while the payload is being
// read, the slices read so far are copied over and the rest goes straight into its buffer. Reading
// never waits for a receive (the connection would stall, and over a long link its TCP window with
// it). A finished message is handed to the mailbox in sequence order. Node::mu guards the postings
// and the per-source state below.
//
// With CURVE the plane is sealed (bulk_seal.h): each connection's hello carries the sender's key
// for this receiver process (its pair key), a sender encrypts a message on its own thread before queueing it,
// and the io thread decrypts each 1 MiB record in place (in the Recv's buffer, where it goes there)
// as soon as it is read whole.
//
// This header is the plane's state, shared by the io thread's code (bulk_plane.cc) and the Node's
// calls into the plane (zmq_node_bulk.cc); nothing else includes it.
#pragma once

#include <boost/asio.hpp>

#include <linux/sockios.h>
#include <sys/ioctl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "deploy/bulk_seal.h"
#include "deploy/zmq_node.h"

namespace narrows::deploy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// What one TCP connection keeps in flight at most: about half its send buffer's limit.
int64_t TcpWindowBytes();

constexpr uint64_t kSliceBytes = uint64_t{1} << 20;  // at most, per read

struct Write {
  std::vector<uint8_t> header;
  const void* data = nullptr;
  size_t bytes = 0;
  std::unique_ptr<uint8_t[]> owned;  // a copied payload
  core::SendLease* lease = nullptr;  // a lent one's
  int dst = -1;
  void GiveBack() {
    if (lease) lease->Return(dst);
    lease = nullptr;
  }
};

struct OutStream {
  OutStream(asio::io_context& io, int to) : sock(io), dst(to) {}
  tcp::socket sock;
  int dst;
  // Read by senders to choose a connection: bytes queued here, and the socket once connected.
  std::atomic<int64_t> queued{0};
  std::atomic<int> fd{-1};
  // Bytes not yet acknowledged by the receiver: queued here, and in the kernel (SIOCOUTQ).
  int64_t Outstanding() const {
    int in_kernel = 0;
    const int f = fd.load();
    if (f >= 0) ::ioctl(f, SIOCOUTQ, &in_kernel);
    return queued.load() + in_kernel;
  }
  bool connected = false, writing = false, broken = false;
  // Broken by an error (a reset, a refused connect), not closed here: set on the io thread, read by
  // senders, who send to that peer over ZeroMQ from then on (SendBulk).
  std::atomic<bool> failed{false};
  std::deque<Write> queue;
};

struct InStream {
  explicit InStream(asio::io_context& io) : sock(io) {}
  tcp::socket sock;
  int src = -1;
  uint64_t inc = 0;
  std::array<uint8_t, kFrameHeaderBytes> header{};
  FrameHeader h;
  std::vector<uint8_t> hello;  // a sealed hello's payload
  SealKey key{};               // sealed: the sender's pair key, from its hello
  std::vector<uint8_t> tags;   // sealed: the frame's record tags
  size_t opened = 0;           // sealed: its records decrypted so far
  bool forged = false;         // sealed: a record failed authentication
  ZmqTransport::Node::Posting* claimed = nullptr;  // the Recv it is read into
  std::unique_ptr<uint8_t[]> buffer;       // ... or this
  uint8_t* target = nullptr;
  uint64_t read = 0;                       // of the payload, so far
  bool in_frame = false;                   // between a frame's header and its end
  int low_water = 1;                       // the socket's SO_RCVLOWAT
  FrameChecksum checksum;                  // plain: of the header and what was read so far
  bool duplicate = false;                  // its sequence number came before: read and dropped
};

// A message read whole, waiting for the ones sent before it.
struct Arrived {
  int tag = 0;
  std::optional<ZmqPayload> payload;  // none: dropped (corrupt, or its process was replaced)
  ZmqTransport::Node::Posting* claimed = nullptr;
};

struct ZmqTransport::Node::Bulk {
  explicit Bulk(Node& n) : node(n), acceptor(io), guard(io.get_executor()) {}
  Node& node;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  std::thread thread;
  const int64_t window = TcpWindowBytes();
  bool sealed = false;  // the run uses CURVE: hellos and frames sealed (bulk_seal.h)
  SealKey hello_key{};

  // Per destination, guarded by its send_mu: its process, where, the next sequence number, the connections.
  struct Outbound {
    uint64_t inc = 0;
    std::string endpoint;
    uint64_t next_seq = 0;
    SealKey key{};  // sealed: this process's pair key for that one (new with each)
    std::vector<std::shared_ptr<OutStream>> streams;
    bool over_zeromq = false;  // a connection failed: its data goes over ZeroMQ (said once)
  };
  std::vector<Outbound> out;

  // Per source, guarded by node.mu: the process its connections come from, what it sent that has
  // begun to arrive (sequence -> tag) and not been handed on, and what arrived whole.
  struct Inbound {
    uint64_t inc = 0;
    uint64_t next = 0;  // the next sequence number to hand to the mailbox
    std::map<uint64_t, int> begun;
    std::map<uint64_t, Arrived> arrived;
    int64_t held = 0;  // bytes of the arrived messages read into buffers of ours (not a Recv's)
    std::vector<std::weak_ptr<InStream>> streams;  // its connections (Close ends them)
  };
  std::vector<Inbound> in;

  // --- io thread: sending (bulk_plane.cc) ---
  void Broken(const std::shared_ptr<OutStream>& s, const std::string& why);
  void WriteNext(const std::shared_ptr<OutStream>& s);
  void Enqueue(const std::shared_ptr<OutStream>& s, Write w);
  void Open(const std::shared_ptr<OutStream>& s, tcp::endpoint at, Write hello);

  // --- io thread: receiving (bulk_plane.cc) ---
  void Accept();
  void Drop(const std::shared_ptr<InStream>& s, const std::string& why);
  void ReadHello(const std::shared_ptr<InStream>& s);
  void Admit(const std::shared_ptr<InStream>& s);
  void Restart(Inbound& from, uint64_t inc);  // REQUIRES: node.mu held.
  static void LowWater(InStream& s, uint64_t bytes);
  template <class Then>
  void ReadExactly(const std::shared_ptr<InStream>& s, uint8_t* to, size_t n, Then then);
  void ReadHeader(const std::shared_ptr<InStream>& s);
  Posting* Fits(const std::shared_ptr<InStream>& s);  // REQUIRES: node.mu held.
  void Route(const std::shared_ptr<InStream>& s);
  void ReadSlice(const std::shared_ptr<InStream>& s);
  void OpenRecords(const std::shared_ptr<InStream>& s);
  void Finish(const std::shared_ptr<InStream>& s);
  void Lost(const std::shared_ptr<InStream>& s, const boost::system::error_code& ec);
  void Close(int src, uint64_t inc);  // REQUIRES: node.mu held.
  void HandOn(int src);               // REQUIRES: node.mu held.
};

}  // namespace narrows::deploy
