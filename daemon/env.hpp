// The serving side's one seam to time: the daemon's server, its executors,
// the fleet limiter and the gateway read the clock through an Env, so a test
// hands them a fake one (see tests/support/fake_env.hpp) and steps time
// without sleeping. Every TimeNs they compare is CLOCK_MONOTONIC in
// nanoseconds, the clock io_uring and timerfd timers use.
//
// Threading: Env::now() may be called from any thread; an implementation
// that is not thread-safe says so.
#pragma once

#include <time.h>

#include "daemon/core/types.hpp"

namespace fairsched::daemon {

// CLOCK_MONOTONIC now, in nanoseconds (no virtual call: the event loop's own
// spin timing and RealEnv use it).
inline TimeNs monotonicNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

class Env {
 public:
  virtual ~Env() = default;
  // Monotonic nanoseconds; never goes backwards within one Env.
  virtual TimeNs now() const = 0;

  // The process's clock. Lives for the whole program.
  static Env& real();
};

class RealEnv final : public Env {
 public:
  TimeNs now() const override { return monotonicNow(); }
};

inline Env& Env::real() {
  static RealEnv env;
  return env;
}

}  // namespace fairsched::daemon
