// The serving side's stats structs as JSON, one function per struct, for
// `fairschedctl status` (server_admin.cpp). The keys are the status
// output's contract (fairschedctl and its tests read them); the Prometheus
// rendering of the same structs is in metrics_render.cpp.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/fleet/fleet_limiter.hpp"
#include "daemon/server/server_stats.hpp"

namespace fairsched::daemon {

// {"counters": {...}, "preemptions": {endpoint: n}, "preempts_ignored": n}:
// the keys ServerStats contributes to the status object. `endpoint_names`
// by EndpointId; `worker_endpoint[e]` says whether endpoint e is served by
// workers (only those are listed under "preemptions").
nlohmann::json serverStatsJson(const ServerStats& s, std::span<const std::string> endpoint_names,
                               const std::vector<bool>& worker_endpoint);

// The status object's "fleet": the limiter's counters and breaker state,
// with `backend`, the fleet backend's URL.
nlohmann::json fleetStatsJson(const fleet::FleetStats& f, std::string_view backend);

}  // namespace fairsched::daemon
