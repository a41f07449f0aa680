#include "daemon/core/backlog_throttle.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace fairsched::core {
namespace {

constexpr TimeNs kSecond = kNsPerSec;
constexpr std::uint64_t kHuge = std::numeric_limits<std::uint64_t>::max();

TEST(BacklogThrottle, DefaultConstructedIsDisabled) {
  BacklogThrottle t;
  EXPECT_EQ(t.target(), 0);
  t.onBatchDone(1, kSecond);  // 1 token/s: any backlog would be "late"
  EXPECT_TRUE(t.admits(0));
  EXPECT_TRUE(t.admits(1'000'000));
  EXPECT_TRUE(t.admits(kHuge));
}

TEST(BacklogThrottle, DisabledWhenTargetIsZeroEvenWithMeasuredRate) {
  BacklogThrottle t(/*target_ns=*/0, /*parallelism=*/1);
  t.onBatchDone(10, kSecond);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 10.0);
  EXPECT_EQ(t.estimatedDelay(100), 10 * kSecond);  // still estimates ...
  EXPECT_TRUE(t.admits(100));                      // ... but never rejects
  EXPECT_TRUE(t.admits(kHuge));
}

TEST(BacklogThrottle, NothingMeasuredMeansNoEstimate) {
  BacklogThrottle t(kNsPerMs);
  EXPECT_EQ(t.tokensPerSecond(), 0.0);
  EXPECT_EQ(t.estimatedDelay(0), 0);
  EXPECT_EQ(t.estimatedDelay(1), 0);
  EXPECT_EQ(t.estimatedDelay(kHuge), 0);
}

TEST(BacklogThrottle, AdmitsEverythingBeforeFirstMeasurement) {
  BacklogThrottle t(/*target_ns=*/1);  // a 1 ns target
  EXPECT_TRUE(t.admits(0));
  EXPECT_TRUE(t.admits(1));
  EXPECT_TRUE(t.admits(kHuge));
}

TEST(BacklogThrottle, FirstSampleSetsTheRate) {
  BacklogThrottle t(kSecond);
  t.onBatchDone(1'000, kSecond);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 1'000.0);
}

TEST(BacklogThrottle, FirstSampleScalesByServiceTime) {
  BacklogThrottle t(kSecond);
  t.onBatchDone(500, 250 * kNsPerMs);  // 500 tokens in a quarter second
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 2'000.0);
}

TEST(BacklogThrottle, LaterSamplesMoveRateByDefaultAlpha) {
  BacklogThrottle t(kSecond);  // alpha 0.2
  t.onBatchDone(1'000, kSecond);
  t.onBatchDone(2'000, kSecond);  // sample 2000
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 1'000.0 + 0.2 * (2'000.0 - 1'000.0));
  t.onBatchDone(2'000, kSecond);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 1'200.0 + 0.2 * (2'000.0 - 1'200.0));
}

TEST(BacklogThrottle, LaterSamplesMoveRateByGivenAlpha) {
  BacklogThrottle t(kSecond, 1, /*alpha=*/0.5);
  t.onBatchDone(1'000, kSecond);
  t.onBatchDone(3'000, kSecond);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 2'000.0);
  t.onBatchDone(1'000, kSecond);  // a slower sample pulls it down
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 1'500.0);
}

TEST(BacklogThrottle, AlphaOneFollowsTheLatestSample) {
  BacklogThrottle t(kSecond, 1, /*alpha=*/1.0);
  t.onBatchDone(1'000, kSecond);
  t.onBatchDone(7'000, kSecond);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 7'000.0);
}

TEST(BacklogThrottle, RepeatedEqualSamplesConverge) {
  BacklogThrottle t(kSecond);
  t.onBatchDone(100, kSecond);
  for (int i = 0; i < 200; ++i) t.onBatchDone(5'000, kSecond);
  EXPECT_NEAR(t.tokensPerSecond(), 5'000.0, 1e-6);
}

TEST(BacklogThrottle, ParallelismMultipliesTheRate) {
  BacklogThrottle t(kSecond, /*parallelism=*/4);
  t.onBatchDone(1'000, kSecond);  // per slot
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 4'000.0);
  EXPECT_EQ(t.estimatedDelay(4'000), kSecond);
  t.onBatchDone(2'000, kSecond);  // sample 8000
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 4'000.0 + 0.2 * (8'000.0 - 4'000.0));
}

TEST(BacklogThrottle, ZeroParallelismCountsAsOne) {
  BacklogThrottle t(kSecond, /*parallelism=*/0);
  t.onBatchDone(1'000, kSecond);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 1'000.0);
}

TEST(BacklogThrottle, EstimatedDelayIsWorkOverRate) {
  BacklogThrottle t(kSecond);
  t.onBatchDone(1'000, kSecond);  // 1000 tokens/s: 1 ms per token
  EXPECT_EQ(t.estimatedDelay(0), 0);
  EXPECT_EQ(t.estimatedDelay(1), kNsPerMs);
  EXPECT_EQ(t.estimatedDelay(500), 500 * kNsPerMs);
  EXPECT_EQ(t.estimatedDelay(1'000), kSecond);
  EXPECT_EQ(t.estimatedDelay(60'000), 60 * kSecond);
}

TEST(BacklogThrottle, EstimatedDelayOfHugeBacklogSaturatesAtNever) {
  BacklogThrottle t(kSecond);
  t.onBatchDone(1, kSecond);  // 1 token/s
  EXPECT_EQ(t.estimatedDelay(kHuge), kNever);
  EXPECT_FALSE(t.admits(kHuge));
}

TEST(BacklogThrottle, AdmitsZeroWorkAhead) {
  BacklogThrottle t(/*target_ns=*/1);
  t.onBatchDone(1, kSecond);
  EXPECT_TRUE(t.admits(0));
}

TEST(BacklogThrottle, AdmitsAtExactlyTheTarget) {
  BacklogThrottle t(kSecond);
  t.onBatchDone(1'000, kSecond);  // 1000 tokens/s
  ASSERT_EQ(t.estimatedDelay(1'000), kSecond);
  EXPECT_TRUE(t.admits(999));
  EXPECT_TRUE(t.admits(1'000));  // delay == target
  EXPECT_FALSE(t.admits(1'001));
}

TEST(BacklogThrottle, RejectsJustPastTheTarget) {
  BacklogThrottle t(/*target_ns=*/500 * kNsPerMs);
  t.onBatchDone(2'000, kSecond);  // 0.5 ms per token
  EXPECT_TRUE(t.admits(1'000));   // exactly 500 ms
  EXPECT_FALSE(t.admits(1'001));  // 500.5 ms
}

TEST(BacklogThrottle, FasterExecutorAdmitsMore) {
  BacklogThrottle slow(kSecond, /*parallelism=*/1);
  BacklogThrottle fast(kSecond, /*parallelism=*/2);
  slow.onBatchDone(1'000, kSecond);
  fast.onBatchDone(1'000, kSecond);
  EXPECT_FALSE(slow.admits(2'000));
  EXPECT_TRUE(fast.admits(2'000));
}

TEST(BacklogThrottle, ZeroTokensAreIgnoredBeforeFirstMeasurement) {
  BacklogThrottle t(kNsPerMs);
  t.onBatchDone(0, kSecond);
  EXPECT_EQ(t.tokensPerSecond(), 0.0);
  EXPECT_TRUE(t.admits(kHuge));
}

TEST(BacklogThrottle, ZeroTokensDoNotMoveAMeasuredRate) {
  BacklogThrottle t(kSecond);
  t.onBatchDone(1'000, kSecond);
  t.onBatchDone(0, kSecond);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 1'000.0);
}

TEST(BacklogThrottle, NonPositiveServiceTimeIsIgnored) {
  BacklogThrottle t(kSecond);
  t.onBatchDone(1'000, 0);
  t.onBatchDone(1'000, -kSecond);
  t.onBatchDone(1'000, std::numeric_limits<TimeNs>::min());
  EXPECT_EQ(t.tokensPerSecond(), 0.0);
  t.onBatchDone(1'000, kSecond);
  t.onBatchDone(1'000, 0);
  t.onBatchDone(5, -1);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 1'000.0);
}

TEST(BacklogThrottle, OneNanosecondServiceTimeIsAValidSample) {
  BacklogThrottle t(kSecond);
  t.onBatchDone(1, 1);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond(), 1e9);
  EXPECT_EQ(t.estimatedDelay(1'000'000'000), kSecond);
}

TEST(BacklogThrottle, SlowdownEventuallyTurnsAdmissionIntoRejection) {
  // The executor goes from 10,000 to 100 tokens/s; the EMA follows and a
  // backlog that was fine becomes one to reject.
  BacklogThrottle t(kSecond);
  t.onBatchDone(10'000, kSecond);
  ASSERT_TRUE(t.admits(5'000));
  int batches = 0;
  while (t.admits(5'000) && batches < 1'000) {
    t.onBatchDone(100, kSecond);
    ++batches;
  }
  EXPECT_FALSE(t.admits(5'000));
  EXPECT_GT(batches, 1);  // moved gradually, not at the first slow sample
}

}  // namespace
}  // namespace fairsched::core
