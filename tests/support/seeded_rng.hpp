// The random generator of a randomised test: seeded from FAIRSCHED_SEED when
// it is set (to replay a failure), else from the clock; the seed is printed
// so any run can be replayed with FAIRSCHED_SEED=<seed>.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace fairsched::testing {

inline std::uint64_t testSeed(const char* what) {
  std::uint64_t seed = 0;
  if (const char* env = std::getenv("FAIRSCHED_SEED"); env && *env) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
  }
  std::printf("%s: seed %llu (replay with FAIRSCHED_SEED=%llu)\n", what,
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

inline std::mt19937_64 seededRng(const char* what) {
  return std::mt19937_64(testSeed(what));
}

}  // namespace fairsched::testing
