// Scheduler, per-tenant state over its life: a reload re-applying tenants'
// settings (reconfigure), their limiters, idle-state collection, and the
// read-only views of it. See scheduler.hpp.
#include <algorithm>

#include "daemon/core/scheduler.hpp"

namespace fairsched::core {

std::optional<std::string> Scheduler::reconfigure(SchedulerSpec spec) {
  if (spec.policy != spec_.policy) return std::string("the scheduling policy cannot change");
  if (spec.endpoints.size() != spec_.endpoints.size()) {
    return std::string("the set of endpoints cannot change");
  }
  for (std::size_t e = 0; e < spec.endpoints.size(); ++e) {
    const EndpointSpec& was = spec_.endpoints[e];
    const EndpointSpec& is = spec.endpoints[e];
    if (is.name != was.name) {
      return "the set of endpoints cannot change (endpoint " + std::to_string(e) + " is '" +
             was.name + "', not '" + is.name + "')";
    }
    if (is.max_batch_tokens < was.max_batch_tokens) {
      return "endpoints." + is.name + ".max_batch_tokens cannot shrink (" +
             std::to_string(was.max_batch_tokens) + " -> " + std::to_string(is.max_batch_tokens) +
             "): queued requests must still fit a batch";
    }
    if (is.parallelism != was.parallelism) {
      return "endpoints." + is.name + ": the executor's threads or streams cannot change";
    }
  }
  std::vector<TierId> tier_map(spec_.tiers.size(), TenantTable::kNoTier);
  for (std::size_t o = 0; o < spec_.tiers.size(); ++o) {
    for (std::size_t n = 0; n < spec.tiers.size(); ++n) {
      if (spec_.tiers[o].name == spec.tiers[n].name) tier_map[o] = static_cast<TierId>(n);
    }
  }
  spec_ = std::move(spec);
  // The old tables stay alive until every limiter is rebuilt below.
  const std::deque<LimitTable> old_limits = tenants_.reconfigure(spec_, tier_map);
  spec_.tenants.clear();
  spec_.tenants.shrink_to_fit();

  for (std::size_t e = 0; e < endpoints_.size(); ++e) {
    EndpointState& ep = endpoints_[e];
    const EndpointSpec& es = spec_.endpoints[e];
    if (es.latency_target != ep.spec.latency_target || es.parallelism != ep.spec.parallelism) {
      ep.throttle = BacklogThrottle(es.latency_target, es.parallelism);
    }
    if (es.cost != ep.spec.cost) {
      // Requests in flight were charged under the old model: correcting
      // them by an adaptive cost would compare unlike units.
      for (Slot& s : slots_) {
        if (s.state == SlotState::kInFlight && s.req.endpoint == e)
          s.charged = kChargedUnderOtherModel;
      }
    }
    ep.spec = es;
    resetTiers(ep);
    for (std::uint32_t i = 0; i < ep.states.size(); ++i) {
      TenantState& ts = ep.states[i];
      if (!ts.live) continue;
      const TenantTable::Entry& entry = tenants_[ts.tenant];
      ts.tier = entry.tier;
      ts.weight = entry.weight;
      ts.queue_limit = entry.queue_limit;
      // Fleet accounts are opened afresh: the old ones give their unused
      // leases back; the fleet keeps counting what was used.
      std::unique_ptr<KeyLimiter> limiter = makeLimiter(ep, entry);
      if (limiter && ts.limiter) limiter->carryOver(*ts.limiter);
      ts.limiter = std::move(limiter);
      TenantSelector& selector = ep.tenant_selectors[ts.tier];
      selector.setQuantum(i, quantumOf(ep.spec, ts.weight));
      ep.tiers[ts.tier].queued_tokens += ts.queued_tokens;
      if (ts.queued == 0) continue;
      ep.tiers[ts.tier].backlogged_weight += ts.weight;
      if (spec_.policy != Policy::kFair) continue;
      dropWithdrawnHead(ts);
      const QueueEntry& head = ts.queue.top();
      selector.enqueue(i, costOf(ep, ts, slots_[indexOf(head.handle)]), 0);
    }
  }
  return std::nullopt;
}

std::unique_ptr<KeyLimiter> Scheduler::makeLimiter(const EndpointState& ep,
                                                   const TenantTable::Entry& e) {
  const auto eid = static_cast<std::size_t>(&ep - endpoints_.data());
  if (!e.limits || eid >= e.limits->size()) return nullptr;
  const auto& specs = (*e.limits)[eid];
  if (std::none_of(specs.begin(), specs.end(), [](const LimitSpec& s) { return s.amount != 0; })) {
    return nullptr;
  }
  std::vector<std::unique_ptr<FleetAccount>> fleet;
  if (fleet_gate_ != nullptr) {
    for (const LimitSpec& s : specs) {
      fleet.push_back(s.scope == LimitScope::kFleet && s.amount != 0
                          ? fleet_gate_->open(e.name, ep.spec.name, s)
                          : nullptr);
    }
  }
  return std::make_unique<KeyLimiter>(std::span<const LimitSpec>(specs), std::move(fleet));
}

std::size_t Scheduler::collectIdle(TimeNs now, std::size_t budget) {
  std::size_t dropped = 0;
  for (std::size_t e = 0; e < endpoints_.size() && budget > 0; ++e) {
    EndpointState& ep = endpoints_[e];
    for (std::size_t n = ep.states.size(); n > 0 && budget > 0; --n, --budget) {
      if (ep.gc_cursor >= ep.states.size()) ep.gc_cursor = 0;
      const auto i = static_cast<std::uint32_t>(ep.gc_cursor++);
      TenantState& ts = ep.states[i];
      if (!ts.live || ts.queued != 0 || ts.in_flight != 0) continue;
      if (now - ts.last_active < spec_.idle_timeout) continue;
      if (ts.limiter && !ts.limiter->idle(now)) continue;
      ep.tenant_selectors[ts.tier].forget(i);
      ep.state_of[ts.tenant] = kNoState;
      const TenantId t = ts.tenant;
      ts = TenantState{};
      ep.free_states.push_back(i);
      tenants_.release(t);
      ++dropped;
    }
  }
  return dropped;
}

std::size_t Scheduler::activeTenantStates() const {
  std::size_t n = 0;
  for (const auto& ep : endpoints_) n += ep.states.size() - ep.free_states.size();
  return n;
}

std::optional<TenantView> Scheduler::view(TenantId t, EndpointId e, TimeNs now) const {
  if (e >= endpoints_.size()) return std::nullopt;
  const EndpointState& ep = endpoints_[e];
  const std::uint32_t i = findState(ep, t);
  if (i == kNoState) return std::nullopt;
  const TenantState& ts = ep.states[i];
  TenantView v;
  v.tenant = t;
  v.queued = ts.queued;
  v.in_flight = ts.in_flight;
  v.queued_tokens = ts.queued_tokens;
  v.deficit = ep.tenant_selectors[ts.tier].deficit(i);
  v.expected_output = ts.expected_output;
  if (now > 0) v.recent_tokens = ts.recent.sum(now);
  v.stats = ts.stats;
  return v;
}

std::uint64_t Scheduler::queuedOf(TenantId t) const {
  std::uint64_t n = 0;
  for (const EndpointState& ep : endpoints_) {
    const std::uint32_t i = findState(ep, t);
    if (i != kNoState) n += ep.states[i].queued;
  }
  return n;
}

bool Scheduler::saveStates(EndpointId e, std::size_t& cursor, std::size_t budget, TimeNs now,
                           SavedStateSink& sink) {
  if (e >= endpoints_.size()) return true;
  EndpointState& ep = endpoints_[e];
  for (; cursor < ep.states.size() && budget > 0; ++cursor, --budget) {
    TenantState& ts = ep.states[cursor];
    if (!ts.live) continue;
    saved_.clear();
    saved_.tenant = ts.tenant;
    saved_.expected_output = ts.expected_output;
    const auto f = static_cast<std::uint32_t>(cursor);
    saved_.service = ep.tenant_selectors[ts.tier].service(f, now);
    if (ts.limiter) ts.limiter->save(now, saved_);
    if (!saved_.empty()) sink.add(saved_);
  }
  return cursor >= ep.states.size();
}

void Scheduler::restoreState(EndpointId e, TenantId t, const SavedTenantState& s, TimeNs elapsed,
                             TimeNs now) {
  if (e >= endpoints_.size() || !tenants_.valid(t)) return;
  EndpointState& ep = endpoints_[e];
  const std::uint32_t i = stateFor(ep, t, now);
  TenantState& ts = ep.states[i];
  elapsed = std::max<TimeNs>(elapsed, 0);
  if (ts.limiter) {
    std::vector<SavedBucket> aged;
    for (const SavedWindow& w : s.windows) {
      if (w.first > s.buckets.size() || w.count > s.buckets.size() - w.first) continue;
      aged.assign(s.buckets.begin() + w.first, s.buckets.begin() + w.first + w.count);
      for (SavedBucket& b : aged) b.age = b.age > kNever - elapsed ? kNever : b.age + elapsed;
      ts.limiter->restore(w.unit, w.window_ns, aged, now);
    }
  }
  if (s.expected_output >= 0 && ts.expected_output < 0) ts.expected_output = s.expected_output;
  if (s.service > 0) ep.tenant_selectors[ts.tier].restoreService(i, s.service, elapsed, now);
}

std::vector<LimitUsage> Scheduler::limitUsage(TenantId t, EndpointId e, TimeNs now) {
  if (e >= endpoints_.size()) return {};
  EndpointState& ep = endpoints_[e];
  const std::uint32_t i = findState(ep, t);
  if (i == kNoState || !ep.states[i].limiter) return {};
  return ep.states[i].limiter->usage(now);
}

}  // namespace fairsched::core
