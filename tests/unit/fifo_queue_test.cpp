#include "daemon/core/fifo_queue.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "tests/support/queue_reference.hpp"

namespace fairsched::core {
namespace {

using testing::drainSeqs;

// Handles encode the tenant in the high 32 bits so tests can tell who was served.
std::uint64_t handleOf(std::uint32_t tenant, std::uint64_t seq) {
  return (static_cast<std::uint64_t>(tenant) << 32) | (seq & 0xffff'ffffu);
}
std::uint32_t tenantOf(std::uint64_t handle) {
  return static_cast<std::uint32_t>(handle >> 32);
}

QueueEntry entry(std::uint32_t tenant, std::int32_t priority, TimeNs deadline, std::uint64_t seq) {
  return QueueEntry{QueueKey{priority, deadline, seq}, handleOf(tenant, seq)};
}

TEST(FifoQueue, NewQueueIsEmpty) {
  FifoQueue q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
}

TEST(FifoQueue, SingleEntryIsTopAndPopEmpties) {
  FifoQueue q;
  q.push(QueueEntry{QueueKey{-1, 77, 3}, 99});
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q.top().key.priority, -1);
  EXPECT_EQ(q.top().key.deadline, 77);
  EXPECT_EQ(q.top().key.seq, 3u);
  EXPECT_EQ(q.top().handle, 99u);
  q.pop();
  EXPECT_TRUE(q.empty());
}

TEST(FifoQueue, PopsHigherPriorityFirstAcrossTenants) {
  FifoQueue q;
  q.push(entry(/*tenant=*/1, 0, kNever, 1));
  q.push(entry(2, 3, kNever, 2));
  q.push(entry(3, -1, kNever, 3));
  q.push(entry(1, 1, kNever, 4));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{2, 4, 1, 3}));
}

TEST(FifoQueue, PopsEarlierDeadlineFirstAcrossTenantsAtEqualPriority) {
  FifoQueue q;
  q.push(entry(1, 0, kNever, 1));
  q.push(entry(2, 0, 500, 2));
  q.push(entry(3, 0, 100, 3));
  q.push(entry(1, 0, 300, 4));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{3, 4, 2, 1}));
}

TEST(FifoQueue, PriorityOutranksDeadlineAcrossTenants) {
  FifoQueue q;
  q.push(entry(1, 0, 1, 1));
  q.push(entry(2, 1, kNever, 2));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{2, 1}));
}

TEST(FifoQueue, FloodingTenantIsServedInArrivalOrderAheadOfLaterTenant) {
  // The naive baseline: no fairness, a tenant that arrived first with 1,000
  // requests is served entirely before a tenant that arrived after it.
  constexpr std::uint64_t kFlood = 1'000;
  FifoQueue q;
  std::uint64_t seq = 0;
  for (std::uint64_t i = 0; i < kFlood; ++i) q.push(entry(1, 0, kNever, seq++));
  q.push(entry(2, 0, kNever, seq++));
  for (std::uint64_t i = 0; i < kFlood; ++i) {
    ASSERT_EQ(tenantOf(q.top().handle), 1u) << "at " << i;
    ASSERT_EQ(q.top().key.seq, i);
    q.pop();
  }
  ASSERT_FALSE(q.empty());
  EXPECT_EQ(tenantOf(q.top().handle), 2u);
  EXPECT_EQ(q.top().key.seq, kFlood);
}

TEST(FifoQueue, HigherPriorityTenantOvertakesFlood) {
  FifoQueue q;
  std::uint64_t seq = 0;
  for (int i = 0; i < 100; ++i) q.push(entry(1, 0, kNever, seq++));
  q.push(entry(2, 1, kNever, seq++));
  EXPECT_EQ(tenantOf(q.top().handle), 2u);
  EXPECT_EQ(q.size(), 101u);
}

TEST(FifoQueue, EqualKeysComeOutByArrivalAcrossTenants) {
  FifoQueue q;
  q.push(entry(3, 2, 40, 30));
  q.push(entry(1, 2, 40, 10));
  q.push(entry(2, 2, 40, 20));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{10, 20, 30}));
}

TEST(FifoQueue, ManyInterleavedTenantsComeOutInArrivalOrder) {
  constexpr std::uint64_t kMany = 10'000;
  FifoQueue q;
  for (std::uint64_t s = 0; s < kMany; ++s)
    q.push(entry(static_cast<std::uint32_t>(s % 7), 0, kNever, s));
  const auto out = drainSeqs(q);
  ASSERT_EQ(out.size(), kMany);
  for (std::uint64_t s = 0; s < kMany; ++s) ASSERT_EQ(out[s], s);
}

TEST(FifoQueue, ReverseArrivalsComeOutSorted) {
  constexpr std::int32_t kMany = 1'000;
  FifoQueue q;
  for (std::int32_t p = 0; p < kMany; ++p) {
    q.push(entry(static_cast<std::uint32_t>(p % 3), p, kNever, static_cast<std::uint64_t>(p)));
  }
  for (std::int32_t p = kMany - 1; p >= 0; --p) {
    ASSERT_EQ(q.top().key.priority, p);
    q.pop();
  }
  EXPECT_TRUE(q.empty());
}

TEST(FifoQueue, ExtremeKeysOrderCorrectly) {
  constexpr auto kMinPrio = std::numeric_limits<std::int32_t>::min();
  constexpr auto kMaxPrio = std::numeric_limits<std::int32_t>::max();
  constexpr auto kMaxSeq = std::numeric_limits<std::uint64_t>::max();
  constexpr auto kMinTime = std::numeric_limits<TimeNs>::min();
  FifoQueue q;
  q.push(entry(1, kMinPrio, kMinTime, 1));
  q.push(entry(2, kMaxPrio, kNever, kMaxSeq));
  q.push(entry(3, kMaxPrio, kNever, 0));
  q.push(entry(4, kMaxPrio, kMinTime, 5));
  q.push(entry(5, 0, -1, 3));
  q.push(entry(6, 0, 0, 2));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{5, 0, kMaxSeq, 3, 2, 1}));
}

TEST(FifoQueue, ManyFillDrainCycles) {
  FifoQueue q;
  std::uint64_t seq = std::numeric_limits<std::uint64_t>::max() - 100'000;
  for (int cycle = 0; cycle < 100; ++cycle) {
    const std::uint64_t first = seq;
    for (int i = 0; i < 500; ++i)
      q.push(entry(static_cast<std::uint32_t>(i % 5), 0, kNever, seq++));
    ASSERT_EQ(q.size(), 500u);
    ASSERT_TRUE(testing::popsInSeqOrder(q, first, 500)) << "cycle " << cycle;
    ASSERT_TRUE(q.empty());
  }
}

TEST(FifoQueue, ClearEmptiesTheQueue) {
  FifoQueue q;
  for (std::uint64_t s = 0; s < 10; ++s)
    q.push(entry(1, static_cast<std::int32_t>(s % 3), kNever, s));
  q.clear();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
}

TEST(FifoQueue, QueueIsUsableAfterClear) {
  FifoQueue q;
  q.push(entry(1, 9, kNever, 100));
  q.clear();
  q.push(entry(2, 0, kNever, 1));
  q.push(entry(3, 1, kNever, 2));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{2, 1}));
}

// ---- Property: pop order equals std::sort by QueueKey::before -------------

struct Op {
  bool pop = false;
  std::uint32_t tenant = 0;
  std::int32_t priority = 0;
  TimeNs deadline = kNever;
};

rc::Gen<Op> genOp() {
  return rc::gen::map(rc::gen::tuple(rc::gen::inRange(0, 3), rc::gen::inRange(0, 4),
                                     rc::gen::inRange(-2, 3), rc::gen::inRange(0, 5)),
                      [](const std::tuple<int, int, int, int>& t) {
                        Op op;
                        op.pop = std::get<0>(t) == 0;
                        op.tenant = static_cast<std::uint32_t>(std::get<1>(t));
                        op.priority = std::get<2>(t);
                        const int d = std::get<3>(t);
                        op.deadline = d >= 3 ? kNever : static_cast<TimeNs>(d) * kNsPerMs;
                        return op;
                      });
}

RC_GTEST_PROP(FifoQueueProperty, PopsInSortedOrderOfEntriesPushedSoFar, ()) {
  const auto ops = *rc::gen::container<std::vector<Op>>(genOp());
  FifoQueue q;
  testing::checkAgainstSortedReference(q, ops, [](const Op& op, std::uint64_t seq) {
    return entry(op.tenant, op.priority, op.deadline, seq);
  });
}

}  // namespace
}  // namespace fairsched::core
