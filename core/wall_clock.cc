#include "core/wall_clock.h"

#include <chrono>

namespace narrows::core {
namespace {
double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

WallClock::WallClock() : start_(SteadySeconds()) {}
void WallClock::Reset() { start_ = SteadySeconds(); }
double WallClock::Now() const { return SteadySeconds() - start_; }

}  // namespace narrows::core
