// The server of asynchronous DiLoCo (async_diloco.cc, whose opening comment describes the
// algorithm): the global parameters, the outer optimiser applied to each pseudo-gradient as it
// arrives, and who is still expected; and the messages it and the workers exchange. Internal to
// async_diloco.cc and its server; includes LibTorch. A Server is used by one thread, its Serve's.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/outer.h"
#include "trainer/algorithms/outer_optimizer.h"
#include "trainer/checkpoint.h"

namespace narrows::trainer::async_diloco {

struct AsyncOptions : OuterOptions {
  // Delayed Nesterov: the momentum takes the mean of the last nesterov_delay pseudo-gradients once
  // every that many arrivals (0: the worker count; 1: plain Nesterov on every arrival).
  int64_t nesterov_delay = 0;
  bool dylu = false;  // the server answers each push with the worker's next inner-step count
};

// Its tags, in the entry's private range (core/tags.h).
constexpr int kTagPush = core::tags::Private(0);   // worker -> server: PushHeader, then the encoded pseudo-gradient
constexpr int kTagReply = core::tags::Private(1);  // server -> worker: ReplyHeader, then the global parameters
constexpr int kTagStop = core::tags::Private(2);   // server -> worker, once: the token budget is spent
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

  // Takes pushes over `t` (`live`: over a network) until no worker is expected any more.
  core::Status Serve(core::Transport& t, bool live);

  // A resumed run: the server as checkpointed (its records merged by the caller).
  core::Status Restore(const WorkerCheckpoint& c);

 private:
  // Over a network, after a receive timed out: the workers that died without a goodbye.
  void ForgetDead(core::Transport& t);
  // The push `m` from `src` (`recorded`: the deployment's, in a replay), answered with a reply.
  core::Status Take(core::Transport& t, int src, const std::vector<uint8_t>& m, size_t payload, int64_t budget,
                    const AsyncArrival* recorded, std::vector<float>& g);
  // A worker that asks to join: expected again; if the budget is spent, it hears so.
  core::Status TakeJoin(core::Transport& t, int src, ReplyHeader* reply);
  // A pseudo-gradient, decoded into `g` and applied; once the budget is spent every worker hears so.
  core::Status TakeUpdate(core::Transport& t, int src, const std::vector<uint8_t>& m, const PushHeader& header,
                          int64_t budget, const AsyncArrival* recorded, std::vector<float>& g, ReplyHeader* reply,
                          int32_t* answered);
  // Why a well-formed push cannot be an honest worker's ("" if it can).
  std::string Implausible(const PushHeader& h) const;
  void Apply(const std::vector<float>& values, const PushHeader& h, int src, double now);
  // The server's state: global parameters, outer optimiser, counters and step times, and worker
  // 0's records so far, as rank-0.ckpt of step-N (N: the run's progress).
  std::vector<std::pair<std::string, torch::Tensor*>> Tensors();
  core::Status SaveCheckpoint(double now);
  int64_t NextInnerSteps(int src) const;

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

}  // namespace narrows::trainer::async_diloco
