// The scale scenario on a reduced grid: real daemons and client processes,
// the JSON has the shape docs/benchmarks.md gives, every cell completed requests
// and none was lost. No figure is asserted: CPU per request and round trips
// are for people to read in a full run (fairsched-bench scale).
#include <gtest/gtest.h>

#include <variant>

#include "bench/scale_scenario.hpp"

namespace fairsched::bench {
namespace {

TEST(BenchScale, ReducedGridCompletesEveryCellAndLosesNothing) {
  ScenarioOptions o;
  o.quick = true;
  ScaleSettings s = scaleSettings(o);
  // Both ends of each axis, smaller: more processes than tenants (each
  // process still opens one) and more tenants than one connection holds.
  s.processes = {1, 8};
  s.tenants = {2, 100};
  s.rate_per_s = 2'000;
  s.warmup = std::chrono::milliseconds(100);
  s.measured = std::chrono::milliseconds(300);
  s.scan_budget = std::chrono::milliseconds(1);
  const ScenarioResult r = runScale(s);
  if (const auto* err = std::get_if<ScenarioError>(&r)) FAIL() << err->message;
  const nlohmann::json& j = std::get<ScenarioReport>(r).json;
  EXPECT_EQ(j["scenario"], "scale");
  ASSERT_EQ(j["cells"].size(), 4u);
  for (const nlohmann::json& c : j["cells"]) {
    SCOPED_TRACE(c.dump());
    EXPECT_GE(c["tenants"].get<int>(), c["processes"].get<int>());
    EXPECT_GT(c["completed"].get<std::uint64_t>(), 0u);
    EXPECT_GT(c["completed_per_s"].get<double>(), 0);
    EXPECT_EQ(c["lost"], 0);
    EXPECT_EQ(c["submitted"].get<std::uint64_t>(), c["completed"].get<std::uint64_t>());
    EXPECT_EQ(c["daemon_exit_status"], 0);
    ASSERT_TRUE(c["daemon_cpu_ns_per_request"].is_number());
    ASSERT_TRUE(c["vs_base"].is_number());
    ASSERT_TRUE(c["rtt"]["p50_us"].is_number());
    ASSERT_TRUE(c["rtt"]["p99_us"].is_number());
    ASSERT_TRUE(c["ring_full"].is_number());
  }
  // 100 tenants on one process share its one connection (layout 3: tenants
  // are handles, not rings).
  EXPECT_EQ(j["cells"][1]["connections"].get<std::uint64_t>(),
            j["cells"][1]["processes"].get<std::uint64_t>());
  ASSERT_EQ(j["bitmap_scan"].size(), 4u);
  for (const nlohmann::json& b : j["bitmap_scan"]) EXPECT_GT(b["ns_per_pass"].get<double>(), 0);
  EXPECT_EQ(j["target"]["lost"], 0);
}

}  // namespace
}  // namespace fairsched::bench
