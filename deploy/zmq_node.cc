#include "deploy/zmq_node.h"

#include <chrono>
#include <iostream>
#include <random>

#include "deploy/addresses.h"

namespace narrows::deploy {

using core::Status;

std::string RankName(int r) { return "rank " + std::to_string(r); }

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

namespace {
// A payload lent by the caller: ZeroMQ calls ReturnLent (from its I/O thread) once it has written
// the bytes to the socket or dropped them with the socket.
struct Lent {
  core::SendLease* lease;
  int dst;
};
void ReturnLent(void* /*data*/, void* hint) {
  std::unique_ptr<Lent> lent(static_cast<Lent*>(hint));
  lent->lease->Return(lent->dst);
}
}  // namespace

ZmqTransport::Node::Node(const ZmqOptions& o) : opt(o), mailbox(o.rank, o.world_size) {
  std::random_device rd;
  incarnation = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(SteadySeconds() * 1e9);
  if (!opt.log) opt.log = [](const std::string& m) { std::cerr << m << "\n"; };
}

void ZmqTransport::Node::Log(const std::string& m) const { opt.log("narrows[" + RankName(opt.rank) + "]: " + m); }

void ZmqTransport::Node::Secure(zmq::socket_t& s, CurveRole role) {
  if (!opt.curve) return;
  if (role == CurveRole::kServer) {
    s.set(zmq::sockopt::curve_server, 1);
    s.set(zmq::sockopt::curve_secretkey, opt.keys.secret_key);
    s.set(zmq::sockopt::zap_domain, "narrows");
  } else {
    s.set(zmq::sockopt::curve_serverkey, opt.keys.public_key);
    s.set(zmq::sockopt::curve_publickey, opt.keys.public_key);
    s.set(zmq::sockopt::curve_secretkey, opt.keys.secret_key);
  }
}

std::unique_ptr<zmq::socket_t> ZmqTransport::Node::Push(const std::string& endpoint, int linger_ms) {
  auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::push);
  s->set(zmq::sockopt::sndhwm, 0);  // Send never blocks: the contract says it returns at once
  s->set(zmq::sockopt::linger, linger_ms);
  s->set(zmq::sockopt::immediate, 0);
  Secure(*s, CurveRole::kClient);
  s->connect(endpoint);
  return s;
}

bool ZmqTransport::Node::SendFrame(zmq::socket_t& s, FrameType type, int src, int tag, const void* payload, size_t bytes,
                      core::SendLease* lease, int dst, uint64_t seq, uint64_t to_incarnation) const {
  const auto header = EncodeFrameHeader(type, src, tag, payload, bytes, incarnation, seq, to_incarnation);
  if (!s.send(zmq::buffer(header), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
  if (!lease) return static_cast<bool>(s.send(zmq::message_t(payload, bytes), zmq::send_flags::dontwait));
  lease->Lend(dst);  // returned by ZeroMQ, or by `body`'s destructor if the send fails
  zmq::message_t body(const_cast<void*>(payload), bytes, &ReturnLent, new Lent{lease, dst});
  return static_cast<bool>(s.send(body, zmq::send_flags::dontwait));
}

void ZmqTransport::Node::DropQueued(int r) {
  Peer& p = *peers[static_cast<size_t>(r)];
  std::lock_guard<std::mutex> lock(p.send_mu);
  DropBulk(r);
  if (!p.data) return;
  p.data->set(zmq::sockopt::linger, 0);
  p.data->close();
  p.data.reset();
}

void ZmqTransport::Node::SendControl(int dst, FrameType type, const Json& body) {
  const std::string text = body.dump();
  Peer& p = *peers[static_cast<size_t>(dst)];
  std::lock_guard<std::mutex> lock(p.send_mu);
  if (p.control) SendFrame(*p.control, type, opt.rank, 0, text.data(), text.size());
}

Json ZmqTransport::Node::Hello(const Json& listed) const {
  // As the table lists them, not as bound: bound on every interface (--bind's default), a
  // socket's own name is 0.0.0.0, which on another machine names that machine.
  auto as_listed = [&listed](const char* key, const std::string& bound) {
    return listed.is_object() && listed.contains(key) && listed[key].is_string() ? listed[key].get<std::string>() : bound;
  };
  Json h = {{"data", as_listed("data", data_ep)}, {"control", as_listed("control", control_ep)}, {"incarnation", incarnation}};
  if (!bulk_ep.empty()) h["bulk"] = as_listed("bulk", bulk_ep);
  return h;
}

void ZmqTransport::Node::ConnectPeer(int r, const std::string& d, const std::string& c, const std::string& b,
                                     uint64_t inc) {
  Peer& p = *peers[static_cast<size_t>(r)];
  std::lock_guard<std::mutex> lock(p.send_mu);
  // A new process of the peer: what was queued for its predecessor is void (dropped, even where
  // the new one took the same port), and data to it is numbered from 0.
  const bool successor = inc != p.incarnation;
  if (successor && p.data) p.data->set(zmq::sockopt::linger, 0);
  if (p.data_ep != d || !p.data || successor) p.data = Push(d, 2000);
  if (successor) p.data_seq = 0;
  if (p.control_ep != c || !p.control) p.control = Push(c, 500);
  p.data_ep = d;
  p.control_ep = c;
  p.bulk_ep = bulk ? b : "";
  ConnectBulk(r, p.bulk_ep, inc);
  p.incarnation = inc;
  p.state = PeerState::kAlive;
  p.last_seen = SteadySeconds();
}


void ZmqTransport::Node::EvictPeer(int r, const std::string& why) {
  Peer& p = *peers[static_cast<size_t>(r)];
  if (!p.evicted.empty() || p.incarnation == 0) return;  // already, or never connected
  p.state = PeerState::kDead;
  p.evicted = why;
  p.retired.push_back(p.incarnation);  // its frames, a late hello included, are void from now on
  mailbox.Discard(r);
  CloseBulkFrom(r, p.incarnation);
  evictions.emplace_back(r, p.incarnation, why);
  Log(RankName(r) + " evicted: " + why);
  cv.notify_all();
}

void ZmqTransport::Node::EvictSender(int r, const std::string& why) {
  ++rejected;
  EvictPeer(r, "by " + RankName(opt.rank) + ": " + why);
}

void ZmqTransport::Node::BoundQueued(int r, int64_t held) {
  if (opt.max_queued_bytes == 0) return;
  const int64_t queued = mailbox.QueuedBytes(r) + held;
  if (queued <= static_cast<int64_t>(opt.max_queued_bytes)) return;
  EvictSender(r, std::to_string(queued) + " bytes of its messages wait unread, more than the " +
                     std::to_string(opt.max_queued_bytes) + " a member may queue (deploy.max_queued_mb)");
}

std::string ZmqTransport::Node::Unavailable(int r) const {
  if (!evicted.empty()) return evicted;
  if (r == opt.rank) return "";
  const Peer& p = *peers[static_cast<size_t>(r)];
  const PeerState state = p.state;
  if (state == PeerState::kAlive) return "";
  if (!p.evicted.empty()) return RankName(r) + " was evicted (" + p.evicted + ")";
  return RankName(r) + (state == PeerState::kLeft ? " has left" : " is dead");
}

Status ZmqTransport::Node::Bind(int master_port) {
  const int rank = opt.rank;
  try {
    if (opt.curve) zap.bind("inproc://zeromq.zap.01");  // only CURVE asks it
    for (auto* s : {&data_pull, &control_pull}) {
      s->set(zmq::sockopt::rcvhwm, 0);
      s->set(zmq::sockopt::linger, 0);
      s->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(opt.max_message_bytes + kFrameHeaderBytes));
      Secure(*s, CurveRole::kServer);
      s->bind("tcp://" + opt.bind_host + ":*");
    }
    data_ep = data_pull.get(zmq::sockopt::last_endpoint);
    control_ep = control_pull.get(zmq::sockopt::last_endpoint);
    NARROWS_RETURN_IF_ERROR(BindBulk());
    for (int r = 0; r < opt.world_size; ++r) peers.push_back(std::make_unique<Peer>());
    if (rank == 0) {
      router = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
      router->set(zmq::sockopt::linger, 0);
      router->set(zmq::sockopt::maxmsgsize, int64_t{1} << 20);
      Secure(*router, CurveRole::kServer);
      router->bind("tcp://" + opt.bind_host + ":" + std::to_string(master_port));
      table.assign(static_cast<size_t>(opt.world_size), nullptr);
    }
  } catch (const zmq::error_t& e) {
    return Status::IoError(RankName(rank) + ": cannot bind its sockets: " + e.what() +
                           (rank == 0 ? " (is the rendezvous port " + std::to_string(master_port) + " in use?)" : ""));
  }
  return Status::Ok();
}

core::Result<Json> ZmqTransport::Node::Rendezvous(const std::string& master_host, int master_port) {
  Json reg = {{"data_port", PortOf(data_ep)}, {"control_port", PortOf(control_ep)}, {"incarnation", incarnation},
              {"digest", opt.run_digest}};
  if (!bulk_ep.empty()) reg["bulk_port"] = PortOf(bulk_ep);
  if (!opt.advertise.empty()) reg["host"] = opt.advertise;
  if (opt.restarted) reg["restarted"] = true;
  if (opt.rank == 0) {  // rank 0 registers with itself and waits for the others
    const std::string host = opt.advertise.empty() ? master_host : opt.advertise;
    std::unique_lock<std::mutex> lock(mu);
    table[0] = {{"data", TcpEndpoint(host, PortOf(data_ep))},
                {"control", TcpEndpoint(host, PortOf(control_ep))},
                {"incarnation", incarnation}};
    if (!bulk_ep.empty()) table[0]["bulk"] = TcpEndpoint(host, PortOf(bulk_ep));
    AnswerRegistrations();
    if (!cv.wait_for(lock, std::chrono::duration<double>(opt.connect_timeout_s), [&] { return table_complete; })) {
      int missing = 0;
      for (const auto& e : table) missing += e.is_null() ? 1 : 0;
      return Status::Timeout(RankName(0) + ": " + std::to_string(missing) + " of " + std::to_string(opt.world_size) +
                             " ranks did not register within " + std::to_string(opt.connect_timeout_s) + " s");
    }
    return Json(table);
  }
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  Secure(dealer, CurveRole::kClient);
  dealer.connect(TcpEndpoint(master_host, master_port));
  const std::string text = reg.dump();
  SendFrame(dealer, FrameType::kHello, opt.rank, 0, text.data(), text.size());
  zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(static_cast<int64_t>(opt.connect_timeout_s * 1000)));
  if (!(item.revents & ZMQ_POLLIN)) {
    return Status::Timeout(RankName(opt.rank) + ": no answer from the rendezvous at " + opt.master + " within " +
                           std::to_string(opt.connect_timeout_s) + " s (is rank 0 up" +
                           (opt.curve ? ", with the same key file?)" : "?)"));
  }
  std::vector<zmq::message_t> parts = RecvParts(dealer, zmq::recv_flags::none);
  if (parts.size() != 2) return Status::InvalidArgument("rendezvous answered with a malformed frame");
  auto header = DecodeFrameHeader(static_cast<const uint8_t*>(parts[0].data()), parts[0].size(), 1 << 20);
  if (!header.ok()) return Status::InvalidArgument("rendezvous answer: " + header.status().message());
  NARROWS_RETURN_IF_ERROR(VerifyFrame(static_cast<const uint8_t*>(parts[0].data()), *header, parts[1].data(),
                                      parts[1].size()));
  Json answer;
  try {
    answer = Json::parse(parts[1].to_string());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("rendezvous answer is not JSON: ") + e.what());
  }
  if (answer.is_object() && answer.contains("error")) {
    return Status::InvalidArgument("rendezvous at " + opt.master + " refused " + RankName(opt.rank) + ": " +
                                   answer["error"].get<std::string>());
  }
  if (!answer.is_array() || static_cast<int>(answer.size()) != opt.world_size) {
    return Status::InvalidArgument("rendezvous answered with a table for another world size");
  }
  return answer;
}

void ZmqTransport::Node::ConnectAll(const Json& endpoints) {
  {
    std::lock_guard<std::mutex> lock(mu);
    for (int r = 0; r < opt.world_size; ++r) {
      if (r == opt.rank) continue;
      const Json& e = endpoints[static_cast<size_t>(r)];
      ConnectPeer(r, e.at("data"), e.at("control"), e.value("bulk", std::string()), e.at("incarnation"));
    }
  }
  const Json hello = Hello(endpoints[static_cast<size_t>(opt.rank)]);
  for (int r = 0; r < opt.world_size; ++r) {
    if (r != opt.rank) SendControl(r, FrameType::kHello, hello);
  }
}

void ZmqTransport::Node::Close() {
  std::vector<std::pair<int, int64_t>> alive;  // (rank, data frames sent to it)
  {
    std::lock_guard<std::mutex> lock(mu);
    for (int r = 0; r < opt.world_size; ++r) {
      const Peer& p = *peers[static_cast<size_t>(r)];
      if (r != opt.rank && p.state == PeerState::kAlive) alive.emplace_back(r, p.data_sent);
    }
  }
  CloseBulk();  // before the byes: they count what it still has to write
  for (const auto& [r, sent_to] : alive) SendControl(r, FrameType::kBye, {{"incarnation", incarnation}, {"sent", sent_to}});
  stop = true;
  if (thread.joinable()) thread.join();
  for (auto& p : peers) {
    std::lock_guard<std::mutex> lock(p->send_mu);
    if (p->control) p->control->close();
    if (p->data) p->data->close();
  }
  data_pull.close();
  control_pull.close();
  zap.close();
  if (router) router->close();
  ctx.close();
}

}  // namespace narrows::deploy
