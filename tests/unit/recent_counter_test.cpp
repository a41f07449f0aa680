// RecentCounter: the last ten seconds in one-second buckets.
#include "daemon/core/recent_counter.hpp"

#include <gtest/gtest.h>

namespace fairsched::core {
namespace {

constexpr TimeNs kSec = kNsPerSec;

TEST(RecentCounter, SumsTheLastTenSecondsOnly) {
  RecentCounter c;
  c.add(5, 0);
  c.add(7, kSec / 2);
  EXPECT_EQ(c.sum(kSec / 2), 12u);
  c.add(1, 3 * kSec);
  EXPECT_EQ(c.sum(3 * kSec), 13u);
  EXPECT_EQ(c.sum(9 * kSec + kSec / 2), 13u);  // second 0 is still inside [0, 9]
  EXPECT_EQ(c.sum(10 * kSec), 1u);             // second 0 has left the window
  EXPECT_EQ(c.sum(13 * kSec), 0u);
}

TEST(RecentCounter, ALongGapClearsEveryBucket) {
  RecentCounter c;
  for (int s = 0; s < 10; ++s) c.add(1, s * kSec);
  EXPECT_EQ(c.sum(9 * kSec), 10u);
  c.add(4, 100 * kSec);
  EXPECT_EQ(c.sum(100 * kSec), 4u);
  c.add(2, 104 * kSec);
  EXPECT_EQ(c.sum(105 * kSec), 6u);
  EXPECT_EQ(c.sum(113 * kSec), 2u);  // second 104 is the oldest inside [104, 113]
  EXPECT_EQ(c.sum(114 * kSec), 0u);
}

}  // namespace
}  // namespace fairsched::core
