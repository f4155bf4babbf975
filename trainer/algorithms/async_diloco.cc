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
#include <memory>
#include <string>
#include <vector>

#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/async_diloco_server.h"
#include "trainer/algorithms/outer.h"
#include "trainer/checkpoint.h"

namespace narrows::trainer {
namespace async_diloco {
namespace {

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
}  // namespace async_diloco

NARROWS_REGISTER_ALGORITHM(async_diloco, async_diloco::AsyncPlugin());

}  // namespace narrows::trainer
