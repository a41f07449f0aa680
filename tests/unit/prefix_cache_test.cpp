// Prefix identity and what a worker holds of it: block hash chains
// (include/fairsched/prefix_hash.hpp) and the LRU of blocks
// (daemon/core/prefix_cache.hpp), against a brute-force model on random
// operations (seed printed, FAIRSCHED_SEED replays).
#include "daemon/core/prefix_cache.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <list>
#include <random>
#include <vector>

#include "fairsched/prefix_hash.hpp"
#include "tests/support/seeded_rng.hpp"

namespace fairsched::core {
namespace {

std::vector<std::uint32_t> tokens(std::size_t n, std::uint32_t salt) {
  std::vector<std::uint32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint32_t>(i * 7919 + salt);
  return t;
}

TEST(PrefixHash, OnlyWholeBlocksEachCoveringThePrefixUpToIt) {
  EXPECT_TRUE(prefixBlockHashes(tokens(15, 0)).empty());
  EXPECT_EQ(prefixBlockHashes(tokens(16, 0)).size(), 1u);
  EXPECT_EQ(prefixBlockHashes(tokens(47, 0)).size(), 2u);
  EXPECT_EQ(prefixBlockHashes(tokens(4000, 0), 16, 100).size(), 100u) << "bounded";
  // Same leading blocks, same leading hashes; a change in block k changes
  // hash k and every one after it, never one before.
  std::vector<std::uint32_t> a = tokens(160, 3), b = a;
  b[5 * 16 + 7] ^= 1;
  const auto ha = prefixBlockHashes(a), hb = prefixBlockHashes(b);
  ASSERT_EQ(ha.size(), 10u);
  for (std::size_t k = 0; k < 5; ++k) EXPECT_EQ(ha[k], hb[k]) << k;
  for (std::size_t k = 5; k < 10; ++k) EXPECT_NE(ha[k], hb[k]) << k;
  // The same block after a different prefix hashes differently.
  std::vector<std::uint32_t> c = a;
  c[0] ^= 1;
  EXPECT_NE(prefixBlockHashes(c)[9], ha[9]);
  // A hash names the prefix up to a token boundary, whatever the block
  // size: the 32-token chain is every other hash of the 16-token one.
  const auto h32 = prefixBlockHashes(a, 32);
  ASSERT_EQ(h32.size(), 5u);
  for (std::size_t k = 0; k < 5; ++k) EXPECT_EQ(h32[k], ha[2 * k + 1]) << k;
  // The span form writes what fits and says how many.
  std::uint64_t out[3];
  EXPECT_EQ(prefixBlockHashes(a, 16, out), 3u);
  EXPECT_EQ(out[2], ha[2]);
}

TEST(BlockLru, MatchedCountsLeadingBlocksOnly) {
  BlockLru lru(100);
  const auto chain = prefixBlockHashes(tokens(16 * 8, 1));
  EXPECT_EQ(lru.matched(chain), 0u);
  lru.insert(std::span(chain).first(5));
  EXPECT_EQ(lru.matched(chain), 5u);
  lru.erase(chain[2]);
  EXPECT_EQ(lru.matched(chain), 2u) << "a hole ends the match";
  lru.clear();
  EXPECT_EQ(lru.matched(chain), 0u);
  EXPECT_EQ(lru.size(), 0u);
}

TEST(BlockLru, EvictsTheLeastRecentAndAChainsTailBeforeItsHead) {
  BlockLru lru(6);
  const auto a = prefixBlockHashes(tokens(16 * 4, 1));
  const auto b = prefixBlockHashes(tokens(16 * 4, 2));
  lru.insert(a);
  lru.insert(b);  // 8 blocks into 6: a's last two go
  EXPECT_EQ(lru.size(), 6u);
  EXPECT_EQ(lru.matched(a), 2u);
  EXPECT_EQ(lru.matched(b), 4u);
  EXPECT_EQ(lru.touch(a), 2u);  // a's head is now the most recent
  lru.insert(prefixBlockHashes(tokens(16 * 2, 9)));
  EXPECT_EQ(lru.matched(a), 2u) << "touched, so kept";
  EXPECT_EQ(lru.matched(b), 2u) << "b's tail went first";
  lru.setCapacity(1);
  EXPECT_EQ(lru.size(), 1u);
  // What an insert evicts is named, least recent first (an engine reports
  // it); a chain longer than the cache keeps its leading blocks only.
  std::vector<std::uint64_t> evicted;
  BlockLru two(2);
  two.insert(a, &evicted);
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(two.matched(a), 2u);
  two.insert(b, &evicted);
  EXPECT_EQ(evicted, (std::vector<std::uint64_t>{a[1], a[0]}));
  EXPECT_EQ(two.matched(b), 2u);
  BlockLru none(0);
  none.insert(a);
  EXPECT_EQ(none.matched(a), 0u) << "no capacity, nothing held";
}

// A list-based LRU with the same rules, and random operations on both.
TEST(BlockLru, AgreesWithABruteForceModel) {
  const std::uint64_t seed = testing::testSeed();
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 50; ++round) {
    const std::size_t cap = 1 + rng() % 40;
    BlockLru lru(cap);
    std::list<std::uint64_t> model;  // front: most recent
    auto modelTouch = [&](std::uint64_t h) {
      model.remove(h);
      model.push_front(h);
    };
    auto modelMatched = [&](const std::vector<std::uint64_t>& c) {
      std::size_t n = 0;
      while (n < c.size() && std::find(model.begin(), model.end(), c[n]) != model.end()) ++n;
      return n;
    };
    for (int op = 0; op < 400; ++op) {
      std::vector<std::uint64_t> chain(rng() % 12);
      for (std::size_t i = 0; i < chain.size(); ++i) chain[i] = (rng() % 8) * 100 + i;  // overlaps
      switch (rng() % 4) {
        case 0: {
          lru.insert(chain);
          const std::size_t keep = std::min(chain.size(), cap);
          for (std::size_t i = keep; i-- > 0;) modelTouch(chain[i]);
          while (model.size() > cap) model.pop_back();
          break;
        }
        case 1: {
          const std::size_t n = modelMatched(chain);
          EXPECT_EQ(lru.touch(chain), n);
          for (std::size_t i = n; i-- > 0;) modelTouch(chain[i]);
          break;
        }
        case 2:
          if (!chain.empty()) {
            lru.erase(chain[0]);
            model.remove(chain[0]);
          }
          break;
        default:
          EXPECT_EQ(lru.matched(chain), modelMatched(chain));
      }
      ASSERT_EQ(lru.size(), model.size()) << "seed " << seed << " round " << round;
    }
  }
}

}  // namespace
}  // namespace fairsched::core
