// Checking a daemon::Result that should have failed: EXPECT_TRUE(failsWith(
// r, Errc::kConfig, "cpu executor: threads must be >= 1")) says which part
// differed when it did not fail so.
#pragma once

#include <gtest/gtest.h>

#include <string_view>

#include "daemon/error.hpp"

namespace fairsched::testing {

template <class R>
::testing::AssertionResult failsWith(const R& r, daemon::Errc code, std::string_view message) {
  if (r.ok()) return ::testing::AssertionFailure() << "it succeeded";
  if (r.code() != code) {
    return ::testing::AssertionFailure()
           << "code " << daemon::toString(r.code()) << ", not " << daemon::toString(code) << " ("
           << r.error().message << ")";
  }
  if (r.error().message != message) {
    return ::testing::AssertionFailure()
           << "message \"" << r.error().message << "\", not \"" << message << "\"";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace fairsched::testing
