// Scheduler, requests in flight on worker endpoints: per-token charging,
// settling a prompt's size, requeue after a lost worker, and preemption.
// See scheduler.hpp.
#include <algorithm>

#include "daemon/core/scheduler.hpp"

namespace fairsched::core {

void Scheduler::backToQueue(EndpointState& ep, Slot& s, Handle h, TimeNs now) {
  TenantState& ts = ep.states[s.ts];
  ts.in_flight--;
  in_flight_--;
  s.state = SlotState::kQueued;
  ts.last_active = now;
  enqueue(ep, indexOf(h), now);
  if (ts.in_flight == 0 && spec_.policy == Policy::kFair) noteNewcomer(ep, s.ts);
  // Its deadline entry may be gone: nextDeadline() and expireDeadlines() drop
  // the entries of requests in flight. A second entry is harmless (stale ones
  // are skipped).
  trackDeadline(s.req, h);
}

bool Scheduler::requeue(Handle h, TimeNs now) {
  Slot* s = inFlight(h);
  if (!s) return false;
  EndpointState& ep = endpoints_[s->req.endpoint];
  TenantState& ts = ep.states[s->ts];
  // Give back what its dispatch (and any token) charged: it runs again and
  // pays again then.
  if (spec_.policy == Policy::kFair && s->charged != kChargedUnderOtherModel && s->charged != 0) {
    ep.tenant_selectors[ts.tier].adjust(s->ts, s->charged, now);
  }
  s->charged = 0;
  s->emitted = 0;
  s->resumed = false;
  ts.stats.dispatched--;
  backToQueue(ep, *s, h, now);
  return true;
}

bool Scheduler::charge(Handle h, std::uint32_t tokens, TimeNs now) {
  Slot* s = inFlight(h);
  if (!s) return false;
  if (tokens == 0) return true;
  EndpointState& ep = endpoints_[s->req.endpoint];
  if (!ep.spec.per_token) return true;
  TenantState& ts = ep.states[s->ts];
  s->emitted += tokens;
  if (spec_.policy == Policy::kFair && ep.spec.cost != CostModel::kRequests &&
      s->charged != kChargedUnderOtherModel) {
    // VTC weighs an output token twice a prompt token (as published).
    const std::int64_t cost =
        static_cast<std::int64_t>(tokens) * (ep.spec.fairness == Fairness::kVtc ? 2 : 1);
    ep.tenant_selectors[ts.tier].adjust(s->ts, -cost, now);
    s->charged += cost;
  }
  ts.stats.tokens_served += tokens;
  ts.recent.add(tokens, now);
  ep.recent.add(tokens, now);
  ts.last_active = now;
  return true;
}

bool Scheduler::settleInput(Handle h, std::uint32_t input_tokens, TimeNs now) {
  Slot* s = inFlight(h);
  if (!s) return false;
  const std::int64_t delta =
      static_cast<std::int64_t>(input_tokens) - static_cast<std::int64_t>(s->req.input_tokens);
  if (delta == 0) return true;
  EndpointState& ep = endpoints_[s->req.endpoint];
  TenantState& ts = ep.states[s->ts];
  if (spec_.policy == Policy::kFair && ep.spec.cost != CostModel::kRequests &&
      s->charged != kChargedUnderOtherModel) {
    ep.tenant_selectors[ts.tier].adjust(s->ts, -delta, now);  // delta > 0 charges more
    s->charged += delta;
  }
  s->req.input_tokens = input_tokens;
  return true;
}

bool Scheduler::preempt(Handle h, TimeNs now) {
  Slot* s = inFlight(h);
  if (!s) return false;
  EndpointState& ep = endpoints_[s->req.endpoint];
  TenantState& ts = ep.states[s->ts];
  ep.preemption_budget.spend();
  ts.stats.preempted++;
  // Charges stay: its client received what it generated. The prompt the
  // engine recomputes is not charged again.
  s->resumed = ep.spec.preemption.enabled;
  backToQueue(ep, *s, h, now);
  return true;
}

Handle Scheduler::preemptionVictim(EndpointId e, TimeNs now, std::span<const Running> running) {
  if (e >= endpoints_.size() || spec_.policy != Policy::kFair || running.empty()) return 0;
  EndpointState& ep = endpoints_[e];
  const PreemptionSpec& ps = ep.spec.preemption;
  if (!ps.enabled || ep.queued == 0) return 0;
  if (!ep.preemption_budget.allows(ps.max_per_s, now)) return 0;

  // The next choice, as takeFair() would make it.
  const TierSelector::Choice choice = nextTier(ep);
  if (choice.tier == TierSelector::kNoTier) return 0;
  const TenantSelector::FlowId waiting = ep.tenant_selectors[choice.tier].select();
  if (waiting == TenantSelector::kNone) return 0;
  // Services per unit of weight (the selectors keep them per quantum).
  const auto quantum = static_cast<double>(ep.spec.quantum);
  const auto serviceOf = [&](TierId tier, std::uint32_t ts_index) {
    return ep.tenant_selectors[tier].service(ts_index, now) * quantum;
  };
  const PreemptionWaiter waiter{waiting, choice.tier, ep.states[waiting].weight,
                                serviceOf(choice.tier, waiting),
                                ep.tiers[choice.tier].backlogged_weight};
  std::vector<PreemptionCandidate>& candidates = preemption_candidates_;
  candidates.clear();
  for (const Running& r : running) {
    const Slot* s = inFlight(r.handle);
    if (!s || s->req.endpoint != e) continue;
    const TenantState& ts = ep.states[s->ts];
    const double service = ts.tier >= choice.tier ? serviceOf(ts.tier, s->ts) : 0.0;
    // What resuming it costs the engine: its prompt, less what its cache
    // holds of it, and what it generated.
    const std::uint64_t recompute = std::uint64_t{s->req.input_tokens} -
                                    std::min(r.cached_tokens, s->req.input_tokens) + s->emitted;
    candidates.push_back({r.handle, s->ts, ts.tier, ts.weight, ts.queued != 0, service, r.progress,
                          recompute, s->dispatched_at, s->seq});
  }
  const double margin = static_cast<double>(
      std::max<std::int64_t>(ep.spec.quantum, std::int64_t{ps.min_progress_tokens}));
  return victim_chooser_.choose(waiter, candidates, {ps.min_progress_tokens, margin, ps.for_share});
}

}  // namespace fairsched::core
