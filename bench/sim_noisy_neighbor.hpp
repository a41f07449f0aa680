// `sim-noisy-neighbor`: the noisy-neighbor experiment on the real scheduling
// core in virtual time (bench/simulator.hpp), with the executor modelled from
// the config's `cpu` settings. Tenant A bursts 10,000 requests; tenant B sends
// 5, spaced out during the burst; same tier and weight. Runs policy `fair`,
// policy `fifo`, and B alone, and reports the noisy-neighbor JSON shape of
// docs/benchmarks.md. The multi-process `noisy-neighbor` (real daemon, real client
// processes) measures the same thing through the whole system.
#pragma once

#include "bench/scenario.hpp"

namespace fairsched::bench {

ScenarioResult runSimNoisyNeighbor(const ScenarioOptions& options);

}  // namespace fairsched::bench
