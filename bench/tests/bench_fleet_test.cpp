// The fleet scenario in quick mode: the JSON has the shape docs/benchmarks.md
// gives, and the numbers are consistent with each other. Skipped, with the
// reason, when no redis-server can be started.
#include <gtest/gtest.h>
#include <unistd.h>

#include <variant>

#include "bench/fleet_scenario.hpp"
#include "tests/support/redis_server.hpp"

namespace fairsched::bench {
namespace {

TEST(BenchFleet, QuickRunReportsEveryModeInTheDocumentedShape) {
  if (::access(testing::RedisServer::kDefaultBinary, X_OK) != 0) {
    GTEST_SKIP() << testing::RedisServer::kDefaultBinary << " is not installed";
  }
  ScenarioOptions o;
  o.quick = true;
  const ScenarioResult r = runFleetScenario(o);
  if (const auto* err = std::get_if<ScenarioError>(&r)) {
    if (err->message.rfind("cannot start a redis-server", 0) == 0) GTEST_SKIP() << err->message;
    FAIL() << err->message;
  }
  const nlohmann::json& j = std::get<ScenarioReport>(r).json;
  ASSERT_TRUE(j["host"]["admissions_per_s"].is_number());
  ASSERT_TRUE(j["fleet"]["admissions_per_s"].is_number());
  ASSERT_TRUE(j["fleet"]["redis_roundtrip_fraction"].is_number());
  ASSERT_TRUE(j["fleet"]["max_overshoot"].is_number());
  ASSERT_TRUE(j["naive"]["admissions_per_s"].is_number());
  EXPECT_GT(j["host"]["admissions_per_s"].get<double>(), 0);
  EXPECT_GT(j["fleet"]["admissions_per_s"].get<double>(), 0);
  EXPECT_GT(j["naive"]["admissions_per_s"].get<double>(), 0);
  // Leases of 1000: at most a round trip per few hundred admissions.
  EXPECT_LE(j["fleet"]["redis_roundtrip_fraction"].get<double>(), 0.01);
  EXPECT_LE(j["fleet"]["max_overshoot"].get<std::int64_t>(),
            j["fleet"]["overshoot_bound"].get<std::int64_t>());
  EXPECT_GE(j["fleet"]["overshoot_max_window"].get<std::uint64_t>(),
            j["fleet"]["overshoot_limit"].get<std::uint64_t>() / 2)
      << "the overshoot run never approached its limit";
}

}  // namespace
}  // namespace fairsched::bench
