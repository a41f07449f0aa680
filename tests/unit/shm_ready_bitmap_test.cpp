// The ready bitmap: producers mark rings, the daemon takes whole words and
// never believes a bit for a ring that does not exist.
#include "shm/ready_bitmap.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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

}  // namespace
}  // namespace fairsched::shm
