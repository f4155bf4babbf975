// Asynchronous DiLoCo (Async Local-SGD, arXiv 2401.09135): no rounds, nobody waits for the slowest.
//
// A server holds the global parameters. It runs beside worker 0, as an operation started on its
// endpoint (core::Transport::Start), so worker 0's link carries every pseudo-gradient in and the
// parameters out: a parameter server on one worker's link, not on a datacenter's. A worker takes
// H inner steps from the parameters it last received, sends its pseudo-gradient (those parameters
// minus its own, through the outer_gradient codec) and continues from the parameters the server
// sends back, which already hold the updates of every worker that arrived meanwhile (their
// staleness is recorded per update).
//
// The server applies each pseudo-gradient as it arrives (in arrival order: virtual time under the
// emulator, the network's over ZeroMQ). With the Nesterov outer optimiser it uses delayed Nesterov:
// every arrival moves the parameters by lr * g / N; every N-th arrival also folds the mean of the
// last N into the momentum and adds lr * mu * momentum, so that N updates computed from the same
// parameters move them exactly as one synchronous Nesterov step on their mean (N = nesterov_delay,
// by default the worker count; N = 1 is plain Nesterov on every arrival, the naive baseline). SGD
// and Adam outer optimisers are applied on every arrival. With dylu the server answers each worker
// with its next inner-step count, floor(H * t_fastest / t_own) from the step times the workers
// report, so that slow workers push as often as fast ones.
//
// A deployment's restarted worker (--rejoin; any but worker 0, which hosts the server) asks the
// server to join: the server expects it again and answers with the global parameters, and it trains
// on from them with a fresh inner optimiser, its data stream at the run's progress. Live checkpoints
// (deploy.checkpoint_every, in rounds of H steps of progress) hold the server's state alone, written
// by worker 0: a run resumed from one restores the server, and every worker joins it so. Neither can
// equal an uninterrupted run: arrival order is the network's.
//
// Every push the server takes is an `arrival` event (its worker, what it was, and with dylu the
// inner-step count the server answered), in the order taken. A replay of a deployment
// (Membership::kReplay) takes the pushes in that order, each from the worker the trace names, and
// answers with the recorded counts, so that what wall time decided over the network — the order of
// the updates, hence every worker's staleness and starting parameters, and DyLU's counts, computed
// from measured step times — is the deployment's; until the budget is spent (the order of the pushes
// after it changes nothing). A run with crashes or restarts is not replayed (what a killed worker had
// computed when it died is not in the events).
//
// The run ends at DiLoCo's token count: once the server has applied workers * train.steps inner
// steps it sends every worker a stop; each then says goodbye, and the server ends when all have (or
// left: a scripted departure says goodbye; over a network a dead worker drops out of Members()).
// The learning-rate schedule follows the run's progress (applied inner steps / workers).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>

#include "core/run_writer.h"
#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/outer.h"
#include "trainer/algorithms/outer_optimizer.h"
#include "trainer/checkpoint.h"

namespace narrows::trainer {
namespace {

struct AsyncOptions : OuterOptions {
  // Delayed Nesterov: the momentum takes the mean of the last nesterov_delay pseudo-gradients once
  // every that many arrivals (0: the worker count; 1: plain Nesterov on every arrival).
  int64_t nesterov_delay = 0;
  bool dylu = false;  // the server answers each push with the worker's next inner-step count
};

constexpr int kTagPush = core::tags::kAsyncPush;   // worker -> server: PushHeader, then the encoded pseudo-gradient
constexpr int kTagReply = core::tags::kAsyncReply;  // server -> worker: ReplyHeader, then the global parameters
constexpr int kTagStop = core::tags::kAsyncStop;   // server -> worker, once: the token budget is spent
constexpr int kServer = 0;      // the rank whose endpoint hosts the server

struct PushHeader {
  int32_t kind;        // kUpdate, kBye or kJoin
  int32_t steps;       // inner steps behind this pseudo-gradient
  int64_t base_version;  // the server version the worker started them from
  double step_time_s;  // the worker's mean compute time per inner step (DyLU)
};
struct ReplyHeader {
  int32_t kind;  // kParams, kStopped (the update was not applied) or kAck (to a bye)
  int32_t next_inner_steps;
  int64_t version;
  int64_t global_step;  // applied inner steps / workers: the run's progress
  int32_t stop_sent;    // a stop is on its way to this worker
  int32_t unused = 0;
};
enum : int32_t { kUpdate = 0, kBye = 1, kJoin = 2, kParams = 0, kStopped = 1, kAck = 2 };

template <typename Header>
std::vector<uint8_t> Message(const Header& h, size_t payload_bytes) {
  std::vector<uint8_t> out(sizeof h + payload_bytes);
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

template <typename Header>
core::Result<Header> ReadHeader(const std::vector<uint8_t>& m, size_t payload_bytes, int src, const char* what) {
  Header h;
  if (m.size() < sizeof h) {
    return core::Status::InvalidArgument(std::string(what) + " from rank " + std::to_string(src) + " has " +
                                         std::to_string(m.size()) + " bytes, shorter than its header");
  }
  std::memcpy(&h, m.data(), sizeof h);
  const bool full = (std::is_same_v<Header, PushHeader> ? h.kind == kUpdate : h.kind == kParams);
  if (m.size() != sizeof h + (full ? payload_bytes : 0)) {
    return core::Status::InvalidArgument(std::string(what) + " from rank " + std::to_string(src) + " has " +
                                         std::to_string(m.size()) + " bytes, expected " +
                                         std::to_string(sizeof h + (full ? payload_bytes : 0)));
  }
  return h;
}

// The server: the global parameters, the outer optimiser, and who is still expected.
class Server {
 public:
  Server(const EntryContext& x, Recorder& records, const torch::Tensor& initial)
      : x_(x),
        records_(records),
        o_(x.algo.Options<AsyncOptions>()),
        n_params_(initial.numel()),
        global_(initial.detach().clone()),
        pending_(torch::zeros_like(global_)),
        outer_(OuterOptimizerState::Like(global_)),
        delay_(o_.nesterov_delay > 0 ? o_.nesterov_delay : x.num_workers),
        step_time_(static_cast<size_t>(x.num_workers), 0.0),
        expected_(static_cast<size_t>(x.num_workers), true),
        stop_sent_(static_cast<size_t>(x.num_workers), false) {}

  core::Status Serve(core::Transport& t, bool live) {
    live_ = live;
    const int64_t budget = static_cast<int64_t>(x_.num_workers) * x_.sc.train.steps;
    const size_t payload = static_cast<size_t>(codec_.EncodedBytes(n_params_));
    std::vector<uint8_t> m;
    std::vector<float> g(static_cast<size_t>(n_params_));
    const std::vector<AsyncArrival>* order =
        x_.opt.membership == Membership::kReplay && x_.opt.trace ? &x_.opt.trace->arrivals : nullptr;
    size_t taken = 0;  // pushes taken so far
    while (std::count(expected_.begin(), expected_.end(), true) > 0) {
      // A replay takes the deployment's next push while the budget lasts.
      const AsyncArrival* recorded = order && !stopped_ && taken < order->size() ? &(*order)[taken] : nullptr;
      auto from = t.RecvMessage(recorded ? recorded->worker : core::kAnySource, kTagPush, &m, live ? 1.0 : core::kForever);
      if (!from.ok()) {
        // The emulator: no worker can send any more (one that failed says no goodbye; its error is
        // reported by its own worker).
        if (from.status().code() == core::StatusCode::kPeerUnavailable) return core::Status::Ok();
        if (!live || from.status().code() != core::StatusCode::kTimeout) return from.status();
        const std::vector<int> members = t.Members();
        for (int r = 0; r < x_.num_workers; ++r) {
          if (expected_[static_cast<size_t>(r)] && std::find(members.begin(), members.end(), r) == members.end()) {
            expected_[static_cast<size_t>(r)] = false;  // died without a goodbye
            records_.Event({{"type", "crash"}, {"step", global_step_}, {"time", t.clock().Now()}, {"worker", r}});
          }
        }
        continue;
      }
      const int src = *from;
      ++taken;
      auto header = ReadHeader<PushHeader>(m, payload, src, "async push");
      // A push that is malformed or claims what cannot be (a peer gone bad) is refused, not fatal:
      // nothing of it is applied or counted, and the reply restarts the worker from the global model.
      const std::string refused = header.ok() ? Implausible(*header) : header.status().message();
      ReplyHeader reply{kParams, static_cast<int32_t>(o_.inner_steps), version_, global_step_, 0, 0};
      const char* kind = "update";
      int32_t answered = 0;  // DyLU: the inner-step count this update was answered with
      if (!refused.empty()) {
        kind = "refused";
        records_.Event({{"type", "refused_message"}, {"step", global_step_}, {"time", t.clock().Now()},
                        {"worker", src}, {"reason", refused}});
      } else if (header->kind == kBye) {
        kind = "bye";
        expected_[static_cast<size_t>(src)] = false;
        reply.kind = kAck;
      } else if (header->kind == kJoin) {
        kind = "join";
        // A restarted (or resumed) worker: expected again, from the global parameters.
        expected_[static_cast<size_t>(src)] = true;
        records_.Event({{"type", "join"}, {"step", global_step_}, {"time", t.clock().Now()}, {"workers", {src}}});
        if (stopped_) {
          reply.kind = kStopped;
          if (!stop_sent_[static_cast<size_t>(src)]) {
            const int32_t stop = 1;
            const core::Status sent = t.Send(src, kTagStop, &stop, sizeof stop);
            if (!sent.ok() && !(live && sent.code() == core::StatusCode::kPeerUnavailable)) return sent;
            stop_sent_[static_cast<size_t>(src)] = true;
          }
        }
      } else if (stopped_) {
        kind = "stopped";
        reply.kind = kStopped;  // spent after this worker started: its steps are not applied
      } else {
        codec_.Decode(m.data() + sizeof(PushHeader), n_params_, g.data());
        if (!AllFinite(g.data(), n_params_)) {
          // A diverged replica, or a peer that sent NaN or infinity: never applied, its steps not
          // counted; the reply's global parameters restart the worker from the global model.
          records_.Event({{"type", "dropped_outer_gradient"}, {"step", global_step_}, {"time", t.clock().Now()},
                          {"worker", src}, {"reason", "non-finite"}});
        } else {
          Apply(g, *header, src, t.clock().Now());
        }
        if (o_.dylu) {
          answered = static_cast<int32_t>(recorded && recorded->next_inner_steps > 0 ? recorded->next_inner_steps
                                                                                   : NextInnerSteps(src));
          reply.next_inner_steps = answered;
        }
        if (applied_steps_ >= budget) {
          stopped_ = true;
          const int32_t stop = 1;
          for (int r = 0; r < x_.num_workers; ++r) {
            if (!expected_[static_cast<size_t>(r)]) continue;
            NARROWS_RETURN_IF_ERROR(t.Send(r, kTagStop, &stop, sizeof stop));
            stop_sent_[static_cast<size_t>(r)] = true;
          }
        }
        reply.version = version_;
        reply.global_step = global_step_;
      }
      Json arrival = {{"type", "arrival"}, {"step", global_step_}, {"time", t.clock().Now()}, {"worker", src}, {"kind", kind}};
      if (answered > 0) arrival["next_inner_steps"] = answered;
      records_.Event(std::move(arrival));
      reply.stop_sent = stop_sent_[static_cast<size_t>(src)] ? 1 : 0;
      const size_t params_bytes = reply.kind == kParams ? static_cast<size_t>(n_params_) * sizeof(float) : 0;
      std::vector<uint8_t> out = Message(reply, params_bytes);
      if (params_bytes) ToHost(global_, reinterpret_cast<float*>(out.data() + sizeof reply));
      const core::Status s = t.Send(src, kTagReply, out.data(), out.size());
      if (!s.ok() && !(live && s.code() == core::StatusCode::kPeerUnavailable)) return s;
      NARROWS_RETURN_IF_ERROR(checkpoint_error_);  // a checkpoint that could not be written ends the run
    }
    return core::Status::Ok();
  }

  // A resumed run: the server as checkpointed (its records merged by the caller).
  core::Status Restore(const WorkerCheckpoint& c) {
    const std::string what = "async server checkpoint (rank-0.ckpt)";
    NARROWS_RETURN_IF_ERROR(CopyByName(c.tensors, Tensors(), what));
    std::istringstream in(c.drop_rng);
    in >> arrivals_ >> version_ >> applied_steps_;
    for (double& t : step_time_) in >> t;
    if (!in) return core::Status::InvalidArgument(what + ": unreadable counters '" + c.drop_rng + "'");
    outer_.steps = c.outer_steps;
    global_step_ = c.step;
    return core::Status::Ok();
  }

 private:
  // Why a well-formed push cannot be an honest worker's ("" if it can).
  std::string Implausible(const PushHeader& h) const {
    if (h.kind != kUpdate && h.kind != kBye && h.kind != kJoin) return "async push of unknown kind " + std::to_string(h.kind);
    if (h.kind != kUpdate) return "";
    if (h.steps < 0 || h.steps > o_.inner_steps) {
      return "async push of " + std::to_string(h.steps) + " inner steps (at most " + std::to_string(o_.inner_steps) + ")";
    }
    if (h.base_version < 0 || h.base_version > version_) {
      return "async push from version " + std::to_string(h.base_version) + " (the server is at " + std::to_string(version_) + ")";
    }
    if (!std::isfinite(h.step_time_s) || h.step_time_s < 0) return "async push with step time " + std::to_string(h.step_time_s);
    return "";
  }

  void Apply(const std::vector<float>& values, const PushHeader& h, int src, double now) {
    torch::NoGradGuard no_grad;
    torch::Tensor g = torch::empty_like(global_);
    FromHost(values.data(), g);
    if (o_.outer_optimizer == OuterOptimizer::kNesterov) {
      // Delayed Nesterov (see the top of this file).
      const double lr = o_.outer_lr, mu = o_.outer_momentum, n = static_cast<double>(delay_);
      pending_.add_(g);
      if (++arrivals_ % delay_ == 0) {
        outer_.momentum.mul_(mu).add_(pending_ / n);
        global_.sub_(g / n + mu * outer_.momentum, lr);
        pending_.zero_();
      } else {
        global_.sub_(g / n, lr);
      }
    } else {
      OuterStep(o_, global_, g, outer_);
    }
    const int64_t staleness = version_ - h.base_version;
    ++version_;
    applied_steps_ += h.steps;
    if (h.step_time_s > 0) step_time_[static_cast<size_t>(src)] = h.step_time_s;
    const int64_t before = global_step_;
    global_step_ = std::min(x_.sc.train.steps, applied_steps_ / x_.num_workers);
    records_.OuterSync(global_step_, now,
                 {{"worker", src}, {"inner_steps", h.steps}, {"staleness", staleness}, {"version", version_}});
    if (global_step_ > before) records_.MaybeEvaluate(before, global_step_, now, global_);
    const int64_t every = x_.sc.deploy.checkpoint_every * o_.inner_steps;  // rounds of H steps of progress
    if (live_ && every > 0 && !x_.opt.checkpoint_dir.empty() && global_step_ / every > before / every &&
        global_step_ < x_.sc.train.steps) {
      checkpoint_error_ = SaveCheckpoint(now);
    }
  }

  // The server's state: global parameters, outer optimiser, counters and step times, and worker
  // 0's records so far, as rank-0.ckpt of step-N (N: the run's progress).
  std::vector<std::pair<std::string, torch::Tensor*>> Tensors() {
    return {{"global", &global_}, {"pending", &pending_}, {"outer_momentum", &outer_.momentum},
            {"outer_adam_m", &outer_.adam_m}, {"outer_adam_v", &outer_.adam_v}};
  }
  core::Status SaveCheckpoint(double now) {
    WorkerCheckpoint c;
    c.rank = kServer;
    c.step = global_step_;
    c.outer_steps = outer_.steps;
    c.clock_s = now;
    std::ostringstream extra;
    extra.precision(17);  // the step times exactly
    extra << arrivals_ << " " << version_ << " " << applied_steps_;
    for (double t : step_time_) extra << " " << t;
    c.drop_rng = extra.str();
    c.part = records_.Export().dump();
    for (const auto& [name, t] : Tensors()) c.tensors.emplace_back(name, *t);
    char folder[32];
    std::snprintf(folder, sizeof folder, "/step-%06lld", static_cast<long long>(global_step_));
    const std::string dir = x_.opt.checkpoint_dir + folder;
    NARROWS_RETURN_IF_ERROR(core::MakeDirs(dir));
    NARROWS_RETURN_IF_ERROR(WriteCheckpoint(CheckpointPath(dir, kServer), c));
    records_.Event({{"type", "checkpoint"}, {"step", global_step_}, {"time", now}, {"dir", dir}});
    return core::Status::Ok();
  }

  int64_t NextInnerSteps(int src) const {
    double fastest = 0.0;
    for (double t : step_time_) {
      if (t > 0 && (fastest == 0.0 || t < fastest)) fastest = t;
    }
    return DyluInnerSteps(o_.inner_steps, fastest, step_time_[static_cast<size_t>(src)]);
  }

  const EntryContext& x_;
  Recorder& records_;
  const AsyncOptions& o_;
  const int64_t n_params_;
  torch::Tensor global_, pending_;
  OuterOptimizerState outer_;
  const core::Codec codec_{o_.outer_gradient};
  const int64_t delay_;
  int64_t arrivals_ = 0, version_ = 0, applied_steps_ = 0, global_step_ = 0;
  std::vector<double> step_time_;
  std::vector<bool> expected_, stop_sent_;
  bool stopped_ = false;
  bool live_ = false;  // Serve's: over a network
  core::Status checkpoint_error_;  // the last checkpoint's, reported when the server ends
};

class AsyncDiloco final : public Algorithm {  // owns its loop: no rounds
 public:
  explicit AsyncDiloco(WorkerContext& w)
      : w_(w), x_(w.entry), records_(w.records), o_(x_.algo.Options<AsyncOptions>()), n_params_(w.replica.model().flat_params().numel()),
        base_(w.replica.model().flat_params().detach().clone()) {}

  core::Status Run(WorkerContext& w) override {
    const bool resumed = w.live() && !x_.opt.resume_from.empty();
    joining_ = w.live() && (x_.opt.rejoin || resumed);
    if (joining_ && w.rank == kServer && x_.opt.rejoin) {
      return core::Status::InvalidArgument("async-diloco: worker 0 hosts the server and cannot rejoin");
    }
    std::unique_ptr<core::Work> server;
    if (w.rank == kServer) {
      auto state = std::make_shared<Server>(x_, records_, base_);
      const bool live = w.live();
      if (resumed) {
        auto c = ReadCheckpoint(CheckpointPath(x_.opt.resume_from, kServer));
        if (!c.ok()) return c.status();
        NARROWS_RETURN_IF_ERROR(state->Restore(*c));
        try {
          NARROWS_RETURN_IF_ERROR(records_.Merge(Json::parse(c->part)));
        } catch (const std::exception& e) {
          return core::Status::InvalidArgument(std::string("checkpoint records: ") + e.what());
        }
        w.time_offset = c->clock_s;
      }
      server = w.t.Start([state, live](core::Transport& t) { return state->Serve(t, live); });
    }
    core::Status s = Train();
    if (server) {
      const core::Status served = server->Wait();
      if (s.ok()) s = served;
    }
    return s;
  }

 private:
  core::Status Train() {
    const int64_t S = x_.sc.train.steps;
    int64_t inner_steps = o_.inner_steps, global_step = 0, chunk = 0, sent_at_push = w_.Stats().bytes_sent;
    int64_t first = 0;
    if (joining_) {
      auto reply = Join();
      if (!reply.ok()) return reply.status();
      if (reply->kind == kStopped) {  // the budget was spent while this worker was away
        int32_t flag = 0;
        NARROWS_RETURN_IF_ERROR(w_.t.Recv(kServer, kTagStop, &flag, sizeof flag));
        stop_received_ = true;
        return Goodbye();
      }
      global_step = first = reply->global_step;
      w_.StartDataAt(first);  // its place in the data
    }
    double chunk_compute_from = w_.compute_s;
    for (int64_t local = first;; ++local) {
      if (local < S && !w_.roster->Trains(local)) {  // a scripted departure
        for (const auto& [step, crashed] : w_.roster->Departures(local, local + 1)) {
          records_.Event({{"type", crashed ? "crash" : "leave"}, {"step", step}, {"time", w_.Now()}, {"worker", w_.rank}});
        }
        return Goodbye();
      }
      std::vector<uint8_t> stop;
      if (w_.t.RecvMessage(kServer, kTagStop, &stop, 0.0).ok()) {
        stop_received_ = true;
        return Goodbye();
      }
      const StepStats stats = w_.InnerStep(std::min(S - 1, global_step + chunk), -1);
      if (++chunk < inner_steps) {
        w_.Record(local, stats.loss);
        continue;
      }
      const double step_time = (w_.compute_s - chunk_compute_from) / static_cast<double>(chunk);
      auto reply = Push(chunk, step_time);
      if (!reply.ok()) return reply.status();
      w_.Record(local, stats.loss);  // after the push, as DiLoCo records a round's last step
      w_.CountSyncBytes(w_.Stats().bytes_sent - sent_at_push);
      sent_at_push = w_.Stats().bytes_sent;
      if (reply->kind == kStopped || reply->stop_sent) {
        int32_t flag = 0;
        NARROWS_RETURN_IF_ERROR(w_.t.Recv(kServer, kTagStop, &flag, sizeof flag));
        stop_received_ = true;
        return Goodbye();
      }
      if (o_.dylu && reply->next_inner_steps != inner_steps) {
        records_.Event({{"type", "inner_steps"}, {"step", local + 1}, {"worker", w_.rank},
                  {"inner_steps", reply->next_inner_steps}, {"step_time_s", step_time}});
      }
      inner_steps = reply->next_inner_steps;
      global_step = reply->global_step;
      chunk = 0;
      chunk_compute_from = w_.compute_s;
    }
  }

  // Sends this worker's pseudo-gradient; on kParams, continues from the parameters sent back.
  core::Result<ReplyHeader> Push(int64_t steps, double step_time) {
    const size_t payload = static_cast<size_t>(codec_.EncodedBytes(n_params_));
    std::vector<float>& g = w_.buffer;
    g.resize(static_cast<size_t>(n_params_));
    {
      torch::NoGradGuard no_grad;
      ToHost(base_ - w_.replica.model().flat_params(), g.data());
    }
    // A diverged replica's pseudo-gradient goes out as it is (the server refuses it) but leaves the
    // error-feedback residual alone, and the worker restarts from the global parameters sent back
    // with a fresh inner optimiser.
    const bool own_finite = AllFinite(g.data(), n_params_);
    if (own_finite) error_feedback_.Apply(codec_, g.data(), n_params_);
    std::vector<uint8_t> out = Message(PushHeader{kUpdate, static_cast<int32_t>(steps), version_, step_time}, payload);
    codec_.Encode(g.data(), n_params_, out.data() + sizeof(PushHeader));
    std::vector<uint8_t> in;
    NARROWS_RETURN_IF_ERROR(w_.Timed(WorkerContext::Spent::kCommunicating, [&]() -> core::Status {
      NARROWS_RETURN_IF_ERROR(w_.t.Send(kServer, kTagPush, out.data(), out.size()));
      auto from = w_.t.RecvMessage(kServer, kTagReply, &in);
      return from.ok() ? core::Status::Ok() : from.status();
    }));
    auto reply = ReadHeader<ReplyHeader>(in, static_cast<size_t>(n_params_) * sizeof(float), kServer, "async reply");
    if (!reply.ok() || reply->kind != kParams) return reply;
    torch::NoGradGuard no_grad;
    FromHost(reinterpret_cast<const float*>(in.data() + sizeof(ReplyHeader)), base_);
    w_.replica.model().flat_params().copy_(base_);
    if (!own_finite) w_.replica.optimizer().Reset();
    version_ = reply->version;
    return reply;
  }

  // Asks the server to expect this worker again; on kParams, starts from the parameters sent back.
  core::Result<ReplyHeader> Join() {
    std::vector<uint8_t> out = Message(PushHeader{kJoin, 0, 0, 0.0}, 0), in;
    NARROWS_RETURN_IF_ERROR(w_.t.Send(kServer, kTagPush, out.data(), out.size()));
    auto from = w_.t.RecvMessage(kServer, kTagReply, &in);
    if (!from.ok()) return from.status();
    auto reply = ReadHeader<ReplyHeader>(in, static_cast<size_t>(n_params_) * sizeof(float), kServer, "async join");
    if (!reply.ok() || reply->kind != kParams) return reply;
    torch::NoGradGuard no_grad;
    FromHost(reinterpret_cast<const float*>(in.data() + sizeof(ReplyHeader)), base_);
    w_.replica.model().flat_params().copy_(base_);
    version_ = reply->version;
    return reply;
  }

  // Tells the server this worker is done (it stops expecting it) and takes a stop still on its way.
  core::Status Goodbye() {
    std::vector<uint8_t> out = Message(PushHeader{kBye, 0, version_, 0.0}, 0), in;
    NARROWS_RETURN_IF_ERROR(w_.t.Send(kServer, kTagPush, out.data(), out.size()));
    auto from = w_.t.RecvMessage(kServer, kTagReply, &in);
    if (!from.ok()) return from.status();
    auto ack = ReadHeader<ReplyHeader>(in, 0, kServer, "async goodbye");
    if (!ack.ok()) return ack.status();
    if (ack->stop_sent && !stop_received_) {
      int32_t stop = 0;
      NARROWS_RETURN_IF_ERROR(w_.t.Recv(kServer, kTagStop, &stop, sizeof stop));
    }
    return core::Status::Ok();
  }

  WorkerContext& w_;
  const EntryContext& x_;
  Recorder& records_;
  const AsyncOptions& o_;
  const int64_t n_params_;
  torch::Tensor base_;  // the global parameters this worker's inner steps started from
  int64_t version_ = 0;
  const core::Codec codec_{o_.outer_gradient};
  ErrorFeedback error_feedback_;
  bool stop_received_ = false;
  bool joining_ = false;  // live: a restarted or resumed process, which joins the server first
};

const core::KeyBlock kAsyncKeys("compare[]: async-diloco",
                                "Asynchronous DiLoCo: a server beside worker 0 applies each pseudo-gradient as it arrives.");
const core::BoolKey kDylu(kAsyncKeys, "dylu", false,
                          core::Doc("each worker's inner steps scaled to its measured speed from the second round (DyLU)"));
const core::IntKey kNesterovDelay(kAsyncKeys, "nesterov_delay", 0, 0, 1 << 20,
                                  core::Doc("Nesterov: the momentum takes the mean of the last N pseudo-gradients every N "
                                            "arrivals; 0: N = the worker count; 1: plain Nesterov"));

core::ParsedOptions ParseAsync(core::OptionReader& r, const core::Scenario& sc, const core::AlgorithmSpec&) {
  auto o = std::make_shared<AsyncOptions>();
  ReadOuterOptions(r, o.get());
  o->dylu = r.Bool(kDylu);
  o->nesterov_delay = r.Int(kNesterovDelay);
  // Worker 0 hosts the server; the pool shrinks but never grows (a joiner would need the server's
  // state mid-flight, which is not built).
  for (const auto& f : sc.faults) {
    if (f.kind == core::FaultKind::kJoin || (f.kind != core::FaultKind::kLinkDown && f.worker == 0)) {
      r.Error("async-diloco supports leave and crash faults of workers other than 0 "
              "(worker 0 hosts the server; joins are not supported)");
      break;
    }
  }
  if (sc.model.buffers == core::ModelBuffers::kAveraged) {
    r.Error("async-diloco has no rounds whose members could average the model's buffers "
            "(model.buffers: averaged); use model.buffers: local, or another algorithm");
  }
  return {o, RoundsName("async-diloco", *o)};
}

// The budget of workers * steps inner steps is applied in U updates of H steps. Worker i cycles
// through H steps at its own speed and a round trip to the server beside worker 0 (its encoded push
// in, the fp32 parameters back; none for worker 0), so the updates arrive at known times, unless
// worker 0's link, which carries every remote push in and every reply out, is slower still.
// Assumes no DyLU (each push is H steps) and the scenario's uniform access links; queueing at the
// server is counted only as that link's load.
std::vector<PlanRow> PlanAsync(const PlanInputs& in, const core::AlgorithmSpec& entry) {
  const AsyncOptions& a = entry.Options<AsyncOptions>();
  const core::Scenario& sc = *in.sc;
  const int m = in.workers();
  const double params = in.workload.params;
  const double updates = std::ceil(in.steps * m / static_cast<double>(a.inner_steps));
  const double push = sizeof(PushHeader) + static_cast<double>(core::Codec(a.outer_gradient).EncodedBytes(static_cast<int64_t>(params)));
  const double reply = sizeof(ReplyHeader) + 4.0 * params;
  double round_trip = 0, server_link = 0;
  if (m > 1) {
    round_trip = in.slowest_delivery({{1, 0, static_cast<int64_t>(push)}}) +
                 in.slowest_delivery({{0, 1, static_cast<int64_t>(reply)}});
    std::vector<PlanMessage> pushes_in, replies_out;
    for (int v = 1; v < m; ++v) {
      pushes_in.push_back({v, 0, static_cast<int64_t>(push)});
      replies_out.push_back({0, v, static_cast<int64_t>(reply)});
    }
    server_link = std::max(in.slowest_delivery(pushes_in), in.slowest_delivery(replies_out)) / (m - 1);  // per remote update
  }
  // The updates in the order they arrive: worker i's k-th at k * cycle_i (the budget runs out at the
  // U-th; the others then stop at once), unless the server's link is the slower.
  std::vector<double> cycle(static_cast<size_t>(m)), next(static_cast<size_t>(m));
  std::vector<int64_t> pushes(static_cast<size_t>(m), 0);
  for (int i = 0; i < m; ++i) {
    cycle[static_cast<size_t>(i)] = static_cast<double>(a.inner_steps) * in.nominal_step_s / sc.workers.speed[static_cast<size_t>(i)] +
                                    (i == 0 ? 0.0 : round_trip);
    next[static_cast<size_t>(i)] = cycle[static_cast<size_t>(i)];
  }
  double by_workers = 0;
  int64_t remote = 0;
  for (int64_t u = 0; u < static_cast<int64_t>(updates); ++u) {
    const auto i = static_cast<size_t>(std::min_element(next.begin(), next.end()) - next.begin());
    by_workers = next[i];
    next[i] += cycle[i];
    ++pushes[i];
    if (i > 0) ++remote;
  }
  PlanRow r;
  r.time_s = std::max(by_workers, static_cast<double>(remote) * server_link);
  for (int i = 0; i < m; ++i) {
    const double waiting = static_cast<double>(pushes[static_cast<size_t>(i)]) * (i == 0 ? 0.0 : round_trip);
    const double chunk = cycle[static_cast<size_t>(i)] - (i == 0 ? 0.0 : round_trip);
    // Computing but for its round trips, and at most the chunk after its last push; a slower server
    // link only adds waiting.
    r.compute_s += std::min(std::max(0.0, by_workers - waiting),
                            static_cast<double>(pushes[static_cast<size_t>(i)] + 1) * chunk) / m;
  }
  r.syncs = static_cast<int64_t>(updates);
  r.bytes_per_worker = static_cast<double>(remote) * (push + reply) / m;
  return {r};
}

AlgorithmPlugin AsyncPlugin() {
  AlgorithmPlugin p;
  p.parser.name = "async-diloco";
  p.parser.shorthands = "async-diloco, async-diloco-hN";
  p.parser.shorthand = [](const std::string& text) { return InnerStepsShorthand("async-diloco", text); };
  p.parser.parse = ParseAsync;
  p.summary = "asynchronous DiLoCo: a server beside worker 0 applies each pseudo-gradient as it arrives";
  p.make = [](WorkerContext& w) -> std::unique_ptr<Algorithm> { return std::make_unique<AsyncDiloco>(w); };
  p.plan = PlanAsync;
  p.replay = [](const core::AlgorithmSpec&) -> std::string { return ""; };  // the server follows the arrivals
  p.replay_trace = ReplayTrace::kArrivals;
  p.scheduled_membership = [](const core::AlgorithmSpec&) -> std::string {
    return "its server takes no scheduled leave or join in real processes";
  };
  p.retime = [](const core::AlgorithmSpec&) -> std::string {
    return "its server applies outer gradients in the order they arrive, which the network decides";
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_ALGORITHM(async_diloco, AsyncPlugin());

}  // namespace narrows::trainer
