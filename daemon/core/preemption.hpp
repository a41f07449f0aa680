// Preemption's two decisions on a worker endpoint, as pure functions of what
// they are shown: whether the endpoint's rate allows one more preemption now
// (PreemptionBudget), and which running request to give back so that the next
// fair choice can run (VictimChooser). The Scheduler describes the situation
// from its state (Scheduler::preemptionVictim, scheduler_running.cpp) and
// applies the choice (Scheduler::preempt); nothing here reads or changes
// scheduler state.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "daemon/core/types.hpp"

namespace fairsched::core {

// A token bucket of `max_per_s` preemptions per second, refilled
// continuously, holding a second's worth (and at least one). It starts empty
// at time 0, so the first call, at any `now` of a running clock, finds it full.
class PreemptionBudget {
 public:
  // Refills the bucket up to `now`; true when it holds a whole preemption.
  bool allows(double max_per_s, TimeNs now);
  // One preemption was made (whether allows() was asked or not): the bucket
  // may go below zero and then takes that much longer to allow the next.
  void spend() { tokens_ -= 1.0; }
  double tokens() const { return tokens_; }

 private:
  double tokens_ = 0;
  TimeNs refilled_ = 0;
};

// The request that would run next if a sequence were free: the next fair
// choice of the endpoint (its tier, then its tenant within the tier).
struct PreemptionWaiter {
  std::uint32_t tenant = 0;  // any id that tells the tenants of the endpoint apart
  TierId tier = 0;           // 0 is the highest tier
  double weight = 1.0;       // its tenant's weight
  double service = 0;        // its tenant's service per unit of weight, as for candidates
  // The sum of the weights of the tier's tenants that have requests queued
  // (the waiter's own included).
  double backlogged_weight = 0;
};

// A running request, as the choice sees it.
struct PreemptionCandidate {
  std::uint64_t handle = 0;  // what choose() returns for it; never 0
  std::uint32_t tenant = 0;  // as PreemptionWaiter::tenant
  TierId tier = 0;
  double weight = 1.0;  // its tenant's weight
  bool tenant_queued =
      false;  // its tenant has requests queued (its weight is in backlogged_weight)
  double service =
      0;  // its tenant's service per unit of weight; only read when tier >= the waiter's
  std::uint32_t progress = 0;  // output tokens since it was last dispatched
  // What the engine computes again when it resumes: its prompt and every
  // token it generated so far.
  std::uint64_t recompute_tokens = 0;
  TimeNs dispatched_at = 0;
  std::uint64_t seq = 0;  // arrival order: among requests dispatched together, higher is newer
};

struct PreemptionRules {
  // A request that made less progress since it last started is never chosen
  // (no thrashing).
  std::uint32_t min_progress_tokens = 0;
  // How much more service per weight the tenant of a victim in the waiter's
  // own tier must have had than the waiter's tenant.
  double margin = 0;
  // PreemptionSpec::for_share: in the waiter's own tier, also when the
  // waiter's tenant runs something (below its share); else only when it
  // runs nothing.
  bool for_share = false;
};

class VictimChooser {
 public:
  // The handle of the running request to preempt for `waiter`, or 0 for none.
  // Requests with progress < min_progress_tokens, and requests of a higher
  // tier than the waiter's (a smaller TierId), are never chosen. Otherwise:
  //  - a request of a lower tier than the waiter's goes first, the lowest
  //    tier first, then the most-served tenant of that tier;
  //  - a request of the waiter's tier only when the waiter's tenant runs
  //    nothing on the endpoint (unless rules.for_share), and sharing the
  //    sequences the tier runs fairly calls for it: each tenant's share is the tier's
  //    running requests × its weight / the weights of the tier's active
  //    tenants (backlogged_weight, plus the weight of each running tenant
  //    with nothing queued). The waiter's tenant must run fewer than its
  //    share; the victim's tenant must run more than its own share, at least
  //    two more than the waiter's tenant runs, and have been served at least
  //    `margin` more per weight. Among such tenants, the most served. Never
  //    one of the waiter's own tenant's requests.
  // Among the requests of the chosen tenant: the cheapest to resume (the
  // fewest recompute_tokens: a preemption costs the engine that prefill
  // again), then the newest (dispatched last; among those dispatched
  // together, arrived last). Ties between tenants served equally go the
  // same way.
  std::uint64_t choose(const PreemptionWaiter& waiter, std::span<const PreemptionCandidate> running,
                       const PreemptionRules& rules);

 private:
  std::uint32_t runningOf(std::uint32_t tenant) const;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> counts_;  // scratch: tenant, running
};

}  // namespace fairsched::core
