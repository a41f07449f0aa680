// `fairsched-bench replay`: a JSONL trace (bench/trace.hpp) through the real
// scheduling core against the executors modelled from the config
// (bench/simulator.hpp; worker endpoints as continuous-batching engines from
// [endpoints.NAME.engine]), in virtual time. Reports per-tenant outcomes,
// latency and time to first token, served tokens per time window, the
// maximum service difference between tenants that are both backlogged and
// the windowed service difference of the VTC paper
// (bench/service_difference.hpp).
//
// Policies: fair (the config as written: its fairness and preemption), drr
// (fair with DRR and no preemption on every endpoint: admission alone), vtc
// (the Virtual Token Counter as published, no preemption), fifo, and floor
// (no queueing at all: every request runs alone from its arrival — the
// physical reference). Several policies, or --runs N with --jitter-ms J
// (N copies of the trace, each arrival moved by up to ±J ms), give a
// comparison: medians and ranges per policy, and ratios to fifo, vtc and the
// floor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "bench/scenario.hpp"
#include "bench/service_difference.hpp"
#include "bench/simulator.hpp"
#include "bench/trace.hpp"
#include "daemon/config/config.hpp"

namespace fairsched::bench {

// kFairPrefix, kFifoPrefix: fair or fifo order, each request placed on the
// engine holding most of its prefix within the load bound; kRouter: routed
// on arrival by prefix to an engine's own first-come-first-served queue
// (bench/simulator.hpp, Placement). They matter with Locality.
enum class ReplayPolicy { kFair, kDrr, kVtc, kFifo, kFloor, kFairPrefix, kFifoPrefix, kRouter };
const char* toString(ReplayPolicy p);
std::optional<ReplayPolicy> parseReplayPolicy(std::string_view name);

struct ReplayRun {
  ReplayPolicy policy = ReplayPolicy::kFair;
  std::vector<RequestEvent> events;       // one per trace request, in trace order
  std::vector<SimOutcome> outcomes;       // the simulator's, in arrival order (not with --real)
  std::map<std::string, double> weights;  // every tenant's scheduling weight
  // --real: what the reference workers' engines counted, all together:
  // prompt tokens taken (again after a preemption), those found cached and
  // sequences given back on PREEMPT.
  struct {
    std::uint64_t prompt_tokens = 0, cached_tokens = 0, preempted = 0;
  } engines;
};

// Replays `trace` under `policy` with the tiers, tenants, limits, endpoints
// and executor models of `cfg`. Fails (with the line) on an endpoint the
// config does not have. Times in the events are relative to t = 0 of the trace.
// `jitter` > 0 moves each arrival by a uniform amount in [-jitter, jitter]
// (never before 0), drawn from `seed`.
// Worker endpoints as `replicas` engines, each with a prefix cache of
// `cache_blocks` blocks of `block_tokens`; each request's chain from the
// trace's prefix segments (promptChain, at most `max_blocks`).
struct Locality {
  std::uint32_t replicas = 1;
  std::uint64_t cache_blocks = 0;
  std::uint32_t block_tokens = 16;
  std::size_t max_blocks = 1024;
  double load_slack = 0.25;
  // fair+prefix: the fairness slack a choice may use for locality, in cost
  // units per unit of weight (EndpointSpec::locality_slack).
  double locality_slack = 4096;
};
std::variant<ReplayRun, std::string> replayTrace(const config::Config& cfg, ReplayPolicy policy,
                                                 const std::vector<TraceRequest>& trace,
                                                 TimeNs jitter = 0, std::uint64_t seed = 0,
                                                 const Locality* locality = nullptr);
inline std::variant<ReplayRun, std::string> replayTrace(const config::Config& cfg, Policy policy,
                                                        const std::vector<TraceRequest>& trace) {
  return replayTrace(cfg, policy == Policy::kFifo ? ReplayPolicy::kFifo : ReplayPolicy::kFair,
                     trace);
}

// The same trace through real processes: a forked fairschedd with `cfg`
// (its socket and a client rule set up in `dir`, policy applied as by
// replayTrace; kFloor and kRouter have no daemon form), one reference worker
// per worker endpoint modelling its [endpoints.NAME.engine], and one client
// process per tenant submitting at the trace's times (streamed on worker
// endpoints; each request asks for and produces output_tokens). Events as by
// replayTrace, except that the dispatch time is not seen by a client: it is
// set to the first token's arrival (or the completion) for the metrics that
// need one. With `locality`: `replicas` reference workers per worker
// endpoint, each with a prefix cache of `cache_blocks` reporting KV events,
// every request carrying its prompt's tokens (promptTokens), the daemon
// routing by prefix for kFairPrefix and kFifoPrefix and to the roomiest
// otherwise; run.engines holds what the engines counted.
std::variant<ReplayRun, std::string> replayReal(config::Config cfg, ReplayPolicy policy,
                                                const std::vector<TraceRequest>& trace,
                                                const std::string& dir,
                                                const Locality* locality = nullptr);

// The headline figures of one run, for comparisons.
struct ReplaySummary {
  double windowed_difference = 0;  // mean over windows (VTC paper: 60 s), tenants in the system
  double windowed_waiting = 0;     // the same among tenants with a waiting request
  double max_service_difference = 0;
  double light_ttft_p50_ms = 0;  // light tenants: under half an equal share of the demand
  double ttft_p50_ms = 0;        // every request with a first token
  double makespan_s = 0;         // first arrival to last completion
  std::uint64_t preemptions = 0;
};
// `window`: of the windowed service difference.
ReplaySummary summarize(const ReplayRun& run, const CostWeights& cost,
                        TimeNs window = 60 * kNsPerSec);

// {"scenario":"replay","policy":..,"cost":..,"tenants":{NAME:{submitted,
// completed,rejected,p50_ms,p99_ms,max_ms,tokens_served,weight}},
// "max_service_difference":..,"max_service_difference_at":{..},
// "window_s":..,"series":{NAME:{"tokens_per_window":[..],"latency_ms":[..]}}}
nlohmann::json replayJson(const ReplayRun& run, const CostWeights& cost,
                          TimeNs window = 60 * kNsPerSec);

// One JSON object per line and request, in trace order (docs/benchmarks.md).
std::string replayEventsJsonl(const ReplayRun& run);

std::string replayTable(const nlohmann::json& report);

ScenarioResult runReplay(const ScenarioOptions& options);

// --replicas N (N > 1): the policies of `options.policy` (all: kReplicaPolicies)
// on N engines with prefix caches (bench/replay_replicas.cpp): per policy the
// total time, prefill tokens computed, cache hit rate, light tenants' time to
// first token and the windowed service difference, and the aims.
inline constexpr std::string_view kReplicaPolicies = "fair,fair+prefix,vtc,fifo,fifo+prefix,router";
ScenarioResult runReplicaComparison(const config::Config& cfg,
                                    const std::vector<TraceRequest>& trace,
                                    const std::vector<ReplayPolicy>& policies,
                                    const ScenarioOptions& options);
std::optional<std::string> plotReplay(const nlohmann::json& report, const std::string& path);

}  // namespace fairsched::bench
