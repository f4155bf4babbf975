#include "deploy/zmq_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "core/heap.h"
#include "core/loopback_transport.h"
#include "core/thread_work.h"
#include "deploy/frame.h"

namespace narrows::deploy {
namespace {

using Json = nlohmann::json;
using core::Status;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Rank(int r) { return "rank " + std::to_string(r); }

// "tcp://0.0.0.0:41234" -> 41234.
int PortOf(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  return colon == std::string::npos ? -1 : std::atoi(endpoint.c_str() + colon + 1);
}

std::string Endpoint(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// Splits "host:port" (IPv6 hosts in brackets).
core::Result<std::pair<std::string, int>> SplitHostPort(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    return Status::InvalidArgument("expected host:port, got '" + s + "'");
  }
  std::string host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  const long port = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) {
    return Status::InvalidArgument("expected a port in 1..65535 in '" + s + "'");
  }
  return std::make_pair(host, static_cast<int>(port));
}

// The parts of the next multipart message on `s` (none if `flags` is dontwait and none waits).
std::vector<zmq::message_t> RecvParts(zmq::socket_t& s, zmq::recv_flags flags) {
  std::vector<zmq::message_t> parts;
  while (true) {
    zmq::message_t m;
    if (!s.recv(m, parts.empty() ? flags : zmq::recv_flags::none)) break;
    const bool more = m.more();
    parts.push_back(std::move(m));
    if (!more) break;
  }
  return parts;
}

}  // namespace

core::Result<CurveKeys> GenerateCurveKeys() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Status::Internal("zmq_curve_keypair failed: this libzmq has no CURVE support");
  }
  return CurveKeys{pub, sec};
}

core::Result<CurveKeys> ReadKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open the key file");
  CurveKeys keys;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos && line.find('"') == std::string::npos) continue;  // a section name
    const auto q1 = line.find('"'), q2 = line.rfind('"');
    if (eq == std::string::npos || q1 == std::string::npos || q2 <= q1) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": expected name = \"key\"");
    }
    std::string name = line.substr(first, eq - first);
    name.erase(name.find_last_not_of(" \t") + 1);
    const std::string value = line.substr(q1 + 1, q2 - q1 - 1);
    if (name != "public-key" && name != "secret-key") continue;  // metadata of a zcert file
    if (value.size() != 40) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": " + name +
                                     " must be 40 Z85 characters, got " + std::to_string(value.size()));
    }
    (name == "public-key" ? keys.public_key : keys.secret_key) = value;
  }
  if (keys.public_key.empty() || keys.secret_key.empty()) {
    return Status::InvalidArgument(path + ": needs both public-key and secret-key (narrows keygen writes one)");
  }
  char derived[41];
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0 || keys.public_key != derived) {
    return Status::InvalidArgument(path + ": public-key does not belong to secret-key");
  }
  return keys;
}

Status WriteNewKeyFile(const std::string& path) {
  auto keys = GenerateCurveKeys();
  if (!keys.ok()) return keys.status();
  FILE* f = std::fopen(path.c_str(), "wx");  // fails if it exists
  if (!f) return Status::IoError(path + ": cannot create the key file (" + std::strerror(errno) + ")");
  ::fchmod(fileno(f), 0600);
  std::fprintf(f, "# narrows CURVE key pair: every process of a run needs this file; keep it secret\n"
                  "curve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n",
               keys->public_key.c_str(), keys->secret_key.c_str());
  const bool ok = std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  std::fclose(f);
  return ok ? Status::Ok() : Status::IoError(path + ": write failed");
}

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 29500;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

// ---------------------------------------------------------------------------------------------

struct ZmqTransport::Node {
  enum class PeerState { kAlive, kLeft, kDead };
  struct Peer {
    std::string data_ep, control_ep;
    uint64_t incarnation = 0;
    int64_t generation = 0;  // new incarnations seen
    std::unique_ptr<zmq::socket_t> data, control;  // PUSH, guarded by send_mu
    std::mutex send_mu;
    PeerState state = PeerState::kAlive;
    double last_seen = 0.0;
    // Data frames sent to it and received from it (this incarnation); a bye says how many it sent,
    // and the peer has left only once all of them arrived (they travel on another connection).
    int64_t data_sent = 0, data_received = 0, leaves_after = -1;
  };

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
  // (source, tag) -> messages in arrival order; `seq` orders arrivals across sources.
  struct Arrival {
    uint64_t seq;
    zmq::message_t payload;
  };
  std::map<std::pair<int, int>, std::deque<Arrival>> mailbox;
  uint64_t arrivals = 0;
  core::TransportStats stats;
  int64_t rejected = 0;
  std::string evicted;  // non-empty: why this rank stopped
  // Rendezvous (rank 0): the registered ranks' endpoints and the identities waiting for the table.
  std::vector<Json> table;
  std::vector<std::string> waiting;
  bool table_complete = false;

  explicit Node(const ZmqOptions& o) : opt(o) {
    std::random_device rd;
    incarnation = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(Seconds() * 1e9);
    if (!opt.log) opt.log = [](const std::string& m) { std::cerr << m << "\n"; };
  }

  void Log(const std::string& m) const { opt.log("narrows[" + Rank(opt.rank) + "]: " + m); }

  void Secure(zmq::socket_t& s, bool server) {
    if (!opt.curve) return;
    if (server) {
      s.set(zmq::sockopt::curve_server, 1);
      s.set(zmq::sockopt::curve_secretkey, opt.keys.secret_key);
      s.set(zmq::sockopt::zap_domain, "narrows");
    } else {
      s.set(zmq::sockopt::curve_serverkey, opt.keys.public_key);
      s.set(zmq::sockopt::curve_publickey, opt.keys.public_key);
      s.set(zmq::sockopt::curve_secretkey, opt.keys.secret_key);
    }
  }

  std::unique_ptr<zmq::socket_t> Push(const std::string& endpoint, int linger_ms) {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::push);
    s->set(zmq::sockopt::sndhwm, 0);  // Send never blocks: the contract says it returns at once
    s->set(zmq::sockopt::linger, linger_ms);
    s->set(zmq::sockopt::immediate, 0);
    Secure(*s, false);
    s->connect(endpoint);
    return s;
  }

  // A payload lent by the caller: ZeroMQ calls ReturnLent (from its I/O thread) once it has written
  // the bytes to the socket or dropped them with the socket.
  struct Lent {
    core::SendLease* lease;
    int dst;
  };
  static void ReturnLent(void* /*data*/, void* hint) {
    std::unique_ptr<Lent> lent(static_cast<Lent*>(hint));
    lent->lease->Return(lent->dst);
  }

  // The header, then the payload: copied into the message, or lent to it when `lease` is given.
  static bool SendFrame(zmq::socket_t& s, FrameType type, int src, int tag, const void* payload, size_t bytes,
                        core::SendLease* lease = nullptr, int dst = -1) {
    const auto header = EncodeFrameHeader(type, src, tag, payload, bytes);
    if (!s.send(zmq::buffer(header), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
    if (!lease) return static_cast<bool>(s.send(zmq::message_t(payload, bytes), zmq::send_flags::dontwait));
    lease->Lend(dst);  // returned by ZeroMQ, or by `body`'s destructor if the send fails
    zmq::message_t body(const_cast<void*>(payload), bytes, &ReturnLent, new Lent{lease, dst});
    return static_cast<bool>(s.send(body, zmq::send_flags::dontwait));
  }

  // Closes the data socket to `r` without lingering: what it still queued (lent messages
  // included) is dropped. The next hello from `r` opens a new one.
  void DropQueued(int r) {
    Peer& p = *peers[static_cast<size_t>(r)];
    std::lock_guard<std::mutex> lock(p.send_mu);
    if (!p.data) return;
    p.data->set(zmq::sockopt::linger, 0);
    p.data->close();
    p.data.reset();
  }

  void SendControl(int dst, FrameType type, const Json& body) {
    const std::string text = body.dump();
    Peer& p = *peers[static_cast<size_t>(dst)];
    std::lock_guard<std::mutex> lock(p.send_mu);
    if (p.control) SendFrame(*p.control, type, opt.rank, 0, text.data(), text.size());
  }

  Json Hello() const { return {{"data", data_ep}, {"control", control_ep}, {"incarnation", incarnation}}; }

  // Connects to a peer's endpoints (again, for a restarted peer). REQUIRES: mu held.
  void ConnectPeer(int r, const std::string& d, const std::string& c, uint64_t inc) {
    Peer& p = *peers[static_cast<size_t>(r)];
    std::lock_guard<std::mutex> lock(p.send_mu);
    if (p.data_ep != d || !p.data) p.data = Push(d, 2000);
    if (p.control_ep != c || !p.control) p.control = Push(c, 500);
    p.data_ep = d;
    p.control_ep = c;
    p.incarnation = inc;
    p.state = PeerState::kAlive;
    p.last_seen = Seconds();
  }

  // --- receiving thread ----------------------------------------------------------------------

  void Reject(int src_hint, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++rejected;
    }
    Log("rejected a frame" + (src_hint >= 0 ? " claiming " + Rank(src_hint) : std::string()) + ": " + why);
  }

  // Reads one multipart frame [header][payload]; false if none was waiting.
  bool ReadFrame(zmq::socket_t& s, bool control, std::string* identity = nullptr) {
    std::vector<zmq::message_t> parts = RecvParts(s, zmq::recv_flags::dontwait);
    if (parts.empty()) return false;
    std::string peer_address;
    if (identity) {
      *identity = parts.front().to_string();
      parts.erase(parts.begin());
      const char* addr = parts.empty() ? nullptr : parts.front().gets("Peer-Address");
      peer_address = addr ? addr : "";
    }
    if (parts.size() != 2) {
      Reject(-1, "expected 2 parts (header, payload), got " + std::to_string(parts.size()));
      return true;
    }
    const auto* hbytes = static_cast<const uint8_t*>(parts[0].data());
    auto header = DecodeFrameHeader(hbytes, parts[0].size(), opt.max_message_bytes);
    if (!header.ok()) {
      Reject(-1, header.status().message());
      return true;
    }
    const int src = header->src;
    if (header->length != parts[1].size()) {
      Reject(src, "header says " + std::to_string(header->length) + " payload bytes, frame has " +
                      std::to_string(parts[1].size()));
      return true;
    }
    if (const Status s = VerifyFrame(hbytes, *header, parts[1].data(), parts[1].size()); !s.ok()) {
      Reject(src, s.message());
      return true;
    }
    if (src < 0 || src >= opt.world_size || src == opt.rank) {
      Reject(src, "sender rank " + std::to_string(src) + " is not a peer in a world of " +
                      std::to_string(opt.world_size));
      return true;
    }
    if (identity) {
      if (header->type != FrameType::kHello) {
        Reject(src, "only registrations go to the rendezvous");
        return true;
      }
      OnRegister(src, *identity, peer_address, parts[1]);
    } else if (!control) {
      if (header->type != FrameType::kData) {
        Reject(src, "control frame on the data socket");
        return true;
      }
      OnData(src, header->tag, std::move(parts[1]));
    } else {
      if (header->type == FrameType::kData) {
        Reject(src, "data frame on the control socket");
        return true;
      }
      OnControl(src, header->type, parts[1]);
    }
    return true;
  }

  void OnData(int src, int tag, zmq::message_t payload) {
    {
      std::lock_guard<std::mutex> lock(mu);
      Peer& p = *peers[static_cast<size_t>(src)];
      if (p.state == PeerState::kDead) return;  // a dead incarnation's late bytes
      p.last_seen = Seconds();
      mailbox[{src, tag}].push_back({arrivals++, std::move(payload)});
      if (++p.data_received == p.leaves_after && p.state == PeerState::kAlive) p.state = PeerState::kLeft;
    }
    cv.notify_all();
  }

  // The JSON body of a control frame, or false (the frame rejected) if it is not JSON.
  bool ParseBody(int src, const zmq::message_t& payload, const char* what, Json* body) {
    try {
      *body = Json::parse(payload.to_string());
      return true;
    } catch (const std::exception& e) {
      Reject(src, std::string(what) + " is not JSON: " + e.what());
      return false;
    }
  }

  void OnControl(int src, FrameType type, const zmq::message_t& payload) {
    Json body;
    if (!ParseBody(src, payload, "control payload", &body)) return;
    std::unique_lock<std::mutex> lock(mu);
    Peer& p = *peers[static_cast<size_t>(src)];
    const uint64_t inc = body.value("incarnation", uint64_t{0});
    if (type == FrameType::kHello) {
      if (!body.contains("data") || !body.contains("control") || !body["data"].is_string() ||
          !body["control"].is_string()) {
        lock.unlock();
        Reject(src, "hello without data and control endpoints");
        return;
      }
      if (p.incarnation != 0 && inc != p.incarnation) {
        // A restarted process: what its previous incarnation sent is void.
        for (auto it = mailbox.begin(); it != mailbox.end();) {
          it = it->first.first == src ? mailbox.erase(it) : std::next(it);
        }
        p.data_sent = p.data_received = 0;
        p.leaves_after = -1;
        ++p.generation;
        Log(Rank(src) + " rejoined (new process)");
      }
      ConnectPeer(src, body["data"], body["control"], inc);
    } else if (type == FrameType::kHeartbeat) {
      if (inc != p.incarnation || p.state != PeerState::kAlive) return;  // stale or declared dead
      p.last_seen = Seconds();
      for (const auto& d : body.value("dead", Json::array())) {
        if (d.is_array() && d.size() == 2 && d[0] == opt.rank && d[1] == incarnation && evicted.empty()) {
          evicted = "this rank was declared dead by " + Rank(src);
          Log(evicted + "; it stops");
        }
      }
    } else if (type == FrameType::kBye) {
      if (inc == p.incarnation && p.state == PeerState::kAlive) {
        p.leaves_after = body.value("sent", int64_t{0});
        if (p.data_received >= p.leaves_after) p.state = PeerState::kLeft;
      }
    }
    lock.unlock();
    cv.notify_all();
  }

  // Rank 0: a rank registers its endpoints (at start, or again after a restart).
  void OnRegister(int src, const std::string& identity, const std::string& peer_address,
                  const zmq::message_t& payload) {
    Json body;
    if (!ParseBody(src, payload, "registration", &body)) return;
    std::string host = body.value("host", std::string());
    if (host.empty()) host = peer_address.empty() ? "127.0.0.1" : peer_address;
    const int dp = body.value("data_port", 0), cp = body.value("control_port", 0);
    if (dp <= 0 || cp <= 0) {
      Reject(src, "registration without ports");
      return;
    }
    const uint64_t inc = body.value("incarnation", uint64_t{0});
    std::lock_guard<std::mutex> lock(mu);
    const Json& known = table[static_cast<size_t>(src)];
    if (!table_complete && !known.is_null() && known.value("incarnation", uint64_t{0}) != inc) {
      // Before every rank has registered, a second process for a rank is a mistake (the same rank
      // given twice, or a restart before the original registered), not a restart: refuse it.
      const std::string why = Rank(src) + " is already registered by another process (rank given twice?)";
      Log("refused a registration: " + why);
      SendHello(identity, Json{{"error", why}}.dump());
      return;
    }
    table[static_cast<size_t>(src)] = {{"data", Endpoint(host, dp)}, {"control", Endpoint(host, cp)},
                                       {"incarnation", inc}};
    waiting.push_back(identity);
    AnswerRegistrations();
  }

  // REQUIRES: mu held. A rendezvous answer to the registering process `identity`.
  void SendHello(const std::string& identity, const std::string& text) {
    const auto header = EncodeFrameHeader(FrameType::kHello, 0, 0, text.data(), text.size());
    router->send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router->send(zmq::buffer(header), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router->send(zmq::buffer(text), zmq::send_flags::dontwait);
  }

  // REQUIRES: mu held. Sends the table to every waiting rank once every rank has registered.
  void AnswerRegistrations() {
    for (const auto& e : table) {
      if (e.is_null()) return;
    }
    table_complete = true;
    const std::string text = Json(table).dump();
    for (const auto& id : waiting) SendHello(id, text);
    waiting.clear();
    cv.notify_all();
  }

  // ZAP (ZeroMQ's authentication protocol, RFC 27): admit a CURVE client only if its public key
  // is the cluster's — which the handshake proves it holds the secret key of.
  void AnswerZap() {
    std::vector<zmq::message_t> req = RecvParts(zap, zmq::recv_flags::dontwait);
    if (req.size() < 6) return;
    bool ok = false;
    if (req.size() >= 7 && req[5].to_string() == "CURVE" && req[6].size() == 32) {
      char z85[41];
      zmq_z85_encode(z85, static_cast<const uint8_t*>(req[6].data()), 32);
      ok = opt.keys.public_key == z85;
    }
    if (!ok) Log("refused a connection from " + req[3].to_string() + ": not the cluster's key");
    const std::string code = ok ? "200" : "400";
    zap.send(zmq::buffer(std::string("1.0")), zmq::send_flags::sndmore);
    zap.send(req[1], zmq::send_flags::sndmore);
    zap.send(zmq::buffer(code), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(std::string(ok ? "OK" : "wrong key")), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(std::string("")), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(std::string("")), zmq::send_flags::none);
  }

  void Beat() {
    Json dead = Json::array();
    std::vector<int> to;
    {
      std::lock_guard<std::mutex> lock(mu);
      const double now = Seconds();
      for (int r = 0; r < opt.world_size; ++r) {
        if (r == opt.rank) continue;
        Peer& p = *peers[static_cast<size_t>(r)];
        if (p.state == PeerState::kAlive && p.incarnation != 0 && now - p.last_seen > opt.timeout_s) {
          p.state = PeerState::kDead;
          Log(Rank(r) + " declared dead: nothing heard for " + std::to_string(now - p.last_seen) + " s");
          cv.notify_all();
        }
        if (p.state == PeerState::kDead) dead.push_back({r, p.incarnation});
        if (p.state == PeerState::kAlive && p.control) to.push_back(r);
      }
    }
    const Json body = {{"incarnation", incarnation}, {"dead", dead}};
    for (int r : to) SendControl(r, FrameType::kHeartbeat, body);
  }

  void Loop() {
    std::vector<zmq::pollitem_t> items = {{data_pull.handle(), 0, ZMQ_POLLIN, 0},
                                          {control_pull.handle(), 0, ZMQ_POLLIN, 0},
                                          {zap.handle(), 0, ZMQ_POLLIN, 0}};
    if (router) items.push_back({router->handle(), 0, ZMQ_POLLIN, 0});
    const auto wait = std::chrono::milliseconds(std::max(1, std::min(50, static_cast<int>(opt.heartbeat_s * 500))));
    double next_beat = 0.0;
    while (!stop.load()) {
      try {
        zmq::poll(items.data(), items.size(), wait);
        if (items[2].revents & ZMQ_POLLIN) AnswerZap();
        for (int i = 0; i < 256 && ReadFrame(control_pull, true); ++i) {
        }
        for (int i = 0; i < 256 && ReadFrame(data_pull, false); ++i) {
        }
        if (router) {
          std::string id;
          for (int i = 0; i < 64 && ReadFrame(*router, true, &id); ++i) {
          }
        }
        const double now = Seconds();
        if (now >= next_beat) {
          Beat();
          next_beat = now + opt.heartbeat_s;
        }
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) return;
        Log(std::string("receiving thread: ") + e.what());
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------

ZmqTransport::ZmqTransport(std::shared_ptr<Node> node)
    : node_(std::move(node)), clock_(std::make_shared<core::WallClock>()) {}

core::Result<std::unique_ptr<ZmqTransport>> ZmqTransport::Connect(const ZmqOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) + " is not in a world of " +
                                   std::to_string(options.world_size));
  }
  if (options.heartbeat_s <= 0 || options.timeout_s <= options.heartbeat_s) {
    return Status::InvalidArgument("the heartbeat timeout must exceed the heartbeat interval");
  }
  auto master = SplitHostPort(options.master);
  if (!master.ok()) return Status::InvalidArgument("rendezvous address: " + master.status().message());
  core::KeepLargeBlocksOnTheHeap();  // every message is a fresh buffer (ours to send, ZeroMQ's on receipt)
  auto node = std::make_shared<Node>(options);
  Node& n = *node;
  const int rank = options.rank;
  try {
    if (options.curve) n.zap.bind("inproc://zeromq.zap.01");  // only CURVE asks it
    for (auto* s : {&n.data_pull, &n.control_pull}) {
      s->set(zmq::sockopt::rcvhwm, 0);
      s->set(zmq::sockopt::linger, 0);
      s->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.max_message_bytes + kFrameHeaderBytes));
      n.Secure(*s, true);
      s->bind("tcp://" + options.bind_host + ":*");
    }
    n.data_ep = n.data_pull.get(zmq::sockopt::last_endpoint);
    n.control_ep = n.control_pull.get(zmq::sockopt::last_endpoint);
    for (int r = 0; r < options.world_size; ++r) n.peers.push_back(std::make_unique<Node::Peer>());
    if (rank == 0) {
      n.router = std::make_unique<zmq::socket_t>(n.ctx, zmq::socket_type::router);
      n.router->set(zmq::sockopt::linger, 0);
      n.router->set(zmq::sockopt::maxmsgsize, int64_t{1} << 20);
      n.Secure(*n.router, true);
      n.router->bind("tcp://" + options.bind_host + ":" + std::to_string(master->second));
      n.table.assign(static_cast<size_t>(options.world_size), nullptr);
    }
  } catch (const zmq::error_t& e) {
    return Status::IoError(Rank(rank) + ": cannot bind its sockets: " + e.what() +
                           (rank == 0 ? " (is the rendezvous port " + std::to_string(master->second) + " in use?)" : ""));
  }
  n.thread = std::thread([&n] { n.Loop(); });
  std::unique_ptr<ZmqTransport> t(new ZmqTransport(node));
  t->owner_ = true;

  // Register at the rendezvous and wait for the table of every rank's endpoints.
  Json reg = {{"data_port", PortOf(n.data_ep)}, {"control_port", PortOf(n.control_ep)},
              {"incarnation", n.incarnation}};
  if (!options.advertise.empty()) reg["host"] = options.advertise;
  if (rank == 0 && options.advertise.empty()) reg["host"] = master->first;
  Json table;
  if (rank == 0) {
    // Rank 0 registers with itself.
    std::unique_lock<std::mutex> lock(n.mu);
    n.table[0] = {{"data", Endpoint(reg["host"], PortOf(n.data_ep))},
                  {"control", Endpoint(reg["host"], PortOf(n.control_ep))},
                  {"incarnation", n.incarnation}};
    n.AnswerRegistrations();
    if (!n.cv.wait_for(lock, std::chrono::duration<double>(options.connect_timeout_s), [&] { return n.table_complete; })) {
      int missing = 0;
      for (const auto& e : n.table) missing += e.is_null() ? 1 : 0;
      return Status::Timeout(Rank(0) + ": " + std::to_string(missing) + " of " + std::to_string(options.world_size) +
                             " ranks did not register within " + std::to_string(options.connect_timeout_s) + " s");
    }
    table = n.table;
  } else {
    zmq::socket_t dealer(n.ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    n.Secure(dealer, false);
    dealer.connect(Endpoint(master->first, master->second));
    const std::string text = reg.dump();
    Node::SendFrame(dealer, FrameType::kHello, rank, 0, text.data(), text.size());
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(static_cast<int64_t>(options.connect_timeout_s * 1000)));
    if (!(item.revents & ZMQ_POLLIN)) {
      return Status::Timeout(Rank(rank) + ": no answer from the rendezvous at " + options.master + " within " +
                             std::to_string(options.connect_timeout_s) + " s (is rank 0 up" +
                             (options.curve ? ", with the same key file?)" : "?)"));
    }
    std::vector<zmq::message_t> parts = RecvParts(dealer, zmq::recv_flags::none);
    if (parts.size() != 2) return Status::InvalidArgument("rendezvous answered with a malformed frame");
    auto header = DecodeFrameHeader(static_cast<const uint8_t*>(parts[0].data()), parts[0].size(), 1 << 20);
    if (!header.ok()) return Status::InvalidArgument("rendezvous answer: " + header.status().message());
    NARROWS_RETURN_IF_ERROR(VerifyFrame(static_cast<const uint8_t*>(parts[0].data()), *header, parts[1].data(),
                                        parts[1].size()));
    try {
      table = Json::parse(parts[1].to_string());
    } catch (const std::exception& e) {
      return Status::InvalidArgument(std::string("rendezvous answer is not JSON: ") + e.what());
    }
    if (table.is_object() && table.contains("error")) {
      return Status::InvalidArgument("rendezvous at " + options.master + " refused " + Rank(rank) + ": " +
                                     table["error"].get<std::string>());
    }
    if (!table.is_array() || static_cast<int>(table.size()) != options.world_size) {
      return Status::InvalidArgument("rendezvous answered with a table for another world size");
    }
  }
  {
    std::lock_guard<std::mutex> lock(n.mu);
    for (int r = 0; r < options.world_size; ++r) {
      if (r == rank) continue;
      const Json& e = table[static_cast<size_t>(r)];
      n.ConnectPeer(r, e.at("data"), e.at("control"), e.at("incarnation"));
    }
  }
  const Json hello = n.Hello();
  for (int r = 0; r < options.world_size; ++r) {
    if (r != rank) n.SendControl(r, FrameType::kHello, hello);
  }
  t->ResetClock();
  return t;
}

ZmqTransport::~ZmqTransport() {
  if (!owner_) return;
  Node& n = *node_;
  std::vector<int> alive;
  {
    std::lock_guard<std::mutex> lock(n.mu);
    for (int r = 0; r < n.opt.world_size; ++r) {
      if (r != n.opt.rank && n.peers[static_cast<size_t>(r)]->state == Node::PeerState::kAlive) alive.push_back(r);
    }
  }
  for (int r : alive) {
    int64_t sent = 0;
    {
      std::lock_guard<std::mutex> lock(n.mu);
      sent = n.peers[static_cast<size_t>(r)]->data_sent;
    }
    n.SendControl(r, FrameType::kBye, {{"incarnation", n.incarnation}, {"sent", sent}});
  }
  n.stop = true;
  n.thread.join();
  for (auto& p : n.peers) {
    std::lock_guard<std::mutex> lock(p->send_mu);
    if (p->control) p->control->close();
    if (p->data) p->data->close();
  }
  n.data_pull.close();
  n.control_pull.close();
  n.zap.close();
  if (n.router) n.router->close();
  n.ctx.close();
}

int ZmqTransport::rank() const { return node_->opt.rank; }
int ZmqTransport::world_size() const { return node_->opt.world_size; }

Status ZmqTransport::Send(int dst, int tag, const void* data, size_t bytes) {
  return SendTo(dst, tag, data, bytes, nullptr);
}

Status ZmqTransport::SendBorrowed(int dst, int tag, const void* data, size_t bytes, core::SendLease& lease) {
  return SendTo(dst, tag, data, bytes, bytes >= kMinBorrowedBytes ? &lease : nullptr);
}

void ZmqTransport::AwaitLent(core::SendLease& lease) {
  Node& n = *node_;
  while (true) {
    const std::vector<int> holding = lease.Outstanding(0.05);
    if (holding.empty()) return;
    for (int dst : holding) {
      bool gone = false;
      {
        std::lock_guard<std::mutex> lock(n.mu);
        gone = n.peers[static_cast<size_t>(dst)]->state != Node::PeerState::kAlive;
      }
      if (gone) n.DropQueued(dst);
    }
  }
}

Status ZmqTransport::SendTo(int dst, int tag, const void* data, size_t bytes, core::SendLease* lease) {
  Node& n = *node_;
  if (dst < 0 || dst >= world_size()) return Status::InvalidArgument("send to invalid rank " + std::to_string(dst));
  if (dst == rank()) {  // between two endpoints of this process: at once, off the network
    {
      std::lock_guard<std::mutex> lock(n.mu);
      n.mailbox[{dst, tag}].push_back({n.arrivals++, zmq::message_t(data, bytes)});
    }
    n.cv.notify_all();
    return Status::Ok();
  }
  Node::Peer& p = *n.peers[static_cast<size_t>(dst)];
  {
    std::lock_guard<std::mutex> lock(n.mu);
    if (!n.evicted.empty()) return Status::PeerUnavailable(n.evicted);
    if (p.state != Node::PeerState::kAlive) {
      return Status::PeerUnavailable(Rank(dst) + (p.state == Node::PeerState::kLeft ? " has left" : " is dead"));
    }
  }
  {
    std::lock_guard<std::mutex> lock(p.send_mu);
    if (!p.data || !Node::SendFrame(*p.data, FrameType::kData, rank(), tag, data, bytes, lease, dst)) {
      return Status::IoError("ZeroMQ refused a message to " + Rank(dst));
    }
  }
  std::lock_guard<std::mutex> lock(n.mu);
  ++p.data_sent;
  n.stats.bytes_sent += static_cast<int64_t>(bytes);
  ++n.stats.messages_sent;
  return Status::Ok();
}

namespace {
// The next message with `tag` from `src` (or any source) in `n`'s mailbox handed to `accept`.
core::Result<int> Receive(ZmqTransport::Node& n, int me, int world_size, int src, int tag, double timeout_s,
                          const std::function<Status(zmq::message_t&)>& accept) {
  using Node = ZmqTransport::Node;
  std::unique_lock<std::mutex> lock(n.mu);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::min(timeout_s, 1e7));
  const std::string who = src == core::kAnySource ? "any rank" : Rank(src);
  while (true) {
    if (!n.evicted.empty()) return Status::PeerUnavailable(n.evicted);
    // The earliest arrival from `src` (or from anyone) with `tag`.
    std::deque<Node::Arrival>* queue = nullptr;
    int from = -1;
    for (int r = src == core::kAnySource ? 0 : src; r < (src == core::kAnySource ? world_size : src + 1); ++r) {
      auto it = n.mailbox.find({r, tag});
      if (it == n.mailbox.end() || it->second.empty()) continue;
      if (!queue || it->second.front().seq < queue->front().seq) {
        queue = &it->second;
        from = r;
      }
    }
    if (queue) {
      zmq::message_t m = std::move(queue->front().payload);
      queue->pop_front();
      const auto size = static_cast<int64_t>(m.size());
      NARROWS_RETURN_IF_ERROR(accept(m));
      if (from != me) {
        n.stats.bytes_received += size;
        ++n.stats.messages_received;
      }
      return from;
    }
    if (src != core::kAnySource && src != me) {
      const Node::Peer& p = *n.peers[static_cast<size_t>(src)];
      if (p.state != Node::PeerState::kAlive) {
        return Status::PeerUnavailable(Rank(src) + (p.state == Node::PeerState::kLeft ? " has left" : " is dead"));
      }
    }
    if (n.cv.wait_until(lock, deadline) == std::cv_status::timeout) {
      return Status::Timeout("no message from " + who + " within " + std::to_string(timeout_s) + " s");
    }
  }
}
}  // namespace

Status ZmqTransport::Recv(int src, int tag, void* data, size_t bytes, double timeout_s) {
  return RecvInPlace(src, tag, bytes, [&](const void* in) {
    if (bytes) std::memcpy(data, in, bytes);
  }, timeout_s);
}

Status ZmqTransport::RecvInPlace(int src, int tag, size_t bytes, const std::function<void(const void*)>& consume,
                                 double timeout_s) {
  if (src < 0 || src >= world_size()) return Status::InvalidArgument("receive from invalid rank " + std::to_string(src));
  zmq::message_t m;
  auto got = Receive(*node_, rank(), world_size(), src, tag, timeout_s, [&](zmq::message_t& arrived) {
    if (arrived.size() != bytes) {
      return Status::InvalidArgument("message from " + Rank(src) + " has " + std::to_string(arrived.size()) +
                                     " bytes, expected " + std::to_string(bytes));
    }
    m = std::move(arrived);
    return Status::Ok();
  });
  if (!got.ok()) return got.status();
  consume(m.data());  // outside the lock, from ZeroMQ's buffer
  return Status::Ok();
}

core::Result<int> ZmqTransport::RecvMessage(int src, int tag, std::vector<uint8_t>* out, double timeout_s) {
  if (src != core::kAnySource && (src < 0 || src >= world_size())) {
    return Status::InvalidArgument("receive from invalid rank " + std::to_string(src));
  }
  zmq::message_t m;
  auto got = Receive(*node_, rank(), world_size(), src, tag, timeout_s, [&](zmq::message_t& arrived) {
    m = std::move(arrived);
    return Status::Ok();
  });
  if (got.ok()) out->assign(static_cast<const uint8_t*>(m.data()), static_cast<const uint8_t*>(m.data()) + m.size());
  return got;
}

std::vector<int> ZmqTransport::Members() {
  Node& n = *node_;
  std::lock_guard<std::mutex> lock(n.mu);
  std::vector<int> out;
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank() ? n.evicted.empty() : n.peers[static_cast<size_t>(r)]->state == Node::PeerState::kAlive) {
      out.push_back(r);
    }
  }
  return out;
}

int64_t ZmqTransport::Generation(int r) {
  if (r < 0 || r >= world_size() || r == rank()) return 0;
  std::lock_guard<std::mutex> lock(node_->mu);
  return node_->peers[static_cast<size_t>(r)]->generation;
}

core::Clock& ZmqTransport::clock() { return *clock_; }

core::TransportStats ZmqTransport::stats() const {
  std::lock_guard<std::mutex> lock(node_->mu);
  return node_->stats;
}

std::unique_ptr<core::Work> ZmqTransport::Start(core::AsyncOp op) {
  auto child = std::shared_ptr<ZmqTransport>(new ZmqTransport(node_));
  child->clock_ = clock_;  // the operation's clock reads the same time as the caller's
  return std::make_unique<core::ThreadWork>([child, op = std::move(op)] { return op(*child); });
}

void ZmqTransport::ResetClock() { clock_->Reset(); }

std::string ZmqTransport::data_endpoint() const { return node_->data_ep; }

int64_t ZmqTransport::frames_rejected() const {
  std::lock_guard<std::mutex> lock(node_->mu);
  return node_->rejected;
}

}  // namespace narrows::deploy
