// Preemption's decisions on their own (daemon/core/preemption.hpp): the rate's
// token bucket, and the victim choice — tiers first, then the fair share of
// the waiting tier's sequences, the service margin, minimum progress, and the
// cheapest-to-resume, then newest, request of the chosen tenant. The scheduler's use of them is
// tested in scheduler_worker_test.cpp (SchedulerPreemption).
#include "daemon/core/preemption.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace fairsched::core {
namespace {

constexpr TimeNs kSec = kNsPerSec;
constexpr std::uint32_t kMinProgress = 16;
constexpr PreemptionRules kRules{kMinProgress, /*margin=*/256};
// for_share: also for a waiting tenant that runs something below its share.
constexpr PreemptionRules kShareRules{kMinProgress, /*margin=*/256, /*for_share=*/true};

// Tenant 0 of tier 0 waits, with nothing running and served 0 per weight.
PreemptionWaiter waiterOf(std::uint32_t tenant = 0, TierId tier = 0,
                          double backlogged_weight = 1.0) {
  return PreemptionWaiter{tenant, tier, /*weight=*/1.0, /*service=*/0, backlogged_weight};
}

// A request of `tenant` running with enough progress, served `service` per weight.
PreemptionCandidate running(std::uint64_t handle, std::uint32_t tenant, TierId tier,
                            double service = 1000, TimeNs dispatched_at = 0,
                            std::uint64_t seq = 0) {
  return {.handle = handle,
          .tenant = tenant,
          .tier = tier,
          .service = service,
          .progress = kMinProgress,
          .dispatched_at = dispatched_at,
          .seq = seq};
}

std::uint64_t choose(const PreemptionWaiter& w, const std::vector<PreemptionCandidate>& rs,
                     const PreemptionRules& rules = kRules) {
  VictimChooser chooser;
  return chooser.choose(w, rs, rules);
}

TEST(PreemptionBudget, FirstCallOfARunningClockFindsItFull) {
  PreemptionBudget b;
  EXPECT_TRUE(b.allows(2.0, 100 * kSec));
  EXPECT_DOUBLE_EQ(b.tokens(), 2.0);  // one second deep
}

TEST(PreemptionBudget, HoldsAtLeastOneEvenBelowOnePerSecond) {
  PreemptionBudget b;
  EXPECT_TRUE(b.allows(0.5, 100 * kSec));
  EXPECT_DOUBLE_EQ(b.tokens(), 1.0);
  b.spend();
  EXPECT_FALSE(b.allows(0.5, 101 * kSec));  // half a preemption back
  EXPECT_TRUE(b.allows(0.5, 102 * kSec));
}

TEST(PreemptionBudget, RefillsAtTheRateAndSpendingCanGoBelowZero) {
  PreemptionBudget b;
  ASSERT_TRUE(b.allows(4.0, 10 * kSec));
  for (int i = 0; i < 5; ++i) b.spend();  // preempt() does not ask first
  EXPECT_DOUBLE_EQ(b.tokens(), -1.0);
  EXPECT_FALSE(b.allows(4.0, 10 * kSec + kSec / 4));  // back to 0
  EXPECT_FALSE(b.allows(4.0, 10 * kSec + kSec * 3 / 8));
  EXPECT_TRUE(b.allows(4.0, 10 * kSec + kSec / 2));  // 1 token a further 1/4 s on
}

TEST(VictimChooser, NothingRunningChoosesNothing) {
  EXPECT_EQ(choose(waiterOf(), {}), 0u);
}

TEST(VictimChooser, TheLowestTierGoesFirstAndAHigherTierNever) {
  const PreemptionWaiter w = waiterOf(/*tenant=*/0, /*tier=*/1);
  // Tier 0 is above the waiter: never, however served.
  EXPECT_EQ(choose(w, {running(1, 5, 0, 1e9)}), 0u);
  // Tier 3 before tier 2, whatever the service and the order.
  EXPECT_EQ(choose(w, {running(1, 5, 0, 1e9), running(2, 6, 2, 1e6), running(3, 7, 3, 1),
                       running(4, 8, 2, 1e7)}),
            3u);
}

TEST(VictimChooser, WithinALowerTierTheMostServedTenantThenTheNewestRequest) {
  const PreemptionWaiter w = waiterOf(0, 0);
  EXPECT_EQ(choose(w, {running(1, 5, 1, 100), running(2, 6, 1, 300), running(3, 7, 1, 200)}), 2u);
  // Tenant 6 is served most; of its requests the last dispatched, then the last arrived.
  EXPECT_EQ(choose(w, {running(1, 6, 1, 300, 5 * kSec, 1), running(2, 6, 1, 300, 9 * kSec, 2),
                       running(3, 6, 1, 300, 9 * kSec, 7), running(4, 6, 1, 300, 7 * kSec, 9)}),
            3u);
}

// A preemption costs the engine the victim's prompt and what it generated,
// again: of the chosen tenant's requests the cheapest to resume goes,
// newest among equals; the tenant chosen is still the most served.
TEST(VictimChooser, OfTheChosenTenantTheCheapestToResumeGoesFirst) {
  const PreemptionWaiter w = waiterOf(0, 0);
  std::vector<PreemptionCandidate> rs = {
      running(1, 6, 1, 300, 5 * kSec, 1), running(2, 6, 1, 300, 9 * kSec, 2),
      running(3, 6, 1, 300, 7 * kSec, 3), running(4, 7, 1, 200, 9 * kSec, 4)};
  rs[0].recompute_tokens = 900;
  rs[1].recompute_tokens = 1500;  // the newest, but the dearest
  rs[2].recompute_tokens = 350;
  rs[3].recompute_tokens = 10;  // cheaper still, but of a less served tenant
  EXPECT_EQ(choose(w, rs), 3u);
  rs[0].recompute_tokens = 350;  // equal cost: the newer of the two
  EXPECT_EQ(choose(w, rs), 3u);
  rs[0].recompute_tokens = 349;
  EXPECT_EQ(choose(w, rs), 1u);
}

TEST(VictimChooser, TooLittleProgressIsNeverChosen) {
  const PreemptionWaiter w = waiterOf(0, 0);
  PreemptionCandidate fresh = running(1, 5, 1, 1e9);
  fresh.progress = kMinProgress - 1;
  EXPECT_EQ(choose(w, {fresh}), 0u);
  EXPECT_EQ(choose(w, {fresh, running(2, 6, 1, 1)}), 2u);
}

TEST(VictimChooser, InTheWaitersTierATenantAboveItsShareGivesOneUp) {
  // Tier 0 runs 4 requests, all of tenant 1 (also backlogged): weights 1 + 1,
  // so each tenant's share is 2 sequences. Tenant 0 runs none.
  const PreemptionWaiter w = waiterOf(0, 0, /*backlogged_weight=*/2.0);
  std::vector<PreemptionCandidate> rs;
  for (std::uint64_t h = 1; h <= 4; ++h) {
    rs.push_back(running(h, 1, 0, 1000, static_cast<TimeNs>(h) * kSec));
    rs.back().tenant_queued = true;
  }
  EXPECT_EQ(choose(w, rs), 4u);  // the newest
}

TEST(VictimChooser, InTheWaitersTierNotWithoutTheServiceMargin) {
  const PreemptionWaiter w = waiterOf(0, 0, 2.0);
  std::vector<PreemptionCandidate> rs;
  for (std::uint64_t h = 1; h <= 4; ++h) {
    rs.push_back(running(h, 1, 0, /*service=*/255));  // waiter 0 + margin 256
    rs.back().tenant_queued = true;
  }
  EXPECT_EQ(choose(w, rs), 0u);
  for (auto& r : rs) r.service = 256;  // exactly the margin is enough
  EXPECT_EQ(choose(w, rs), 1u);        // all alike: the first stays the choice
}

TEST(VictimChooser, InTheWaitersTierNotWhenTheVictimWouldKeepFewerThanTheWaiter) {
  // Tenant 0 runs 1, tenant 1 runs 2: 2 < 1 + 2, so no trade.
  const PreemptionWaiter w = waiterOf(0, 0, /*backlogged_weight=*/1.0);
  std::vector<PreemptionCandidate> rs = {running(1, 0, 0, 0), running(2, 1, 0), running(3, 1, 0)};
  rs[0].tenant_queued = true;  // the waiter's tenant: its weight is in backlogged_weight
  EXPECT_EQ(choose(w, rs, kShareRules), 0u);
  rs.push_back(running(4, 1, 0));             // now 3 >= 1 + 2, and 3 > its share of 4 × 1/2
  EXPECT_EQ(choose(w, rs, kShareRules), 2u);  // dispatched together: the first of equal age
  EXPECT_EQ(choose(w, rs), 0u) << "tenant 0 runs one already: by default not preempted for";
}

TEST(VictimChooser, InTheWaitersTierNotWhenTheWaiterHasItsShare) {
  // Tenant 0 (weight 1) runs 2 of 6 with tenant 1 (weight 1, idle) running 4:
  // shares 3 and 3; tenant 0 is below its share, tenant 1 above it.
  const PreemptionWaiter w = waiterOf(0, 0, /*backlogged_weight=*/1.0);
  std::vector<PreemptionCandidate> rs = {running(1, 0, 0, 0), running(2, 0, 0, 0)};
  rs[0].tenant_queued = rs[1].tenant_queued = true;
  for (std::uint64_t h = 3; h <= 6; ++h) rs.push_back(running(h, 1, 0));
  EXPECT_EQ(choose(w, rs, kShareRules), 3u);
  EXPECT_EQ(choose(w, rs), 0u) << "it runs two: by default it waits for a sequence to free";
  // With weight 1 against tenant 1's 2, tenant 0's share is 2: it has it.
  for (auto& r : rs) r.weight = r.tenant == 1 ? 2.0 : 1.0;
  EXPECT_EQ(choose(w, rs, kShareRules), 0u);
}

TEST(VictimChooser, ARunningTenantWithNothingQueuedCountsItsWeight) {
  // Tenant 1, weight 3, runs 3 and has nothing queued: weights 1 + 3, its
  // share 3 × 3/4 = 2.25 < 3, the waiter's 0.75 > 0.
  const PreemptionWaiter w = waiterOf(0, 0, /*backlogged_weight=*/1.0);
  std::vector<PreemptionCandidate> rs;
  for (std::uint64_t h = 1; h <= 3; ++h) {
    rs.push_back(running(h, 1, 0, 1000, static_cast<TimeNs>(10 - h) * kSec));
    rs.back().weight = 3.0;
  }
  EXPECT_EQ(choose(w, rs), 1u);  // dispatched last
  // Were its weight already in backlogged_weight (it has requests queued and
  // the caller passed 1 + 3) the shares would be the same ...
  for (auto& r : rs) r.tenant_queued = true;
  EXPECT_EQ(choose(waiterOf(0, 0, 4.0), rs), 1u);
  // ... but not counted at all, its share would be 9: nothing to give.
  EXPECT_EQ(choose(waiterOf(0, 0, 1.0), rs), 0u);
}

TEST(VictimChooser, NeverTheWaitersOwnTenant) {
  const PreemptionWaiter w = waiterOf(3, 0, 1.0);
  std::vector<PreemptionCandidate> rs;
  for (std::uint64_t h = 1; h <= 4; ++h) rs.push_back(running(h, 3, 0, 1e9));
  EXPECT_EQ(choose(w, rs), 0u);
}

TEST(VictimChooser, ALowerTierVictimBeatsAnInTierOne) {
  const PreemptionWaiter w = waiterOf(0, 0, 2.0);
  std::vector<PreemptionCandidate> rs;
  for (std::uint64_t h = 1; h <= 4; ++h) {
    rs.push_back(running(h, 1, 0, 1e9));
    rs.back().tenant_queued = true;
  }
  rs.push_back(running(9, 2, 1, 1));
  EXPECT_EQ(choose(w, rs), 9u);
}

TEST(VictimChooser, ScratchStateDoesNotLeakBetweenCalls) {
  VictimChooser chooser;
  const PreemptionWaiter w = waiterOf(0, 0, 2.0);
  std::vector<PreemptionCandidate> rs;
  for (std::uint64_t h = 1; h <= 4; ++h) {
    rs.push_back(running(h, 1, 0));
    rs.back().tenant_queued = true;
  }
  EXPECT_EQ(chooser.choose(w, rs, kRules), 1u);
  // Tenant 1 running one request is no victim (1 < 0 + 2); counted on top of
  // the last call's four it would be.
  const std::vector<PreemptionCandidate> one(rs.begin(), rs.begin() + 1);
  EXPECT_EQ(chooser.choose(w, one, kRules), 0u);
}

}  // namespace
}  // namespace fairsched::core
