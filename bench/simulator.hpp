// The real scheduling core against a modelled executor, in virtual time.
//
// Each endpoint has `slots` executor slots; a batch occupies one for
// per_batch_us + per_token_us × (input + actual output tokens) — the same
// model as the daemon's CPU executor, so results mean the same thing as on a
// GPU whose cost per batch follows it. The core is asked for a batch whenever
// a slot is free (late binding), exactly as the daemon does. Virtual time runs
// as fast as the core can decide: an hour of trace takes seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/scheduler_spec.hpp"
#include "daemon/core/types.hpp"

namespace fairsched::bench {

struct ExecutorModel {
  double per_batch_us = 200.0;
  double per_token_us = 0.5;
  std::uint32_t slots = 1;
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
};

struct SimOutcome {
  std::size_t arrival_index = 0;  // into the arrivals given to simulate()
  Status status = Status::kOk;
  TimeNs arrival = 0;
  TimeNs dispatch = -1;    // -1: never dispatched
  TimeNs completion = 0;   // when the client learns the outcome
  TimeNs retry_after = 0;  // RATE_LIMITED only
};

// Runs `arrivals` (sorted by t) to completion. `executors[e]` models endpoint e.
// Returns one outcome per arrival, in arrival order.
std::vector<SimOutcome> simulate(const core::SchedulerSpec& spec,
                                 const std::vector<ExecutorModel>& executors,
                                 const std::vector<SimArrival>& arrivals);

}  // namespace fairsched::bench
