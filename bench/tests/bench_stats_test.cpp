// The statistics the scenarios' PASS/MISS lines rest on.
#include "bench/stats.hpp"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

namespace fairsched::bench {
namespace {

TEST(BenchStats, PercentileInterpolatesBetweenRanks) {
  EXPECT_EQ(percentile({}, 50), 0.0);
  EXPECT_EQ(percentile({3, 1, 2}, 0), 1.0);
  EXPECT_EQ(percentile({3, 1, 2}, 100), 3.0);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
}

TEST(BenchStats, MaxInWindowCountsHalfOpenWindows) {
  // Three admissions of 1 at 0, 999 and 1000: a 1000-wide window holds two.
  EXPECT_EQ(maxInWindow({{0, 1}, {999, 1}, {1000, 1}}, 1000), 2.0);
  EXPECT_EQ(maxInWindow({{0, 1}, {999, 1}, {1000, 1}}, 1001), 3.0);
  EXPECT_EQ(maxInWindow({{1000, 5}, {0, 7}}, 100), 7.0);  // order does not matter
  EXPECT_EQ(maxInWindow({}, 10), 0.0);
}

TEST(BenchStats, MaxInWindowMatchesBruteForce) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::pair<double, double>> adm;
    for (int i = 0; i < 200; ++i) {
      adm.push_back({static_cast<double>(rng() % 5000), static_cast<double>(1 + rng() % 9)});
    }
    const double window = 1 + rng() % 700;
    double brute = 0;
    for (const auto& start : adm) {
      double sum = 0;
      for (const auto& a : adm) {
        if (a.first >= start.first && a.first < start.first + window) sum += a.second;
      }
      brute = std::max(brute, sum);
    }
    EXPECT_EQ(maxInWindow(adm, window), brute) << "round " << round;
  }
}

}  // namespace
}  // namespace fairsched::bench
