// Clock: the only way trainer code reads time.
//
// Under the emulator a worker's clock is virtual: it advances when the worker is charged compute
// time and when it waits for messages. Over a real network it is the wall clock. Times are seconds
// since the start of the run, as double. A Clock belongs to one worker; not thread-safe.
#pragma once

namespace narrows::core {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since the run started.
  virtual double Now() const = 0;
  // Accounts for `seconds` of computation that just finished. A virtual clock advances by it; a
  // wall clock ignores it (the time has already passed).
  virtual void ChargeCompute(double seconds) = 0;
  // A computation that this worker, slower than its host (a speed factor below 1), takes
  // `extra_seconds` longer over than the host did: a wall clock waits that long, so that a real
  // process runs at its worker's speed; a virtual clock ignores it (ChargeCompute's seconds have it).
  virtual void Pace(double extra_seconds) { (void)extra_seconds; }
  // True if time only moves when charged or when waiting (emulation).
  virtual bool is_virtual() const = 0;
};

}  // namespace narrows::core
