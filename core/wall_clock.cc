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
void WallClock::Pace(double extra_seconds) {
  if (extra_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(extra_seconds));
}

}  // namespace narrows::core
