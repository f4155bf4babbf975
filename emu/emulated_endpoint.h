// The emulator's per-actor pieces, beside the engine that schedules them: an actor's virtual
// clock, and its transport endpoint. Every call takes the engine's lock and the baton first
// (Engine::Yield), so it happens at the actor's virtual time, after every earlier event. Internal
// to emu/: users reach them through Engine::endpoint and Transport::clock.
#pragma once

#include <vector>

#include "core/mailbox.h"
#include "emu/engine.h"

namespace narrows::emu {

class Engine::VirtualClock : public core::Clock {
 public:
  VirtualClock(Engine* engine, int actor) : engine_(engine), actor_(actor) {}
  double Now() const override;
  void ChargeCompute(double seconds) override;
  bool is_virtual() const override { return true; }

 private:
  Engine* engine_;
  int actor_;
};

class Engine::Endpoint : public core::MailboxTransport<std::vector<uint8_t>> {
 public:
  Endpoint(Engine* engine, int actor, int rank) : engine_(engine), actor_(actor), rank_(rank), clock_(engine, actor) {}
  int rank() const override { return rank_; }
  int world_size() const override { return engine_->num_workers_; }
  // Starts a flow in the network model at this actor's time; a message to the own rank (another
  // endpoint of it) arrives at once, off the network.
  core::Status Send(int dst, int tag, const void* data, size_t bytes) override;
  // The same flow, with an empty payload.
  core::Status SendSizeOnly(int dst, int tag, int64_t bytes) override;
  // The steps taken by the scheduler, without a thread switch for each (Engine::RunSizeOnly).
  // NARROWS_EMULATOR_STEP_BY_STEP=1 in the environment: one call per step instead (the same times:
  // the peer tools/bench/emulator measures plans against).
  core::Status RunSizeOnly(const std::vector<core::SizeOnlyStep>& steps, double timeout_s) override {
    if (engine_->step_by_step_) return Transport::RunSizeOnly(steps, timeout_s);
    return engine_->RunSizeOnly(actor_, steps, timeout_s);
  }
  // Every rank stays a member: a finished or crashed worker shows as receives that can never be
  // satisfied (PeerUnavailable), not as a membership change.
  std::vector<int> Members() override;
  core::Clock& clock() override { return clock_; }
  core::TransportStats stats() const override;
  std::unique_ptr<core::Work> Start(core::AsyncOp op) override { return engine_->Start(actor_, std::move(op)); }

 protected:
  core::Result<core::Envelope<std::vector<uint8_t>>> Await(int src, int tag, size_t expected_bytes, double timeout_s, void* into) override;

 private:
  // `bytes_in` null: a size-only message of `bytes` (no payload travels).
  core::Status Transmit(int dst, int tag, const uint8_t* bytes_in, int64_t bytes);
  Engine* engine_;
  int actor_, rank_;
  VirtualClock clock_;
};

}  // namespace narrows::emu
