// The property scenarios of docs/benchmarks.md, each with a real fairschedd and one
// client process per tenant (bench/process_run.hpp) and a config built in
// code (--config is not used: each property needs its own tiers, weights and
// endpoint limits). Each prints a table with PASS or MISS against its target.
//  - weighted:   three backlogged tenants of weight 1:2:4; each one's share of
//                served tokens within 2% (relative) of its weight share.
//  - tiers:      paid keeps within 1.5x of its p99 alone while trial is
//                backlogged; trial is served with what is left; trial's
//                configured min_share holds when paid is backlogged too.
//  - token-cost: A sends 32k-token requests, B 256-token ones: under token
//                budgets B's share of tokens >= 45%; request budgets for contrast.
#pragma once

#include <cstdint>
#include <string>

#include "bench/scenario.hpp"

namespace fairsched::bench {

// The one endpoint every property scenario uses, as TOML: `chat`, streaming,
// cost model `cost`, batches of 32 requests and `max_batch_tokens`, the CPU
// model of the default config (200 us per batch, 0.5 us per token), no
// latency target.
std::string chatEndpointToml(const char* cost, std::uint32_t max_batch_tokens,
                             std::uint32_t max_output_tokens);
// The tier every tenant of weighted, token-cost and rate-limit is in, as
// TOML: "paid", the default, no min_share, weight 1, 20,000 queued.
std::string paidTierToml();

ScenarioResult runWeighted(const ScenarioOptions& options);
ScenarioResult runTiers(const ScenarioOptions& options);
ScenarioResult runTokenCost(const ScenarioOptions& options);
// rate-limit (bench/rate_limit_scenario.cpp): limits hold in every window,
// retry jitter, the retry budget under sustained rejection.
ScenarioResult runRateLimit(const ScenarioOptions& options);
// flood (bench/flood_scenario.cpp): steady clients' latency while other
// clients flood the daemon with submissions their limits refuse.
ScenarioResult runFlood(const ScenarioOptions& options);
// connect (bench/connect_scenario.cpp): the daemon's CPU per connection, and
// steady clients' latency during a storm of short-lived clients.
ScenarioResult runConnect(const ScenarioOptions& options);
// gateway (bench/gateway_scenario.cpp): fairsched-gateway against the same
// native upstream called directly, concurrency 1/16/64, JSON and streamed.
ScenarioResult runGatewayScenario(const ScenarioOptions& options);

}  // namespace fairsched::bench
