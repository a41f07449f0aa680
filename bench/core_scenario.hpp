// The `core` scenario: how many scheduling decisions per second the real core
// (fairsched::core::Scheduler under policy `fair`: tier -> DRR -> priority)
// makes, against the same Scheduler under policy `fifo` (one priority queue:
// the same code path except the queue), at 1, 100 and 10,000 tenants; plus
// limiter checks per second and the heap cost of a listed, idle tenant.
//
// Method. Each round builds a fresh Scheduler, pre-fills its queues with
// requests spread evenly over the tenants in a shuffled order (random input
// and output token counts from the seeded RNG), then times only the drain
// through nextBatch(): decisions = requests dispatched. Submitting and
// completing are timed separately. Fair and fifo rounds alternate; the report
// gives the best round and the median.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bench/scenario.hpp"
#include "daemon/core/scheduler_spec.hpp"

namespace fairsched::bench {

ScenarioResult runCoreScenario(const ScenarioOptions& options);
std::optional<std::string> plotCoreScenario(const nlohmann::json& report, const std::string& path);

// The spec every core measurement uses: one endpoint (tokens cost model,
// batches of 32 requests, a token budget so large that batches fill by count,
// no wait, no latency target), one tier without limits whose queue bound
// never binds, and `listed` tenants named "org-%08d".
core::SchedulerSpec coreBenchSpec(Policy policy, std::size_t listed = 0);

}  // namespace fairsched::bench
