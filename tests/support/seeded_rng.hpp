// The seed of a randomised test: FAIRSCHED_SEED from the environment (to
// replay a failure), or a fresh one; printed either way, so any run can be
// replayed with FAIRSCHED_SEED=<seed>.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>

namespace fairsched::testing {

inline std::uint64_t testSeed() {
  std::uint64_t seed = 0;
  if (const char* env = std::getenv("FAIRSCHED_SEED"); env && *env) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  }
  std::cout << "[ seed     ] FAIRSCHED_SEED=" << seed << "\n";
  return seed;
}

}  // namespace fairsched::testing
