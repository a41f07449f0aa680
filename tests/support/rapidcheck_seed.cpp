// Linked into every test binary that uses rapidcheck (tests/CMakeLists.txt):
// with FAIRSCHED_SEED set, and RC_PARAMS naming no seed of its own, the
// binary's properties run with that seed, so FAIRSCHED_SEED=<n> replays
// them as it replays the tests that draw from testSeed(). rapidcheck reads
// RC_PARAMS on its first property, after this has run.
#include <stdlib.h>

#include <string>

#include "seeded_rng.hpp"

namespace {

const bool kRapidcheckSeeded = [] {
  const auto seed = fairsched::testing::seedFromEnv();
  if (!seed) return false;
  const char* given = std::getenv("RC_PARAMS");
  std::string params = given != nullptr ? given : "";
  if (params.find("seed=") != std::string::npos) return false;
  if (!params.empty()) params += " ";
  params += "seed=" + std::to_string(*seed);
  return setenv("RC_PARAMS", params.c_str(), 1) == 0;
}();

}  // namespace
