// `stream`: tokens through the whole worker path (docs/worker.md) — a
// reference worker (worker/reference_engine.hpp, a zero-cost engine model:
// every step decodes one token of each running sequence) emits into its
// event ring, fairschedd validates and charges each token and relays it
// into the submitting client's completion ring, the client checks it
// against the reference function. Measured in one run: tokens relayed per
// second with a STEP record per engine step and, as the baseline, a TOKENS
// record per sequence per step; token latency from the worker's emit to the
// client's receipt (busy-polling client, and a client that sleeps on its
// descriptor), lost and mismatched tokens; and two limits with nothing of
// fairsched in between: a bare shared-memory ping-pong between two
// processes, and a word handed from a process that sleeps between writes
// to a spinning reader on its CPU (the paced worker's situation when three
// processes share two CPUs).
//
// JSON: {"scenario":"stream","tokens_per_s":..,"tokens_per_s_token_records":..,
// "step_records_speedup":..,"token_latency":{"p50_us":..,"p99_us":..},
// "raw_pingpong":{"p50_us":..},"vs_raw":{"p50":..},"sleeping_handoff":{..},
// "vs_sleeping_handoff":{"p50":..},"lost":N,"mismatched":N, ...}
#pragma once

#include "bench/scenario.hpp"

namespace fairsched::bench {

ScenarioResult runStreamScenario(const ScenarioOptions& options);

}  // namespace fairsched::bench
