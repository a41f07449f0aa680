// The per-connection rejection budget (daemon/server/reject_budget.hpp): a
// burst, then the rate; once spent, nothing until half the burst is back;
// no budget means no bound. Time is passed in.
#include "daemon/server/reject_budget.hpp"

#include <gtest/gtest.h>

namespace fairsched::daemon {
namespace {

constexpr TimeNs kMs = 1'000'000;

TEST(RejectBudget, ABurstThenTheRateAndNothingMoreInAnyWindow) {
  RejectBudget b(1000, 10);  // 1 ms a rejection, bursts of 10
  const TimeNs t0 = 5 * kNsPerSec;
  EXPECT_EQ(b.take(t0), 10u);
  for (int i = 0; i < 10; ++i) b.spend(t0);
  EXPECT_EQ(b.take(t0), 0u) << "the burst is spent";
  EXPECT_FALSE(b.allows(t0));
  // Throttled until half the burst (5) is back: 5 ms.
  EXPECT_EQ(b.nextAt(), t0 + 5 * kMs);
  EXPECT_EQ(b.take(t0 + 4 * kMs), 0u);
  EXPECT_TRUE(b.allows(t0 + 5 * kMs));
  EXPECT_EQ(b.take(t0 + 5 * kMs), 5u);
  // Over any long interval: at most the rate plus the burst.
  TimeNs now = t0 + 5 * kMs;
  std::uint64_t spent = 0;
  for (int step = 0; step < 100'000; ++step, now += kMs / 10) {
    for (std::uint64_t n = b.take(now); n > 0; --n, ++spent) b.spend(now);
  }
  const double seconds = static_cast<double>(now - (t0 + 5 * kMs)) / kNsPerSec;
  EXPECT_LE(static_cast<double>(spent), 1000 * seconds + 10);
  EXPECT_GE(static_cast<double>(spent), 1000 * seconds - 10);
}

TEST(RejectBudget, AQuietConnectionHasItsWholeBurstAgain) {
  RejectBudget b(100, 64);
  for (int i = 0; i < 64; ++i) b.spend(kNsPerSec);
  EXPECT_EQ(b.take(kNsPerSec), 0u);
  EXPECT_EQ(b.take(100 * kNsPerSec), 64u) << "never more than the burst";
}

TEST(RejectBudget, NoBudgetNeverThrottles) {
  RejectBudget b;
  EXPECT_FALSE(b.limited());
  for (int i = 0; i < 1'000'000; ++i) b.spend(0);
  EXPECT_TRUE(b.allows(0));
  EXPECT_GT(b.take(0), 0u);
}

}  // namespace
}  // namespace fairsched::daemon
