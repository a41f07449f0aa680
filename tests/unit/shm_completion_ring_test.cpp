// The completion ring: order, full and empty boundaries, 64-bit wrap,
// batches, a client read index full of garbage, the wire encoding of
// Status, and one producer thread against one consumer thread.
#include "shm/completion_ring.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "shm/shared_word.hpp"
#include "tests/support/seeded_rng.hpp"

namespace fairsched::shm {
namespace {

using Clock = std::chrono::steady_clock;

using testing::testSeed;

struct RingFixture {
  std::unique_ptr<CompletionControl> control = std::make_unique<CompletionControl>();
  std::unique_ptr<ClientControl> client = std::make_unique<ClientControl>();
  std::vector<CompletionCell> cells;
  CompletionRingMemory mem;

  explicit RingFixture(std::uint32_t capacity, std::uint64_t start = 0) : cells(capacity) {
    mem.control = control.get();
    mem.cells = cells.data();
    mem.capacity = capacity;
    mem.client = client.get();
    initCompletionRing(mem, start);
  }
  void setClientRead(std::uint64_t value) {
    sharedStore(client->completion_read, value, std::memory_order_relaxed);
  }
};

CompletionSlot makeCompletion(std::uint64_t id) {
  CompletionSlot c;
  c.request_id = id;
  c.tag = id ^ 0xabcdef;
  c.status = encodeStatus(id % 2 == 0 ? Status::kOk : Status::kRateLimited);
  c.retry_after_ns = id % 2 == 0 ? 0 : static_cast<std::int64_t>(id) * 1000;
  c.queue_wait_ns = id * 3;
  c.service_ns = id * 5;
  c.output_tokens = static_cast<std::uint32_t>(id % 100);
  c.checksum = id * 0x9e3779b97f4a7c15ULL;
  return c;
}

TEST(CompletionRing, PopsWhatWasPushedInOrder) {
  RingFixture f(8);
  CompletionProducer producer(f.mem, 0);
  CompletionConsumer consumer(f.mem);
  CompletionSlot out;
  EXPECT_FALSE(consumer.tryPop(out));
  for (std::uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(producer.tryPush(makeCompletion(id)));
  EXPECT_EQ(consumer.available(), 5u);
  for (std::uint64_t id = 0; id < 5; ++id) {
    ASSERT_TRUE(consumer.tryPop(out));
    EXPECT_EQ(out, makeCompletion(id));
  }
  EXPECT_FALSE(consumer.tryPop(out));
  EXPECT_FALSE(consumer.broken());
}

TEST(CompletionRing, PushFailsWhenFullAndSucceedsAfterOnePop) {
  RingFixture f(4);
  CompletionProducer producer(f.mem, 0);
  CompletionConsumer consumer(f.mem);
  for (std::uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(producer.tryPush(makeCompletion(id)));
  EXPECT_EQ(producer.freeSlots(), 0u);
  EXPECT_FALSE(producer.tryPush(makeCompletion(4)));
  EXPECT_TRUE(producer.readIndexValid());
  CompletionSlot out;
  ASSERT_TRUE(consumer.tryPop(out));
  EXPECT_TRUE(producer.tryPush(makeCompletion(4)));
  EXPECT_FALSE(producer.tryPush(makeCompletion(5)));
}

TEST(CompletionRing, BatchWritesWhatFitsAndPublishesOnce) {
  RingFixture f(4);
  CompletionProducer producer(f.mem, 0);
  CompletionConsumer consumer(f.mem);
  std::vector<CompletionSlot> batch;
  for (std::uint64_t id = 0; id < 6; ++id) batch.push_back(makeCompletion(id));
  EXPECT_EQ(producer.tryPushBatch(batch), 4u);
  EXPECT_EQ(producer.tryPushBatch(batch), 0u);
  CompletionSlot out;
  ASSERT_TRUE(consumer.tryPop(out));
  ASSERT_TRUE(consumer.tryPop(out));
  EXPECT_EQ(producer.tryPushBatch(std::span(batch).subspan(4)), 2u);
  for (std::uint64_t id = 2; id < 6; ++id) {
    ASSERT_TRUE(consumer.tryPop(out));
    EXPECT_EQ(out.request_id, id);
  }
  EXPECT_EQ(producer.tryPushBatch({}), 0u);
}

TEST(CompletionRing, AnUnpublishedChunkGrowsAndTheClientSeesItOnlyWhole) {
  RingFixture f(8);
  std::vector<std::uint32_t> arena(8 * 4, 0);
  f.mem.reply_arena = arena.data();
  f.mem.reply_tokens_per_slot = 4;
  CompletionProducer p(f.mem, 0);
  CompletionConsumer c(f.mem);
  CompletionSlot chunk;
  chunk.request_id = 7;
  chunk.status = kStreamChunk;
  chunk.output_tokens = 1;
  const std::uint64_t at = p.written();
  p.write(chunk, std::vector<std::uint32_t>{10});
  EXPECT_EQ(p.published(), 0u);
  CompletionSlot out;
  std::vector<std::uint32_t> payload;
  auto words = [](const CompletionSlot& s) { return s.output_tokens; };
  EXPECT_FALSE(c.tryPop(out, payload, words)) << "nothing published yet";
  chunk.output_tokens = 3;
  p.amend(at, chunk, 1, std::vector<std::uint32_t>{11, 12});
  p.publish();
  EXPECT_EQ(p.published(), p.written());
  ASSERT_TRUE(c.tryPop(out, payload, words));
  EXPECT_EQ(out.request_id, 7u);
  EXPECT_EQ(out.output_tokens, 3u);
  EXPECT_EQ(payload, (std::vector<std::uint32_t>{10, 11, 12}));
}

// The daemon holds at most 64 unpublished records: the 65th write publishes
// the first 64 (and only those), so a burst costs the daemon no unbounded
// copy; published() says so, which is what a caller checks before amending.
TEST(CompletionRing, AWriteBeyondSixtyFourHeldRecordsPublishesThem) {
  RingFixture f(256);
  CompletionProducer producer(f.mem, 0);
  CompletionConsumer consumer(f.mem);
  for (std::uint64_t id = 0; id < 64; ++id) producer.write(makeCompletion(id), {});
  EXPECT_EQ(producer.published(), 0u);
  EXPECT_EQ(consumer.available(), 0u);
  producer.write(makeCompletion(64), {});
  EXPECT_EQ(producer.published(), 64u);
  EXPECT_EQ(consumer.available(), 64u);
  producer.publish();
  EXPECT_EQ(consumer.available(), 65u);
  CompletionSlot out;
  for (std::uint64_t id = 0; id < 65; ++id) {
    ASSERT_TRUE(consumer.tryPop(out));
    EXPECT_EQ(out, makeCompletion(id));
  }
}

class CompletionRingWrap : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(CompletionRingWrap, CrossesTheBoundaryWithFullAndEmptyIntact) {
  const std::uint64_t start = GetParam();
  RingFixture f(8, start);
  CompletionProducer producer(f.mem, start);
  CompletionConsumer consumer(f.mem);
  std::uint64_t pushed = 0;
  std::uint64_t popped = 0;
  CompletionSlot out;
  for (int round = 0; round < 6; ++round) {
    while (producer.tryPush(makeCompletion(pushed))) ++pushed;
    EXPECT_EQ(pushed - popped, 8u);
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(consumer.tryPop(out));
      EXPECT_EQ(out.request_id, popped++);
    }
  }
  while (consumer.tryPop(out)) EXPECT_EQ(out.request_id, popped++);
  EXPECT_EQ(popped, pushed);
  EXPECT_EQ(consumer.position(), start + pushed);
  EXPECT_FALSE(consumer.broken());
  EXPECT_TRUE(producer.readIndexValid());
}

INSTANTIATE_TEST_SUITE_P(NearTheTop, CompletionRingWrap,
                         ::testing::Values(std::uint64_t{0}, (std::uint64_t{1} << 32) - 3,
                                           std::numeric_limits<std::uint64_t>::max() - 10));

// The client's read index is client-writable. Out of range — behind the
// write index by more than the capacity, or ahead of it — it gains the
// client nothing: the daemon writes no further than the last valid index
// allowed, and says so.
TEST(CompletionRing, GarbageClientReadIndexIsTreatedAsFull) {
  const std::uint64_t start = std::numeric_limits<std::uint64_t>::max() - 2;
  for (const std::uint64_t offset : {std::uint64_t{1}, std::uint64_t{1000}, -std::uint64_t{5},
                                     -(std::uint64_t{1} << 40), std::uint64_t{1} << 63}) {
    RingFixture f(4, start);
    CompletionProducer producer(f.mem, start);
    for (std::uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(producer.tryPush(makeCompletion(id)));
    const std::uint64_t write = producer.written();  // wrapped past 2^64
    f.setClientRead(write + offset);
    EXPECT_FALSE(producer.tryPush(makeCompletion(4))) << "offset " << offset;
    EXPECT_FALSE(producer.readIndexValid());
    EXPECT_EQ(producer.freeSlots(), 0u);
    EXPECT_EQ(producer.written(), write);
    f.setClientRead(write - 3);  // sane again: one completion read
    EXPECT_EQ(producer.freeSlots(), 1u);
    EXPECT_TRUE(producer.readIndexValid());
    EXPECT_TRUE(producer.tryPush(makeCompletion(4)));
  }
}

// Room that a valid read index already granted stays usable; garbage only
// stops the daemon from going further.
TEST(CompletionRing, GarbageReadIndexKeepsTheRoomAlreadyGranted) {
  RingFixture f(4);
  CompletionProducer producer(f.mem, 0);
  ASSERT_TRUE(producer.tryPush(makeCompletion(0)));
  ASSERT_TRUE(producer.tryPush(makeCompletion(1)));
  f.setClientRead(1000);
  EXPECT_TRUE(producer.tryPush(makeCompletion(2)));
  EXPECT_TRUE(producer.tryPush(makeCompletion(3)));
  EXPECT_FALSE(producer.tryPush(makeCompletion(4)));
  EXPECT_FALSE(producer.readIndexValid());
  EXPECT_EQ(producer.written(), 4u);
}

TEST(CompletionRing, ReadIndexInRangeButBackwardsOnlyShrinksTheRoom) {
  RingFixture f(8);
  CompletionProducer producer(f.mem, 0);
  CompletionConsumer consumer(f.mem);
  for (std::uint64_t id = 0; id < 8; ++id) ASSERT_TRUE(producer.tryPush(makeCompletion(id)));
  CompletionSlot out;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(consumer.tryPop(out));
  f.setClientRead(3);  // the client "un-reads" three completions
  EXPECT_EQ(producer.freeSlots(8), 3u);
  EXPECT_TRUE(producer.readIndexValid());
}

// A cell whose mark is neither its lap's nor the lap before's is no state of
// the ring: the client says broken and pops nothing, then or later.
TEST(CompletionRing, ClientNoticesACellMarkOfNoNearLap) {
  RingFixture f(4);
  CompletionProducer producer(f.mem, 0);
  CompletionConsumer consumer(f.mem);
  ASSERT_TRUE(producer.tryPush(makeCompletion(0)));
  CompletionSlot out;
  ASSERT_TRUE(consumer.tryPop(out));
  EXPECT_FALSE(consumer.broken());
  // Position 1 is of lap 0 (mark 1); the lap before marks 0. Mark 5 is neither.
  std::uint64_t& word = f.cells[1].words[6];
  sharedStore(word, sharedLoad(word, std::memory_order_relaxed) | (std::uint64_t{5} << 16),
              std::memory_order_relaxed);
  EXPECT_FALSE(consumer.tryPop(out));
  EXPECT_TRUE(consumer.broken());
  ASSERT_TRUE(producer.tryPush(makeCompletion(1)));
  EXPECT_FALSE(consumer.tryPop(out)) << "broken stays broken";
}

// The mark lives in the cell's status word: the record popped carries none
// of it, and a record written but not published keeps the lap before's mark
// on every lap, so the client never mistakes it for published.
TEST(CompletionRing, TheMarkIsTheRingsAndAWrittenCellStaysUnpublishedOnEveryLap) {
  const std::uint64_t start = (std::uint64_t{0xffff} << 2) - 3;  // marks wrap 16 bits soon
  RingFixture f(4, start);
  CompletionProducer producer(f.mem, start);
  CompletionConsumer consumer(f.mem);
  CompletionSlot out;
  for (std::uint64_t id = 0; id < 40; ++id) {
    ASSERT_EQ(producer.freeSlots(4), 4u);
    CompletionSlot c = makeCompletion(id);
    c.status = kStreamChunk;
    producer.write(c, {});
    ASSERT_EQ(consumer.available(), 0u) << "written at " << producer.written() - 1;
    ASSERT_FALSE(consumer.tryPop(out));
    producer.publish();
    ASSERT_TRUE(consumer.hasNext());
    ASSERT_TRUE(consumer.tryPop(out));
    EXPECT_EQ(out, c);
  }
  EXPECT_FALSE(consumer.broken());
}

TEST(CompletionRing, StatusEncodingIsTheLayoutsAndUnknownValuesAreRejected) {
  EXPECT_EQ(encodeStatus(Status::kOk), 0u);
  EXPECT_EQ(encodeStatus(Status::kRateLimited), 1u);
  EXPECT_EQ(encodeStatus(Status::kExecutorFailed), 9u);
  EXPECT_EQ(encodeStatus(Status::kSlowConsumer), 10u);
  for (std::uint32_t v = 0; v <= 10; ++v) {
    ASSERT_TRUE(decodeStatus(v).has_value());
    EXPECT_EQ(encodeStatus(*decodeStatus(v)), v);
  }
  EXPECT_FALSE(decodeStatus(11).has_value());
  EXPECT_FALSE(decodeStatus(kStreamChunk).has_value());
  EXPECT_FALSE(decodeStatus(0xffffffffu).has_value());
}

TEST(CompletionRing, StressOneProducerThreadOneConsumerThreadKeepOrder) {
  const std::uint64_t seed = testSeed();
  RingFixture f(16, (std::uint64_t{1} << 32) - 50);
  CompletionProducer producer(f.mem, (std::uint64_t{1} << 32) - 50);
  CompletionConsumer consumer(f.mem);
  const auto deadline = Clock::now() + std::chrono::milliseconds(300);
  std::atomic<std::uint64_t> pushed_total{0};
  std::atomic<bool> done{false};
  std::thread daemon([&] {
    std::mt19937_64 rng(seed);
    std::vector<CompletionSlot> batch;
    std::uint64_t next = 0;
    while (Clock::now() < deadline) {
      batch.clear();
      const std::size_t n = 1 + rng() % 5;
      for (std::size_t i = 0; i < n; ++i) batch.push_back(makeCompletion(next + i));
      const std::size_t written = producer.tryPushBatch(batch);
      next += written;
      if (written == 0) std::this_thread::yield();
    }
    pushed_total.store(next);
    done.store(true, std::memory_order_release);
  });
  std::uint64_t expected = 0;
  CompletionSlot out;
  for (;;) {
    const bool finished = done.load(std::memory_order_acquire);
    if (consumer.tryPop(out)) {
      ASSERT_EQ(out, makeCompletion(expected));
      ++expected;
    } else if (finished) {
      break;
    } else {
      std::this_thread::yield();
    }
  }
  daemon.join();
  EXPECT_EQ(expected, pushed_total.load());
  EXPECT_GT(expected, 0u);
  EXPECT_FALSE(consumer.broken());
}

}  // namespace
}  // namespace fairsched::shm
