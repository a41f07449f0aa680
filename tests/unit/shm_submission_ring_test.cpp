// The submission ring: push/pop, full and empty boundaries, 64-bit wrap,
// the per-slot prompt arena, drain budgets, many producers against one
// consumer, and a consumer that survives hostile and dead producers.
#include "shm/submission_ring.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shm/shared_word.hpp"
#include "tests/support/seeded_rng.hpp"

namespace fairsched::shm {
namespace {

using Clock = std::chrono::steady_clock;

using testing::testSeed;

// One ring over heap memory (so ASan sees any read out of bounds).
struct RingFixture {
  std::unique_ptr<SubmissionRingControl> control = std::make_unique<SubmissionRingControl>();
  std::vector<SubmissionCell> cells;
  std::vector<std::uint32_t> arena;
  std::unique_ptr<std::uint64_t> ready = std::make_unique<std::uint64_t>(0);
  SubmissionRingMemory mem;

  RingFixture(std::uint32_t capacity, std::uint32_t tokens_per_slot, std::uint64_t start = 0,
              std::uint32_t ring_bit = 0)
      : cells(capacity), arena(std::size_t{capacity} * tokens_per_slot) {
    mem.control = control.get();
    mem.cells = cells.data();
    mem.capacity = capacity;
    mem.arena = arena.data();
    mem.tokens_per_slot = tokens_per_slot;
    mem.ready_word = ready.get();
    mem.ready_bit = std::uint64_t{1} << ring_bit;
    initSubmissionRing(mem, start);
  }
};

SubmissionSlot makeSlot(std::uint64_t id) {
  SubmissionSlot s;
  s.request_id = id;
  s.tag = id * 7 + 1;
  s.deadline_ns = static_cast<std::int64_t>(id) * 1000;
  s.max_output_tokens = static_cast<std::uint32_t>(id % 1000 + 1);
  s.priority = static_cast<std::int32_t>(id % 5) - 2;
  s.endpoint = static_cast<std::uint16_t>(id % 3);
  return s;
}

TEST(SubmissionRing, PopsWhatWasPushedInOrder) {
  RingFixture f(8, 4);
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  std::vector<std::uint32_t> prompt;
  SubmissionSlot out;
  EXPECT_EQ(consumer.tryPop(out, prompt), PopResult::kEmpty);
  for (std::uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(producer.tryPush(makeSlot(id)));
  for (std::uint64_t id = 1; id <= 5; ++id) {
    ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kOk);
    EXPECT_EQ(out, makeSlot(id));
    EXPECT_TRUE(prompt.empty());
  }
  EXPECT_EQ(consumer.tryPop(out, prompt), PopResult::kEmpty);
  EXPECT_EQ(consumer.position(), 5u);
}

TEST(SubmissionRing, PushFailsWhenFullAndSucceedsAfterOnePop) {
  RingFixture f(4, 2);
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  for (std::uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(producer.tryPush(makeSlot(id)));
  EXPECT_EQ(producer.sizeApprox(), 4u);
  EXPECT_FALSE(producer.tryPush(makeSlot(99)));
  EXPECT_EQ(producer.tryPushPrompt(makeSlot(99), {}), PushResult::kFull);
  std::vector<std::uint32_t> prompt;
  SubmissionSlot out;
  ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kOk);
  EXPECT_EQ(out.request_id, 0u);
  EXPECT_TRUE(producer.tryPush(makeSlot(4)));
  EXPECT_FALSE(producer.tryPush(makeSlot(5)));
}

TEST(SubmissionRing, EmptyRingOfCapacityTwoFillsAndDrainsRepeatedly) {
  RingFixture f(2, 1);
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  std::vector<std::uint32_t> prompt;
  SubmissionSlot out;
  std::uint64_t id = 0;
  for (int lap = 0; lap < 10; ++lap) {
    ASSERT_TRUE(producer.tryPush(makeSlot(id)));
    ASSERT_TRUE(producer.tryPush(makeSlot(id + 1)));
    ASSERT_FALSE(producer.tryPush(makeSlot(id + 2)));
    ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kOk);
    EXPECT_EQ(out.request_id, id);
    ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kOk);
    EXPECT_EQ(out.request_id, id + 1);
    ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kEmpty);
    id += 2;
  }
}

// Positions near 2^32 catch a 32-bit truncation, near 2^64 the unsigned wrap.
class SubmissionRingWrap : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(SubmissionRingWrap, CrossesTheBoundaryWithFullAndEmptyIntact) {
  const std::uint64_t start = GetParam();
  RingFixture f(8, 3, start);
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, start);
  std::vector<std::uint32_t> prompt;
  SubmissionSlot out;
  std::uint64_t next_push = 0;
  std::uint64_t next_pop = 0;
  for (int round = 0; round < 6; ++round) {
    while (true) {
      const std::uint32_t tokens[] = {static_cast<std::uint32_t>(next_push), 7, 9};
      const PushResult r = producer.tryPushPrompt(makeSlot(next_push), tokens);
      if (r == PushResult::kFull) break;
      ASSERT_EQ(r, PushResult::kOk);
      ++next_push;
    }
    EXPECT_EQ(next_push - next_pop, 8u) << "full exactly at capacity";
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kOk);
      EXPECT_EQ(out.request_id, next_pop);
      ASSERT_EQ(prompt.size(), 3u);
      EXPECT_EQ(prompt[0], static_cast<std::uint32_t>(next_pop));
      ++next_pop;
    }
  }
  while (consumer.tryPop(out, prompt) == PopResult::kOk) ++next_pop;
  EXPECT_EQ(next_pop, next_push);
  EXPECT_EQ(consumer.position(), start + next_push);
  EXPECT_FALSE(consumer.corrupt());
}

INSTANTIATE_TEST_SUITE_P(NearTheTop, SubmissionRingWrap,
                         ::testing::Values(std::uint64_t{0}, (std::uint64_t{1} << 32) - 5,
                                           std::numeric_limits<std::uint64_t>::max() - 12));

TEST(SubmissionRing, PromptLandsInTheClaimedSlotsShareOfTheArena) {
  RingFixture f(4, 20);
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  std::vector<std::uint32_t> a(kInlineWords + 1), b(20);
  for (std::uint32_t i = 0; i < a.size(); ++i) a[i] = i + 1;
  for (std::uint32_t i = 0; i < b.size(); ++i) b[i] = 100 + i;
  ASSERT_EQ(producer.tryPushPrompt(makeSlot(1), a), PushResult::kOk);
  ASSERT_EQ(producer.tryPushPrompt(makeSlot(2), b), PushResult::kOk);
  std::vector<std::uint32_t> prompt;
  SubmissionSlot out;
  ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kOk);
  EXPECT_FALSE(out.inlined());
  EXPECT_EQ(out.prompt_offset, 0u);
  EXPECT_EQ(out.prompt_tokens, kInlineWords + 1);
  EXPECT_EQ(prompt, a);
  EXPECT_EQ(f.arena[0], 1u);
  ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kOk);
  EXPECT_EQ(out.prompt_offset, 20u);
  EXPECT_EQ(prompt, b);
  EXPECT_EQ(f.arena[20], 100u);
}

TEST(SubmissionRing, AShortPromptAndItsParametersTravelInTheCellAndTouchNoArena) {
  RingFixture f(4, 64);
  const std::vector<std::uint32_t> untouched = f.arena;
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  std::vector<std::uint32_t> one = {7}, full(kInlineWords);
  for (std::uint32_t i = 0; i < full.size(); ++i) full[i] = 1000 + i;
  const std::vector<std::byte> params = {std::byte{1}, std::byte{2}, std::byte{3}};
  const std::vector<std::uint32_t> with_params(kInlineWords - 1, 5);  // 15 + 1 word of params
  ASSERT_EQ(producer.tryPushPrompt(makeSlot(1), one), PushResult::kOk);
  ASSERT_EQ(producer.tryPushPrompt(makeSlot(2), full), PushResult::kOk);
  ASSERT_EQ(producer.tryPushPrompt(makeSlot(3), with_params, params), PushResult::kOk);
  SubmissionSlot flagged = makeSlot(4);
  flagged.flags = kSlotInline;  // the ring decides: no words, nothing inline
  ASSERT_EQ(producer.tryPushPrompt(flagged, {}), PushResult::kOk);
  EXPECT_EQ(f.arena, untouched);

  std::vector<std::uint32_t> words;
  SubmissionSlot out;
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_TRUE(out.inlined());
  EXPECT_EQ(out.prompt_offset, 0u);
  EXPECT_EQ(words, one);
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_TRUE(out.inlined());
  EXPECT_EQ(words, full);
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_TRUE(out.inlined());
  EXPECT_EQ(out.prompt_tokens, kInlineWords - 1);
  EXPECT_EQ(out.params_bytes, 3u);
  ASSERT_EQ(words.size(), kInlineWords);
  EXPECT_EQ(words.back(), 0x030201u) << "the parameters, their pad zeroed";
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_FALSE(out.inlined());
  EXPECT_TRUE(words.empty());
}

TEST(SubmissionRing, AnInlineSlotWithAnOffsetOrTooManyWordsIsRejectedAlone) {
  RingFixture f(4, 64);
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  const std::vector<std::uint32_t> p = {1, 2, 3};
  for (std::uint64_t id = 1; id <= 3; ++id)
    ASSERT_EQ(producer.tryPushPrompt(makeSlot(id), p), PushResult::kOk);
  // A client scribbles over the first two published cells.
  sharedStore(f.cells[0].words[3], std::uint64_t{4}, std::memory_order_relaxed);  // prompt_offset
  SubmissionSlot big;
  std::memcpy(&big, f.cells[1].words, sizeof big);
  big.prompt_tokens = kInlineWords + 1;
  std::uint64_t w[kSubmissionSlotWords];
  std::memcpy(w, &big, sizeof w);
  for (std::size_t i = 0; i < kSubmissionSlotWords; ++i)
    sharedStore(f.cells[1].words[i], w[i], std::memory_order_relaxed);

  std::vector<std::uint32_t> words;
  SubmissionSlot out;
  for (std::uint64_t id = 1; id <= 2; ++id) {
    ASSERT_EQ(consumer.tryPop(out, words), PopResult::kCorrupt);
    EXPECT_EQ(consumer.slotCheck(), SlotCheck::kInlineOutOfCell);
    EXPECT_EQ(out.request_id, id);
    consumer.skipBadSlot();
  }
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_EQ(out.request_id, 3u);
  EXPECT_EQ(words, p);
}

TEST(SubmissionRing, APrefixTravelsBetweenThePromptAndTheParameters) {
  RingFixture f(4, 64);
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  const std::vector<std::uint32_t> prompt = {1, 2, 3};
  const std::vector<std::uint64_t> prefix = {0x1122334455667788ULL, 9};
  const std::vector<std::byte> params = {std::byte{0xaa}, std::byte{0xbb}};
  const auto none = [](SubmissionSlot&) {};
  // Seven words: in the cell; a longer prefix goes to the arena.
  ASSERT_EQ(producer.tryPushPrompt(makeSlot(1), prompt, prefix, params, none), PushResult::kOk);
  const std::vector<std::uint64_t> long_prefix(10, 5);
  ASSERT_EQ(producer.tryPushPrompt(makeSlot(2), prompt, long_prefix, params, none),
            PushResult::kOk);
  SubmissionSlot counts = makeSlot(3);
  counts.flags = kSlotCountsOnly;
  counts.prompt_tokens = 500;  // a count: no ids, the prefix right away
  ASSERT_EQ(producer.tryPushPrompt(counts, {}, prefix, {}, none), PushResult::kOk);
  const std::vector<std::uint64_t> too_many(kMaxSlotPrefixBlocks + 1, 1);
  EXPECT_EQ(producer.tryPushPrompt(makeSlot(4), prompt, too_many, params, none),
            PushResult::kInvalidSlot);

  std::vector<std::uint32_t> words;
  SubmissionSlot out;
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_TRUE(out.inlined());
  EXPECT_EQ(out.prefixBlocks(), 2u);
  EXPECT_EQ(out.paramsBytes(), 2u);
  EXPECT_EQ(out.prompt_tokens, 3u);
  EXPECT_EQ(words, (std::vector<std::uint32_t>{1, 2, 3, 0x55667788, 0x11223344, 9, 0, 0xbbaa}));
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_FALSE(out.inlined());
  EXPECT_EQ(out.prefixBlocks(), 10u);
  EXPECT_EQ(words.size(), 3u + 20u + 1u);
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_EQ(out.prompt_tokens, 500u);
  EXPECT_EQ(out.prefixBlocks(), 2u);
  EXPECT_EQ(out.paramsBytes(), 0u);
  EXPECT_EQ(words.size(), 4u);
  EXPECT_EQ(consumer.tryPop(out, words), PopResult::kEmpty) << "the refused one never went";
}

TEST(SubmissionRing, PromptLargerThanASlotsShareIsRefusedBeforeClaiming) {
  RingFixture f(4, 5);
  SubmissionProducer producer(f.mem);
  const std::vector<std::uint32_t> big(6, 1);
  EXPECT_EQ(producer.tryPushPrompt(makeSlot(1), big), PushResult::kPromptTooLarge);
  EXPECT_EQ(producer.sizeApprox(), 0u);
  SubmissionSlot flagged = makeSlot(2);
  flagged.flags = 0x80;  // not a known flag
  EXPECT_EQ(producer.tryPushPrompt(flagged, {}), PushResult::kInvalidSlot);
}

TEST(SubmissionRing, PushMarksTheReadyBit) {
  RingFixture f(4, 1, 0, 5);
  SubmissionProducer producer(f.mem);
  EXPECT_EQ(*f.ready, 0u);
  ASSERT_TRUE(producer.tryPush(makeSlot(1)));
  EXPECT_EQ(*f.ready, std::uint64_t{1} << 5);
}

TEST(SubmissionRing, DrainStopsAtTheBudget) {
  RingFixture f(16, 2);
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  for (std::uint64_t id = 0; id < 10; ++id) {
    const std::uint32_t tokens[] = {static_cast<std::uint32_t>(id)};
    ASSERT_EQ(producer.tryPushPrompt(makeSlot(id), tokens), PushResult::kOk);
  }
  std::vector<std::uint64_t> seen;
  auto sink = [&](const SubmissionSlot& s, std::span<const std::uint32_t> prompt) {
    ASSERT_EQ(prompt.size(), 1u);
    EXPECT_EQ(prompt[0], s.request_id);
    seen.push_back(s.request_id);
  };
  DrainResult r = consumer.drain(4, sink);
  EXPECT_EQ(r.popped, 4u);
  EXPECT_EQ(r.stop, PopResult::kOk);
  r = consumer.drain(100, sink);
  EXPECT_EQ(r.popped, 6u);
  EXPECT_EQ(r.stop, PopResult::kEmpty);
  r = consumer.drain(0, sink);
  EXPECT_EQ(r.popped, 0u);
  ASSERT_EQ(seen.size(), 10u);
  for (std::uint64_t i = 0; i < 10; ++i) EXPECT_EQ(seen[i], i);
}

TEST(SubmissionRing, PeekReturnsTheSameCopyUntilRelease) {
  RingFixture f(4, 3);
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  const std::uint32_t tokens[] = {5, 6, 7};
  ASSERT_EQ(producer.tryPushPrompt(makeSlot(1), tokens), PushResult::kOk);
  SubmissionSlot a;
  SubmissionSlot b;
  ASSERT_EQ(consumer.peek(a), PopResult::kOk);
  // A client rewriting the published cell after the copy changes nothing.
  sharedStore(f.cells[0].words[0], std::uint64_t{999}, std::memory_order_relaxed);
  ASSERT_EQ(consumer.peek(b), PopResult::kOk);
  EXPECT_EQ(a, b);
  std::vector<std::uint32_t> dst(3);
  consumer.copyPrompt(dst);
  EXPECT_EQ(dst, (std::vector<std::uint32_t>{5, 6, 7}));
  consumer.release();
  EXPECT_EQ(consumer.peek(a), PopResult::kEmpty);
}

TEST(SubmissionRing, SequenceThatTheProtocolCannotProduceIsCorruptAndSticky) {
  RingFixture f(4, 1);
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  ASSERT_TRUE(producer.tryPush(makeSlot(1)));
  sharedStore(f.cells[0].sequence, std::uint64_t{77}, std::memory_order_relaxed);
  SubmissionSlot out;
  std::vector<std::uint32_t> prompt;
  EXPECT_EQ(consumer.tryPop(out, prompt), PopResult::kCorrupt);
  EXPECT_EQ(consumer.corruption(), Corruption::kBadSequence);
  EXPECT_EQ(consumer.badSequence(), 77u);
  // Repairing the cell does not un-corrupt the consumer: the client is dropped.
  sharedStore(f.cells[0].sequence, std::uint64_t{1}, std::memory_order_relaxed);
  EXPECT_EQ(consumer.tryPop(out, prompt), PopResult::kCorrupt);
}

TEST(SubmissionRing, SlotNamingTokensOutsideTheArenaIsCorrupt) {
  RingFixture f(4, 2);  // 8 arena tokens
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  SubmissionSlot bad = makeSlot(3);
  bad.prompt_offset = 6;
  bad.prompt_tokens = 2;
  ASSERT_EQ(checkSlot(bad, 8), SlotCheck::kValid);
  ASSERT_TRUE(producer.tryPush(bad));
  // Another thread of the client rewrites the published count.
  sharedStore(f.cells[0].words[4], std::uint64_t{3}, std::memory_order_relaxed);
  SubmissionSlot out;
  std::vector<std::uint32_t> prompt;
  EXPECT_EQ(consumer.tryPop(out, prompt), PopResult::kCorrupt);
  EXPECT_EQ(consumer.corruption(), Corruption::kBadSlot);
  EXPECT_EQ(consumer.slotCheck(), SlotCheck::kPromptOutOfArena);
  EXPECT_EQ(out.request_id, 3u) << "the copy is kept for the log";
}

TEST(SubmissionRing, BadSlotIsSkippedAndOnlyThatRequestIsLost) {
  RingFixture f(4, 2);  // 8 arena tokens
  SubmissionProducer producer(f.mem);
  SubmissionConsumer consumer(f.mem, 0);
  ASSERT_TRUE(producer.tryPush(makeSlot(1)));
  ASSERT_TRUE(producer.tryPush(makeSlot(2)));
  // The client scribbles a prompt count beyond the arena into the first slot.
  sharedStore(f.cells[0].words[4], std::uint64_t{99}, std::memory_order_relaxed);
  SubmissionSlot out;
  std::vector<std::uint32_t> prompt;
  ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kCorrupt);
  EXPECT_EQ(out.request_id, 1u);
  consumer.skipBadSlot();
  EXPECT_FALSE(consumer.corrupt());
  ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kOk);
  EXPECT_EQ(out.request_id, 2u);
  EXPECT_EQ(consumer.tryPop(out, prompt), PopResult::kEmpty);
  // The skipped cell went back to the producers: the ring fills to capacity again.
  for (std::uint64_t id = 3; id < 7; ++id) EXPECT_TRUE(producer.tryPush(makeSlot(id)));
  EXPECT_FALSE(producer.tryPush(makeSlot(7)));
}

TEST(SubmissionRing, CheckSlotBoundsEveryField) {
  SubmissionSlot s;
  EXPECT_EQ(checkSlot(s, 0), SlotCheck::kValid);
  s.prompt_offset = 10;
  s.prompt_tokens = 0;
  EXPECT_EQ(checkSlot(s, 10), SlotCheck::kValid);
  EXPECT_EQ(checkSlot(s, 9), SlotCheck::kPromptOutOfArena);
  s.prompt_offset = std::numeric_limits<std::uint64_t>::max();
  s.prompt_tokens = 2;
  EXPECT_EQ(checkSlot(s, 100), SlotCheck::kPromptOutOfArena) << "no wrap-around in offset + count";
  s.prompt_offset = 98;
  EXPECT_EQ(checkSlot(s, 100), SlotCheck::kValid);
  s.prompt_tokens = 3;
  EXPECT_EQ(checkSlot(s, 100), SlotCheck::kPromptOutOfArena);
  s = SubmissionSlot{};
  s.flags = 0x8000;
  EXPECT_EQ(checkSlot(s, 1), SlotCheck::kFlagsSet);
  s.flags = 0;
  s.tenant = 0xFFFFFFFF;  // the tenant handle is the daemon's table's to judge
  EXPECT_EQ(checkSlot(s, 1), SlotCheck::kValid);
  // A prefix: 1..kMaxSlotPrefixBlocks hashes in the high half of
  // params_bytes, two words each, counted in the arena.
  s = SubmissionSlot{};
  s.flags = kSlotPrefix;
  EXPECT_EQ(checkSlot(s, 100), SlotCheck::kBadPrefix) << "the flag without hashes";
  s.params_bytes = (std::uint32_t{3} << 16) | 5;
  EXPECT_EQ(s.arenaWords(), 6u + 2u);
  EXPECT_EQ(checkSlot(s, 8), SlotCheck::kValid);
  EXPECT_EQ(checkSlot(s, 7), SlotCheck::kPromptOutOfArena);
  s.params_bytes = (kMaxSlotPrefixBlocks + 1) << 16;
  EXPECT_EQ(checkSlot(s, 1 << 20), SlotCheck::kBadPrefix);
  s.params_bytes = (std::uint32_t{1} << 16) | (kMaxParamsBytes + 1);
  EXPECT_EQ(checkSlot(s, 1 << 20), SlotCheck::kParamsTooLarge);
  s.flags = 0;  // without the flag, the same value is parameters over the limit
  s.params_bytes = std::uint32_t{1} << 16;
  EXPECT_EQ(checkSlot(s, 1 << 20), SlotCheck::kParamsTooLarge);
}

RC_GTEST_PROP(SubmissionRing, CheckedSlotNeverLeavesTheArena,
              (std::uint64_t offset, std::uint32_t tokens, std::uint32_t arena)) {
  SubmissionSlot s;
  s.prompt_offset = offset;
  s.prompt_tokens = tokens;
  if (checkSlot(s, arena) == SlotCheck::kValid) {
    RC_ASSERT(offset <= arena);
    RC_ASSERT(std::uint64_t{tokens} <= arena - offset);
  } else {
    RC_ASSERT(offset > arena || std::uint64_t{tokens} > arena - offset);
  }
}

// A producer that claimed a position and died before publishing: its ring
// reads as empty from there on; the consumer neither blocks nor misreads, and
// other rings are untouched.
TEST(SubmissionRing, ClaimedButNeverPublishedSlotWedgesOnlyItsOwnRing) {
  RingFixture dead(4, 1);
  RingFixture alive(4, 1);
  SubmissionProducer dead_producer(dead.mem);
  SubmissionProducer alive_producer(alive.mem);
  // The dying producer's claim: reserve 0 -> 1, the cell never published.
  sharedStore(dead.control->reserve, std::uint64_t{1}, std::memory_order_relaxed);
  ASSERT_TRUE(dead_producer.tryPush(makeSlot(2)));  // position 1, published
  ASSERT_TRUE(alive_producer.tryPush(makeSlot(10)));
  SubmissionConsumer dead_consumer(dead.mem, 0);
  SubmissionConsumer alive_consumer(alive.mem, 0);
  SubmissionSlot out;
  std::vector<std::uint32_t> prompt;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(dead_consumer.tryPop(out, prompt), PopResult::kEmpty);
  }
  EXPECT_FALSE(dead_consumer.corrupt());
  ASSERT_EQ(alive_consumer.tryPop(out, prompt), PopResult::kOk);
  EXPECT_EQ(out.request_id, 10u);
}

// Many threads of one client push, the daemon's thread drains with random
// budgets: every item arrives exactly once, each producer's in its order,
// with its prompt intact.
TEST(SubmissionRing, StressManyProducersOneConsumerDeliverEachItemOnceInProducerOrder) {
  const std::uint64_t seed = testSeed();
  constexpr int kProducers = 4;
  constexpr std::uint32_t kTokensPerSlot = 6;
  RingFixture f(64, kTokensPerSlot, (std::uint64_t{1} << 32) - 100);
  const std::uint64_t start = sharedLoad(f.control->reserve, std::memory_order_relaxed);
  const auto deadline = Clock::now() + std::chrono::milliseconds(400);

  auto tokenOf = [](std::uint64_t id, std::size_t i) {
    return static_cast<std::uint32_t>(id * 31 + i);
  };
  std::atomic<int> running{kProducers};
  std::vector<std::uint64_t> pushed(kProducers, 0);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937_64 rng(seed + static_cast<std::uint64_t>(p));
      SubmissionProducer producer(f.mem);
      std::vector<std::uint32_t> prompt;
      std::uint64_t n = 0;
      while (Clock::now() < deadline && n < 200'000) {
        const std::uint64_t id = (static_cast<std::uint64_t>(p) << 40) | n;
        prompt.resize(rng() % (kTokensPerSlot + 1));
        for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = tokenOf(id, i);
        SubmissionSlot s;
        s.request_id = id;
        s.tag = ~id;
        const PushResult r = producer.tryPushPrompt(s, prompt);
        if (r == PushResult::kOk) {
          ++n;
        } else {
          EXPECT_EQ(r, PushResult::kFull);
          if (r != PushResult::kFull) break;
          std::this_thread::yield();
        }
      }
      pushed[p] = n;
      running.fetch_sub(1, std::memory_order_release);
    });
  }

  std::mt19937_64 rng(seed);
  SubmissionConsumer consumer(f.mem, start);
  std::vector<std::uint64_t> next(kProducers, 0);
  std::uint64_t total = 0;
  bool ok = true;
  auto sink = [&](const SubmissionSlot& s, std::span<const std::uint32_t> prompt) {
    const auto p = static_cast<int>(s.request_id >> 40);
    const std::uint64_t n = s.request_id & ((std::uint64_t{1} << 40) - 1);
    if (p >= kProducers || n != next[p] || s.tag != ~s.request_id) {
      ok = false;
      return;
    }
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] != tokenOf(s.request_id, i)) ok = false;
    }
    ++next[p];
    ++total;
  };
  for (;;) {
    const bool done = running.load(std::memory_order_acquire) == 0;
    const DrainResult r = consumer.drain(1 + rng() % 8, sink);
    ASSERT_NE(r.stop, PopResult::kCorrupt);
    ASSERT_TRUE(ok) << "out of order, duplicated or damaged item";
    if (done && r.stop == PopResult::kEmpty) break;
    if (r.popped == 0) std::this_thread::yield();
  }
  for (auto& t : producers) t.join();
  std::uint64_t expected = 0;
  for (int p = 0; p < kProducers; ++p) {
    EXPECT_EQ(next[p], pushed[p]) << "producer " << p;
    expected += pushed[p];
  }
  EXPECT_EQ(total, expected);
  EXPECT_GT(total, 0u);
  std::cout << total << " items from " << kProducers << " producers\n";
}

// A hostile writer scribbles random words over the cells and the control
// block while the daemon's consumer runs. The consumer never crashes or reads
// outside the ring (ASan watches the heap buffers), and whatever it returns
// kOk for is inside the arena.
TEST(SubmissionRing, ConsumerSurvivesAHostileWriter) {
  const std::uint64_t seed = testSeed();
  constexpr std::uint32_t kCapacity = 16;
  constexpr std::uint32_t kTokensPerSlot = 4;
  RingFixture f(kCapacity, kTokensPerSlot);
  std::atomic<bool> stop{false};
  std::thread hostile([&] {
    std::mt19937_64 rng(seed ^ 0x5eed);
    auto* control_words = reinterpret_cast<std::uint64_t*>(f.control.get());
    while (!stop.load(std::memory_order_relaxed)) {
      const std::uint32_t cell = static_cast<std::uint32_t>(rng() % kCapacity);
      switch (rng() % 4) {
        case 0:  // garbage anywhere in a cell
          sharedStore(f.cells[cell].words[rng() % kSubmissionSlotWords], rng(),
                      std::memory_order_relaxed);
          break;
        case 1:  // plausible sequence numbers, so kOk paths run too
          sharedStore(f.cells[cell].sequence,
                      storedSequence(cell + 1 + kCapacity * (rng() % 4), cell),
                      std::memory_order_release);
          break;
        case 2:  // plausible fields: prompt bounds near the arena's, flags and reserved 0
          sharedStore(f.cells[cell].words[3], rng() % (kCapacity * kTokensPerSlot + 2),
                      std::memory_order_relaxed);
          sharedStore(f.cells[cell].words[4], rng() % 8, std::memory_order_relaxed);
          sharedStore(f.cells[cell].words[5], rng() & 0xffffffffffffULL, std::memory_order_relaxed);
          sharedStore(f.cells[cell].words[6], std::uint64_t{0}, std::memory_order_relaxed);
          break;
        default:  // the control block
          sharedStore(control_words[(rng() % 2) * 8], rng(), std::memory_order_relaxed);
          break;
      }
    }
  });

  std::mt19937_64 rng(seed);
  SubmissionConsumer consumer(f.mem, 0);
  std::vector<std::uint32_t> prompt;
  SubmissionSlot out;
  std::uint64_t counts[3] = {0, 0, 0};
  const auto deadline = Clock::now() + std::chrono::milliseconds(300);
  while (Clock::now() < deadline) {
    const PopResult r = consumer.tryPop(out, prompt);
    ++counts[static_cast<int>(r)];
    if (r == PopResult::kOk) {
      ASSERT_EQ(checkSlot(out, f.mem.arenaTokens()), SlotCheck::kValid);
      ASSERT_EQ(prompt.size(), out.arenaWords());
    } else if (r == PopResult::kCorrupt) {
      consumer = SubmissionConsumer(f.mem, rng() % (4 * kCapacity));
    }
  }
  stop.store(true);
  hostile.join();
  std::cout << "empty " << counts[0] << ", ok " << counts[1] << ", corrupt " << counts[2] << "\n";
  EXPECT_GT(counts[2], 0u);
}

}  // namespace
}  // namespace fairsched::shm
