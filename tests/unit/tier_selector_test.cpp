#include "daemon/core/tier_selector.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace fairsched::core {
namespace {

using Choice = TierSelector::Choice;
constexpr TierId kNoTier = TierSelector::kNoTier;

template <std::size_t N>
using Backlog = std::array<bool, N>;

// The first backlogged tier: what strict priority alone would pick.
template <std::size_t N>
TierId strictTier(const Backlog<N>& b) {
  for (std::size_t t = 0; t < N; ++t) {
    if (b[t]) return static_cast<TierId>(t);
  }
  return kNoTier;
}

// select() then charge(): one dispatch of `cost`.
template <std::size_t N>
Choice dispatch(TierSelector& sel, const Backlog<N>& b, std::int64_t cost) {
  const Choice c = sel.select(std::span<const bool>(b));
  if (c.tier != kNoTier) sel.charge(c, cost, std::span<const bool>(b));
  return c;
}

TEST(TierSelector, NoTiersSelectsNothing) {
  TierSelector sel;
  EXPECT_EQ(sel.tiers(), 0u);
  const Choice c = sel.select({});
  EXPECT_EQ(c.tier, kNoTier);
  EXPECT_FALSE(c.via_floor);
}

TEST(TierSelector, NothingBackloggedSelectsNoTier) {
  const Backlog<3> none{false, false, false};
  TierSelector strict({0.0, 0.0, 0.0});
  EXPECT_EQ(strict.select(none).tier, kNoTier);
  TierSelector floored({0.0, 0.2, 0.3});
  EXPECT_EQ(floored.select(none).tier, kNoTier);
  EXPECT_FALSE(floored.select(none).via_floor);
}

TEST(TierSelector, SingleTierIsChosenWhenBacklogged) {
  TierSelector sel({0.0});
  EXPECT_EQ(sel.select(Backlog<1>{true}).tier, 0);
  EXPECT_EQ(sel.select(Backlog<1>{false}).tier, kNoTier);
}

TEST(TierSelector, StrictPriorityPicksFirstBackloggedTier) {
  TierSelector sel({0.0, 0.0, 0.0});
  EXPECT_EQ(sel.select(Backlog<3>{true, true, true}).tier, 0);
  EXPECT_EQ(sel.select(Backlog<3>{false, true, true}).tier, 1);
  EXPECT_EQ(sel.select(Backlog<3>{false, false, true}).tier, 2);
  EXPECT_EQ(sel.select(Backlog<3>{true, false, true}).tier, 0);
  EXPECT_FALSE(sel.select(Backlog<3>{false, false, true}).via_floor);
}

TEST(TierSelector, LowerTierNeverChosenWhileHigherIsBackloggedWithoutMinShare) {
  TierSelector sel({0.0, 0.0, 0.0});
  const Backlog<3> all{true, true, true};
  const Backlog<3> lower{false, true, true};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10'000; ++i) {
    const std::int64_t cost = static_cast<std::int64_t>(rng() % 4096) + 1;
    const Choice c = dispatch(sel, all, cost);
    ASSERT_EQ(c.tier, 0) << "dispatch " << i;
    ASSERT_FALSE(c.via_floor);
  }
  for (int i = 0; i < 1'000; ++i) {
    const Choice c = dispatch(sel, lower, 100);
    ASSERT_EQ(c.tier, 1) << "dispatch " << i;
  }
  EXPECT_EQ(sel.credit(1), 0.0);
  EXPECT_EQ(sel.credit(2), 0.0);
}

TEST(TierSelector, MinShareOnTopTierChangesNothing) {
  TierSelector sel({0.5, 0.0});
  const Backlog<2> both{true, true};
  for (int i = 0; i < 1'000; ++i) {
    const Choice c = dispatch(sel, both, 10);
    ASSERT_EQ(c.tier, 0);
    ASSERT_FALSE(c.via_floor);
  }
  EXPECT_EQ(sel.credit(0), 0.0);  // served in strict order: nothing banked
}

// The floor, measured: tier 1 has min_share 0.2 and both tiers are backlogged
// throughout. Costs are random; seeds are fixed and printed.
TEST(TierSelector, MinShareKeepsBackloggedLowerTierAtItsShare) {
  constexpr double kShare = 0.2;
  constexpr std::int64_t kMaxCost = 4096;
  constexpr int kDispatches = 10'000;
  for (const std::uint64_t seed : {0x5eedULL, 1ULL, 20240611ULL, 0xdeadbeefULL}) {
    SCOPED_TRACE("seed=" + std::to_string(seed));
    RecordProperty("seed_" + std::to_string(seed), std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> costOf(1, kMaxCost);
    TierSelector sel({0.0, kShare});
    const Backlog<2> both{true, true};
    double total = 0;
    double lower = 0;
    std::int64_t biggest = 0;
    for (int i = 0; i < kDispatches; ++i) {
      const std::int64_t cost = costOf(rng);
      const Choice c = dispatch(sel, both, cost);
      ASSERT_NE(c.tier, kNoTier);
      // via_floor exactly when the choice is not the strict one.
      ASSERT_EQ(c.via_floor, c.tier != strictTier(both)) << "dispatch " << i;
      total += static_cast<double>(cost);
      if (c.tier == 1) lower += static_cast<double>(cost);
      biggest = std::max(biggest, cost);
    }
    const double share = lower / total;
    std::cout << "seed " << seed << ": tier 1 share " << share << " over " << kDispatches
              << " dispatches, total cost " << total << "\n";
    EXPECT_GE(share, kShare - static_cast<double>(biggest) / total);
    EXPECT_LE(share, kShare + 0.01);
  }
}

TEST(TierSelector, FloorArrivesSmoothlyNotAsBurst) {
  // Exact arithmetic: share 1/4 and cost 4 add exactly 1 credit per dispatch.
  TierSelector sel({0.0, 0.25});
  const Backlog<2> both{true, true};
  std::string pattern;
  for (int i = 0; i < 16; ++i) pattern += dispatch(sel, both, 4).tier == 0 ? '0' : '1';
  // First the strict tier; then tier 1 once its credit turns positive, and
  // every fourth dispatch after that.
  EXPECT_EQ(pattern, "0100010001000100");
}

TEST(TierSelector, ViaFloorOnlyWhenChosenAheadOfStrictOrder) {
  TierSelector sel({0.0, 0.25});
  const Backlog<2> both{true, true};
  const Backlog<2> lowerOnly{false, true};

  Choice c = sel.select(both);  // no credit yet: strict order
  EXPECT_EQ(c.tier, 0);
  EXPECT_FALSE(c.via_floor);
  sel.charge(c, 4, both);  // tier 1 earns 1
  ASSERT_GT(sel.credit(1), 0.0);

  c = sel.select(both);
  EXPECT_EQ(c.tier, 1);
  EXPECT_TRUE(c.via_floor);

  // Same positive credit, but tier 1 is also the strict choice: not via floor.
  c = sel.select(lowerOnly);
  EXPECT_EQ(c.tier, 1);
  EXPECT_FALSE(c.via_floor);
}

TEST(TierSelector, FloorTierWithCreditIsNotChosenWhenNotBacklogged) {
  TierSelector sel({0.0, 0.25});
  const Backlog<2> both{true, true};
  dispatch(sel, both, 4);
  ASSERT_GT(sel.credit(1), 0.0);
  const Choice c = sel.select(Backlog<2>{true, false});
  EXPECT_EQ(c.tier, 0);
  EXPECT_FALSE(c.via_floor);
}

TEST(TierSelector, CreditAccruesOnlyWhileBacklogged) {
  TierSelector sel({0.0, 0.25, 0.25});
  const Backlog<3> twoIdle{true, true, false};
  for (int i = 0; i < 100; ++i) {
    const Choice c = dispatch(sel, twoIdle, 8);
    ASSERT_NE(c.tier, 2);
  }
  EXPECT_EQ(sel.credit(2), 0.0);
}

TEST(TierSelector, IdleTierLosesCredit) {
  TierSelector sel({0.0, 0.25});
  const Backlog<2> both{true, true};
  const Backlog<2> upperOnly{true, false};
  dispatch(sel, both, 400);  // tier 0 served; tier 1 earns 100
  ASSERT_DOUBLE_EQ(sel.credit(1), 100.0);
  dispatch(sel, upperOnly, 4);  // tier 1 idle at this dispatch
  EXPECT_EQ(sel.credit(1), 0.0);
  const Choice c = sel.select(both);
  EXPECT_EQ(c.tier, 0);
  EXPECT_FALSE(c.via_floor);
}

TEST(TierSelector, IdleTierLosesDebtToo) {
  // Debt from floor service is not carried across an idle period either.
  TierSelector sel({0.0, 0.25});
  const Backlog<2> both{true, true};
  dispatch(sel, both, 4);                         // tier 0; credit 1
  ASSERT_TRUE(dispatch(sel, both, 4).via_floor);  // tier 1; credit 1 + 1 - 4 = -2
  ASSERT_LT(sel.credit(1), 0.0);
  dispatch(sel, Backlog<2>{true, false}, 4);
  EXPECT_EQ(sel.credit(1), 0.0);
}

TEST(TierSelector, NoBurstAfterIdlePeriod) {
  TierSelector sel({0.0, 0.25});
  const Backlog<2> both{true, true};
  const Backlog<2> upperOnly{true, false};
  for (int i = 0; i < 1'000; ++i) dispatch(sel, both, 4);
  // Tier 1 is idle while tier 0 dispatches a lot: nothing may accrue.
  for (int i = 0; i < 10'000; ++i) ASSERT_EQ(dispatch(sel, upperOnly, 4).tier, 0);
  EXPECT_EQ(sel.credit(1), 0.0);
  // Back to both: tier 1 gets its quarter, one dispatch at a time.
  std::string pattern;
  for (int i = 0; i < 12; ++i) pattern += dispatch(sel, both, 4).tier == 0 ? '0' : '1';
  EXPECT_EQ(pattern, "010001000100");
}

TEST(TierSelector, NoBurstAfterIdlePeriodWithRandomCosts) {
  constexpr std::uint64_t kSeed = 0xfa17;
  SCOPED_TRACE("seed=" + std::to_string(kSeed));
  RecordProperty("seed", std::to_string(kSeed));
  constexpr double kShare = 0.2;
  constexpr std::int64_t kMaxCost = 1000;
  std::mt19937_64 rng(kSeed);
  std::uniform_int_distribution<std::int64_t> costOf(1, kMaxCost);
  TierSelector sel({0.0, kShare});
  const Backlog<2> both{true, true};
  const Backlog<2> upperOnly{true, false};
  for (int i = 0; i < 1'000; ++i) dispatch(sel, both, costOf(rng));
  for (int i = 0; i < 5'000; ++i) dispatch(sel, upperOnly, costOf(rng));
  // Every prefix after the return: tier 1's cost stays within its share plus
  // one request. A banked credit would show up as a run of tier 1 at the start.
  double total = 0;
  double lower = 0;
  for (int i = 0; i < 2'000; ++i) {
    const std::int64_t cost = costOf(rng);
    const Choice c = dispatch(sel, both, cost);
    total += static_cast<double>(cost);
    if (c.tier == 1) lower += static_cast<double>(cost);
    ASSERT_LE(lower, kShare * total + static_cast<double>(kMaxCost)) << "dispatch " << i;
  }
}

TEST(TierSelector, StrictOrderServiceOfFloorTierLeavesNoCredit) {
  // Higher tier idle: the floor tier is served in strict order and must not
  // bank the min_share of its own dispatches.
  constexpr std::uint64_t kSeed = 99;
  SCOPED_TRACE("seed=" + std::to_string(kSeed));
  std::mt19937_64 rng(kSeed);
  TierSelector sel({0.0, 0.2});
  const Backlog<2> lowerOnly{false, true};
  for (int i = 0; i < 1'000; ++i) {
    const Choice c = dispatch(sel, lowerOnly, static_cast<std::int64_t>(rng() % 1000) + 1);
    ASSERT_EQ(c.tier, 1);
    ASSERT_FALSE(c.via_floor);
    ASSERT_EQ(sel.credit(1), 0.0) << "dispatch " << i;
  }
  // The higher tier returns: strict order first, no burst of tier 1.
  const Choice c = sel.select(Backlog<2>{true, true});
  EXPECT_EQ(c.tier, 0);
  EXPECT_FALSE(c.via_floor);
}

TEST(TierSelector, StrictOrderServiceUsesUpEarnedCredit) {
  TierSelector sel({0.0, 0.25});
  dispatch(sel, Backlog<2>{true, true}, 4);  // tier 1 earns 1
  ASSERT_DOUBLE_EQ(sel.credit(1), 1.0);
  const Choice c = dispatch(sel, Backlog<2>{false, true}, 4);  // strict: 1 + 1 - 4 < 0
  EXPECT_EQ(c.tier, 1);
  EXPECT_FALSE(c.via_floor);
  EXPECT_EQ(sel.credit(1), 0.0);
  EXPECT_EQ(sel.select(Backlog<2>{true, true}).tier, 0);
}

TEST(TierSelector, FloorTierOvertakesAllHigherTiers) {
  // Tier 2 has the floor; tiers 0 and 1 are backlogged. Tier 2 still gets its
  // share, tier 1 (no floor) gets nothing while tier 0 is backlogged.
  TierSelector sel({0.0, 0.0, 0.25});
  const Backlog<3> all{true, true, true};
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 4'000; ++i) {
    const Choice c = dispatch(sel, all, 4);
    ASSERT_EQ(c.via_floor, c.tier == 2);
    ++counts[c.tier];
  }
  EXPECT_EQ(counts[1], 0);
  EXPECT_EQ(counts[2], 1'000);
  EXPECT_EQ(counts[0], 3'000);
}

TEST(TierSelector, FloorTierFurthestBehindGoesFirst) {
  TierSelector sel({0.0, 0.125, 0.5});
  const Backlog<3> all{true, true, true};
  dispatch(sel, all, 8);  // tier 0; credits: tier 1 = 1, tier 2 = 4
  ASSERT_DOUBLE_EQ(sel.credit(1), 1.0);
  ASSERT_DOUBLE_EQ(sel.credit(2), 4.0);
  const Choice c = sel.select(all);
  EXPECT_EQ(c.tier, 2);
  EXPECT_TRUE(c.via_floor);
}

TEST(TierSelector, TwoFloorTiersEachGetTheirShare) {
  constexpr std::uint64_t kSeed = 4242;
  SCOPED_TRACE("seed=" + std::to_string(kSeed));
  RecordProperty("seed", std::to_string(kSeed));
  constexpr std::int64_t kMaxCost = 2048;
  std::mt19937_64 rng(kSeed);
  std::uniform_int_distribution<std::int64_t> costOf(1, kMaxCost);
  TierSelector sel({0.0, 0.2, 0.3});
  const Backlog<3> all{true, true, true};
  double total = 0;
  double served[3] = {0, 0, 0};
  for (int i = 0; i < 10'000; ++i) {
    const std::int64_t cost = costOf(rng);
    const Choice c = dispatch(sel, all, cost);
    total += static_cast<double>(cost);
    served[c.tier] += static_cast<double>(cost);
  }
  const double slack = 2.0 * static_cast<double>(kMaxCost) / total;
  EXPECT_GE(served[1] / total, 0.2 - slack);
  EXPECT_GE(served[2] / total, 0.3 - slack);
  EXPECT_LE(served[1] / total, 0.2 + 0.01);
  EXPECT_LE(served[2] / total, 0.3 + 0.01);
}

TEST(TierSelector, ChargeWithoutFloorsKeepsCreditsZero) {
  TierSelector sel({0.0, 0.0});
  sel.charge(Choice{0, false}, 1'000, Backlog<2>{true, true});
  sel.charge(Choice{1, false}, 1'000, Backlog<2>{false, true});
  EXPECT_EQ(sel.credit(0), 0.0);
  EXPECT_EQ(sel.credit(1), 0.0);
}

TEST(TierSelector, CreditEarnedBeforeAnIdlePeriodWithoutDispatchesIsLost) {
  // "Credit is not banked: a tier that goes idle loses it." Here tier 1 goes
  // idle (its request is withdrawn) while nothing else is queued either, so
  // no dispatch happens during the idle period; select() is told tier 1 is
  // idle. When both tiers are backlogged again, tier 1 must not be served
  // ahead of strict order by credit it earned before going idle.
  TierSelector sel({0.0, 0.25});
  const Backlog<2> both{true, true};
  dispatch(sel, both, 400);  // tier 0 served; tier 1 earns 100
  ASSERT_GT(sel.credit(1), 0.0);
  // Everything idle (tier 1's request was cancelled before it was chosen).
  EXPECT_EQ(sel.select(Backlog<2>{false, false}).tier, kNoTier);
  // Both come back later.
  const Choice c = sel.select(both);
  EXPECT_EQ(c.tier, 0) << "tier 1 kept credit " << sel.credit(1) << " across its idle period";
  EXPECT_FALSE(c.via_floor);
}

}  // namespace
}  // namespace fairsched::core
