// KeyLimiter and the SlidingWindow behind it: the sliding-window guarantee
// against a brute-force log, exact retry_after, reservations and refunds.
#include "daemon/core/rate_limiter.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <random>
#include <vector>

namespace fairsched::core {
namespace {

constexpr TimeNs kMinute = 60 * kNsPerSec;

LimitSpec requestsPer(std::uint64_t n, TimeNs window) {
  return {LimitUnit::kRequests, n, window};
}
LimitSpec tokensPer(std::uint64_t n, TimeNs window) {
  return {LimitUnit::kTokens, n, window};
}

TEST(RateLimiter, NoLimitsAdmitsEverything) {
  KeyLimiter l;
  EXPECT_TRUE(l.unlimited());
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(l.tryAdmit(1'000'000, i).admitted);
}

TEST(RateLimiter, UnlimitedSpecIsSkipped) {
  const std::vector<LimitSpec> specs{requestsPer(0, kMinute)};
  KeyLimiter l(specs);
  EXPECT_TRUE(l.unlimited());
  EXPECT_TRUE(l.tryAdmit(1, 0).admitted);
}

TEST(RateLimiter, AdmitsUpToTheLimitThenRejects) {
  const std::vector<LimitSpec> specs{requestsPer(3, kMinute)};
  KeyLimiter l(specs);
  EXPECT_TRUE(l.tryAdmit(10, 1).admitted);
  EXPECT_TRUE(l.tryAdmit(10, 2).admitted);
  EXPECT_TRUE(l.tryAdmit(10, 3).admitted);
  const LimitDecision d = l.tryAdmit(10, 4);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.limiting_index, 0);
  // All three share one sub-bucket whose last admission is t=3: it stops
  // counting once t=3 leaves the window (t-W, t], at t = 3 + W.
  EXPECT_EQ(d.retry_after, 3 + kMinute - 4);
}

TEST(RateLimiter, RetryAfterIsExact) {
  const std::vector<LimitSpec> specs{requestsPer(5, kMinute)};
  KeyLimiter l(specs);
  TimeNs t = 0;
  for (int i = 0; i < 5; ++i) {
    t += 7 * kNsPerSec;
    ASSERT_TRUE(l.tryAdmit(1, t).admitted);
  }
  const LimitDecision d = l.tryAdmit(1, t);
  ASSERT_FALSE(d.admitted);
  ASSERT_GT(d.retry_after, 0);
  EXPECT_FALSE(l.tryAdmit(1, t + d.retry_after - 1).admitted);
  EXPECT_TRUE(l.tryAdmit(1, t + d.retry_after).admitted);
}

TEST(RateLimiter, RetryAfterIsTheLatestAmongRejectingLimits) {
  const std::vector<LimitSpec> specs{requestsPer(1, kNsPerSec), requestsPer(1, kMinute)};
  KeyLimiter l(specs);
  ASSERT_TRUE(l.tryAdmit(1, 0).admitted);
  const LimitDecision d = l.tryAdmit(1, 10);
  ASSERT_FALSE(d.admitted);
  EXPECT_EQ(d.limiting_index, 1);
  EXPECT_EQ(d.retry_after, kMinute - 10);
}

TEST(RateLimiter, RejectionChargesNoLimit) {
  const std::vector<LimitSpec> specs{requestsPer(100, kMinute), tokensPer(1000, kMinute)};
  KeyLimiter l(specs);
  ASSERT_TRUE(l.tryAdmit(900, 0).admitted);
  ASSERT_FALSE(l.tryAdmit(200, 1).admitted);  // tokens reject; the request limit must not count it
  const auto usage = l.usage(2);
  ASSERT_EQ(usage.size(), 2u);
  EXPECT_EQ(usage[0].used, 1u);
  EXPECT_EQ(usage[1].used, 900u);
}

TEST(RateLimiter, CostAboveTheLimitCanNeverBeAdmitted) {
  const std::vector<LimitSpec> specs{tokensPer(1000, kMinute)};
  KeyLimiter l(specs);
  const LimitDecision d = l.tryAdmit(1001, 0);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.retry_after, kNever);
}

TEST(RateLimiter, TokenReservationIsRefundedIntoItsBucket) {
  const std::vector<LimitSpec> specs{tokensPer(1000, kMinute)};
  KeyLimiter l(specs);
  ASSERT_TRUE(l.tryAdmit(800, 0).admitted);  // reserve prompt + max output
  EXPECT_FALSE(l.tryAdmit(300, 1).admitted);
  l.refundTokens(600, 0);  // only 200 were used
  EXPECT_TRUE(l.tryAdmit(800, 2).admitted);
  EXPECT_FALSE(l.tryAdmit(1, 3).admitted);
}

TEST(RateLimiter, RefundAfterItsBucketLeftTheWindowIsIgnored) {
  const std::vector<LimitSpec> specs{tokensPer(1000, kMinute)};
  KeyLimiter l(specs);
  ASSERT_TRUE(l.tryAdmit(1000, 0).admitted);
  ASSERT_TRUE(l.tryAdmit(1000, kMinute).admitted);  // the first left the window
  l.refundTokens(1000, 0);                          // belongs to a bucket that no longer counts
  EXPECT_FALSE(l.tryAdmit(1, kMinute + 1).admitted);
}

TEST(RateLimiter, TimeGoingBackwardsIsNoTimePassing) {
  const std::vector<LimitSpec> specs{requestsPer(2, kMinute)};
  KeyLimiter l(specs);
  ASSERT_TRUE(l.tryAdmit(1, 10 * kMinute).admitted);
  ASSERT_TRUE(l.tryAdmit(1, 10 * kMinute).admitted);
  const LimitDecision d = l.tryAdmit(1, 3 * kMinute);  // clock stepped back
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.retry_after, kMinute);
  EXPECT_TRUE(l.tryAdmit(1, 11 * kMinute).admitted);
}

TEST(RateLimiter, IdleOnlyOnceEveryWindowIsEmpty) {
  const std::vector<LimitSpec> specs{requestsPer(10, kNsPerSec), requestsPer(100, kMinute)};
  KeyLimiter l(specs);
  ASSERT_TRUE(l.tryAdmit(1, 0).admitted);
  EXPECT_FALSE(l.idle(2 * kNsPerSec));  // the minute window still counts it
  EXPECT_FALSE(l.idle(kMinute - 1));
  EXPECT_TRUE(l.idle(kMinute));  // windows are (t - W, t]: t = 0 has left
}

TEST(RateLimiter, LongGapClearsEverything) {
  const std::vector<LimitSpec> specs{requestsPer(3, kMinute)};
  KeyLimiter l(specs);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(l.tryAdmit(1, i).admitted);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(l.tryAdmit(1, 1000 * kMinute + i).admitted);
  EXPECT_FALSE(l.tryAdmit(1, 1000 * kMinute + 3).admitted);
}

TEST(RateLimiter, UnderAdmitsAtMostOneBucketAtTheTrailingEdge) {
  // Steady traffic just above the limit: over a long run the admitted rate
  // must reach at least kSubBuckets / (kSubBuckets + 1) of the limit.
  const std::vector<LimitSpec> specs{requestsPer(600, kMinute)};
  KeyLimiter l(specs);
  std::uint64_t admitted = 0;
  const TimeNs step = kMinute / 1200;  // offered: twice the limit
  const TimeNs span = 30 * kMinute;
  for (TimeNs t = 0; t < span; t += step) admitted += l.tryAdmit(1, t).admitted ? 1 : 0;
  const double per_minute = static_cast<double>(admitted) / 30.0;
  EXPECT_LE(per_minute, 600.0);
  EXPECT_GE(per_minute, 600.0 * SlidingWindow::kSubBuckets / (SlidingWindow::kSubBuckets + 1));
}

struct Admitted {
  TimeNs t;
  std::uint64_t tokens;
};

// Brute-force sliding log: the cost admitted in (t - W, t] for every
// admission time t (the window ending at an admission is where a sum peaks).
void checkSlidingLogGuarantee(const std::vector<Admitted>& log, const LimitSpec& spec) {
  std::size_t lo = 0;
  std::uint64_t sum = 0;
  for (std::size_t hi = 0; hi < log.size(); ++hi) {
    sum += spec.unit == LimitUnit::kRequests ? 1 : log[hi].tokens;
    while (log[lo].t <= log[hi].t - spec.window_ns) {
      sum -= spec.unit == LimitUnit::kRequests ? 1 : log[lo].tokens;
      ++lo;
    }
    RC_ASSERT(sum <= spec.amount);
  }
}

// RapidCheck picks the seed (printed on failure); each run is long enough to
// cross many windows regardless of RapidCheck's size parameter.
struct Rng {
  std::mt19937_64 gen;
  std::int64_t operator()(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(gen);
  }
};

RC_GTEST_PROP(RateLimiterProperty, NeverExceedsAnyWindowOfTheSlidingLog, ()) {
  Rng rng{std::mt19937_64(*rc::gen::arbitrary<std::uint64_t>())};
  const auto n_req = static_cast<std::uint64_t>(rng(1, 50));
  const auto n_tok = static_cast<std::uint64_t>(rng(100, 5000));
  const TimeNs windows[] = {kNsPerSec, 7 * kNsPerSec, kMinute, 90 * kNsPerSec + 7};
  const TimeNs window = windows[rng(0, 3)];
  const std::vector<LimitSpec> specs{requestsPer(n_req, window), tokensPer(n_tok, window * 2)};
  KeyLimiter l(specs);
  std::vector<Admitted> log;
  TimeNs t = 0;
  const auto steps = rng(200, 2000);
  for (std::int64_t i = 0; i < steps; ++i) {
    t += rng(0, window / rng(1, 200));
    const auto tokens = static_cast<std::uint64_t>(rng(1, 400));
    const LimitDecision d = l.tryAdmit(tokens, t);
    if (d.admitted) {
      log.push_back({t, tokens});
    } else {
      // Not needlessly strict: the rejection is justified by the log over a
      // window at most one bucket longer than W, for the limit that rejected.
      RC_ASSERT(d.limiting_index >= 0);
      const LimitSpec& s = specs[static_cast<std::size_t>(d.limiting_index)];
      const TimeNs horizon = t - s.window_ns - SlidingWindow::bucketWidth(s.window_ns);
      std::uint64_t sum = s.unit == LimitUnit::kRequests ? 1 : tokens;
      for (const auto& a : log) {
        if (a.t > horizon) sum += s.unit == LimitUnit::kRequests ? 1 : a.tokens;
      }
      RC_ASSERT(sum > s.amount);
    }
  }
  for (const auto& s : specs) checkSlidingLogGuarantee(log, s);
}

RC_GTEST_PROP(RateLimiterProperty, RefundedReservationsStillRespectTheLimit, ()) {
  Rng rng{std::mt19937_64(*rc::gen::arbitrary<std::uint64_t>())};
  const TimeNs window = kMinute;
  const std::vector<LimitSpec> specs{tokensPer(2000, window)};
  KeyLimiter l(specs);
  std::vector<Admitted> net;  // admission time, tokens actually used
  TimeNs t = 0;
  const auto steps = rng(100, 1500);
  for (std::int64_t i = 0; i < steps; ++i) {
    t += rng(0, window / 10);
    const auto reserved = static_cast<std::uint64_t>(rng(1, 800));
    if (!l.tryAdmit(reserved, t).admitted) continue;
    const auto used = static_cast<std::uint64_t>(rng(0, static_cast<std::int64_t>(reserved)));
    l.refundTokens(reserved - used, t);
    net.push_back({t, used});
  }
  checkSlidingLogGuarantee(net, specs[0]);
}

}  // namespace
}  // namespace fairsched::core

// --- fleet-scoped specs --------------------------------------------------------

namespace fairsched::core {
namespace {

// Admits while it has budget; records refunds.
class FakeAccount : public FleetAccount {
 public:
  explicit FakeAccount(std::uint64_t budget) : budget_(budget) {}
  FleetDecision take(std::uint64_t cost, TimeNs) override {
    ++takes;
    if (cost > budget_) return {false, 7 * kNsPerMs};
    budget_ -= cost;
    return {true, 0};
  }
  void refund(std::uint64_t cost, TimeNs taken_at) override {
    refunded += cost;
    last_refund_at = taken_at;
    budget_ += cost;
  }
  std::uint64_t budget() const { return budget_; }
  int takes = 0;
  std::uint64_t refunded = 0;
  TimeNs last_refund_at = -1;

 private:
  std::uint64_t budget_;
};

LimitSpec fleetRequests(std::uint64_t n) {
  return {LimitUnit::kRequests, n, kMinute, LimitScope::kFleet};
}
LimitSpec fleetTokens(std::uint64_t n) {
  return {LimitUnit::kTokens, n, kMinute, LimitScope::kFleet};
}

struct Fleet {
  std::vector<std::unique_ptr<FleetAccount>> accounts;
  std::vector<FakeAccount*> fakes;
  Fleet& add(std::uint64_t budget) {
    auto a = std::make_unique<FakeAccount>(budget);
    fakes.push_back(a.get());
    accounts.push_back(std::move(a));
    return *this;
  }
  Fleet& none() {
    fakes.push_back(nullptr);
    accounts.push_back(nullptr);
    return *this;
  }
};

TEST(RateLimiterFleet, FleetSpecIsCountedByItsAccountNotLocally) {
  const std::vector<LimitSpec> specs{fleetRequests(2)};
  Fleet f;
  f.add(5);
  FakeAccount* acct = f.fakes[0];
  KeyLimiter l(specs, std::move(f.accounts));
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(l.tryAdmit(1, i).admitted) << i;  // the account's 5, not 2
  const LimitDecision d = l.tryAdmit(1, 5);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.retry_after, 7 * kNsPerMs);
  EXPECT_EQ(d.limiting_index, 0);
  EXPECT_EQ(acct->takes, 6);
  EXPECT_TRUE(l.usage(5).empty());
  EXPECT_TRUE(l.idle(5));
}

TEST(RateLimiterFleet, HostLimitRejectsBeforeTheFleetIsAsked) {
  const std::vector<LimitSpec> specs{requestsPer(1, kMinute), fleetRequests(100)};
  Fleet f;
  f.none().add(100);
  FakeAccount* acct = f.fakes[1];
  KeyLimiter l(specs, std::move(f.accounts));
  EXPECT_TRUE(l.tryAdmit(1, 0).admitted);
  EXPECT_FALSE(l.tryAdmit(1, 1).admitted);
  EXPECT_EQ(acct->takes, 1);
  EXPECT_EQ(acct->budget(), 99u);
}

TEST(RateLimiterFleet, FleetRejectionUndoesEarlierFleetTakesAndChargesNothingLocally) {
  const std::vector<LimitSpec> specs{requestsPer(10, kMinute), fleetRequests(100),
                                     fleetTokens(1000)};
  Fleet f;
  f.none().add(100).add(50);
  FakeAccount* requests = f.fakes[1];
  FakeAccount* tokens = f.fakes[2];
  KeyLimiter l(specs, std::move(f.accounts));
  const LimitDecision d = l.tryAdmit(60, 3);  // 60 tokens > 50 left in the token account
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.limiting_index, 2);
  EXPECT_EQ(requests->budget(), 100u);
  EXPECT_EQ(requests->refunded, 1u);
  EXPECT_EQ(requests->last_refund_at, 3);
  EXPECT_EQ(tokens->budget(), 50u);
  ASSERT_EQ(l.usage(3).size(), 1u);
  EXPECT_EQ(l.usage(3)[0].used, 0u);  // the host limit was not charged
}

TEST(RateLimiterFleet, CostLargerThanAFleetLimitCanNeverBeAdmitted) {
  const std::vector<LimitSpec> specs{fleetTokens(100)};
  Fleet f;
  f.add(1'000'000);
  FakeAccount* acct = f.fakes[0];
  KeyLimiter l(specs, std::move(f.accounts));
  const LimitDecision d = l.tryAdmit(101, 0);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.retry_after, kNever);
  EXPECT_EQ(acct->takes, 0);
}

TEST(RateLimiterFleet, TokenRefundsReachTheFleetAccount) {
  const std::vector<LimitSpec> specs{fleetRequests(100), fleetTokens(1000)};
  Fleet f;
  f.add(100).add(1000);
  FakeAccount* requests = f.fakes[0];
  FakeAccount* tokens = f.fakes[1];
  KeyLimiter l(specs, std::move(f.accounts));
  ASSERT_TRUE(l.tryAdmit(300, 42).admitted);
  l.refundTokens(120, 42);
  EXPECT_EQ(tokens->refunded, 120u);
  EXPECT_EQ(tokens->last_refund_at, 42);
  EXPECT_EQ(requests->refunded, 0u);  // request limits get no token refunds
}

TEST(RateLimiterFleet, FleetSpecWithoutAnAccountIsCountedLocally) {
  const std::vector<LimitSpec> specs{fleetRequests(2)};
  KeyLimiter l(specs);
  EXPECT_TRUE(l.tryAdmit(1, 0).admitted);
  EXPECT_TRUE(l.tryAdmit(1, 1).admitted);
  EXPECT_FALSE(l.tryAdmit(1, 2).admitted);
}

}  // namespace
}  // namespace fairsched::core
