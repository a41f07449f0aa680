// LeasePool: spending leases, prefetch, expiry, returns and refunds, with
// injected time and no backend.
#include "daemon/fleet/lease_pool.hpp"

#include <gtest/gtest.h>

namespace fairsched::fleet {
namespace {

constexpr TimeNs kTtl = 60 * kNsPerSec;

// A pool that asked for and got a lease of `amount` in bucket `bucket` at `t`.
void grant(LeasePool& p, std::uint64_t amount, std::int64_t bucket, TimeNs t) {
  ASSERT_TRUE(p.wantsFetch(t));
  const FetchOrder o = p.beginFetch(t);
  ASSERT_GT(o.want, 0u);
  p.onGrant(amount, bucket, t);
}

std::uint64_t returned(LeasePool& p, std::int64_t bucket) {
  std::uint64_t sum = 0;
  for (const LeaseReturn& r : p.beginFetch(0, false).returns) {
    if (r.bucket == bucket) sum += r.amount;
  }
  return sum;
}

TEST(LeasePool, EmptyPoolRejectsAndWantsAFetch) {
  LeasePool p(10, kTtl);
  const core::FleetDecision d = p.take(1, 0);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.retry_after, LeasePool::kFetchWait);
  EXPECT_TRUE(p.wantsFetch(0));
  EXPECT_EQ(p.counters().waited, 1u);
}

TEST(LeasePool, AFirstTakeIsAdmittedOnCreditAndTheGrantPaysItFirst) {
  LeasePool p(10, kTtl);
  EXPECT_TRUE(p.take(4, 0, true).admitted);
  EXPECT_EQ(p.debt(), 4u);
  EXPECT_EQ(p.counters().borrowed, 1u);
  EXPECT_FALSE(p.take(1, 1, true).admitted) << "one debt at a time";
  ASSERT_TRUE(p.wantsFetch(1));
  const FetchOrder o = p.beginFetch(1);
  EXPECT_EQ(o.want, 10u + 4u);  // a lease, plus what is owed
  EXPECT_EQ(o.min, 4u);         // a grant must at least pay the debt
  p.onGrant(14, 1, 1);
  EXPECT_EQ(p.debt(), 0u);
  EXPECT_EQ(p.held(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(p.take(1, 2, true).admitted) << i;
  EXPECT_EQ(p.counters().borrowed, 1u);
}

TEST(LeasePool, NoCreditWhileADebtIsUnpaidOrTheBudgetIsSpent) {
  LeasePool p(10, kTtl);
  ASSERT_TRUE(p.take(4, 0, true).admitted);
  ASSERT_TRUE(p.wantsFetch(0));
  p.beginFetch(0);
  p.onGrant(3, 1, 0);  // short of the debt: it shrinks, no lease
  EXPECT_EQ(p.debt(), 1u);
  EXPECT_EQ(p.held(), 0u);
  EXPECT_FALSE(p.take(1, 1, true).admitted);
  ASSERT_TRUE(p.wantsFetch(1));
  p.beginFetch(1);
  p.onDenied(5 * kNsPerSec);
  EXPECT_FALSE(p.take(1, 2, true).admitted);
  EXPECT_EQ(p.debt(), 1u) << "an unpaid debt is the one request the backend never counted";

  LeasePool q(10, kTtl);
  q.beginFetch(0);
  q.onDenied(5 * kNsPerSec);
  EXPECT_FALSE(q.take(1, 1, true).admitted) << "no credit once the budget is known spent";
  EXPECT_FALSE(q.take(1, 1).admitted) << "no credit unless the limiter allows it";
  EXPECT_EQ(q.counters().borrowed, 0u);
}

TEST(LeasePool, AReplacingPoolTakesOverTheDebtAndTheDenial) {
  LeasePool old(10, kTtl);
  ASSERT_TRUE(old.take(4, 0, true).admitted);
  old.beginFetch(0);
  old.onDenied(7 * kNsPerSec);
  LeasePool fresh(20, kTtl);
  fresh.adoptDebt(old);
  EXPECT_EQ(old.debt(), 0u);
  EXPECT_EQ(fresh.debt(), 4u);
  EXPECT_EQ(fresh.deniedUntil(), 7 * kNsPerSec);
  EXPECT_FALSE(fresh.take(1, 1, true).admitted);
}

TEST(LeasePool, RefundOfABorrowedTakeIsDropped) {
  LeasePool p(10, kTtl);
  ASSERT_TRUE(p.take(4, 100, true).admitted);
  ASSERT_TRUE(p.wantsFetch(100));
  p.beginFetch(100);
  p.onGrant(14, 1, 100);
  p.refund(4, 100, 200);
  EXPECT_EQ(p.counters().refunds_dropped, 1u);
  EXPECT_EQ(p.held(), 10u);
}

TEST(LeasePool, SpendsALeaseExactlyToZero) {
  LeasePool p(10, kTtl);
  grant(p, 10, 1, 0);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(p.take(1, 1).admitted) << i;
  EXPECT_FALSE(p.take(1, 1).admitted);
  EXPECT_EQ(p.counters().admitted, 10u);
}

TEST(LeasePool, OneFetchAtATime) {
  LeasePool p(10, kTtl);
  EXPECT_TRUE(p.wantsFetch(0));
  const FetchOrder o = p.beginFetch(0);
  EXPECT_EQ(o.want, 10u);
  EXPECT_FALSE(p.wantsFetch(0));
  p.onFetchFailed();
  EXPECT_TRUE(p.wantsFetch(0));
}

TEST(LeasePool, PrefetchesWhenTheCurrentLeaseRunsLow) {
  LeasePool p(10, kTtl);
  grant(p, 10, 1, 0);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.take(1, 1).admitted);
  EXPECT_FALSE(p.wantsFetch(1));  // 6 left of 10
  ASSERT_TRUE(p.take(1, 1).admitted);
  ASSERT_TRUE(p.take(1, 1).admitted);
  EXPECT_TRUE(p.wantsFetch(1));  // 4 left: below half
  grant(p, 10, 2, 1);
  EXPECT_FALSE(p.wantsFetch(1));  // a next lease is held
  for (int i = 0; i < 14; ++i) EXPECT_TRUE(p.take(1, 2).admitted) << i;
  EXPECT_EQ(p.held(), 0u);
}

TEST(LeasePool, OnceATakeWaitedTheNextLeaseIsFetchedAsSoonAsTheCurrentIsInUse) {
  LeasePool p(10, kTtl);
  grant(p, 10, 1, 0);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(p.take(1, 1).admitted);
  ASSERT_TRUE(p.wantsFetch(1));
  p.beginFetch(1);  // the round trip outlasts the rest of the lease
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.take(1, 2).admitted);
  EXPECT_FALSE(p.take(1, 2).admitted) << "ran dry while fetching";
  p.onGrant(10, 1, 3);
  ASSERT_TRUE(p.take(1, 3).admitted);  // the next lease becomes current: 9 of 10 left
  EXPECT_TRUE(p.wantsFetch(3)) << "eager: a whole lease ahead, not at half";
  grant(p, 10, 1, 3);
  EXPECT_FALSE(p.wantsFetch(3)) << "still at most two leases held";
  EXPECT_EQ(p.held(), 19u);
}

TEST(LeasePool, ALeaseThatExpiresUnspentEndsEagerPrefetching) {
  LeasePool p(10, kTtl);
  EXPECT_FALSE(p.take(1, 0).admitted);  // waited: eager
  grant(p, 10, 1, 0);
  ASSERT_TRUE(p.take(1, 1).admitted);
  ASSERT_TRUE(p.wantsFetch(1)) << "eager";
  grant(p, 10, 2, 1);  // the next lease, expiring 1 ns after the current one
  // Demand stops; the current lease expires with 9 left, the next one takes over.
  ASSERT_TRUE(p.take(1, kTtl).admitted);
  EXPECT_EQ(p.held(), 9u);
  EXPECT_FALSE(p.wantsFetch(kTtl)) << "9 of 10 left, and no longer eager: fetch at half";
}

TEST(LeasePool, SwitchingLeasesReturnsTheRemainderToItsOwnBucket) {
  LeasePool p(10, kTtl);
  grant(p, 10, 7, 0);
  ASSERT_TRUE(p.take(8, 1).admitted);  // 2 left, wants a fetch
  grant(p, 10, 9, 1);
  ASSERT_TRUE(p.take(5, 2).admitted);  // 2 < 5: switch to the next lease
  EXPECT_EQ(p.held(), 5u);
  EXPECT_EQ(returned(p, 7), 2u);
}

TEST(LeasePool, ACostLargerThanTheLeaseAsksForABiggerOne) {
  LeasePool p(10, kTtl);
  EXPECT_FALSE(p.take(25, 0).admitted);
  const FetchOrder o = p.beginFetch(0);
  EXPECT_EQ(o.want, 25u);
  EXPECT_EQ(o.min, 25u);
  p.onGrant(25, 1, 0);
  EXPECT_TRUE(p.take(25, 1).admitted);
}

TEST(LeasePool, TooSmallNextLeaseStillLetsAFetchStart) {
  LeasePool p(10, kTtl);
  grant(p, 10, 1, 0);
  ASSERT_TRUE(p.take(9, 0).admitted);
  grant(p, 3, 2, 0);  // the backend had only 3 left
  EXPECT_FALSE(p.take(5, 1).admitted);
  EXPECT_TRUE(p.wantsFetch(1));
}

TEST(LeasePool, ExpiredLeaseIsNotSpentAndGoesBack) {
  LeasePool p(10, kTtl);
  grant(p, 10, 3, 100);
  ASSERT_TRUE(p.take(1, 200).admitted);
  EXPECT_TRUE(p.take(1, 100 + kTtl - 1).admitted);
  EXPECT_FALSE(p.take(1, 100 + kTtl).admitted);
  EXPECT_EQ(returned(p, 3), 8u);
}

TEST(LeasePool, DenialHoldsFetchesBackAndSetsRetryAfter) {
  LeasePool p(10, kTtl);
  p.beginFetch(0);
  p.onDenied(5 * kNsPerSec);
  EXPECT_FALSE(p.wantsFetch(kNsPerSec));
  const core::FleetDecision d = p.take(1, kNsPerSec);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.retry_after, 4 * kNsPerSec);
  EXPECT_TRUE(p.wantsFetch(5 * kNsPerSec));
  EXPECT_EQ(p.counters().denials, 1u);
}

TEST(LeasePool, RefundOfTheCurrentLeaseIsSpentAgain) {
  LeasePool p(10, kTtl);
  grant(p, 10, 1, 0);
  ASSERT_TRUE(p.take(10, 5).admitted);
  p.refund(4, 5, 6);
  EXPECT_EQ(p.held(), 4u);
  EXPECT_EQ(p.counters().refunds_local, 1u);
}

TEST(LeasePool, RefundOfARetiredLeaseGoesBackToItsBucket) {
  LeasePool p(10, kTtl);
  grant(p, 10, 11, 0);
  ASSERT_TRUE(p.take(9, 5).admitted);
  grant(p, 10, 12, 6);
  ASSERT_TRUE(p.take(5, 7).admitted);   // switches at 7
  p.refund(3, 5, 8);                    // taken at 5, from the lease of bucket 11
  EXPECT_EQ(returned(p, 11), 1u + 3u);  // its remainder and the refund
  EXPECT_EQ(p.counters().refunds_returned, 1u);
}

TEST(LeasePool, RefundOfATakeAtTheInstantOfASwitchIsDropped) {
  LeasePool p(10, kTtl);
  grant(p, 10, 1, 0);
  ASSERT_TRUE(p.take(9, 5).admitted);
  grant(p, 10, 2, 5);
  ASSERT_TRUE(p.take(5, 5).admitted);  // switch at 5: a take at 5 could be from either
  p.refund(2, 5, 6);
  EXPECT_EQ(p.counters().refunds_dropped, 1u);
  EXPECT_EQ(p.held(), 5u);
}

TEST(LeasePool, RefundOfABypassedTakeIsDropped) {
  LeasePool p(10, kTtl);
  p.markBypassed(100);
  EXPECT_TRUE(p.bypassed(100));
  grant(p, 10, 1, 50);
  ASSERT_TRUE(p.take(3, 100).admitted);
  p.refund(3, 100, 101);
  EXPECT_EQ(p.held(), 7u);
  EXPECT_EQ(p.counters().refunds_dropped, 1u);
}

TEST(LeasePool, ReleaseAllReturnsEveryRemainder) {
  LeasePool p(10, kTtl);
  grant(p, 10, 1, 0);
  ASSERT_TRUE(p.take(8, 0).admitted);
  grant(p, 10, 2, 0);
  p.releaseAll(1);
  EXPECT_EQ(p.held(), 0u);
  const FetchOrder o = p.beginFetch(1, false);
  EXPECT_EQ(o.want, 0u);
  ASSERT_EQ(o.returns.size(), 2u);
  EXPECT_EQ(o.returns[0].amount + o.returns[1].amount, 12u);
}

TEST(LeasePool, ReturnsForOneBucketAreMerged) {
  LeasePool p(10, kTtl);
  grant(p, 10, 4, 0);
  ASSERT_TRUE(p.take(9, 1).admitted);
  grant(p, 10, 5, 1);
  ASSERT_TRUE(p.take(5, 2).admitted);
  p.refund(2, 1, 3);
  p.refund(1, 1, 3);
  const FetchOrder o = p.beginFetch(3, false);
  ASSERT_EQ(o.returns.size(), 1u);
  EXPECT_EQ(o.returns[0].bucket, 4);
  EXPECT_EQ(o.returns[0].amount, 1u + 2u + 1u);
}

// Whatever the order of takes, refunds, grants and expiry: what is spent from
// leases, net of local refunds, never exceeds what was granted.
TEST(LeasePool, NeverSpendsMoreThanGrantedNetOfRefunds) {
  std::uint64_t seed = 12345;
  auto next = [&seed](std::uint64_t n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed >> 33) % n;
  };
  LeasePool p(50, 1000);
  std::uint64_t granted = 0;
  std::uint64_t spent = 0;
  std::uint64_t credited = 0;
  std::uint64_t returned_total = 0;
  std::vector<std::pair<TimeNs, std::uint64_t>> takes;
  TimeNs t = 0;
  for (int i = 0; i < 20000; ++i) {
    t += static_cast<TimeNs>(next(5));
    const std::uint64_t cost = 1 + next(20);
    if (p.take(cost, t).admitted) {
      spent += cost;
      takes.emplace_back(t, cost);
    }
    if (!takes.empty() && next(4) == 0) {
      const auto [at, c] = takes[next(takes.size())];
      const std::uint64_t before = p.counters().refunds_local;
      const std::uint64_t held = p.held();
      p.refund(c / 2, at, t);
      if (p.counters().refunds_local != before) credited += p.held() - held;
    }
    if (p.wantsFetch(t)) {
      const FetchOrder o = p.beginFetch(t);
      for (const LeaseReturn& r : o.returns) returned_total += r.amount;
      const std::uint64_t amount = next(3) == 0 ? 0 : o.want;
      if (amount == 0) {
        p.onDenied(t + 3);
      } else {
        p.onGrant(amount, t, t);
        granted += amount;
      }
    }
  }
  EXPECT_LE(spent, granted + credited);
  EXPECT_GT(spent, 0u);
}

}  // namespace
}  // namespace fairsched::fleet
