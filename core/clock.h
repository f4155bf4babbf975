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
  // A computation that just took `host_s` on this host, charged `charged_s` by the run (its FLOPs at
  // the modelled rate, or the host's robust rate, over the worker's `speed`): returns what it cost
  // this worker on this clock. A virtual clock advances by charged_s and returns it. A wall clock,
  // on which host_s has passed already, waits out a speed factor below 1 (host_s · (1/speed − 1)),
  // so that a real process runs at its worker's speed, and returns the time that passed.
  virtual double Compute(double charged_s, double host_s, double speed) {
    (void)host_s;
    (void)speed;
    ChargeCompute(charged_s);
    return charged_s;
  }
  // True if time only moves when charged or when waiting (emulation).
  virtual bool is_virtual() const = 0;
};

}  // namespace narrows::core
