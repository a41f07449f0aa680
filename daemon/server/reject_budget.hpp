// How fast the daemon rejects one connection's submissions, at most.
//
// A rejection (RATE_LIMITED, QUEUE_FULL, INVALID, ...) spends the event
// loop's time on nothing anyone is served by. A client that answers its
// rejections by submitting again at once — a retry loop without backoff,
// a flood of trial tenants — would otherwise turn the one loop thread into
// its rejection service, and with busy polling the loop never sleeps, so
// the kernel gives it no more CPU than each flooder: the executors then wait
// for the loop while other tenants' requests are queued.
//
// So each connection has a budget of rejections: `per_s` a second, bursts of
// `burst`. A connection that has spent it is not read until half its burst
// is back — its cells wait in its ring, and its client meets RING_FULL,
// which is back-pressure it already handles — and a loop whose only work
// left is such a connection sleeps until then (the half: a flood is then
// answered in chunks, not one cell per pass, so the loop can sleep between
// them, and a sleeping thread is the one the kernel runs first when it
// wakes). Admitted requests cost nothing here, so a client whose requests
// are served is never slowed.
//
// Generic cell rate algorithm: one time, `tat` (when the bucket would be
// full again), no floating point. Single-threaded (the loop's).
#pragma once

#include <algorithm>
#include <cstdint>

#include "daemon/core/types.hpp"

namespace fairsched::daemon {

class RejectBudget {
 public:
  // per_s 0: no budget (rejections are never throttled).
  explicit RejectBudget(std::uint64_t per_s = 0, std::uint64_t burst = 1) {
    if (per_s == 0) return;
    interval_ = std::max<TimeNs>(1, kNsPerSec / static_cast<TimeNs>(per_s));
    burst = std::max<std::uint64_t>(burst, 1);
    tolerance_ = interval_ * static_cast<TimeNs>(burst - 1);
    resume_ = std::max<std::uint64_t>(1, burst / 2);
  }

  bool limited() const { return interval_ != 0; }
  // Rejections it may make at `now` before it is throttled (at least 1 while
  // it is not); a large number without a budget.
  std::uint64_t available(TimeNs now) const {
    if (!limited()) return UINT32_MAX;
    const TimeNs room = now + tolerance_ - std::max(tat_, now);
    return room < 0 ? 0 : static_cast<std::uint64_t>(room / interval_) + 1;
  }
  // What ingest may reject now: 0 while it is throttled (spent, and not yet
  // back to half its burst), else available().
  std::uint64_t take(TimeNs now) {
    const std::uint64_t n = available(now);
    if (throttled_ && n < resume_) return 0;
    throttled_ = n == 0;
    return n;
  }
  bool allows(TimeNs now) const {
    const std::uint64_t n = available(now);
    return throttled_ ? n >= resume_ : n > 0;
  }
  // One rejection at `now` (counted even past the budget: a pass may
  // overshoot by what it read before it looked again).
  void spend(TimeNs now) {
    if (limited()) tat_ = std::max(tat_, now) + interval_;
  }
  // When allows() is true again; `now` or earlier when it is.
  TimeNs nextAt() const {
    return tat_ - tolerance_ +
           (throttled_ ? static_cast<TimeNs>(resume_ - 1) * interval_ : TimeNs{0});
  }

 private:
  TimeNs interval_ = 0;   // ns per rejection
  TimeNs tolerance_ = 0;  // (burst - 1) intervals
  TimeNs tat_ = 0;
  std::uint64_t resume_ = 1;  // available() a throttled budget waits for
  bool throttled_ = false;
};

}  // namespace fairsched::daemon
