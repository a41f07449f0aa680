// A gtest fixture with its own temporary directory (tests/support/temp_dir.hpp,
// removed after the test): dir_, and socket() for a daemon's socket in it.
// A test's fixture derives from it with its directory's prefix.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tests/support/temp_dir.hpp"

namespace fairsched::testing {

class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(const char* prefix) : tmp_(prefix), dir_(tmp_.path()) {}
  void SetUp() override { ASSERT_FALSE(dir_.empty()) << "no temporary directory"; }
  std::string socket() const { return dir_ + "/fairsched.sock"; }

  TempDir tmp_;
  std::string dir_;
};

}  // namespace fairsched::testing
