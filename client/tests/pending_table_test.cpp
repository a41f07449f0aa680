// The client's table of outstanding requests (client/src/pending_table.hpp):
// each entry comes out exactly once, through erase() or takeGeneration(),
// whether it sits in the slab or in the overflow map, and under races
// between completions and a connection loss.
#include "pending_table.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace fairsched::client_detail {
namespace {

Pending pending(std::uint64_t tag, std::uint64_t generation, std::uint32_t tenant = 3,
                bool awaited = false) {
  return Pending{tag, generation, awaited, 0, tenant};
}

TEST(PendingTable, AnEntryComesOutOnceWithItsFields) {
  PendingTable t;
  t.insert(7, pending(70, 1, 5, true));
  EXPECT_EQ(t.size(), 1u);
  const auto found = t.find(7);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->tag, 70u);
  EXPECT_EQ(t.size(), 1u);  // find leaves it in place
  const auto p = t.erase(7);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tag, 70u);
  EXPECT_EQ(p->generation, 1u);
  EXPECT_EQ(p->tenant, 5u);
  EXPECT_TRUE(p->awaited);
  EXPECT_FALSE(t.erase(7));
  EXPECT_FALSE(t.find(7));
  EXPECT_EQ(t.size(), 0u);
}

TEST(PendingTable, AnEntryKeepsItsLaneSoACancelFollowsTheRequest) {
  PendingTable t;
  t.insert(9, Pending{90, 2, false, 255, 0xffffffffU});
  t.insert(10, Pending{100, 2, true, 7, 1});
  const auto found = t.find(9);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->lane, 255u);
  EXPECT_EQ(found->tenant, 0xffffffffU);
  EXPECT_FALSE(found->awaited);
  const auto p = t.erase(10);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->lane, 7u);
  EXPECT_TRUE(p->awaited);
}

TEST(PendingTable, AnIdWhoseEntryIsHeldGoesToTheOverflowAndComesBack) {
  PendingTable t;
  const RequestId old_id = 5, new_id = old_id + PendingTable::kSlots;  // the same entry
  t.insert(old_id, pending(1, 1));
  t.insert(new_id, pending(2, 1));
  EXPECT_EQ(t.size(), 2u);
  ASSERT_TRUE(t.find(new_id));
  EXPECT_EQ(t.find(new_id)->tag, 2u);
  EXPECT_EQ(t.erase(new_id)->tag, 2u);
  EXPECT_FALSE(t.erase(new_id));
  EXPECT_EQ(t.erase(old_id)->tag, 1u);
  EXPECT_EQ(t.size(), 0u);
}

TEST(PendingTable, TakeGenerationTakesThatGenerationOnlyInIdOrder) {
  PendingTable t;
  for (RequestId id = 1; id <= 20; ++id) t.insert(id, pending(id * 10, id % 2 + 1));
  t.insert(3 + PendingTable::kSlots, pending(99, 2));  // overflow, generation 2
  const auto taken = t.takeGeneration(2);              // odd ids, and the overflow one
  ASSERT_EQ(taken.size(), 11u);
  for (std::size_t i = 0; i + 1 < taken.size(); ++i) {
    EXPECT_LT(taken[i].first, taken[i + 1].first);
    EXPECT_EQ(taken[i].first % 2, 1u);
    EXPECT_EQ(taken[i].second.tag, taken[i].first * 10);
  }
  EXPECT_EQ(taken.back().first, 3 + PendingTable::kSlots);
  EXPECT_EQ(t.size(), 10u);
  EXPECT_FALSE(t.erase(3));
  EXPECT_TRUE(t.erase(4));
}

// Producers insert, a completer erases what they published, and a loss
// handler takes generation 1 at the same time: every id comes out exactly
// once, by one of them, with its own tag.
TEST(PendingTable, CompletionsAndALossRacingNeverDeliverTwiceOrLose) {
  constexpr int kProducers = 3;
  constexpr RequestId kPerProducer = 20'000;  // > kSlots: ids wrap the slab
  PendingTable t;
  std::vector<std::atomic<int>> seen(kProducers * kPerProducer + 1);
  std::atomic<RequestId> next{1};
  std::atomic<bool> producing{true};
  // Ids a producer has inserted, for the completer (a ring stands in for the daemon).
  std::vector<std::atomic<RequestId>> published(1 << 12);
  std::atomic<std::uint64_t> head{0};

  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&] {
      for (RequestId n = 0; n < kPerProducer; ++n) {
        const RequestId id = next.fetch_add(1);
        t.insert(id, pending(id * 3, 1));
        published[head.fetch_add(1) % published.size()].store(id);
      }
    });
  }
  auto take = [&](RequestId id, const Pending& p) {
    EXPECT_EQ(p.tag, id * 3);
    seen[id].fetch_add(1);
  };
  std::thread completer([&] {
    std::uint64_t tail = 0;
    while (producing.load() || tail < head.load()) {
      if (tail >= head.load()) continue;
      const RequestId id = published[tail++ % published.size()].exchange(0);
      if (id == 0) continue;  // overwritten before we got there: the loss handler takes it
      if (auto p = t.erase(id)) take(id, *p);
    }
  });
  std::thread loss([&] {
    while (producing.load()) {
      for (auto& [id, p] : t.takeGeneration(1)) take(id, p);
    }
  });
  for (auto& th : producers) th.join();
  producing.store(false);
  completer.join();
  loss.join();
  for (auto& [id, p] : t.takeGeneration(1)) take(id, p);
  for (RequestId id = 1; id < seen.size(); ++id) ASSERT_EQ(seen[id].load(), 1) << "id " << id;
  EXPECT_EQ(t.size(), 0u);
}

}  // namespace
}  // namespace fairsched::client_detail
