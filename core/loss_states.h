// Bursty loss, Gilbert-Elliott in continuous time: a link alternates between a good state (its
// usual loss) and a bad one (the burst's loss), each stay exponential with its mean, drawn from
// the link's seeded stream; good from time 0. Every network model and the link emulator walk the
// same switches from the same seed, so they see the same loss episodes. Deterministic.
#pragma once

#include <cstdint>
#include <limits>
#include <random>

namespace narrows::core {

struct Burst {
  double mean_good_s = 0.0, mean_bad_s = 0.0;  // both > 0: bursts on
  double loss = 0.0;                           // in the bad state
  uint64_t seed = 0;
};

// A link's loss over time: constant, or its Gilbert-Elliott states.
class LossStates {
 public:
  LossStates(double good_loss, const Burst& burst);
  double loss() const { return bad_ ? burst_.loss : good_loss_; }
  bool bad() const { return bad_; }
  // When the state changes next (infinity without bursts).
  double next_switch() const { return next_; }
  // Enters the other state at next_switch() and draws the stay's end.
  void Switch();
  // Switches until the state is the one at time t (t never earlier than before).
  void WalkTo(double t) {
    while (next_ <= t) Switch();
  }

 private:
  Burst burst_;
  double good_loss_;
  bool bad_ = false;
  double next_ = std::numeric_limits<double>::infinity();
  std::mt19937_64 rng_;
};

}  // namespace narrows::core
