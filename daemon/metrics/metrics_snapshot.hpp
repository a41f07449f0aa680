// What a scrape renders: the state of the last Metrics::publish(), copied
// under Metrics' mutex (metrics.hpp), and its rendering into Prometheus
// metric families (metrics_render.cpp). The serving side's counters are
// held as the structs that keep them (ServerStats, fleet::FleetStats), so
// a new counter is listed once more only where it is rendered. Private to
// daemon/metrics/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/fleet/fleet_limiter.hpp"
#include "daemon/metrics/metrics.hpp"
#include "daemon/server/server_stats.hpp"

namespace prometheus {
struct MetricFamily;
}

namespace fairsched::daemon {

struct MetricsSnapshot {
  std::vector<std::string> series_names;
  std::vector<std::string> endpoint_names;  // the daemon's, then __unknown__
  std::vector<SeriesCounters> counters;     // [series * endpoints + endpoint]
  std::vector<SeriesGauges> gauges;         // same index
  std::vector<std::uint64_t> clients;       // open rings per series
  std::vector<std::uint64_t> endpoint_queued;
  ServerStats server;
  std::optional<fleet::FleetStats> fleet;  // set when the daemon has a fleet limiter
  std::uint64_t in_flight = 0;
  std::uint64_t tenants = 0;
  std::uint64_t connections = 0;
  std::uint64_t loop_iterations = 0;
  std::uint64_t listed_series = 0;
};

// The families a scrape serves, in exposition order.
std::vector<prometheus::MetricFamily> renderMetrics(const MetricsSnapshot& s);

}  // namespace fairsched::daemon
