// The stream scenario in quick mode: real daemon, reference worker and
// client processes; the JSON has the shape docs/worker.md gives, and no token
// is lost or reaches the wrong request. No figure is asserted: speed is
// recorded in docs/benchmarks.md, as ratios to the raw ping-pong of the run.
#include <gtest/gtest.h>

#include <variant>

#include "bench/stream_scenario.hpp"

namespace fairsched::bench {
namespace {

TEST(BenchStream, QuickRunReportsTheDocumentedShapeAndLosesNoToken) {
  ScenarioOptions o;
  o.quick = true;
  const ScenarioResult r = runStreamScenario(o);
  if (const auto* err = std::get_if<ScenarioError>(&r)) FAIL() << err->message;
  const nlohmann::json& j = std::get<ScenarioReport>(r).json;
  EXPECT_EQ(j["scenario"], "stream");
  ASSERT_TRUE(j["tokens_per_s"].is_number());
  ASSERT_TRUE(j["token_latency"]["p50_us"].is_number());
  ASSERT_TRUE(j["token_latency"]["p99_us"].is_number());
  ASSERT_TRUE(j["raw_pingpong"]["p50_us"].is_number());
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["raw_pingpong"]["p50_us"].get<double>(), 0);
  EXPECT_GT(j["token_latency"]["samples"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(j["lost"], 0);
  EXPECT_EQ(j["mismatched"], 0);
  EXPECT_EQ(j["failed_requests"], 0);
  EXPECT_EQ(j["daemon_exit_status"], 0);
}

}  // namespace
}  // namespace fairsched::bench
