#include "deploy/zmq_transport.h"

#include <algorithm>

#include <chrono>
#include <cstring>

#include "core/heap.h"
#include "core/thread_work.h"
#include "deploy/zmq_node.h"

namespace narrows::deploy {

using core::Status;

ZmqPayload::ZmqPayload(zmq::message_t message)
    : message_(std::make_unique<zmq::message_t>(std::move(message))), data_(message_->data()), size_(message_->size()) {}
ZmqPayload::ZmqPayload(std::unique_ptr<uint8_t[]> buffer, size_t bytes)
    : buffer_(std::move(buffer)), data_(buffer_.get()), size_(bytes) {}
ZmqPayload ZmqPayload::Placed(const void* at, size_t bytes) {
  ZmqPayload p;
  p.data_ = at;
  p.size_ = bytes;
  return p;
}
ZmqPayload::ZmqPayload(ZmqPayload&&) noexcept = default;
ZmqPayload& ZmqPayload::operator=(ZmqPayload&&) noexcept = default;
ZmqPayload::~ZmqPayload() = default;

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
  NARROWS_RETURN_IF_ERROR(node->Bind(master->second));
  node->thread = std::thread([n = node.get()] { n->Loop(); });
  std::unique_ptr<ZmqTransport> t(new ZmqTransport(node));
  t->owner_ = true;  // from here on, a failure closes the node with `t`
  core::Result<Json> table = node->Rendezvous(master->first, master->second);
  if (!table.ok()) return table.status();
  node->ConnectAll(*table);
  t->at_start_ = (*table)[static_cast<size_t>(options.rank)].value("at_start", false);
  t->ResetClock();
  return t;
}

ZmqTransport::~ZmqTransport() {
  if (owner_) node_->Close();
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
      n.mailbox.Put(dst, tag, ZmqPayload(zmq::message_t(data, bytes)));
    }
    n.cv.notify_all();
    return Status::Ok();
  }
  bool twice = false;
  if (n.opt.before_send) {
    const ZmqOptions::SendPlan plan = n.opt.before_send(dst, tag, bytes);
    bytes = std::min(bytes, plan.bytes);
    twice = plan.twice;
  }
  Node::Peer& p = *n.peers[static_cast<size_t>(dst)];
  {
    std::lock_guard<std::mutex> lock(n.mu);
    if (std::string why = n.Unavailable(dst); !why.empty()) return Status::PeerUnavailable(why);
  }
  {
    std::lock_guard<std::mutex> lock(p.send_mu);
    // Over the plane while it works; a peer without one, or whose connection failed, over ZeroMQ.
    if (n.BulkTo(dst) && n.SendBulk(dst, tag, data, bytes, lease)) {
      if (twice) n.SendBulk(dst, tag, data, bytes, nullptr, /*again=*/true);
    } else if (!p.data || !n.SendFrame(*p.data, FrameType::kData, rank(), tag, data, bytes, lease, dst, p.data_seq++,
                                           p.incarnation)) {
      return Status::IoError("ZeroMQ refused a message to " + RankName(dst));
    } else if (twice) {
      n.SendFrame(*p.data, FrameType::kData, rank(), tag, data, bytes, nullptr, dst, p.data_seq - 1, p.incarnation);
    }
  }
  std::lock_guard<std::mutex> lock(n.mu);
  ++p.data_sent;
  n.sent.bytes_sent += static_cast<int64_t>(bytes);
  ++n.sent.messages_sent;
  return Status::Ok();
}

core::Result<core::Envelope<ZmqPayload>> ZmqTransport::Await(int src, int tag, size_t expected_bytes, double timeout_s,
                                                             void* into) {
  Node& n = *node_;
  std::unique_lock<std::mutex> lock(n.mu);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::min(timeout_s, 1e7));
  // With the bulk plane, a Recv's buffer is offered for its message to be received into.
  Node::Posting posting{into, expected_bytes};
  const bool posted = n.bulk && into != nullptr && src != core::kAnySource && !n.postings.count({src, tag});
  if (posted) n.postings[{src, tag}] = &posting;
  struct Unpost {
    Node& n;
    bool posted;
    std::pair<int, int> key;
    ~Unpost() {
      if (posted) n.postings.erase(key);  // under mu: every return below holds it
    }
  } unpost{n, posted, {src, tag}};
  using State = Node::Posting::State;
  while (true) {
    // While the plane writes into the caller's buffer, the receive stays (it ends with the message).
    if (posting.state == State::kFilling) {
      n.cv.wait(lock);
      continue;
    }
    if (!n.evicted.empty()) return Status::PeerUnavailable(n.evicted);
    if (auto m = n.mailbox.Take(src, tag, expected_bytes)) return std::move(*m);
    if (posting.state == State::kFailed) {
      return Status::PeerUnavailable("the message from " + RankName(src) + " was lost with its connection");
    }
    if (src != core::kAnySource) {
      if (std::string why = n.Unavailable(src); !why.empty()) return Status::PeerUnavailable(why);
    }
    if (n.cv.wait_until(lock, deadline) == std::cv_status::timeout && posting.state != State::kFilling) {
      const std::string who = src == core::kAnySource ? "any rank" : RankName(src);
      return Status::Timeout("no message from " + who + " within " + std::to_string(timeout_s) + " s");
    }
  }
}

int64_t ZmqTransport::DiscardQueued(const std::function<bool(int, int)>& stale) {
  Node& n = *node_;
  std::lock_guard<std::mutex> lock(n.mu);
  return n.mailbox.DiscardIf(stale);
}

Status ZmqTransport::Evict(int r, const std::string& why) {
  if (r < 0 || r >= world_size() || r == rank()) return Status::InvalidArgument("cannot evict rank " + std::to_string(r));
  std::lock_guard<std::mutex> lock(node_->mu);
  node_->EvictPeer(r, "by " + RankName(rank()) + ": " + why);
  return Status::Ok();
}

std::string ZmqTransport::Removed() {
  std::lock_guard<std::mutex> lock(node_->mu);
  return node_->evicted;
}

std::string ZmqTransport::Evicted(int r) {
  if (r < 0 || r >= world_size() || r == rank()) return "";
  std::lock_guard<std::mutex> lock(node_->mu);
  return node_->peers[static_cast<size_t>(r)]->evicted;
}

std::vector<int> ZmqTransport::Members() {
  Node& n = *node_;
  std::lock_guard<std::mutex> lock(n.mu);
  std::vector<int> out;
  for (int r = 0; r < world_size(); ++r) {
    if (n.Unavailable(r).empty()) out.push_back(r);
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
  core::TransportStats s = node_->mailbox.received();
  s.bytes_sent = node_->sent.bytes_sent;
  s.messages_sent = node_->sent.messages_sent;
  return s;
}

std::unique_ptr<core::Work> ZmqTransport::Start(core::AsyncOp op) {
  auto child = std::shared_ptr<ZmqTransport>(new ZmqTransport(node_));
  child->clock_ = clock_;  // the operation's clock reads the same time as the caller's
  return std::make_unique<core::ThreadWork>([child, op = std::move(op)] { return op(*child); });
}

void ZmqTransport::ResetClock() { clock_->Reset(); }

std::string ZmqTransport::data_endpoint() const { return node_->data_ep; }
uint64_t ZmqTransport::incarnation() const { return node_->incarnation; }
std::string ZmqTransport::control_endpoint() const { return node_->control_ep; }
std::string ZmqTransport::bulk_endpoint() const { return node_->bulk_ep; }

BulkCounts ZmqTransport::bulk_counts() const {
  std::lock_guard<std::mutex> lock(node_->mu);
  return node_->bulk_counts;
}

int64_t ZmqTransport::frames_rejected() const {
  std::lock_guard<std::mutex> lock(node_->mu);
  return node_->rejected;
}

}  // namespace narrows::deploy
