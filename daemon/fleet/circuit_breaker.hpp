// Circuit breaker in front of the fleet backend: after a run of failures it
// stops calling the backend for a while, then lets exactly one probe through.
// Pure: time is passed in, the jitter comes from a seeded generator, nothing
// here logs or locks (the one background thread of FleetLimiter owns it and
// logs the transitions it reports).
//
//   closed --(failure_threshold failures in a row)--> open
//   open --(allow() at or after openUntil())--> half-open: one probe allowed
//   half-open --(probe succeeds)--> closed
//   half-open --(probe fails)--> open again, with a longer interval
//
// The open interval is exponential backoff with full jitter: uniform in
// [min_open, min(max_open, base_open * 2^(n-1))] for the n-th open in a row,
// so daemons that lost the same backend at the same moment do not come back
// in lockstep (no connection storm), and a backend that returns is probed
// within max_open. Each probe is one connection attempt plus one command.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>

#include "daemon/core/types.hpp"

namespace fairsched::fleet {

enum class BreakerState : std::uint8_t { kClosed, kOpen, kHalfOpen };

constexpr const char* toString(BreakerState s) {
  switch (s) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half-open";
  }
  return "?";
}

struct BreakerOptions {
  std::uint32_t failure_threshold = 3;  // failures in a row that open the breaker (>= 1)
  TimeNs min_open = 5 * kNsPerMs;
  TimeNs base_open = 50 * kNsPerMs;
  TimeNs max_open = 500 * kNsPerMs;
};

// What an operator (and the metrics code) reads.
struct BreakerCounters {
  std::uint64_t successes = 0;
  std::uint64_t failures = 0;
  std::uint64_t opened = 0;     // closed or half-open -> open
  std::uint64_t probes = 0;     // open -> half-open
  std::uint64_t recovered = 0;  // half-open -> closed
  std::uint64_t refused = 0;    // allow() said no
};

class CircuitBreaker {
 public:
  explicit CircuitBreaker(BreakerOptions options = {}, std::uint64_t seed = 1)
      : options_(options), rng_(seed) {
    options_.failure_threshold = std::max<std::uint32_t>(1, options_.failure_threshold);
    options_.max_open = std::max(options_.max_open, options_.min_open);
  }

  // May a backend call be made at `now`? Moves open -> half-open when the
  // interval is over; in half-open only that one probe is allowed until its
  // outcome is reported.
  bool allow(TimeNs now) {
    switch (state_) {
      case BreakerState::kClosed:
        return true;
      case BreakerState::kOpen:
        if (now >= open_until_) {
          state_ = BreakerState::kHalfOpen;
          counters_.probes++;
          return true;
        }
        break;
      case BreakerState::kHalfOpen:
        break;
    }
    counters_.refused++;
    return false;
  }

  // Outcome of an allowed call. Return true when the state changed.
  bool onSuccess(TimeNs /*now*/) {
    counters_.successes++;
    failures_in_row_ = 0;
    if (state_ == BreakerState::kClosed) return false;
    state_ = BreakerState::kClosed;
    opens_in_row_ = 0;
    counters_.recovered++;
    return true;
  }

  bool onFailure(TimeNs now) {
    counters_.failures++;
    failures_in_row_++;
    if (state_ == BreakerState::kClosed && failures_in_row_ < options_.failure_threshold) {
      return false;
    }
    open(now);
    return true;
  }

  BreakerState state() const { return state_; }
  // When an open breaker lets the next probe through (meaningful in kOpen).
  TimeNs openUntil() const { return open_until_; }
  const BreakerCounters& counters() const { return counters_; }

 private:
  void open(TimeNs now) {
    state_ = BreakerState::kOpen;
    counters_.opened++;
    const std::uint32_t shift = std::min<std::uint32_t>(opens_in_row_, 20);
    opens_in_row_++;
    const TimeNs cap =
        std::clamp<TimeNs>(options_.base_open << shift, options_.min_open, options_.max_open);
    std::uniform_int_distribution<TimeNs> jitter(options_.min_open, cap);
    open_until_ = now + jitter(rng_);
  }

  BreakerOptions options_;
  std::mt19937_64 rng_;
  BreakerState state_ = BreakerState::kClosed;
  std::uint32_t failures_in_row_ = 0;
  std::uint32_t opens_in_row_ = 0;
  TimeNs open_until_ = 0;
  BreakerCounters counters_;
};

}  // namespace fairsched::fleet
