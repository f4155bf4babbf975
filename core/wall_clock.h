// WallClock: the Clock of a real run — seconds of the host's steady clock since the clock started
// (or was last Reset). Compute needs no charging: the time has already passed. Thread-safe to read.
#pragma once

#include "core/clock.h"

namespace narrows::core {

class WallClock : public Clock {
 public:
  WallClock();
  // Time 0 is now.
  void Reset();
  double Now() const override;
  void ChargeCompute(double) override {}
  double Compute(double charged_s, double host_s, double speed) override;  // sleeps for speed < 1
  bool is_virtual() const override { return false; }

 private:
  double start_;
};

}  // namespace narrows::core
