// The real scheduling core against a modelled executor, in virtual time.
//
// Batch endpoints: `slots` executor slots; a batch occupies one for
// per_batch_us + per_token_us × (input + actual output tokens) — the same
// model as the daemon's CPU executor, so results mean the same thing as on a
// GPU whose cost per batch follows it. The core is asked for a batch whenever
// a slot is free (late binding), exactly as the daemon does.
//
// Worker endpoints (`engine` set): one continuous-batching engine that steps
// exactly as the reference worker does (worker/reference_engine.hpp): at each
// step boundary it takes what fits its free sequences and KV tokens
// (Scheduler::take — and, where the endpoint preempts, gives back the
// sequences Scheduler::preemptionVictim names), prefills within the chunk
// budget oldest first, and every prefilled sequence decodes one token; the
// step lasts step_us + prefill_token_us × prefilled + decode_token_us ×
// decoding, and at its end each token is charged (Scheduler::charge) and
// finished sequences complete. A preempted sequence resumes later from
// prompt + generated prefix, recomputed as a prefill.
//
// Virtual time runs as fast as the core can decide: an hour of trace takes
// seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/core/scheduler_spec.hpp"
#include "daemon/core/types.hpp"

namespace fairsched::bench {

// How a worker endpoint's requests reach its engines.
enum class Placement : std::uint8_t {
  kPull,      // each engine takes the next fair choices at its step boundary (one engine)
  kRoomiest,  // the core's next choice goes to the engine with the most free sequences
  kPrefix,    // ... to the engine holding most of its prefix, within the load bound
  kRouter,    // routed on arrival by prefix (same bound) to an engine with a FIFO queue
              // of its own: a prefix-aware router in front of engines' own queues
};

struct ExecutorModel {
  double per_batch_us = 200.0;
  double per_token_us = 0.5;
  std::uint32_t slots = 1;
  std::optional<config::EngineConfig> engine;  // a worker endpoint: continuous batching
  // Worker endpoints: `replicas` identical engines, each with a prefix cache
  // of `cache_blocks` blocks of `block_tokens` (LRU; a cached block's
  // prefill is skipped), placed as `placement` says; `load_slack` is the
  // affinity bound's slack (daemon/core/prefix_router.hpp).
  std::uint32_t replicas = 1;
  std::uint64_t cache_blocks = 0;
  std::uint32_t block_tokens = 16;
  Placement placement = Placement::kPull;
  double load_slack = 0.25;
};

struct SimArrival {
  TimeNs t = 0;
  std::string tenant;
  EndpointId endpoint = 0;
  std::uint32_t input_tokens = 0;
  std::uint32_t output_tokens = 0;      // what the request will actually produce
  std::uint32_t max_output_tokens = 0;  // what it asks for (0: = output_tokens)
  std::int32_t priority = 0;
  TimeNs deadline = kNever;  // absolute
  std::optional<TierId> tier_hint;
  // The prompt's block hash chain (include/fairsched/prefix_hash.hpp); empty
  // when nothing is known of it.
  std::vector<std::uint64_t> blocks;
};

struct SimOutcome {
  std::size_t arrival_index = 0;  // into the arrivals given to simulate()
  Status status = Status::kOk;
  TimeNs arrival = 0;
  TimeNs dispatch = -1;     // -1: never dispatched
  TimeNs completion = 0;    // when the client learns the outcome
  TimeNs retry_after = 0;   // RATE_LIMITED only
  TimeNs first_token = -1;  // worker endpoints: the first output token's emission
  std::uint32_t preemptions = 0;
  // Worker endpoints: prompt tokens prefilled (recomputes after a preemption
  // included) and skipped for a cached prefix; blocks of its chain looked up
  // at each dispatch and found cached.
  std::uint64_t prefilled_tokens = 0;
  std::uint64_t cached_tokens = 0;
  std::uint32_t blocks_queried = 0;
  std::uint32_t blocks_hit = 0;
  std::uint32_t replica = 0;  // the engine that served it (last dispatch)
};

// The executor model of every endpoint of `cfg`, in its order: worker
// endpoints as engines from [endpoints.NAME.engine], the others from
// [endpoints.NAME.cpu].
std::vector<ExecutorModel> executorModels(const config::Config& cfg);

// Runs `arrivals` (sorted by t) to completion. `executors[e]` models endpoint e.
// Returns one outcome per arrival, in arrival order.
std::vector<SimOutcome> simulate(const core::SchedulerSpec& spec,
                                 const std::vector<ExecutorModel>& executors,
                                 const std::vector<SimArrival>& arrivals);

// The physical reference: every request starts at its arrival on an engine of
// its own (worker endpoints: alone, prefill in chunks, then one token per
// step of one sequence; batch endpoints: a batch of one) — no queueing, no
// sharing. Nothing is rejected.
std::vector<SimOutcome> simulateFloor(const std::vector<ExecutorModel>& executors,
                                      const std::vector<SimArrival>& arrivals);

}  // namespace fairsched::bench
