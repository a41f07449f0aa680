// What both noisy-neighbor scenarios report (the multi-process one and the
// virtual-time one): per run and tenant, submitted / completed / rejected /
// lost, latency percentiles of completed requests and tokens served, in the
// JSON shape of docs/benchmarks.md; the table people read; the plot.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "bench/scenario.hpp"
#include "daemon/core/types.hpp"

namespace fairsched::bench {

// One request as its client saw it.
struct RequestRecord {
  TimeNs arrival = 0;      // submitted, relative to the run's start
  TimeNs completion = -1;  // its completion arrived; -1 = never (lost)
  Status status = Status::kOk;
  std::uint64_t tokens = 0;  // input + output tokens, counted when OK
  TimeNs first_token = -1;   // worker endpoints: its first streamed token arrived; -1 = none
};

struct NoisyRun {
  Policy policy = Policy::kFair;
  std::string label;  // "burst" or "alone"
  std::map<std::string, std::vector<RequestRecord>> tenants;
};

// {"scenario":"noisy-neighbor","mode":mode,"runs":[...],"series":{...}}: runs
// as in docs/benchmarks.md (tier and weight per tenant), series the plot's points
// ("policy/label/tenant" -> [[completion_ms, latency_ms], ...]).
nlohmann::json noisyNeighborJson(const std::vector<NoisyRun>& runs, const std::string& mode,
                                 const std::string& tier, double weight);

// The table: one row per run and tenant, then B's p99 against the targets.
std::string noisyNeighborTable(const nlohmann::json& report, const std::string& title);

// The scenario's three runs, in the report's order: fair with A's burst,
// fifo with it, and fair with B alone. `run_one(policy, label, burst)` makes
// one (or says why it could not); the runs, or the first such reason.
using NoisyRunResult = std::variant<NoisyRun, std::string>;
std::variant<std::vector<NoisyRun>, std::string> runNoisyPlans(
    const std::function<NoisyRunResult(Policy, const char*, bool)>& run_one);

// The report of `runs`: noisyNeighborJson and the table under `heading`
// (which says how the runs were made) and the load both scenarios offer.
ScenarioReport noisyNeighborReport(const std::vector<NoisyRun>& runs, const std::string& mode,
                                   const std::string& tier, double weight,
                                   const std::string& heading);

std::optional<std::string> plotNoisyNeighbor(const nlohmann::json& report, const std::string& path);

}  // namespace fairsched::bench
