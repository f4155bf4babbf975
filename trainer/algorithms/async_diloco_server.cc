// Asynchronous DiLoCo's server (async_diloco_server.h): taking each push as it arrives, applying
// it, answering it, and checkpointing the global state.
#include "trainer/algorithms/async_diloco_server.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/run_writer.h"

namespace narrows::trainer::async_diloco {

core::Status Server::Serve(core::Transport& t, bool live) {
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
      ForgetDead(t);
      continue;
    }
    ++taken;
    NARROWS_RETURN_IF_ERROR(Take(t, *from, m, payload, budget, recorded, g));
    NARROWS_RETURN_IF_ERROR(checkpoint_error_);  // a checkpoint that could not be written ends the run
  }
  return core::Status::Ok();
}

void Server::ForgetDead(core::Transport& t) {
  const std::vector<int> members = t.Members();
  for (int r = 0; r < x_.num_workers; ++r) {
    if (expected_[static_cast<size_t>(r)] && std::find(members.begin(), members.end(), r) == members.end()) {
      expected_[static_cast<size_t>(r)] = false;  // died without a goodbye
      records_.Event({{"type", "crash"}, {"step", global_step_}, {"time", t.clock().Now()}, {"worker", r}});
    }
  }
}

core::Status Server::Take(core::Transport& t, int src, const std::vector<uint8_t>& m, size_t payload, int64_t budget,
                          const AsyncArrival* recorded, std::vector<float>& g) {
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
    NARROWS_RETURN_IF_ERROR(TakeJoin(t, src, &reply));
  } else if (stopped_) {
    kind = "stopped";
    reply.kind = kStopped;  // spent after this worker started: its steps are not applied
  } else {
    NARROWS_RETURN_IF_ERROR(TakeUpdate(t, src, m, *header, budget, recorded, g, &reply, &answered));
  }
  Json arrival = {{"type", "arrival"}, {"step", global_step_}, {"time", t.clock().Now()}, {"worker", src}, {"kind", kind}};
  if (answered > 0) arrival["next_inner_steps"] = answered;
  records_.Event(std::move(arrival));
  reply.stop_sent = stop_sent_[static_cast<size_t>(src)] ? 1 : 0;
  const size_t params_bytes = reply.kind == kParams ? static_cast<size_t>(n_params_) * sizeof(float) : 0;
  std::vector<uint8_t> out = Message(reply, params_bytes);
  if (params_bytes) ToHost(global_, reinterpret_cast<float*>(out.data() + sizeof reply));
  const core::Status s = t.Send(src, kTagReply, out.data(), out.size());
  if (!s.ok() && !(live_ && s.code() == core::StatusCode::kPeerUnavailable)) return s;
  return core::Status::Ok();
}

core::Status Server::TakeJoin(core::Transport& t, int src, ReplyHeader* reply) {
  // A restarted (or resumed) worker: expected again, from the global parameters.
  expected_[static_cast<size_t>(src)] = true;
  records_.Event({{"type", "join"}, {"step", global_step_}, {"time", t.clock().Now()}, {"workers", {src}}});
  if (stopped_) {
    reply->kind = kStopped;
    if (!stop_sent_[static_cast<size_t>(src)]) {
      const int32_t stop = 1;
      const core::Status sent = t.Send(src, kTagStop, &stop, sizeof stop);
      if (!sent.ok() && !(live_ && sent.code() == core::StatusCode::kPeerUnavailable)) return sent;
      stop_sent_[static_cast<size_t>(src)] = true;
    }
  }
  return core::Status::Ok();
}

core::Status Server::TakeUpdate(core::Transport& t, int src, const std::vector<uint8_t>& m, const PushHeader& header,
                                int64_t budget, const AsyncArrival* recorded, std::vector<float>& g,
                                ReplyHeader* reply, int32_t* answered) {
  codec_.Decode(m.data() + sizeof(PushHeader), n_params_, g.data());
  if (!AllFinite(g.data(), n_params_)) {
    // A diverged replica, or a peer that sent NaN or infinity: never applied, its steps not
    // counted; the reply's global parameters restart the worker from the global model.
    records_.Event({{"type", "dropped_outer_gradient"}, {"step", global_step_}, {"time", t.clock().Now()},
                    {"worker", src}, {"reason", "non-finite"}});
  } else {
    Apply(g, header, src, t.clock().Now());
  }
  if (o_.dylu) {
    *answered = static_cast<int32_t>(recorded && recorded->next_inner_steps > 0 ? recorded->next_inner_steps
                                                                              : NextInnerSteps(src));
    reply->next_inner_steps = *answered;
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
  reply->version = version_;
  reply->global_step = global_step_;
  return core::Status::Ok();
}

core::Status Server::Restore(const WorkerCheckpoint& c) {
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

std::string Server::Implausible(const PushHeader& h) const {
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

void Server::Apply(const std::vector<float>& values, const PushHeader& h, int src, double now) {
  torch::NoGradGuard no_grad;
  torch::Tensor g = torch::empty_like(global_);
  FromHost(values.data(), g);
  if (o_.outer_optimizer == OuterOptimizer::kNesterov) {
    // Delayed Nesterov (see the top of async_diloco.cc).
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

std::vector<std::pair<std::string, torch::Tensor*>> Server::Tensors() {
  return {{"global", &global_}, {"pending", &pending_}, {"outer_momentum", &outer_.momentum},
          {"outer_adam_m", &outer_.adam_m}, {"outer_adam_v", &outer_.adam_v}};
}

core::Status Server::SaveCheckpoint(double now) {
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

int64_t Server::NextInnerSteps(int src) const {
  double fastest = 0.0;
  for (double t : step_time_) {
    if (t > 0 && (fastest == 0.0 || t < fastest)) fastest = t;
  }
  return DyluInnerSteps(o_.inner_steps, fastest, step_time_[static_cast<size_t>(src)]);
}

}  // namespace narrows::trainer::async_diloco
