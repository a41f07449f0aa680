// The physical-limit baseline of the roundtrip (and stream) benchmarks: a
// bare ping-pong between two processes completes every trip it is asked for,
// each taking a positive time, and the child is reaped (no zombie is left).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>

#include "bench/raw_pingpong.hpp"

namespace fairsched::bench {
namespace {

TEST(RawPingPong, EveryTripIsMeasuredAndTheChildIsReaped) {
  const std::vector<double> rtt = rawPingPong(2000);
  ASSERT_EQ(rtt.size(), 2000u);
  EXPECT_GT(*std::min_element(rtt.begin(), rtt.end()), 0.0);
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1) << "a child is left";
  EXPECT_EQ(errno, ECHILD);
}

}  // namespace
}  // namespace fairsched::bench
