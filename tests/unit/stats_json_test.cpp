// The JSON of the stats structs is the contract of `fairschedctl status`:
// every key, and which field it shows, is pinned here (distinct values, so
// a swapped field shows).
#include "daemon/metrics/stats_json.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace fairsched::daemon {
namespace {

TEST(StatsJson, ServerStatsGivesTheCountersAndTheWorkerEndpointsPreemptions) {
  ServerStats s;
  s.connections_accepted = 1;
  s.connections_refused = 2;
  s.submissions = 3;
  s.completions_delivered = 4;
  s.tokens_streamed = 5;
  s.completions_dropped = 6;
  s.bad_slots = 7;
  s.batches = 8;
  s.bad_tenant_handles = 12;
  s.tenant_handles_open = 13;
  s.reject_throttled = 14;
  s.connects_deferred = 15;
  s.preemptions = {9, 0, 10};
  s.preempts_ignored = 11;
  const std::vector<std::string> names = {"chat", "embed", "code"};
  const nlohmann::json j = serverStatsJson(s, names, {true, false, true});
  EXPECT_EQ(
      j.dump(),
      R"({"counters":{"bad_slots":7,"bad_tenant_handles":12,"batches":8,"completions_delivered":4,)"
      R"("completions_dropped":6,"connections_accepted":1,"connections_refused":2,)"
      R"("connects_deferred":15,)"
      R"("reject_throttled":14,"submissions":3,"tenant_handles_open":13,"tokens_streamed":5},)"
      R"("preemptions":{"chat":9,"code":10},)"
      R"("preempts_ignored":11})");
}

TEST(StatsJson, ServerStatsWithoutWorkerEndpointsHasAnEmptyPreemptionsObject) {
  ServerStats s;
  s.preemptions = {0};
  const std::vector<std::string> names = {"embed"};
  const nlohmann::json j = serverStatsJson(s, names, {false});
  EXPECT_EQ(j["preemptions"].dump(), "{}");
}

TEST(StatsJson, FleetStatsGivesTheBackendTheBreakerAndTheCounters) {
  fleet::FleetStats f;
  f.limits = 1;
  f.leases_held = 2;
  f.degraded_admitted = 3;
  f.degraded_rejected = 4;
  f.backend_calls = 5;
  f.round_trips = 6;
  f.backend_failures = 7;
  f.breaker = fleet::BreakerState::kOpen;
  f.breaker_counters.opened = 8;
  f.degraded = true;
  const nlohmann::json j = fleetStatsJson(f, "redis://127.0.0.1:6379");
  EXPECT_EQ(j.dump(),
            R"({"backend":"redis://127.0.0.1:6379","backend_calls":5,"backend_failures":7,)"
            R"("breaker":"open","breaker_opened":8,"degraded":true,"degraded_admitted":3,)"
            R"("degraded_rejected":4,"leases_held":2,"limits":1,"round_trips":6})");
}

}  // namespace
}  // namespace fairsched::daemon
