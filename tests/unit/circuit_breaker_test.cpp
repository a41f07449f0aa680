// CircuitBreaker: the state machine with injected time and a seeded jitter.
#include "daemon/fleet/circuit_breaker.hpp"

#include <gtest/gtest.h>

namespace fairsched::fleet {
namespace {

constexpr TimeNs kMs = kNsPerMs;

BreakerOptions options() {
  BreakerOptions o;
  o.failure_threshold = 3;
  o.min_open = 5 * kMs;
  o.base_open = 50 * kMs;
  o.max_open = 500 * kMs;
  return o;
}

TEST(CircuitBreaker, StartsClosedAndAllowsCalls) {
  CircuitBreaker b(options());
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  EXPECT_TRUE(b.allow(0));
  EXPECT_FALSE(b.onSuccess(0));
  EXPECT_EQ(b.counters().successes, 1u);
}

TEST(CircuitBreaker, OpensAfterThresholdFailuresInARow) {
  CircuitBreaker b(options());
  EXPECT_FALSE(b.onFailure(1));
  EXPECT_FALSE(b.onFailure(2));
  EXPECT_TRUE(b.onFailure(3));
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  EXPECT_EQ(b.counters().opened, 1u);
  EXPECT_GE(b.openUntil(), 3 + 5 * kMs);
  EXPECT_LE(b.openUntil(), 3 + 50 * kMs);
}

TEST(CircuitBreaker, ASuccessResetsTheFailureRun) {
  CircuitBreaker b(options());
  b.onFailure(1);
  b.onFailure(2);
  b.onSuccess(3);
  b.onFailure(4);
  b.onFailure(5);
  EXPECT_EQ(b.state(), BreakerState::kClosed);
}

TEST(CircuitBreaker, OpenRefusesUntilTheIntervalEndsThenAllowsOneProbe) {
  CircuitBreaker b(options());
  for (int i = 0; i < 3; ++i) b.onFailure(0);
  const TimeNs until = b.openUntil();
  EXPECT_FALSE(b.allow(until - 1));
  EXPECT_EQ(b.counters().refused, 1u);
  EXPECT_TRUE(b.allow(until));
  EXPECT_EQ(b.state(), BreakerState::kHalfOpen);
  EXPECT_FALSE(b.allow(until + 1));  // the probe is still out
  EXPECT_EQ(b.counters().probes, 1u);
}

TEST(CircuitBreaker, SuccessfulProbeCloses) {
  CircuitBreaker b(options());
  for (int i = 0; i < 3; ++i) b.onFailure(0);
  ASSERT_TRUE(b.allow(b.openUntil()));
  EXPECT_TRUE(b.onSuccess(b.openUntil()));
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  EXPECT_EQ(b.counters().recovered, 1u);
  EXPECT_TRUE(b.allow(b.openUntil() + 1));
}

TEST(CircuitBreaker, FailedProbeReopensImmediately) {
  CircuitBreaker b(options());
  for (int i = 0; i < 3; ++i) b.onFailure(0);
  const TimeNs t = b.openUntil();
  ASSERT_TRUE(b.allow(t));
  EXPECT_TRUE(b.onFailure(t));  // one failure is enough in half-open
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  EXPECT_GT(b.openUntil(), t);
  EXPECT_EQ(b.counters().opened, 2u);
}

TEST(CircuitBreaker, OpenIntervalsStayWithinMinAndTheGrowingCap) {
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    CircuitBreaker b(options(), seed);
    TimeNs t = 0;
    for (int i = 0; i < 3; ++i) b.onFailure(t);
    for (int n = 1; n <= 8; ++n) {
      const TimeNs cap = std::min<TimeNs>(500 * kMs, (50 * kMs) << (n - 1));
      const TimeNs interval = b.openUntil() - t;
      EXPECT_GE(interval, 5 * kMs) << "seed " << seed << " open #" << n;
      EXPECT_LE(interval, cap) << "seed " << seed << " open #" << n;
      t = b.openUntil();
      ASSERT_TRUE(b.allow(t));
      b.onFailure(t);
    }
  }
}

TEST(CircuitBreaker, JitterSpreadsProbesOfBreakersWithDifferentSeeds) {
  std::vector<TimeNs> untils;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    CircuitBreaker b(options(), seed);
    for (int i = 0; i < 3; ++i) b.onFailure(0);
    untils.push_back(b.openUntil());
  }
  std::sort(untils.begin(), untils.end());
  EXPECT_GT(std::unique(untils.begin(), untils.end()) - untils.begin(), 10);
}

TEST(CircuitBreaker, RecoveryResetsTheBackoff) {
  CircuitBreaker b(options(), 7);
  TimeNs t = 0;
  for (int n = 0; n < 6; ++n) {  // grow the backoff
    for (int i = 0; i < 3; ++i) b.onFailure(t);
    t = b.openUntil();
    ASSERT_TRUE(b.allow(t));
    if (n < 5) b.onFailure(t);
  }
  b.onSuccess(t);
  for (int i = 0; i < 3; ++i) b.onFailure(t);
  EXPECT_LE(b.openUntil() - t, 50 * kMs);
}

TEST(CircuitBreaker, ThresholdZeroIsTreatedAsOne) {
  BreakerOptions o = options();
  o.failure_threshold = 0;
  CircuitBreaker b(o);
  EXPECT_TRUE(b.onFailure(0));
  EXPECT_EQ(b.state(), BreakerState::kOpen);
}

}  // namespace
}  // namespace fairsched::fleet
