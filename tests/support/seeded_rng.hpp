// The seed of a randomised test: FAIRSCHED_SEED from the environment (to
// replay a failure), or a fresh one; printed either way, so any run can be
// replayed with FAIRSCHED_SEED=<seed>. The one place C++ tests and
// benchmarks read FAIRSCHED_SEED.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>

namespace fairsched::testing {

// FAIRSCHED_SEED when set (decimal), else nullopt.
inline std::optional<std::uint64_t> seedFromEnv() {
  if (const char* env = std::getenv("FAIRSCHED_SEED"); env && *env) {
    return std::strtoull(env, nullptr, 10);
  }
  return std::nullopt;
}

inline std::uint64_t testSeed() {
  std::uint64_t seed = 0;
  if (const auto env = seedFromEnv()) {
    seed = *env;
  } else {
    seed = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  }
  std::cout << "[ seed     ] FAIRSCHED_SEED=" << seed << "\n";
  return seed;
}

}  // namespace fairsched::testing
