#include "core/loss_states.h"

namespace narrows::core {

LossStates::LossStates(double good_loss, const Burst& burst) : burst_(burst), good_loss_(good_loss), rng_(burst.seed) {
  if (burst_.mean_good_s > 0 && burst_.mean_bad_s > 0) {
    next_ = std::exponential_distribution<double>(1.0 / burst_.mean_good_s)(rng_);
  }
}

void LossStates::Switch() {
  bad_ = !bad_;
  next_ += std::exponential_distribution<double>(1.0 / (bad_ ? burst_.mean_bad_s : burst_.mean_good_s))(rng_);
}

}  // namespace narrows::core
