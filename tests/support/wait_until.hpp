// Waiting on a condition, bounded: waitUntil(pred, limit, what) polls `pred`
// until it holds or `limit` passes. Use as ASSERT_TRUE(waitUntil(...)): a
// timeout fails with "<what>: not within <limit> ms".
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace fairsched::testing {

template <class Pred>
::testing::AssertionResult waitUntil(
    Pred&& pred, std::chrono::milliseconds limit, const std::string& what,
    std::chrono::microseconds poll = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (pred()) return ::testing::AssertionSuccess();
    if (std::chrono::steady_clock::now() >= deadline) {
      return ::testing::AssertionFailure() << what << ": not within " << limit.count() << " ms";
    }
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace fairsched::testing
