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
  f.topology.mode = "cluster";
  f.topology.nodes.push_back({"10.0.0.1:7000", {{0, 5460}, {16000, 16000}}, true});
  f.topology.nodes.push_back({"10.0.0.2:7000", {{5461, 15999}, {16001, 16383}}, false});
  f.topology.moved = 9;
  f.topology.ask = 10;
  f.topology.retried = 11;
  f.topology.refreshes = 12;
  f.topology.failovers = 13;
  f.last_error = "io: 10.0.0.2:7000: no reply within 50 ms";
  const nlohmann::json j = fleetStatsJson(f, "redis://app:***@10.0.0.1:7000");
  EXPECT_EQ(j.dump(),
            R"({"backend":"redis://app:***@10.0.0.1:7000","backend_calls":5,"backend_failures":7,)"
            R"("breaker":"open","breaker_opened":8,"degraded":true,"degraded_admitted":3,)"
            R"("degraded_rejected":4,"failovers":13,)"
            R"("last_error":"io: 10.0.0.2:7000: no reply within 50 ms","leases_held":2,)"
            R"("limits":1,"master":"","nodes":[{"address":"10.0.0.1:7000","connected":true,)"
            R"("slots":"0-5460,16000"},{"address":"10.0.0.2:7000","connected":false,)"
            R"("slots":"5461-15999,16001-16383"}],"redirects_ask":10,"redirects_moved":9,)"
            R"("retried":11,"round_trips":6,"topology":"cluster","topology_refreshes":12})");
}

}  // namespace
}  // namespace fairsched::daemon
