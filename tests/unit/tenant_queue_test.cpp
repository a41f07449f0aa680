#include "daemon/core/tenant_queue.hpp"

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

QueueEntry entry(std::int32_t priority, TimeNs deadline, std::uint64_t seq) {
  return QueueEntry{QueueKey{priority, deadline, seq}, /*handle=*/seq + 1000};
}

TEST(QueueKey, HigherPriorityIsBefore) {
  EXPECT_TRUE((QueueKey{1, kNever, 9}).before(QueueKey{0, 0, 0}));
  EXPECT_FALSE((QueueKey{0, 0, 0}).before(QueueKey{1, kNever, 9}));
}

TEST(QueueKey, EarlierDeadlineIsBeforeAtEqualPriority) {
  EXPECT_TRUE((QueueKey{0, 5, 9}).before(QueueKey{0, 6, 0}));
  EXPECT_TRUE((QueueKey{0, 5, 9}).before(QueueKey{0, kNever, 0}));
  EXPECT_FALSE((QueueKey{0, kNever, 0}).before(QueueKey{0, 5, 9}));
}

TEST(QueueKey, LowerSeqIsBeforeAtEqualPriorityAndDeadline) {
  EXPECT_TRUE((QueueKey{0, 5, 1}).before(QueueKey{0, 5, 2}));
  EXPECT_FALSE((QueueKey{0, 5, 2}).before(QueueKey{0, 5, 1}));
}

TEST(QueueKey, IsIrreflexive) {
  const QueueKey k{3, 7, 11};
  EXPECT_FALSE(k.before(k));
}

TEST(TenantQueue, NewQueueIsEmpty) {
  TenantQueue q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
}

TEST(TenantQueue, SingleEntryIsTopAndPopEmpties) {
  TenantQueue q;
  q.push(QueueEntry{QueueKey{2, 100, 7}, 42});
  ASSERT_FALSE(q.empty());
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.top().key.priority, 2);
  EXPECT_EQ(q.top().key.deadline, 100);
  EXPECT_EQ(q.top().key.seq, 7u);
  EXPECT_EQ(q.top().handle, 42u);
  q.pop();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
}

TEST(TenantQueue, PopsHigherPriorityFirst) {
  TenantQueue q;
  q.push(entry(0, kNever, 1));
  q.push(entry(5, kNever, 2));
  q.push(entry(-3, kNever, 3));
  q.push(entry(2, kNever, 4));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{2, 4, 1, 3}));
}

TEST(TenantQueue, PopsEarlierDeadlineFirstAtEqualPriority) {
  TenantQueue q;
  q.push(entry(0, kNever, 1));
  q.push(entry(0, 300, 2));
  q.push(entry(0, 100, 3));
  q.push(entry(0, 200, 4));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{3, 4, 2, 1}));
}

TEST(TenantQueue, PriorityOutranksDeadline) {
  TenantQueue q;
  q.push(entry(0, 1, 1));       // urgent but low priority
  q.push(entry(1, kNever, 2));  // no deadline but higher priority
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{2, 1}));
}

TEST(TenantQueue, PopsEarlierArrivalFirstOnEqualPriorityAndDeadline) {
  TenantQueue q;
  q.push(entry(1, 50, 30));
  q.push(entry(1, 50, 10));
  q.push(entry(1, 50, 20));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{10, 20, 30}));
}

TEST(TenantQueue, InOrderArrivalsComeOutFifo) {
  constexpr std::uint64_t kMany = 10'000;
  TenantQueue q;
  for (std::uint64_t s = 0; s < kMany; ++s) q.push(entry(0, kNever, s));
  EXPECT_EQ(q.size(), kMany);
  const auto out = drainSeqs(q);
  ASSERT_EQ(out.size(), kMany);
  for (std::uint64_t s = 0; s < kMany; ++s) ASSERT_EQ(out[s], s) << "at " << s;
}

TEST(TenantQueue, ReverseOrderArrivalsComeOutSorted) {
  // Every push after the first sorts before the tail: all take the heap path.
  constexpr std::int32_t kMany = 1'000;
  TenantQueue q;
  for (std::int32_t p = 0; p < kMany; ++p) q.push(entry(p, kNever, static_cast<std::uint64_t>(p)));
  std::int32_t expect = kMany - 1;
  while (!q.empty()) {
    ASSERT_EQ(q.top().key.priority, expect);
    q.pop();
    --expect;
  }
  EXPECT_EQ(expect, -1);
}

TEST(TenantQueue, UrgentArrivalOvertakesFifoBacklog) {
  // Fast-path entries first, then one that sorts before all of them (heap path).
  TenantQueue q;
  for (std::uint64_t s = 1; s <= 5; ++s) q.push(entry(0, kNever, s));
  q.push(entry(9, kNever, 6));
  EXPECT_EQ(q.top().key.seq, 6u);
  EXPECT_EQ(q.size(), 6u);
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{6, 1, 2, 3, 4, 5}));
}

TEST(TenantQueue, HeapAndFifoFrontsInterleave) {
  TenantQueue q;
  // FIFO path: (0,100,1) (0,300,3) (0,500,5)
  q.push(entry(0, 100, 1));
  q.push(entry(0, 300, 3));
  q.push(entry(0, 500, 5));
  // Heap path (each sorts before the FIFO tail): deadlines between the FIFO ones.
  q.push(entry(0, 200, 2));
  q.push(entry(0, 400, 4));
  q.push(entry(0, 50, 0));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(TenantQueue, PushAfterPartialPopKeepsOrder) {
  TenantQueue q;
  q.push(entry(0, kNever, 1));
  q.push(entry(0, kNever, 2));
  q.push(entry(0, kNever, 3));
  q.pop();                      // 1
  q.push(entry(1, kNever, 4));  // heap path, goes first
  q.push(entry(0, kNever, 5));  // FIFO path again
  q.push(entry(0, 10, 6));      // heap path, deadline beats the no-deadline entries
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{4, 6, 2, 3, 5}));
}

TEST(TenantQueue, FastPathRestartsAfterQueueDrains) {
  // Once both paths are drained, the next entry starts a new FIFO; later
  // entries are routed against that new tail, not a stale one.
  TenantQueue q;
  q.push(entry(0, kNever, 10));  // FIFO
  q.push(entry(5, kNever, 1));   // heap
  q.push(entry(5, kNever, 2));   // heap (sorts before FIFO tail)
  q.pop();                       // seq 1 (heap)
  q.pop();                       // seq 2 (heap)
  q.pop();                       // seq 10 (FIFO) -> both empty
  EXPECT_TRUE(q.empty());
  q.push(entry(3, kNever, 20));  // FIFO
  q.push(entry(4, kNever, 11));  // heap
  q.push(entry(2, kNever, 21));  // FIFO (after tail 20)
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{11, 20, 21}));
}

TEST(TenantQueue, ExtremeKeysOrderCorrectly) {
  constexpr auto kMinPrio = std::numeric_limits<std::int32_t>::min();
  constexpr auto kMaxPrio = std::numeric_limits<std::int32_t>::max();
  constexpr auto kMaxSeq = std::numeric_limits<std::uint64_t>::max();
  constexpr auto kMinTime = std::numeric_limits<TimeNs>::min();
  TenantQueue q;
  q.push(entry(kMinPrio, kMinTime, 1));
  q.push(entry(kMaxPrio, kNever, kMaxSeq));
  q.push(entry(kMaxPrio, kNever, 0));
  q.push(entry(kMaxPrio, kMinTime, 5));
  q.push(entry(0, -1, 3));
  q.push(entry(0, 0, 2));
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{5, 0, kMaxSeq, 3, 2, 1}));
}

TEST(TenantQueue, HandleTravelsWithItsKey) {
  TenantQueue q;
  q.push(QueueEntry{QueueKey{0, kNever, 1}, 111});
  q.push(QueueEntry{QueueKey{1, kNever, 2}, 222});
  q.push(QueueEntry{QueueKey{0, 5, 3}, 333});
  EXPECT_EQ(q.top().handle, 222u);
  q.pop();
  EXPECT_EQ(q.top().handle, 333u);
  q.pop();
  EXPECT_EQ(q.top().handle, 111u);
}

TEST(TenantQueue, ManyFillDrainCyclesWrapTheFifo) {
  // Repeated fill/drain so the deque's storage and the heap are reused many
  // times; the sequence runs up to the top of the uint64 range.
  TenantQueue q;
  std::uint64_t seq = std::numeric_limits<std::uint64_t>::max() - 100'000;
  for (int cycle = 0; cycle < 200; ++cycle) {
    const std::uint64_t first = seq;
    for (int i = 0; i < 300; ++i) q.push(entry(0, kNever, seq++));
    q.push(entry(1, kNever, seq++));  // one heap entry per cycle
    ASSERT_EQ(q.size(), 301u);
    ASSERT_EQ(q.top().key.priority, 1);
    q.pop();
    ASSERT_TRUE(testing::popsInSeqOrder(q, first, 300)) << "cycle " << cycle;
    ASSERT_TRUE(q.empty());
  }
}

TEST(TenantQueue, SteadyStateHalfFullQueueKeepsFifoOrder) {
  // Push two, pop one, for a long time: the FIFO front and back move forward
  // together (wrap-around of the deque's blocks).
  TenantQueue q;
  std::uint64_t pushed = 0;
  std::uint64_t popped = 0;
  for (int i = 0; i < 20'000; ++i) {
    q.push(entry(0, kNever, pushed++));
    if (i % 2 == 1) {
      ASSERT_EQ(q.top().key.seq, popped);
      q.pop();
      ++popped;
    }
  }
  EXPECT_EQ(q.size(), pushed - popped);
  while (!q.empty()) {
    ASSERT_EQ(q.top().key.seq, popped++);
    q.pop();
  }
  EXPECT_EQ(popped, pushed);
}

TEST(TenantQueue, GrowingPastTheInlineRingWhileWrappedKeepsOrder) {
  TenantQueue q;
  std::uint64_t seq = 1;
  q.push(entry(0, kNever, seq++));
  q.pop();  // the inline ring's head is now off slot 0
  for (int i = 0; i < 2 * static_cast<int>(TenantQueue::kInline) + 3; ++i) {
    q.push(entry(0, kNever, seq++));
  }
  for (std::uint64_t want = 2; want < seq; ++want) {
    ASSERT_FALSE(q.empty());
    EXPECT_EQ(q.top().key.seq, want);
    q.pop();
  }
  EXPECT_TRUE(q.empty());
}

TEST(TenantQueue, CopyIsIndependentOfTheOriginal) {
  for (int n : {1, static_cast<int>(TenantQueue::kInline) + 3}) {
    TenantQueue q;
    for (int i = 0; i < n; ++i) q.push(entry(0, kNever, static_cast<std::uint64_t>(i + 1)));
    q.push(entry(9, kNever, 100));  // into the heap
    TenantQueue copy(q);
    q.clear();
    ASSERT_EQ(copy.size(), static_cast<std::size_t>(n + 1));
    EXPECT_EQ(copy.top().key.seq, 100u);
    copy.pop();
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(copy.top().key.seq, static_cast<std::uint64_t>(i + 1));
      copy.pop();
    }
    EXPECT_TRUE(copy.empty());
  }
}

TEST(TenantQueue, ClearEmptiesFifoAndHeap) {
  TenantQueue q;
  q.push(entry(0, kNever, 1));  // FIFO
  q.push(entry(0, kNever, 2));  // FIFO
  q.push(entry(3, kNever, 3));  // heap
  q.push(entry(1, kNever, 4));  // heap
  ASSERT_EQ(q.size(), 4u);
  q.clear();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
}

TEST(TenantQueue, ClearOnEmptyQueueIsHarmless) {
  TenantQueue q;
  q.clear();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
}

TEST(TenantQueue, QueueIsUsableAfterClear) {
  TenantQueue q;
  q.push(entry(0, kNever, 100));
  q.push(entry(9, kNever, 101));
  q.clear();
  // An entry that sorts before the cleared FIFO tail must not be misrouted.
  q.push(entry(0, kNever, 1));
  q.push(entry(0, kNever, 2));
  q.push(entry(2, kNever, 3));
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(drainSeqs(q), (std::vector<std::uint64_t>{3, 1, 2}));
}

// ---- Property: pop order equals std::sort by QueueKey::before -------------

struct Op {
  bool pop = false;
  std::int32_t priority = 0;
  TimeNs deadline = kNever;
};

rc::Gen<Op> genOp() {
  // Small ranges so ties on priority and deadline are common (exercising the
  // seq tiebreak and the FIFO fast path); pops are about a third of the ops.
  return rc::gen::map(
      rc::gen::tuple(rc::gen::inRange(0, 3), rc::gen::inRange(-2, 3), rc::gen::inRange(0, 5)),
      [](const std::tuple<int, int, int>& t) {
        Op op;
        op.pop = std::get<0>(t) == 0;
        op.priority = std::get<1>(t);
        const int d = std::get<2>(t);
        op.deadline = d >= 3 ? kNever : static_cast<TimeNs>(d) * kNsPerMs;
        return op;
      });
}

// Runs `ops` against a TenantQueue and a reference sorted with
// QueueKey::before (testing::checkAgainstSortedReference). `scramble` makes
// seqs unique but not increasing.
void checkAgainstSortedReference(const std::vector<Op>& ops, bool scramble) {
  TenantQueue q;
  testing::checkAgainstSortedReference(q, ops, [scramble](const Op& op, std::uint64_t n) {
    // Multiplying by an odd constant is a bijection on uint64: unique seqs.
    const std::uint64_t seq = scramble ? n * 0x9E3779B97F4A7C15ull : n;
    return QueueEntry{QueueKey{op.priority, op.deadline, seq}, n + 1};
  });
}

RC_GTEST_PROP(TenantQueueProperty, PopsInSortedOrderOfEntriesPushedSoFar, ()) {
  const auto ops = *rc::gen::container<std::vector<Op>>(genOp());
  checkAgainstSortedReference(ops, /*scramble=*/false);
}

RC_GTEST_PROP(TenantQueueProperty, PopsInSortedOrderWithNonMonotonicSeqs, ()) {
  const auto ops = *rc::gen::container<std::vector<Op>>(genOp());
  checkAgainstSortedReference(ops, /*scramble=*/true);
}

RC_GTEST_PROP(TenantQueueProperty, ClearThenReuseMatchesFreshQueue, ()) {
  const auto before = *rc::gen::container<std::vector<Op>>(genOp());
  const auto after = *rc::gen::container<std::vector<Op>>(genOp());
  TenantQueue q;
  std::uint64_t seq = 0;
  for (const Op& op : before) {
    if (op.pop) {
      if (!q.empty()) q.pop();
    } else {
      q.push(QueueEntry{QueueKey{op.priority, op.deadline, seq++}, 0});
    }
  }
  q.clear();
  RC_ASSERT(q.empty());
  TenantQueue fresh;
  for (const Op& op : after) {
    if (op.pop) {
      RC_ASSERT(q.empty() == fresh.empty());
      if (!fresh.empty()) {
        RC_ASSERT(q.top().key.seq == fresh.top().key.seq);
        q.pop();
        fresh.pop();
      }
    } else {
      const QueueEntry e{QueueKey{op.priority, op.deadline, seq++}, 0};
      q.push(e);
      fresh.push(e);
    }
    RC_ASSERT(q.size() == fresh.size());
  }
}

}  // namespace
}  // namespace fairsched::core
