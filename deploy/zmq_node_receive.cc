// The receiving thread of a ZmqTransport::Node: frames validated and routed (data to the mailbox,
// control to membership, registrations to the rendezvous), heartbeats, and CURVE's ZAP answers.
#include <chrono>

#include "deploy/zmq_node.h"

namespace narrows::deploy {

using core::Status;

void ZmqTransport::Node::Reject(int src_hint, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu);
    ++rejected;
  }
  Log("rejected a frame" + (src_hint >= 0 ? " claiming " + RankName(src_hint) : std::string()) + ": " + why);
}

bool ZmqTransport::Node::ReadFrame(zmq::socket_t& s, Inbox inbox) {
  std::vector<zmq::message_t> parts = RecvParts(s, zmq::recv_flags::dontwait);
  if (parts.empty()) return false;
  std::string identity, peer_address;
  if (inbox == Inbox::kRendezvous) {
    identity = parts.front().to_string();
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
  if (inbox == Inbox::kRendezvous) {
    if (header->type != FrameType::kHello) {
      Reject(src, "only registrations go to the rendezvous");
      return true;
    }
    OnRegister(src, identity, peer_address, parts[1]);
  } else if (inbox == Inbox::kData) {
    if (header->type != FrameType::kData) {
      Reject(src, "control frame on the data socket");
      return true;
    }
    OnData(src, *header, std::move(parts[1]));
  } else {
    if (header->type == FrameType::kData) {
      Reject(src, "data frame on the control socket");
      return true;
    }
    OnControl(src, header->type, parts[1]);
  }
  return true;
}

void ZmqTransport::Node::OnData(int src, const FrameHeader& h, zmq::message_t payload) {
  const uint64_t inc = h.incarnation, seq = h.seq;
  std::string repeated, missing;
  bool evict = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    // Queued by the sender for this rank's previous process, and delivered here because ZeroMQ
    // reconnected to the port this process took over before the sender heard of it: void.
    if (h.to_incarnation != incarnation) return;
    Peer& p = *peers[static_cast<size_t>(src)];
    // Bytes a replaced process left in flight (its kernel still sends them once a link heals) may
    // arrive after its successor's hello, on their own connection: they are void.
    if (p.Replaced(inc)) return;
    // A restarted process's data may come before its hello: held for it (below), not taken for
    // its predecessor's, nor dropped because the predecessor was declared dead.
    const bool early = p.NotCurrent(inc);
    if (!early && p.state == PeerState::kDead) return;  // a dead incarnation's late bytes
    uint64_t& next = p.in_next[inc];
    if (seq < next) {
      // One TCP connection neither repeats nor reorders: a broken or hostile sender did. The
      // member's current process is evicted (a claim in another process's name only refused).
      repeated = "data frame number " + std::to_string(seq) + " after " + std::to_string(next - 1) +
                 " (a repeated or reordered message)";
      evict = inc == p.incarnation;
      if (evict) EvictSender(src, repeated);
    } else if (seq > next) {
      // Dropped by the sender with its queue (it took this process for dead), or overtaken.
      missing = "data from " + RankName(src) + ": messages " + std::to_string(next) + " to " + std::to_string(seq - 1) +
                " never arrived";
    }
    if (repeated.empty()) next = seq + 1;
    if (repeated.empty() && early) {
      if (opt.max_queued_bytes != 0 && p.early_bytes + payload.size() > opt.max_queued_bytes) {
        repeated = "data before its process's hello beyond " + std::to_string(opt.max_queued_bytes) + " bytes";
      } else {
        p.early_bytes += payload.size();
        p.early.push_back({inc, h.tag, std::move(payload)});
      }
    } else if (repeated.empty()) {
      p.last_seen = SteadySeconds();
      mailbox.Put(src, h.tag, ZmqPayload(std::move(payload)));
      if (++p.data_received == p.leaves_after && p.state == PeerState::kAlive) p.state = PeerState::kLeft;
      BoundQueued(src);
    }
  }
  if (!repeated.empty()) {
    if (!evict) Reject(src, repeated + ": dropped");
    return;
  }
  if (!missing.empty()) Log(missing);
  cv.notify_all();
}

bool ZmqTransport::Node::ParseBody(int src, const zmq::message_t& payload, const char* what, Json* body) {
  try {
    *body = Json::parse(payload.to_string());
    return true;
  } catch (const std::exception& e) {
    Reject(src, std::string(what) + " is not JSON: " + e.what());
    return false;
  }
}

void ZmqTransport::Node::OnControl(int src, FrameType type, const zmq::message_t& payload) {
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
    // A replaced process's hello that arrives late (its bytes retransmitted once a link healed).
    if (p.Replaced(inc)) return;
    if (p.NotCurrent(inc)) {
      // A restarted process: what its previous incarnation sent is void.
      mailbox.Discard(src);
      p.retired.push_back(p.incarnation);
      p.data_sent = p.data_received = 0;
      p.leaves_after = -1;
      p.evicted.clear();  // a new process for the rank may join
      ++p.generation;
      Log(RankName(src) + " rejoined (new process)");
    }
    ConnectPeer(src, body["data"], body["control"], body.value("bulk", std::string()), inc);
    // What this process sent before its hello came, in the order it came (another process's, a
    // later one whose hello is still on its way, stays held).
    std::vector<Peer::Early> held;
    p.early_bytes = 0;
    for (auto& e : p.early) {
      if (e.incarnation == inc) {
        mailbox.Put(src, e.tag, ZmqPayload(std::move(e.payload)));
        ++p.data_received;
      } else if (!p.Replaced(e.incarnation)) {
        p.early_bytes += e.payload.size();
        held.push_back(std::move(e));
      }
    }
    p.early = std::move(held);
    HandOnBulk(src);  // and what it sent over the bulk plane
    cv.notify_all();
  } else if (type == FrameType::kHeartbeat) {
    if (inc != p.incarnation || p.state != PeerState::kAlive) return;  // stale or declared dead
    p.last_seen = SteadySeconds();
    // Evictions another member made: the same process is dropped here (on that member's word),
    // and if it is this one, it stops.
    for (const auto& e : body.value("evicted", Json::array())) {
      if (!e.is_array() || e.size() != 3 || !e[0].is_number_integer() || !e[1].is_number_unsigned() || !e[2].is_string()) continue;
      const int r = e[0].get<int>();
      const uint64_t inc_r = e[1].get<uint64_t>();
      if (r < 0 || r >= opt.world_size || r == src) continue;
      if (r == opt.rank) {
        if (inc_r == incarnation && evicted.empty()) {
          evicted = "this rank was evicted " + e[2].get<std::string>();
          Log(evicted + "; it stops");
        }
      } else if (peers[static_cast<size_t>(r)]->incarnation == inc_r) {
        EvictPeer(r, e[2].get<std::string>());
      }
    }
    for (const auto& d : body.value("dead", Json::array())) {
      if (d.is_array() && d.size() == 2 && d[0] == opt.rank && d[1] == incarnation && evicted.empty()) {
        evicted = "this rank was declared dead by " + RankName(src);
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

void ZmqTransport::Node::OnRegister(int src, const std::string& identity, const std::string& peer_address,
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
  if (const std::string digest = body.value("digest", std::string()); digest != opt.run_digest) {
    // A process started with another scenario (or another build's reading of it) would train
    // something else and send pieces of other sizes: refuse it before it joins.
    const std::string why = RankName(src) + "'s scenario or model differs from rank 0's (digest " + digest +
                            ", rank 0 has " + opt.run_digest +
                            "): start every process with the same scenario, --set options and model file";
    Log("refused a registration: " + why);
    SendHello(identity, Json{{"error", why}}.dump());
    return;
  }
  const Json& known = table[static_cast<size_t>(src)];
  const bool replaced = !known.is_null() && known.value("incarnation", uint64_t{0}) != inc;
  if (!table_complete && replaced && !body.value("restarted", false)) {
    // Before every rank has registered, a second process for a rank is a mistake (the same rank
    // given twice), unless it says that it was started again (its predecessor was killed before
    // the run began): then it takes the place, and starts the run with the others (AtStart).
    const std::string why = RankName(src) + " is already registered by another process (rank given twice?)";
    Log("refused a registration: " + why);
    SendHello(identity, Json{{"error", why}}.dump());
    return;
  }
  // A process that a restart replaced before the run began hears so, if it is still there at all.
  for (auto it = waiting.begin(); replaced && it != waiting.end();) {
    if (it->first != src) {
      ++it;
      continue;
    }
    SendHello(it->second, Json{{"error", RankName(src) + " was started again: this process was replaced"}}.dump());
    it = waiting.erase(it);
  }
  table[static_cast<size_t>(src)] = {{"data", TcpEndpoint(host, dp)}, {"control", TcpEndpoint(host, cp)},
                                     {"incarnation", inc}};
  if (const int bp = body.value("bulk_port", 0); bp > 0) table[static_cast<size_t>(src)]["bulk"] = TcpEndpoint(host, bp);
  waiting.emplace_back(src, identity);
  AnswerRegistrations();
}

void ZmqTransport::Node::SendHello(const std::string& identity, const std::string& text) {
  const auto header = EncodeFrameHeader(FrameType::kHello, 0, 0, text.data(), text.size(), incarnation);
  router->send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  router->send(zmq::buffer(header), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  router->send(zmq::buffer(text), zmq::send_flags::dontwait);
}

void ZmqTransport::Node::AnswerRegistrations() {
  for (const auto& e : table) {
    if (e.is_null()) return;
  }
  // The processes registered when the table completes start the run; one that registers later
  // (a restart) finds its own entry without the mark, and joins a run in progress.
  if (!table_complete) {
    for (auto& e : table) e["at_start"] = true;
  }
  table_complete = true;
  const std::string text = Json(table).dump();
  for (const auto& w : waiting) SendHello(w.second, text);
  waiting.clear();
  cv.notify_all();
}

void ZmqTransport::Node::AnswerZap() {
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

void ZmqTransport::Node::Beat() {
  Json dead = Json::array(), evicted_list = Json::array();
  std::vector<int> to;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [r, inc, why] : evictions) evicted_list.push_back({r, inc, why});
    const double now = SteadySeconds();
    for (int r = 0; r < opt.world_size; ++r) {
      if (r == opt.rank) continue;
      Peer& p = *peers[static_cast<size_t>(r)];
      if (p.state == PeerState::kAlive && p.incarnation != 0 && now - p.last_seen > opt.timeout_s) {
        p.state = PeerState::kDead;
        Log(RankName(r) + " declared dead: nothing heard for " + std::to_string(now - p.last_seen) + " s");
        CloseBulkFrom(r, p.incarnation);
        if (r == 0 && evicted.empty()) {
          // Rank 0 hosts the rendezvous and writes the results: a rank that cannot hear it is the
          // one cut off (a partition), not the survivor, and stops rather than train on alone.
          evicted = "cut off from rank 0 (the rendezvous): nothing heard for " + std::to_string(now - p.last_seen) + " s";
          Log(evicted + "; this rank stops");
        }
        cv.notify_all();
      }
      if (p.state == PeerState::kDead) dead.push_back({r, p.incarnation});
      // An evicted process hears the heartbeats too: they tell it why it was dropped.
      if ((p.state == PeerState::kAlive || !p.evicted.empty()) && p.control) to.push_back(r);
    }
  }
  const Json body = {{"incarnation", incarnation}, {"dead", dead}, {"evicted", evicted_list}};
  for (int r : to) SendControl(r, FrameType::kHeartbeat, body);
}

void ZmqTransport::Node::Loop() {
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
      for (int i = 0; i < 256 && ReadFrame(control_pull, Inbox::kControl); ++i) {
      }
      for (int i = 0; i < 256 && ReadFrame(data_pull, Inbox::kData); ++i) {
      }
      for (int i = 0; router && i < 64 && ReadFrame(*router, Inbox::kRendezvous); ++i) {
      }
      const double now = SteadySeconds();
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

}  // namespace narrows::deploy
