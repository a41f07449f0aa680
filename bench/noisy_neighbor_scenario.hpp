// `noisy-neighbor`: the whole system. A real daemon (forked) runs the config
// (the embedded default unless --config; its socket moved to a temporary
// directory and the caller's uid allowed), and real client processes talk to
// it through libfairsched: tenant A bursts 10,000 requests, tenant B sends 5
// spaced out during the burst; same tier and weight. Runs policy `fair`,
// policy `fifo`, and B alone, each with a fresh daemon. Latency is measured
// by each client from submit() to its completion.
#pragma once

#include "bench/scenario.hpp"

namespace fairsched::bench {

ScenarioResult runNoisyNeighbor(const ScenarioOptions& options);

}  // namespace fairsched::bench
