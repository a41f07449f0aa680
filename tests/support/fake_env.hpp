// An Env (daemon/env.hpp) whose clock moves only when told to, or by a fixed
// step at every reading: tests of the parts that read the clock step time
// without sleeping and get exact durations. Thread-safe (an executor's
// threads read it).
#pragma once

#include <atomic>

#include "daemon/env.hpp"

namespace fairsched::testing {

class FakeEnv final : public daemon::Env {
 public:
  // Starts at `start`; every now() returns the current time, then moves it
  // on by `step` (0: only advance() moves it).
  explicit FakeEnv(TimeNs start = 1'000'000'000, TimeNs step = 0) : now_(start), step_(step) {}

  TimeNs now() const override { return now_.fetch_add(step_, std::memory_order_relaxed); }
  void advance(TimeNs by) { now_.fetch_add(by, std::memory_order_relaxed); }

 private:
  mutable std::atomic<TimeNs> now_;
  const TimeNs step_;
};

}  // namespace fairsched::testing
