#include "core/wall_clock.h"

#include <chrono>
#include <thread>

namespace narrows::core {
namespace {
double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

WallClock::WallClock() : start_(SteadySeconds()) {}
void WallClock::Reset() { start_ = SteadySeconds(); }
double WallClock::Now() const { return SteadySeconds() - start_; }
double WallClock::Compute(double, double host_s, double speed) {
  const double wait = speed > 0 && speed < 1 ? host_s * (1.0 / speed - 1.0) : 0.0;
  if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  return host_s + wait;
}

}  // namespace narrows::core
