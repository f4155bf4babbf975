// RunRounds: the loop every algorithm runs in (see algorithm.h), and live checkpoints.
#include <algorithm>
#include <cstdio>

#include "core/run_writer.h"
#include "trainer/algorithms/algorithm.h"
#include "trainer/checkpoint.h"

namespace narrows::trainer {
namespace {

bool HasBuffers(WorkerContext& w) {
  const torch::Tensor& b = w.replica.model().flat_buffers();
  return b.defined() && b.numel() > 0;
}

bool AveragesBuffers(WorkerContext& w) {
  return w.entry.sc.model.buffers == core::ModelBuffers::kAveraged && HasBuffers(w);
}

// What a joiner receives: the algorithm's shared state, and the model's buffers where they are
// averaged (kept per replica otherwise, a joiner keeps its own).
std::vector<torch::Tensor*> Tensors(WorkerContext& w, const SharedState& s) {
  std::vector<torch::Tensor*> out;
  for (const auto& [name, t] : s.tensors) out.push_back(t);
  if (AveragesBuffers(w)) out.push_back(&w.replica.model().flat_buffers());
  return out;
}

// What a worker's checkpoint holds, by name: the algorithm's shared state, the parameters, the
// model's buffers (a torchscript module's, where it has any), the inner optimiser's state.
std::vector<std::pair<std::string, torch::Tensor*>> WorkerTensors(WorkerContext& w, const SharedState& shared) {
  std::vector<std::pair<std::string, torch::Tensor*>> out = shared.tensors;
  out.emplace_back("params", &w.replica.model().flat_params());
  if (HasBuffers(w)) out.emplace_back("buffers", &w.replica.model().flat_buffers());
  for (const auto& state : w.replica.optimizer().State()) out.push_back(state);
  return out;
}

// model.buffers: averaged. The members' float32 buffers averaged at the end of a round, over the
// scenario's collective, with a count of contributors (a member that dies mid-collective drops out).
core::Status AverageBuffers(WorkerContext& w, Round* round) {
  torch::Tensor& buffers = w.replica.model().flat_buffers();
  const int64_t n = buffers.numel();
  std::vector<float> sum(static_cast<size_t>(n + 1));
  NARROWS_RETURN_IF_ERROR(w.Reduce(&round->members, sum.data(), n + 1, round->end, [&] {
    const torch::Tensor host = buffers.detach().to(torch::kCPU).contiguous();
    std::copy(host.data_ptr<float>(), host.data_ptr<float>() + n, sum.begin());
    sum[static_cast<size_t>(n)] = 1.0f;
  }, core::OnFailure::kContinue, WorkerContext::kTagBuffers));
  const float contributors = sum[static_cast<size_t>(n)];
  if (contributors <= 0) return core::Status::Ok();
  torch::NoGradGuard no_grad;
  buffers.copy_(torch::from_blob(sum.data(), {n}, torch::kFloat32).div(contributors));
  return core::Status::Ok();
}

core::Status SaveCheckpoint(WorkerContext& w, const RoundAlgorithm& a, const SharedState& shared, int64_t step,
                            const std::vector<int>& group) {
  WorkerCheckpoint c;
  c.rank = w.rank;
  c.step = step;
  c.outer_steps = shared.counter != nullptr ? *shared.counter : 0;
  c.inner_steps = w.replica.optimizer().steps_taken();
  c.failures = w.roster->failures();
  c.group = group;
  c.clock_s = w.Now();
  c.compute_s = w.compute_s;
  c.comm_s = w.comm_s;
  c.idle_s = w.idle_s;
  const auto stats = w.Stats();
  c.bytes_sent = stats.bytes_sent;
  c.bytes_received = stats.bytes_received;
  c.drop_rng = a.SaveExtra();
  c.part = w.records.Export().dump();
  for (const auto& [name, t] : WorkerTensors(w, shared)) c.tensors.emplace_back(name, *t);
  for (auto& own : a.SaveOwn()) c.tensors.push_back(std::move(own));
  char folder[32];
  std::snprintf(folder, sizeof folder, "/step-%06lld", static_cast<long long>(step));
  const std::string dir = w.entry.opt.checkpoint_dir + folder;
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(dir));
  NARROWS_RETURN_IF_ERROR(WriteCheckpoint(CheckpointPath(dir, w.rank), c));
  if (w.rank == group.front()) {
    w.records.Event({{"type", "checkpoint"}, {"step", step}, {"time", w.Now()}, {"dir", dir}});
  }
  return core::Status::Ok();
}

// Continues worker `w` from its checkpoint in `folder`; returns the step it continues at.
core::Result<int64_t> RestoreCheckpoint(WorkerContext& w, RoundAlgorithm& a, const std::string& folder) {
  auto read = ReadCheckpoint(CheckpointPath(folder, w.rank));
  if (!read.ok()) return read.status();
  const WorkerCheckpoint& c = *read;
  const SharedState shared = a.Shared();
  if (c.rank != w.rank) {
    return core::Status::InvalidArgument("checkpoint of worker " + std::to_string(c.rank) + " does not fit worker " +
                                         std::to_string(w.rank));
  }
  const auto into = WorkerTensors(w, shared);
  const std::string what = "checkpoint of worker " + std::to_string(c.rank);
  if (c.tensors.size() < into.size()) {
    return core::Status::InvalidArgument(what + ": " + std::to_string(c.tensors.size()) + " tensors, this run " +
                                         std::to_string(into.size()) + " at least (another algorithm, optimiser or model?)");
  }
  const auto split = c.tensors.begin() + static_cast<std::ptrdiff_t>(into.size());
  NARROWS_RETURN_IF_ERROR(CopyByName(RoundAlgorithm::OwnState(c.tensors.begin(), split), into, what));
  NARROWS_RETURN_IF_ERROR(a.RestoreOwn(RoundAlgorithm::OwnState(split, c.tensors.end())));
  if (shared.counter != nullptr) *shared.counter = c.outer_steps;
  w.replica.optimizer().set_steps_taken(c.inner_steps);
  w.roster->set_failures(c.failures);
  w.roster->SetGroup(c.group);
  w.time_offset = c.clock_s;
  w.compute_s = c.compute_s;
  w.comm_s = c.comm_s;
  w.idle_s = c.idle_s;
  w.sent_before = c.bytes_sent;
  w.received_before = c.bytes_received;
  NARROWS_RETURN_IF_ERROR(a.RestoreExtra(c.drop_rng));
  try {
    NARROWS_RETURN_IF_ERROR(w.records.Merge(Json::parse(c.part)));
  } catch (const std::exception& e) {
    return core::Status::InvalidArgument(std::string("checkpoint records: ") + e.what());
  }
  return c.step;
}

}  // namespace

void SaveResiduals(const std::string& prefix, const core::EncodingResiduals& r, RoundAlgorithm::OwnState* out) {
  auto tensor = [](const std::vector<float>& v) {
    return torch::from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())}, torch::kFloat32).clone();
  };
  out->emplace_back(prefix + ".sent", tensor(r.sent));
  out->emplace_back(prefix + ".owned", tensor(r.owned));
}

namespace {

// state[*at] if it is named `name`; InvalidArgument naming what was found otherwise.
core::Result<const torch::Tensor*> OwnTensorAt(const std::string& name, const RoundAlgorithm::OwnState& state, size_t at) {
  if (at >= state.size() || state[at].first != name) {
    return core::Status::InvalidArgument("checkpoint: expected " + name + ", found " +
                                         (at < state.size() ? state[at].first : std::string("nothing")));
  }
  return &state[at].second;
}

}  // namespace

core::Status RestoreResiduals(const std::string& prefix, const RoundAlgorithm::OwnState& state, size_t* at,
                              core::EncodingResiduals* r) {
  for (auto [suffix, into] : {std::pair{".sent", &r->sent}, std::pair{".owned", &r->owned}}) {
    auto found = OwnTensorAt(prefix + suffix, state, *at);
    if (!found.ok()) return found.status();
    const torch::Tensor t = (*found)->to(torch::kCPU).contiguous();
    into->assign(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    ++*at;
  }
  return core::Status::Ok();
}

core::Status RestoreOwnTensor(const std::string& name, const RoundAlgorithm::OwnState& state, size_t* at,
                              torch::Tensor* into) {
  auto found = OwnTensorAt(name, state, *at);
  if (!found.ok()) return found.status();
  if ((*found)->numel() != into->numel()) {
    return core::Status::InvalidArgument("checkpoint: " + name + " has " + std::to_string((*found)->numel()) +
                                         " values, this run's " + std::to_string(into->numel()));
  }
  torch::NoGradGuard no_grad;
  into->copy_((*found)->to(into->device()).reshape(into->sizes()));
  ++*at;
  return core::Status::Ok();
}

namespace {

// Live: the leader of a round welcomes this worker and sends it the shared state; the step it
// trains from. A restarted process starts its data stream there; one out by the scenario's
// schedule takes it up where it left it, as in the emulator.
core::Result<int64_t> WelcomeHere(WorkerContext& w, RoundAlgorithm& a, bool restarted, bool* lost_state) {
  Roster& roster = *w.roster;
  auto welcome = roster.AwaitWelcome();
  if (!welcome.ok()) return welcome.status();
  const SharedState shared = a.Shared();
  NARROWS_RETURN_IF_ERROR(SyncToJoiners(w, welcome->root, welcome->joiners, Tensors(w, shared), shared.counter,
                                        roster.Tag(WorkerContext::kTagJoin, welcome->step, welcome->group)));
  a.OnJoin(welcome->step, restarted || *lost_state ? InnerState::kLost : InnerState::kKept);
  *lost_state = false;
  roster.SetGroup(welcome->group);
  if (restarted) w.StartDataAt(welcome->step);
  return welcome->step;
}

// The round from `rs` begins with its joiners receiving the shared state from its root.
core::Status ShareWithJoiners(WorkerContext& w, RoundAlgorithm& a, const Round& round, int64_t rs, bool* lost_state) {
  const bool joining = round.Joining(w.rank);
  if (round.joiners.empty() || !(joining || w.rank == round.root)) return core::Status::Ok();
  if (!joining) NARROWS_RETURN_IF_ERROR(a.Finish());
  const SharedState shared = a.Shared();
  NARROWS_RETURN_IF_ERROR(SyncToJoiners(w, round.root, round.joiners, Tensors(w, shared), shared.counter,
                                        w.roster->Tag(WorkerContext::kTagJoin, rs, round.members)));
  if (joining) {
    if (*lost_state && w.roster->RestartsLostWorkers()) w.StartDataAt(rs);  // as a restarted process does
    a.OnJoin(rs, *lost_state ? InnerState::kLost : InnerState::kKept);
    *lost_state = false;
  } else {
    w.records.Event({{"type", "join"}, {"step", rs}, {"time", w.Now()}, {"workers", round.joiners}});
  }
  return core::Status::Ok();
}

// A member's end of the round that ends at `re` (rounds of H steps, S in all): the algorithm's
// synchronisation, the buffers averaged, and a live checkpoint when one is due.
core::Status EndRoundAsMember(WorkerContext& w, RoundAlgorithm& a, Round* round, int64_t re, int64_t H, int64_t S) {
  const EntryContext& x = w.entry;
  NARROWS_RETURN_IF_ERROR(a.EndRound(round));
  if (AveragesBuffers(w)) {
    // The round's evaluations (held since its start) see the averaged buffers.
    NARROWS_RETURN_IF_ERROR(AverageBuffers(w, round));
    w.own_records.Release();
  }
  const int64_t every = x.sc.deploy.checkpoint_every;
  if (w.roster->live() && a.Checkpoints() && every > 0 && !x.opt.checkpoint_dir.empty() &&
      ((re - 1) / H + 1) % every == 0 && re < S) {
    NARROWS_RETURN_IF_ERROR(a.Finish());
    NARROWS_RETURN_IF_ERROR(SaveCheckpoint(w, a, a.Shared(), re, round->members));
  }
  return core::Status::Ok();
}

}  // namespace

core::Status RunRounds(WorkerContext& w, RoundAlgorithm& a) {
  const EntryContext& x = w.entry;
  Roster& roster = *w.roster;
  const int64_t H = a.RoundSteps(), S = x.sc.train.steps;
  // A worker that never trained or crashed has no inner optimiser state of its own.
  bool lost_state = !roster.Present(0);
  int64_t first = 0;
  const bool resumed = roster.live() && !x.opt.resume_from.empty();
  if (resumed) {
    auto step = RestoreCheckpoint(w, a, x.opt.resume_from);
    if (!step.ok()) return step.status();
    first = *step;
    w.StartDataAt(first);  // this worker's data order
    // The run folder says where it went on from.
    if (w.rank == 0) w.records.Event({{"type", "resumed"}, {"step", first}, {"time", w.Now()}, {"from", x.opt.resume_from}});
  }
  if (!resumed && roster.live() && x.opt.rejoin) {
    auto step = WelcomeHere(w, a, true, &lost_state);
    if (!step.ok()) return step.status();
    first = *step;
  }
  Round round;
  for (int64_t rs = first; rs < S;) {
    if (roster.live() && !roster.Present(rs)) {
      // Out by the scenario's leave or join faults: back at the first round it is due in at the
      // round's start (as in the emulator), or done.
      for (const auto& [step, crashed] : roster.Departures(rs, std::min(S, rs + H))) {
        w.records.Event({{"type", "leave"}, {"step", step}, {"time", w.Now()}, {"worker", w.rank}});
      }
      int64_t back = rs;
      while (back < S && !roster.Present(back)) back += H;
      if (back >= S) break;
      auto step = WelcomeHere(w, a, false, &lost_state);
      if (step.status().code() == core::StatusCode::kPeerUnavailable) break;  // the others are gone
      if (!step.ok()) return step.status();
      rs = *step;
      continue;
    }
    const int64_t re = std::min(S, rs + H);
    NARROWS_RETURN_IF_ERROR(roster.BeginRound(rs, re, &round));
    NARROWS_RETURN_IF_ERROR(ShareWithJoiners(w, a, round, rs, &lost_state));
    const int64_t sent_at_start = w.SyncBytesSent();  // after the joiners' state: the algorithm's own bytes
    if (AveragesBuffers(w)) w.own_records.Hold();
    if (roster.Present(rs)) {
      for (int64_t step = rs; step < re && roster.Trains(step); ++step) {
        NARROWS_RETURN_IF_ERROR(a.Step(&round, step));
      }
    }
    // A departure inside the round is stamped when the worker stops: after the steps it trained.
    for (const auto& [step, crashed] : roster.Departures(rs, re)) {
      lost_state = lost_state || crashed;
      w.records.Event({{"type", crashed ? "crash" : "leave"}, {"step", step}, {"time", w.Now()}, {"worker", w.rank}});
    }
    if (round.Member(w.rank)) NARROWS_RETURN_IF_ERROR(EndRoundAsMember(w, a, &round, re, H, S));
    if (!a.OverlapsRounds()) w.CountSyncBytes(w.SyncBytesSent() - sent_at_start);
    roster.EndRound(round);
    w.own_records.Release();  // a worker that left the round evaluates with its own buffers
    rs = re;
  }
  const core::Status finished = a.Finish();
  w.own_records.Release();
  return finished;
}

}  // namespace narrows::trainer
