// The ready bitmap: producers mark rings, the daemon takes whole words and
// never believes a bit for a ring that does not exist; hot lanes keep their
// bits, and a lane cooled while its producer publishes strands nothing.
#include "shm/ready_bitmap.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "shm/submission_ring.hpp"

namespace fairsched::shm {
namespace {

TEST(ReadyBitmap, TakeEachVisitsMarkedRingsInOrderAndClearsThem) {
  std::uint64_t words[2] = {0, 0};
  ReadyBitmap bitmap(words, 70);
  EXPECT_EQ(bitmap.wordCount(), 2u);
  EXPECT_FALSE(bitmap.anySet());
  for (std::uint32_t ring : {69u, 0u, 64u, 63u, 0u}) bitmap.mark(ring);
  EXPECT_TRUE(bitmap.anySet());
  std::vector<std::uint32_t> seen;
  bitmap.takeEach([&](std::uint32_t ring) { seen.push_back(ring); });
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{0, 63, 64, 69}));
  EXPECT_FALSE(bitmap.anySet());
  seen.clear();
  bitmap.takeEach([&](std::uint32_t ring) { seen.push_back(ring); });
  EXPECT_TRUE(seen.empty());
}

TEST(ReadyBitmap, BitsOfRingsThatDoNotExistAreIgnored) {
  std::uint64_t words[2] = {0, ~std::uint64_t{0} << 6};  // a client sets bits 70..127
  ReadyBitmap bitmap(words, 70);
  EXPECT_FALSE(bitmap.anySet());
  EXPECT_EQ(bitmap.take(1), 0u);
  words[1] = ~std::uint64_t{0};
  EXPECT_EQ(bitmap.take(1), 0x3fu) << "rings 64..69 only";
  EXPECT_EQ(words[1], 0u) << "take clears the whole word";
}

TEST(ReadyBitmap, AFullWordOfRingsIsNotMasked) {
  std::uint64_t words[1] = {~std::uint64_t{0}};
  ReadyBitmap bitmap(words, 64);
  EXPECT_EQ(bitmap.take(0), ~std::uint64_t{0});
}

TEST(ReadyBitmap, KeptBitsStaySetAndUnreportedUntilCleared) {
  std::uint64_t words[2] = {0, 0};
  ReadyBitmap bitmap(words, 70);
  for (std::uint32_t ring : {1u, 5u, 66u}) bitmap.mark(ring);
  const std::uint64_t keep[2] = {std::uint64_t{1} << 5, 0};
  EXPECT_TRUE(bitmap.anySet(keep));
  std::vector<std::uint32_t> seen;
  bitmap.takeEach([&](std::uint32_t ring) { seen.push_back(ring); }, keep);
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{1, 66}));
  EXPECT_EQ(words[0], std::uint64_t{1} << 5) << "the hot lane's bit stays set";
  EXPECT_FALSE(bitmap.anySet(keep));
  EXPECT_TRUE(bitmap.anySet());
  bitmap.mark(5);  // already set: left as it is
  EXPECT_EQ(words[0], std::uint64_t{1} << 5);
  bitmap.clear(0, std::uint64_t{1} << 5);
  EXPECT_FALSE(bitmap.anySet());
  bitmap.mark(5);  // clear again: set
  EXPECT_EQ(words[0], std::uint64_t{1} << 5);
}

// The daemon's side of one lane, as the server runs it: hot (polled
// directly, its bit kept), cooled every so often (bit cleared, one look),
// cold (drained only when a take reports its bit), hot again once a drain
// finds work. A publication the producer did not mark because it saw the
// bit set must be found by the look after the clear; one stranded would
// leave the cold consumer waiting for a bit that never comes.
TEST(ReadyBitmap, ALaneCooledWhileItsProducerPublishesStrandsNothing) {
  constexpr std::uint32_t kCapacity = 64;
  constexpr std::uint64_t kItems = 1'000'000;
  auto control = std::make_unique<SubmissionRingControl>();
  std::vector<SubmissionCell> cells(kCapacity);
  std::vector<std::uint32_t> arena(kCapacity * 4);
  std::uint64_t word = 0;
  SubmissionRingMemory mem;
  mem.control = control.get();
  mem.cells = cells.data();
  mem.capacity = kCapacity;
  mem.arena = arena.data();
  mem.tokens_per_slot = 4;
  mem.ready_word = &word;
  mem.ready_bit = 1;
  initSubmissionRing(mem, 0);
  ReadyBitmap bitmap(&word, 1);

  std::atomic<bool> stop{false};
  std::thread producer([&] {
    SubmissionProducer p(mem);
    for (std::uint64_t i = 1; i <= kItems; ++i) {
      SubmissionSlot s;
      s.request_id = i;
      while (!p.tryPush(s)) {
        if (stop.load()) return;  // the consumer gave up
        std::this_thread::yield();
      }
    }
  });
  SubmissionConsumer consumer(mem, 0);
  std::uint64_t next = 1, cools = 0, strandless_looks = 0;
  bool hot = false, pending = false;
  std::vector<std::uint32_t> prompt;
  auto drain = [&] {
    std::size_t n = 0;
    SubmissionSlot s;
    while (n < 8 && consumer.tryPop(s, prompt) == PopResult::kOk) {  // a pass's budget
      EXPECT_EQ(s.request_id, next);
      ++next;
      ++n;
    }
    return n;
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (std::uint64_t pass = 0; next <= kItems; ++pass) {
    if (std::chrono::steady_clock::now() > give_up) break;
    if (hot) {
      if (consumer.mayHaveItem()) drain();
      pending = false;
      if (pass % 2 == 0) {  // cool: clear, then one look
        bitmap.clear(0, 1);
        hot = false;
        ++cools;
        if (consumer.mayHaveItem()) {
          ++strandless_looks;
          pending = true;  // drained next passes whatever the bitmap says
        }
      }
    } else if (pending || (bitmap.take(0) & 1) != 0) {
      // Taken: drained until empty over passes, as the server's pending rings.
      pending = drain() == 8;
      hot = true;
    }
  }
  stop.store(true);
  producer.join();
  EXPECT_EQ(next, kItems + 1) << "an item stranded in a cold lane; " << cools << " coolings";
  EXPECT_GT(cools, 1000u);
  RecordProperty("items_found_by_the_look_after_a_cooling", std::to_string(strandless_looks));
}

}  // namespace
}  // namespace fairsched::shm
