// `fairsched-bench replay`: a JSONL trace (bench/trace.hpp) through the real
// scheduling core against the executor modelled from the config
// (bench/simulator.hpp), in virtual time. Reports per-tenant outcomes and
// latency, served tokens per time window, and the maximum service difference
// between tenants that are both backlogged (bench/service_difference.hpp).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "bench/scenario.hpp"
#include "bench/service_difference.hpp"
#include "bench/trace.hpp"
#include "daemon/config/config.hpp"

namespace fairsched::bench {

struct ReplayRun {
  Policy policy = Policy::kFair;
  std::vector<RequestEvent> events;       // one per trace request, in trace order
  std::map<std::string, double> weights;  // every tenant's scheduling weight
};

// Replays `trace` under `policy` with the tiers, tenants, limits, endpoints
// and executor models of `cfg`. Fails (with the line) on an endpoint the
// config does not have. Times in the events are relative to t = 0 of the trace.
std::variant<ReplayRun, std::string> replayTrace(const config::Config& cfg, Policy policy,
                                                 const std::vector<TraceRequest>& trace);

// {"scenario":"replay","policy":..,"cost":..,"tenants":{NAME:{submitted,
// completed,rejected,p50_ms,p99_ms,max_ms,tokens_served,weight}},
// "max_service_difference":..,"max_service_difference_at":{..},
// "window_s":..,"series":{NAME:{"tokens_per_window":[..],"latency_ms":[..]}}}
nlohmann::json replayJson(const ReplayRun& run, const CostWeights& cost);

// One JSON object per line and request, in trace order (design.md §6).
std::string replayEventsJsonl(const ReplayRun& run);

std::string replayTable(const nlohmann::json& report);

ScenarioResult runReplay(const ScenarioOptions& options);
std::optional<std::string> plotReplay(const nlohmann::json& report, const std::string& path);

}  // namespace fairsched::bench
