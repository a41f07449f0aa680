// Connection set-ups shared by uid (daemon/server/set_up_queue.hpp): a burst,
// then the rate; a Hello past it waits, in order within its uid, and is
// served when the budget is back; other uids do not wait behind it; a
// waiting connection that goes away leaves the queue. Time is passed in.
#include "daemon/server/set_up_queue.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace fairsched::daemon {
namespace {

constexpr TimeNs kMs = 1'000'000;
constexpr TimeNs kT0 = 7 * kNsPerSec;

TEST(SetUpQueue, ABurstIsServedAtOnceThenHellosWaitInOrderForTheRate) {
  SetUpQueue q(100, 2);  // 10 ms a set-up, bursts of 2
  EXPECT_TRUE(q.admit(1, 1000, kT0));
  EXPECT_TRUE(q.admit(2, 1000, kT0));
  EXPECT_FALSE(q.admit(3, 1000, kT0));
  EXPECT_FALSE(q.admit(4, 1000, kT0));
  EXPECT_EQ(q.waiting(), 2u);
  EXPECT_EQ(q.nextAt(), kT0 + 10 * kMs);
  EXPECT_TRUE(q.takeReady(kT0 + 9 * kMs).empty());
  EXPECT_EQ(q.takeReady(kT0 + 10 * kMs), (std::vector<std::uint64_t>{3}));
  EXPECT_EQ(q.takeReady(kT0 + 20 * kMs), (std::vector<std::uint64_t>{4}));
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_EQ(q.nextAt(), kNever);
}

TEST(SetUpQueue, AHelloNeverPassesOneWaitingOfItsUid) {
  SetUpQueue q(100, 1);
  EXPECT_TRUE(q.admit(1, 1000, kT0));
  EXPECT_FALSE(q.admit(2, 1000, kT0));
  // The budget is back, but 2 waits: 3 queues behind it rather than pass it.
  EXPECT_FALSE(q.admit(3, 1000, kT0 + 10 * kMs));
  EXPECT_EQ(q.takeReady(kT0 + 10 * kMs), (std::vector<std::uint64_t>{2}));
  EXPECT_EQ(q.takeReady(kT0 + 20 * kMs), (std::vector<std::uint64_t>{3}));
}

TEST(SetUpQueue, OtherUidsDoNotWaitBehindAStorm) {
  SetUpQueue q(100, 1);
  EXPECT_TRUE(q.admit(1, 1000, kT0));
  for (std::uint64_t c = 2; c < 50; ++c) EXPECT_FALSE(q.admit(c, 1000, kT0));
  EXPECT_TRUE(q.admit(100, 2000, kT0)) << "a quiet uid's first Hello is served at once";
  EXPECT_TRUE(q.admit(101, 0, kT0));
  EXPECT_EQ(q.waiting(), 48u);
}

TEST(SetUpQueue, AWaitingConnectionThatGoesAwayLeavesTheQueue) {
  SetUpQueue q(100, 1);
  EXPECT_TRUE(q.admit(1, 1000, kT0));
  EXPECT_FALSE(q.admit(2, 1000, kT0));
  EXPECT_FALSE(q.admit(3, 1000, kT0));
  q.forget(2, 1000);
  q.forget(2, 1000);  // twice, or never queued: nothing
  q.forget(9, 4242);
  EXPECT_EQ(q.waiting(), 1u);
  EXPECT_EQ(q.takeReady(kT0 + 10 * kMs), (std::vector<std::uint64_t>{3}));
}

TEST(SetUpQueue, OverAnyLongIntervalAtMostTheRatePlusTheBurstAreServed) {
  SetUpQueue q(1000, 10);  // 1 ms a set-up
  std::uint64_t served = 0, next = 1;
  TimeNs now = kT0;
  for (int step = 0; step < 10'000; ++step, now += kMs / 4) {
    // Four Hellos every quarter millisecond: sixteen times the rate.
    for (int k = 0; k < 4; ++k) served += q.admit(next++, 1000, now) ? 1 : 0;
    served += q.takeReady(now).size();
  }
  const std::uint64_t elapsed_ms = static_cast<std::uint64_t>((now - kT0) / kMs);
  EXPECT_LE(served, elapsed_ms + 10);
  EXPECT_GE(served, elapsed_ms - 1) << "the rate is served, not less";
  EXPECT_EQ(q.waiting(), next - 1 - served);
}

TEST(SetUpQueue, NoBudgetServesEveryHelloAtOnce) {
  SetUpQueue q(0);
  for (std::uint64_t c = 1; c < 1000; ++c) EXPECT_TRUE(q.admit(c, 1000, kT0));
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_EQ(q.nextAt(), kNever);
}

TEST(SetUpQueue, UidsWithAFullBudgetAndNothingWaitingAreForgotten) {
  SetUpQueue q(100, 1);
  for (uid_t u = 0; u < 1000; ++u) EXPECT_TRUE(q.admit(u, u, kT0 + u * 20 * kMs));
  // Each uid's budget was full again 10 ms after its Hello: the entries were
  // pruned as new uids came, and a returning uid starts with a full budget.
  EXPECT_LE(q.uidsKept(), 65u);
  EXPECT_TRUE(q.admit(5000, 3, kT0 + 1000 * 20 * kMs));
}

}  // namespace
}  // namespace fairsched::daemon
