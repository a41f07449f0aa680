// What the scheduling core is built from: resolved, validated settings with
// every default applied (the config layer turns TOML into this). Plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/limit_spec.hpp"
#include "daemon/core/types.hpp"

namespace fairsched::core {

// How the tenants of one tier share an endpoint (flow_selector.hpp).
enum class Fairness : std::uint8_t {
  kDrr,     // deficit round robin: fair among tenants that stay backlogged
  kRecent,  // least recent service first: service decays with half_life
  kVtc,     // the Virtual Token Counter (no decay, returning tenants lifted)
};
const char* toString(Fairness f);

// Preemption on worker endpoints (docs/worker.md): a waiting request of a
// higher tier, or of a tenant served less than a running one, may take the
// place of a running sequence, which later resumes (prompt + generated
// prefix, recomputed by the engine).
struct PreemptionSpec {
  bool enabled = false;
  double max_per_s = 20.0;  // preemptions per second on the endpoint (a token bucket, burst 1 s)
  // A sequence runs this many output tokens after it (re)started before it
  // may be preempted again: no thrashing.
  std::uint32_t min_progress_tokens = 16;
  // Within a tier, a preemption is for a waiting tenant with nothing running
  // on the endpoint: its request's first token is what it buys, and each
  // one costs the engine the victim's prompt and output again. true: also
  // for a tenant running fewer sequences than its share (shares converge
  // sooner, at that cost). A higher tier preempts a lower one either way.
  bool for_share = false;
};

struct EndpointSpec {
  std::string name;
  CostModel cost = CostModel::kTokens;
  std::int64_t quantum = 512;  // DRR quantum for weight 1, in cost units (>= 1)
  std::uint32_t max_batch_requests = 32;
  std::uint32_t max_batch_tokens = 16384;  // input + max output tokens of a batch
  TimeNs max_wait = 2 * kNsPerMs;          // longest a partial batch is held back
  std::uint32_t max_output_tokens = 4096;
  TimeNs latency_target = 0;      // backlog throttle; 0 = off
  std::uint32_t parallelism = 1;  // executor slots (streams, threads)
  // Workers stream tokens (docs/worker.md): the `tokens` and `adaptive` cost
  // models charge a request's prompt at dispatch and each output token as it
  // is generated (Scheduler::charge), so the DRR deficit follows service at
  // iteration granularity; the final count settles nothing further.
  bool per_token = false;
  Fairness fairness = Fairness::kDrr;
  TimeNs half_life = 20 * kNsPerSec;  // kRecent (and preemption's service counters under DRR)
  PreemptionSpec preemption;
  // Locality within fairness (Scheduler::take with a LocalityProbe): a
  // choice may go to a backlogged tenant of the tier whose service, in cost
  // units per unit of weight, is at most this much above the least served
  // one's, for a request whose prefix the worker holds (recent and vtc
  // fairness; 0: only within the chosen tenant). docs/architecture.md
  // states the bound.
  double locality_slack = 0;
};

struct TierSpec {
  std::string name;
  double min_share = 0.0;
  double default_weight = 1.0;
  std::uint32_t default_queue_limit = 10000;
  // A batch closes before this tier's next request would take it past this
  // many tokens (unless the batch is empty); 0 = no cap beyond the
  // endpoint's. Bounds how long a higher tier's request waits behind a
  // running batch of this tier, at the cost of smaller batches here.
  std::uint32_t max_batch_tokens = 0;
};

// Limits per endpoint: index = EndpointId. A spec with amount 0 is "unlimited".
using LimitTable = std::vector<std::vector<LimitSpec>>;

struct TenantSpec {
  std::string name;
  TierId tier = 0;
  double weight = 1.0;
  std::uint32_t queue_limit = 10000;
  std::optional<LimitTable> limits;  // nullopt: the tier's table
};

struct SchedulerSpec {
  Policy policy = Policy::kFair;
  std::vector<EndpointSpec> endpoints;
  std::vector<TierSpec> tiers;  // highest priority first
  std::vector<LimitTable>
      tier_limits;                  // per tier: endpoint defaults merged with the tier's overrides
  std::vector<TenantSpec> tenants;  // listed in the config
  TierId default_tier = 0;          // for unlisted tenants without a tier hint
  TimeNs idle_timeout = 600 * kNsPerSec;
};

}  // namespace fairsched::core
