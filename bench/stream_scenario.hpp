// `stream`: tokens through the whole worker path (docs/worker.md) — a
// reference worker (worker/reference_engine.hpp, a zero-cost engine model:
// every step decodes one token of each running sequence) emits into its
// event ring, fairschedd validates and charges each token and relays it
// into the submitting client's completion ring, the client checks it
// against the reference function. Measured in one run: tokens relayed per
// second, token latency from the worker's emit to the client's receipt
// (busy-polling client, and a client that sleeps on its descriptor), lost
// and mismatched tokens, and a bare shared-memory ping-pong between two
// processes — the physical limit the latency is compared with.
//
// JSON: {"scenario":"stream","tokens_per_s":..,"token_latency":{"p50_us":..,
// "p99_us":..},"raw_pingpong":{"p50_us":..},"lost":N,"mismatched":N, ...}
#pragma once

#include "bench/scenario.hpp"

namespace fairsched::bench {

ScenarioResult runStreamScenario(const ScenarioOptions& options);

}  // namespace fairsched::bench
