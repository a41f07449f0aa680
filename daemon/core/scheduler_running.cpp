// Scheduler, requests in flight on worker endpoints: per-token charging,
// settling a prompt's size, requeue after a lost worker, and preemption.
// See scheduler.hpp.
#include <algorithm>
#include <functional>

#include "daemon/core/scheduler.hpp"

namespace fairsched::core {

void Scheduler::backToQueue(EndpointState& ep, Slot& s, Handle h, TimeNs now) {
  TenantState& ts = ep.states[s.ts];
  ts.in_flight--;
  in_flight_--;
  s.state = SlotState::kQueued;
  ts.last_active = now;
  enqueue(ep, indexOf(h), now);
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
  ep.preempt_budget -= 1.0;
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
  // The rate: a bucket of max_per_s, refilled continuously, one second deep.
  const double cap = std::max(1.0, ps.max_per_s);
  ep.preempt_budget =
      std::min(cap, ep.preempt_budget +
                        static_cast<double>(now - ep.preempt_refilled) / kNsPerSec * ps.max_per_s);
  ep.preempt_refilled = now;
  if (ep.preempt_budget < 1.0) return 0;

  // The next choice, as takeFair() would make it.
  const TierSelector::Choice choice = nextTier(ep);
  if (choice.tier == TierSelector::kNoTier) return 0;
  TenantSelector& selector = ep.tenant_selectors[choice.tier];
  const TenantSelector::FlowId waiting = selector.select();
  if (waiting == TenantSelector::kNone) return 0;
  // Services per unit of weight (the selectors keep them per quantum).
  const auto quantum = static_cast<double>(ep.spec.quantum);
  const double waiting_service = selector.service(waiting, now) * quantum;
  const double margin = static_cast<double>(
      std::max<std::int64_t>(ep.spec.quantum, std::int64_t{ps.min_progress_tokens}));
  // Fair shares of the sequences the waiting tier runs, by weight over the
  // tier's active tenants (backlogged or running): only a tenant below its
  // share may take a sequence, only from one above its share that keeps at
  // least as many as it will have. Without this, tenants that all have
  // their share would trade sequences back and forth.
  auto& counts = preempt_counts_;
  counts.clear();
  std::uint32_t in_tier = 0;
  double weights = ep.tiers[choice.tier].backlogged_weight;
  for (const Running& r : running) {
    const Slot* s = lookup(r.handle);
    if (!s || s->state != SlotState::kInFlight || s->req.endpoint != e) continue;
    const TenantState& ts = ep.states[s->ts];
    if (ts.tier != choice.tier) continue;
    ++in_tier;
    auto it =
        std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == s->ts; });
    if (it == counts.end()) {
      counts.emplace_back(s->ts, 1);
      if (ts.queued == 0) weights += ts.weight;
    } else {
      ++it->second;
    }
  }
  auto runningOf = [&](std::uint32_t ts_index) -> std::uint32_t {
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const auto& c) { return c.first == ts_index; });
    return it == counts.end() ? 0 : it->second;
  };
  auto shareOf = [&](std::uint32_t ts_index) {
    return weights > 0 ? in_tier * ep.states[ts_index].weight / weights : 0.0;
  };
  const std::uint32_t waiting_runs = runningOf(waiting);
  const bool waiting_below_share = waiting_runs < shareOf(waiting);

  // Best victim: lowest tier first; then, within the waiting tier, the
  // most-served tenant (above the waiting one by the margin); newest first.
  Handle best = 0;
  TierId best_tier = 0;
  double best_service = 0;
  TimeNs best_at = 0;
  std::uint64_t best_seq = 0;
  for (const Running& r : running) {
    if (r.progress < ps.min_progress_tokens) continue;
    const Slot* s = lookup(r.handle);
    if (!s || s->state != SlotState::kInFlight || s->req.endpoint != e) continue;
    const TenantState& ts = ep.states[s->ts];
    if (ts.tier < choice.tier) continue;  // a higher tier: never for a lower one
    double service = 0;
    if (ts.tier == choice.tier) {
      if (s->ts == waiting || !waiting_below_share) continue;
      const std::uint32_t runs = runningOf(s->ts);
      if (runs <= shareOf(s->ts) || runs < waiting_runs + 2) continue;
      service = selector.service(s->ts, now) * quantum;
      if (service < waiting_service + margin) continue;
    } else {
      service = ep.tenant_selectors[ts.tier].service(s->ts, now) * quantum;
    }
    // Newest: dispatched last; among those dispatched together, arrived last.
    const bool newer = s->dispatched_at != best_at ? s->dispatched_at > best_at : s->seq > best_seq;
    const bool better =
        best == 0 || ts.tier > best_tier ||
        (ts.tier == best_tier && (service > best_service || (service == best_service && newer)));
    if (better) {
      best = r.handle;
      best_tier = ts.tier;
      best_service = service;
      best_at = s->dispatched_at;
      best_seq = s->seq;
    }
  }
  return best;
}

}  // namespace fairsched::core
