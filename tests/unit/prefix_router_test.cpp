// Routing by prefix within a bounded load (daemon/core/prefix_router.hpp):
// the holder of the most leading blocks wins while its load stays within
// (1 + slack) of the mean; otherwise, and under "roomiest", the roomiest;
// a property test against a brute-force statement of the rule.
#include "daemon/core/prefix_router.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/support/seeded_rng.hpp"

namespace fairsched::core {
namespace {

std::uint64_t totalLoad(const std::vector<RouteCandidate>& c) {
  std::uint64_t t = 0;
  for (const auto& x : c) t += x.load;
  return t;
}

std::size_t choose(Routing r, const std::vector<RouteCandidate>& c, double slack = 0.25) {
  return chooseWorker(r, c, totalLoad(c), c.size(), slack);
}

TEST(PrefixRouter, TheHolderOfMostBlocksWinsWithinTheBound) {
  std::vector<RouteCandidate> c = {{4, 4, 0}, {4, 4, 30}, {3, 5, 10}};
  EXPECT_EQ(choose(Routing::kPrefix, c), 1u);
  EXPECT_EQ(choose(Routing::kRoomiest, c), 2u) << "roomiest ignores the cache";
}

TEST(PrefixRouter, AffinityStopsAtTheBoundAndTheRoomiestTakesIt) {
  // Mean after the request (13 + 1) / 3 = 4.67; bound ceil(1.25 × 4.67) = 6.
  std::vector<RouteCandidate> c = {{6, 2, 50}, {4, 4, 0}, {3, 5, 0}};
  EXPECT_EQ(affinityBound(13, 3, 0.25), 6u);
  EXPECT_EQ(choose(Routing::kPrefix, c), 2u) << "taking it would make worker 0 run 7";
  c[0].load = 5;  // 12 + 1 over 3: bound ceil(5.42) = 6, and 5 + 1 is within
  EXPECT_EQ(choose(Routing::kPrefix, c), 0u);
}

TEST(PrefixRouter, TiesGoToTheRoomiestAndNoCacheMeansRoomiest) {
  std::vector<RouteCandidate> c = {{2, 6, 8}, {1, 7, 8}, {0, 8, 0}};
  EXPECT_EQ(choose(Routing::kPrefix, c), 1u);
  for (auto& x : c) x.matched = 0;
  EXPECT_EQ(choose(Routing::kPrefix, c), 2u);
}

TEST(PrefixRouter, OnlyWorkersWithRoomThatFitAreCandidates) {
  std::vector<RouteCandidate> c = {{8, 0, 40}, {1, 7, 20, false}, {2, 6, 0}};
  EXPECT_EQ(choose(Routing::kPrefix, c), 2u);
  c[2].free = 0;
  EXPECT_EQ(choose(Routing::kPrefix, c), kNoRoute);
  EXPECT_EQ(chooseWorker(Routing::kPrefix, {}, 0, 0, 0.25), kNoRoute);
}

// The rule stated by brute force, on random endpoints.
TEST(PrefixRouter, AgreesWithTheRuleOnRandomEndpoints) {
  const std::uint64_t seed = testing::testSeed();
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20000; ++round) {
    std::vector<RouteCandidate> c(1 + rng() % 6);
    for (auto& x : c) {
      x.load = static_cast<std::uint32_t>(rng() % 10);
      x.free = static_cast<std::uint32_t>(rng() % 3);
      x.matched = rng() % 3 == 0 ? 0 : rng() % 5;
      x.fits = rng() % 8 != 0;
    }
    const double slack = static_cast<double>(rng() % 5) * 0.25;
    const std::size_t got = choose(Routing::kPrefix, c, slack);
    const std::uint64_t total = totalLoad(c);
    const double mean = static_cast<double>(total + 1) / static_cast<double>(c.size());
    auto ok = [&](const RouteCandidate& x) { return x.free > 0 && x.fits; };
    auto within = [&](const RouteCandidate& x) {
      return static_cast<double>(x.load + 1) <= (1.0 + slack) * mean + 1.0 - 1e-9 &&
             x.load + 1 <= affinityBound(total, c.size(), slack);
    };
    std::size_t best_matched = 0;
    for (const auto& x : c) {
      if (ok(x) && within(x)) best_matched = std::max(best_matched, x.matched);
    }
    if (got == kNoRoute) {
      for (const auto& x : c) ASSERT_FALSE(ok(x)) << "seed " << seed;
      continue;
    }
    ASSERT_TRUE(ok(c[got])) << "seed " << seed;
    if (best_matched > 0) {
      EXPECT_EQ(c[got].matched, best_matched) << "seed " << seed << " round " << round;
      EXPECT_TRUE(within(c[got])) << "affinity never passes the bound; seed " << seed;
    } else {
      for (const auto& x : c) {
        if (ok(x)) {
          EXPECT_GE(c[got].free, x.free) << "roomiest; seed " << seed;
        }
      }
    }
  }
}

}  // namespace
}  // namespace fairsched::core
