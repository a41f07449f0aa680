#include "daemon/core/scheduler.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <functional>

namespace fairsched::core {
namespace {
constexpr double kOutputEmaAlpha = 0.25;
}  // namespace

const char* toString(CostModel m) {
  switch (m) {
    case CostModel::kRequests:
      return "requests";
    case CostModel::kTokens:
      return "tokens";
    case CostModel::kAdaptive:
      return "adaptive";
  }
  return "?";
}

const char* toString(Fairness f) {
  switch (f) {
    case Fairness::kDrr:
      return "drr";
    case Fairness::kRecent:
      return "recent";
    case Fairness::kVtc:
      return "vtc";
  }
  return "?";
}

FlowSelector makeFlowSelector(const EndpointSpec& spec) {
  return FlowSelector(spec.fairness, spec.half_life, spec.preemption.enabled);
}

Scheduler::Scheduler(SchedulerSpec spec) : spec_(std::move(spec)), tenants_(spec_) {
  spec_.tenants.clear();  // the table holds them now
  spec_.tenants.shrink_to_fit();
  std::vector<double> shares;
  for (const auto& t : spec_.tiers) shares.push_back(t.min_share);
  endpoints_.resize(spec_.endpoints.size());
  for (std::size_t e = 0; e < spec_.endpoints.size(); ++e) {
    EndpointState& ep = endpoints_[e];
    ep.spec = spec_.endpoints[e];
    ep.flows.assign(spec_.tiers.size(), makeFlowSelector(ep.spec));
    ep.tiers.resize(spec_.tiers.size());
    ep.tier_selector = TierSelector(shares);
    ep.throttle = BacklogThrottle(ep.spec.latency_target, ep.spec.parallelism);
    ep.backlogged = std::make_unique<bool[]>(spec_.tiers.size());
  }
}

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

  std::vector<double> shares;
  for (const auto& t : spec_.tiers) shares.push_back(t.min_share);
  const std::size_t tiers = spec_.tiers.size();
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
    ep.flows.assign(tiers, makeFlowSelector(ep.spec));
    ep.tiers.assign(tiers, TierState{});
    ep.tier_selector = TierSelector(shares);
    ep.backlogged = std::make_unique<bool[]>(tiers);
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
      FlowSelector& drr = ep.flows[ts.tier];
      const double q = static_cast<double>(ep.spec.quantum) * ts.weight;
      drr.setQuantum(i, std::max<std::int64_t>(1, std::llround(q)));
      ep.tiers[ts.tier].queued_tokens += ts.queued_tokens;
      if (ts.queued == 0) continue;
      ep.tiers[ts.tier].backlogged_weight += ts.weight;
      if (spec_.policy != Policy::kFair) continue;
      dropWithdrawnHead(ts);
      const QueueEntry& head = ts.queue.top();
      drr.enqueue(i, costOf(ep, ts, slots_[indexOf(head.handle)]), 0);
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

Scheduler::Slot* Scheduler::lookup(Handle h) {
  const std::uint32_t i = indexOf(h);
  if (i >= slots_.size()) return nullptr;
  Slot& s = slots_[i];
  if (s.state == SlotState::kFree || s.gen != static_cast<std::uint32_t>(h >> 32)) return nullptr;
  return &s;
}

void Scheduler::freeSlot(std::uint32_t index) {
  Slot& s = slots_[index];
  s.state = SlotState::kFree;
  if (++s.gen == 0) s.gen = 1;  // handle 0 is never valid
  free_slots_.push_back(index);
}

std::uint32_t Scheduler::stateFor(EndpointState& ep, TenantId t, TimeNs now) {
  if (const std::uint32_t found = findState(ep, t); found != kNoState) return found;
  std::uint32_t i;
  if (!ep.free_states.empty()) {
    i = ep.free_states.back();
    ep.free_states.pop_back();
  } else {
    i = static_cast<std::uint32_t>(ep.states.size());
    ep.states.emplace_back();
  }
  const TenantTable::Entry& e = tenants_[t];
  TenantState& ts = ep.states[i];
  ts = TenantState{};
  ts.tenant = t;
  ts.tier = e.tier;
  ts.live = true;
  ts.weight = e.weight;
  ts.queue_limit = e.queue_limit;
  ts.last_active = now;
  ts.limiter = makeLimiter(ep, e);
  const double q = static_cast<double>(ep.spec.quantum) * e.weight;
  ep.flows[ts.tier].setQuantum(i, std::max<std::int64_t>(1, std::llround(q)));
  if (t >= ep.state_of.size())
    ep.state_of.resize(std::max<std::size_t>(t + 1, tenants_.capacity()), kNoState);
  ep.state_of[t] = i;
  tenants_.retain(t);
  return i;
}

std::int64_t Scheduler::costOf(const EndpointState& ep, const TenantState& ts, std::uint32_t input,
                               std::uint32_t max_output) const {
  switch (ep.spec.cost) {
    case CostModel::kRequests:
      return 1;
    case CostModel::kTokens:
      if (ep.spec.per_token) return input;  // output is charged as it is generated
      return static_cast<std::int64_t>(input) + max_output;
    case CostModel::kAdaptive: {
      if (ep.spec.per_token) return input;
      const double out = ts.expected_output < 0 ? static_cast<double>(max_output)
                                                : std::min<double>(ts.expected_output, max_output);
      return static_cast<std::int64_t>(input) + std::llround(out);
    }
  }
  return 1;
}

std::uint64_t Scheduler::workAhead(const EndpointState& ep, const TenantState& ts) const {
  if (spec_.policy == Policy::kFifo) return ep.queued_tokens;
  std::uint64_t ahead = 0;
  for (TierId t = 0; t < ts.tier; ++t) ahead += ep.tiers[t].queued_tokens;
  // Within its tier the tenant gets weight / (sum of backlogged weights) of
  // the service, so its own queue drains that much slower.
  const TierState& tier = ep.tiers[ts.tier];
  const double weights = tier.backlogged_weight + (ts.queued == 0 ? ts.weight : 0.0);
  const double share_wait = static_cast<double>(ts.queued_tokens) * weights / ts.weight;
  ahead += std::min<std::uint64_t>(tier.queued_tokens, static_cast<std::uint64_t>(share_wait));
  return ahead;
}

Admission Scheduler::submit(const Request& r, TimeNs now) {
  if (r.endpoint >= endpoints_.size() || !tenants_.valid(r.tenant)) return {Status::kInvalid, 0, 0};
  EndpointState& ep = endpoints_[r.endpoint];
  const std::uint32_t ts_index = stateFor(ep, r.tenant, now);
  TenantState& ts = ep.states[ts_index];
  ts.stats.submitted++;
  ts.last_active = now;
  const std::uint64_t tokens = tokensOf(r);

  if (tokens == 0 || tokens > ep.spec.max_batch_tokens ||
      r.max_output_tokens > ep.spec.max_output_tokens) {
    ts.stats.rejected_invalid++;
    return {Status::kInvalid, 0, 0};
  }
  if (r.deadline <= now) {
    ts.stats.expired++;
    return {Status::kDeadlineExceeded, 0, 0};
  }
  if (ts.queued >= ts.queue_limit) {
    ts.stats.rejected_queue_full++;
    return {Status::kQueueFull, 0, 0};
  }
  if (ep.spec.latency_target > 0 && !ep.throttle.admits(workAhead(ep, ts))) {
    ts.stats.rejected_overloaded++;
    return {Status::kOverloaded, 0, 0};
  }
  if (ts.limiter) {
    const LimitDecision d = ts.limiter->tryAdmit(tokens, now);
    if (!d.admitted) {
      if (d.retry_after == kNever) {  // larger than a limit: it can never be admitted
        ts.stats.rejected_invalid++;
        return {Status::kInvalid, 0, 0};
      }
      ts.stats.rejected_rate_limited++;
      return {Status::kRateLimited, d.retry_after, 0};
    }
  }

  std::uint32_t index;
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[index];
  s.req = r;
  s.arrival = now;
  s.charged = 0;
  s.emitted = 0;
  s.resumed = false;
  s.reserved_input = r.input_tokens;
  s.seq = seq_++;
  s.ts = ts_index;
  s.state = SlotState::kQueued;
  const Handle h = makeHandle(index, s.gen);
  enqueue(ep, index, now);
  if (r.deadline != kNever) {
    deadlines_.push_back({r.deadline, h});
    std::push_heap(deadlines_.begin(), deadlines_.end(), std::greater<>{});
  }
  ts.stats.admitted++;
  return {Status::kOk, 0, h};
}

void Scheduler::enqueue(EndpointState& ep, std::uint32_t index, TimeNs now) {
  Slot& s = slots_[index];
  TenantState& ts = ep.states[s.ts];
  const Request& r = s.req;
  const std::uint64_t tokens = tokensOf(r);
  const Handle h = makeHandle(index, s.gen);
  const QueueEntry entry{{r.priority, r.deadline, s.seq}, h, r.input_tokens, r.max_output_tokens};
  const bool was_empty = ts.queued == 0;
  if (spec_.policy == Policy::kFair) {
    ts.queue.push(entry);
    FlowSelector& drr = ep.flows[ts.tier];
    if (was_empty) {
      drr.enqueue(s.ts, costOf(ep, ts, s), now);
    } else if (ts.queue.top().handle == h) {
      drr.headChanged(s.ts, costOf(ep, ts, s));
    }
  } else {
    ep.fifo.push(entry);
  }
  if (was_empty) ep.tiers[ts.tier].backlogged_weight += ts.weight;
  ts.queued++;
  ts.queued_tokens += tokens;
  ep.tiers[ts.tier].queued_tokens += tokens;
  if (ep.queued++ == 0) ep.pending_since = now;
  ep.queued_tokens += tokens;
}

bool Scheduler::requeue(Handle h, TimeNs now) {
  Slot* s = lookup(h);
  if (!s || s->state != SlotState::kInFlight) return false;
  EndpointState& ep = endpoints_[s->req.endpoint];
  TenantState& ts = ep.states[s->ts];
  // Give back what its dispatch (and any token) charged: it runs again and
  // pays again then.
  if (spec_.policy == Policy::kFair && s->charged != kChargedUnderOtherModel && s->charged != 0) {
    ep.flows[ts.tier].adjust(s->ts, s->charged, now);
  }
  s->charged = 0;
  s->emitted = 0;
  s->resumed = false;
  ts.in_flight--;
  ts.stats.dispatched--;
  in_flight_--;
  s->state = SlotState::kQueued;
  ts.last_active = now;
  enqueue(ep, indexOf(h), now);
  // Its deadline entry may be gone: nextDeadline() and expireDeadlines() drop
  // the entries of requests in flight. A second entry is harmless (stale ones
  // are skipped).
  if (s->req.deadline != kNever) {
    deadlines_.push_back({s->req.deadline, h});
    std::push_heap(deadlines_.begin(), deadlines_.end(), std::greater<>{});
  }
  return true;
}

bool Scheduler::charge(Handle h, std::uint32_t tokens, TimeNs now) {
  Slot* s = lookup(h);
  if (!s || s->state != SlotState::kInFlight) return false;
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
    ep.flows[ts.tier].adjust(s->ts, -cost, now);
    s->charged += cost;
  }
  ts.stats.tokens_served += tokens;
  ts.recent.add(tokens, now);
  ep.recent.add(tokens, now);
  ts.last_active = now;
  return true;
}

bool Scheduler::settleInput(Handle h, std::uint32_t input_tokens, TimeNs now) {
  Slot* s = lookup(h);
  if (!s || s->state != SlotState::kInFlight) return false;
  const std::int64_t delta =
      static_cast<std::int64_t>(input_tokens) - static_cast<std::int64_t>(s->req.input_tokens);
  if (delta == 0) return true;
  EndpointState& ep = endpoints_[s->req.endpoint];
  TenantState& ts = ep.states[s->ts];
  if (spec_.policy == Policy::kFair && ep.spec.cost != CostModel::kRequests &&
      s->charged != kChargedUnderOtherModel) {
    ep.flows[ts.tier].adjust(s->ts, -delta, now);  // delta > 0 charges more
    s->charged += delta;
  }
  s->req.input_tokens = input_tokens;
  return true;
}

bool Scheduler::preempt(Handle h, TimeNs now) {
  Slot* s = lookup(h);
  if (!s || s->state != SlotState::kInFlight) return false;
  EndpointState& ep = endpoints_[s->req.endpoint];
  TenantState& ts = ep.states[s->ts];
  ep.preempt_budget -= 1.0;
  ts.stats.preempted++;
  ts.in_flight--;
  in_flight_--;
  s->state = SlotState::kQueued;
  // Charges stay: its client received what it generated. The prompt the
  // engine recomputes is not charged again.
  s->resumed = ep.spec.preemption.enabled;
  ts.last_active = now;
  enqueue(ep, indexOf(h), now);
  if (s->req.deadline != kNever) {  // as in requeue()
    deadlines_.push_back({s->req.deadline, h});
    std::push_heap(deadlines_.begin(), deadlines_.end(), std::greater<>{});
  }
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
  for (std::size_t t = 0; t < ep.flows.size(); ++t) ep.backlogged[t] = ep.flows[t].anyBacklogged();
  const TierSelector::Choice choice =
      ep.tier_selector.select(std::span<const bool>(ep.backlogged.get(), ep.flows.size()));
  if (choice.tier == TierSelector::kNoTier) return 0;
  FlowSelector& flows = ep.flows[choice.tier];
  const FlowSelector::FlowId waiting = flows.select();
  if (waiting == FlowSelector::kNone) return 0;
  // Services per unit of weight (the selectors keep them per quantum).
  const auto quantum = static_cast<double>(ep.spec.quantum);
  const double waiting_service = flows.service(waiting, now) * quantum;
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
      service = flows.service(s->ts, now) * quantum;
      if (service < waiting_service + margin) continue;
    } else {
      service = ep.flows[ts.tier].service(s->ts, now) * quantum;
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

TimeNs Scheduler::batchDueAt(EndpointId e) const {
  const EndpointState& ep = endpoints_[e];
  if (ep.queued == 0) return kNever;
  if (ep.queued >= ep.spec.max_batch_requests || ep.queued_tokens >= ep.spec.max_batch_tokens) {
    return std::numeric_limits<TimeNs>::min();
  }
  return ep.pending_since + ep.spec.max_wait;
}

void Scheduler::unqueue(EndpointState& ep, TenantState& ts, std::uint64_t tokens) {
  ts.queued--;
  ts.queued_tokens -= tokens;
  TierState& tier = ep.tiers[ts.tier];
  tier.queued_tokens -= tokens;
  if (ts.queued == 0) tier.backlogged_weight = std::max(0.0, tier.backlogged_weight - ts.weight);
  ep.queued_tokens -= tokens;
  if (--ep.queued == 0) ep.pending_since = kNever;
}

bool Scheduler::dropWithdrawnHead(TenantState& ts) {
  bool dropped = false;
  while (!ts.queue.empty()) {
    const Slot* top = lookup(ts.queue.top().handle);
    if (top && top->state == SlotState::kQueued) break;
    ts.queue.pop();
    if (ts.withdrawn > 0) ts.withdrawn--;
    dropped = true;
  }
  return dropped;
}

void Scheduler::refreshHead(EndpointState& ep, std::uint32_t ts_index) {
  TenantState& ts = ep.states[ts_index];
  if (!dropWithdrawnHead(ts)) return;
  FlowSelector& drr = ep.flows[ts.tier];
  if (ts.queue.empty()) {
    drr.remove(ts_index);
  } else {
    drr.headChanged(ts_index, costOf(ep, ts, slots_[indexOf(ts.queue.top().handle)]));
  }
}

void Scheduler::withdraw(Slot& s, Status why, std::vector<Done>& done) {
  EndpointState& ep = endpoints_[s.req.endpoint];
  TenantState& ts = ep.states[s.ts];
  unqueue(ep, ts, tokensOf(s.req));
  if (why == Status::kDeadlineExceeded)
    ts.stats.expired++;
  else
    ts.stats.cancelled++;
  // It never ran: none of its token reservation was used.
  if (ts.limiter) ts.limiter->refundTokens(tokensOf(s.req), s.arrival);
  done.push_back({s.req.id, s.req.tenant, s.req.endpoint, why});
  const std::uint32_t ts_index = s.ts;
  freeSlot(static_cast<std::uint32_t>(&s - slots_.data()));
  if (spec_.policy == Policy::kFair) {
    ts.withdrawn++;
    refreshHead(ep, ts_index);
  }
}

void Scheduler::dispatch(EndpointState& ep, Slot& s, Batch& out, TimeNs now) {
  TenantState& ts = ep.states[s.ts];
  s.state = SlotState::kInFlight;
  ts.in_flight++;
  ts.stats.dispatched++;
  in_flight_++;
  const Handle h = makeHandle(static_cast<std::uint32_t>(&s - slots_.data()), s.gen);
  out.requests.push_back({h, s.req.id, s.req.tenant, s.req.input_tokens, s.req.max_output_tokens,
                          s.arrival, s.emitted});
  s.resumed = false;
  s.dispatched_at = now;
  out.tokens += tokensOf(s.req);
}

void Scheduler::prefetchUpcoming(const EndpointState& ep, const FlowSelector& drr) const {
  // A software pipeline over the flows due next in this round. Each stage
  // needs the line the previous stage fetched (state -> head entry -> slot),
  // so stages run a few turns apart: the flow k turns ahead gets its state
  // fetched, the one k-1 ahead its head entry, the one k-2 ahead its slot. By
  // a flow's turn its data is in cache instead of costing three dependent
  // misses. Hints only: nothing here changes a decision.
  FlowSelector::FlowId ahead[kPrefetchDepth];
  FlowSelector::FlowId f = drr.upcoming();
  std::size_t n = 0;
  for (; n < kPrefetchDepth && f != FlowSelector::kNone; ++n, f = drr.after(f)) ahead[n] = f;
  if (n == kPrefetchDepth) {
    const char* p = reinterpret_cast<const char*>(&ep.states[ahead[n - 1]]);
    for (std::size_t line = 0; line < kHotLines * 64; line += 64) __builtin_prefetch(p + line);
    drr.prefetch(ahead[n - 1]);
  }
  if (n >= kPrefetchDepth - 1) {
    const TenantState& t = ep.states[ahead[kPrefetchDepth - 2]];
    if (!t.queue.empty()) {
      // The head entry, and the one after it: it becomes the head at dispatch.
      const char* head = reinterpret_cast<const char*>(&t.queue.top());
      __builtin_prefetch(head);
      __builtin_prefetch(head + sizeof(QueueEntry));
    }
  }
  if (n >= 1) {
    const std::size_t k = std::min<std::size_t>(n, kPrefetchDepth - 2) - 1;
    const TenantState& t = ep.states[ahead[k]];
    if (!t.queue.empty()) prefetchSlot(t.queue.top().handle);
  }
}

bool Scheduler::takeFair(EndpointState& ep, TimeNs now, Limits limits, Batch& out,
                         std::vector<Done>& done) {
  const std::span<const bool> backlogged(ep.backlogged.get(), ep.flows.size());
  while (out.requests.size() < limits.requests) {
    for (std::size_t t = 0; t < ep.flows.size(); ++t)
      ep.backlogged[t] = ep.flows[t].anyBacklogged();
    const TierSelector::Choice choice = ep.tier_selector.select(backlogged);
    if (choice.tier == TierSelector::kNoTier) break;
    FlowSelector& drr = ep.flows[choice.tier];
    const FlowSelector::FlowId f = drr.select();
    assert(f != FlowSelector::kNone);
    TenantState& ts = ep.states[f];
    prefetchUpcoming(ep, drr);
    const QueueEntry head = ts.queue.top();  // always live
    Slot& s = slots_[indexOf(head.handle)];
    if (head.key.deadline <= now) {
      withdraw(s, Status::kDeadlineExceeded, done);
      continue;
    }
    const std::uint64_t with_head = out.tokens + head.input_tokens + head.max_output_tokens;
    if (with_head > limits.tokens) break;
    const std::uint32_t tier_cap = spec_.tiers[choice.tier].max_batch_tokens;
    if (tier_cap != 0 && with_head > tier_cap && !out.requests.empty()) break;
    const std::int64_t cost = costOf(ep, ts, head);
    ts.queue.pop();
    unqueue(ep, ts, std::uint64_t{head.input_tokens} + head.max_output_tokens);
    s.charged += cost;
    dispatch(ep, s, out, now);
    // The new head: skip entries withdrawn earlier (only when there are any).
    if (ts.withdrawn > 0) dropWithdrawnHead(ts);
    const bool has_next = !ts.queue.empty();
    std::int64_t next_cost = 0;
    if (has_next) {
      const QueueEntry& nh = ts.queue.top();
      next_cost = costOf(ep, ts, nh);
      prefetchSlot(nh.handle);  // dispatched at the flow's next turn
    }
    drr.consume(f, cost, has_next, next_cost, now);
    ep.tier_selector.charge(choice, cost, backlogged);
  }
  return !out.requests.empty();
}

bool Scheduler::takeFifo(EndpointState& ep, TimeNs now, Limits limits, Batch& out,
                         std::vector<Done>& done) {
  while (out.requests.size() < limits.requests && !ep.fifo.empty()) {
    Slot* s = lookup(ep.fifo.top().handle);
    if (!s || s->state != SlotState::kQueued) {
      ep.fifo.pop();
      continue;
    }
    if (s->req.deadline <= now) {
      ep.fifo.pop();
      withdraw(*s, Status::kDeadlineExceeded, done);
      continue;
    }
    if (out.tokens + tokensOf(s->req) > limits.tokens) break;
    ep.fifo.pop();
    TenantState& ts = ep.states[s->ts];
    unqueue(ep, ts, tokensOf(s->req));
    s->charged += costOf(ep, ts, *s);
    dispatch(ep, *s, out, now);
  }
  return !out.requests.empty();
}

bool Scheduler::nextBatch(EndpointId e, TimeNs now, Batch& out, std::vector<Done>& done,
                          bool force) {
  out.clear();
  out.endpoint = e;
  if (e >= endpoints_.size()) return false;
  if (!force && batchDueAt(e) > now) return false;
  EndpointState& ep = endpoints_[e];
  const Limits limits{ep.spec.max_batch_requests, ep.spec.max_batch_tokens};
  return spec_.policy == Policy::kFair ? takeFair(ep, now, limits, out, done)
                                       : takeFifo(ep, now, limits, out, done);
}

bool Scheduler::take(EndpointId e, TimeNs now, std::uint32_t max_requests, std::uint64_t max_tokens,
                     Batch& out, std::vector<Done>& done) {
  out.clear();
  out.endpoint = e;
  if (e >= endpoints_.size() || max_requests == 0) return false;
  EndpointState& ep = endpoints_[e];
  const Limits limits{max_requests, max_tokens};
  return spec_.policy == Policy::kFair ? takeFair(ep, now, limits, out, done)
                                       : takeFifo(ep, now, limits, out, done);
}

bool Scheduler::complete(Handle h, std::uint32_t output_tokens, TimeNs now) {
  Slot* s = lookup(h);
  if (!s || s->state != SlotState::kInFlight) return false;
  EndpointState& ep = endpoints_[s->req.endpoint];
  TenantState& ts = ep.states[s->ts];
  const std::uint32_t out = std::min(output_tokens, s->req.max_output_tokens);
  if (ts.limiter) {
    // The reservation was input + max output at admission; a prompt settled
    // at another size (settleInput) moves the refund by the difference.
    const std::int64_t unused = static_cast<std::int64_t>(s->req.max_output_tokens - out) +
                                static_cast<std::int64_t>(s->reserved_input) -
                                static_cast<std::int64_t>(s->req.input_tokens);
    if (unused > 0) ts.limiter->refundTokens(static_cast<std::uint64_t>(unused), s->arrival);
  }
  if (ep.spec.cost == CostModel::kAdaptive) {
    const std::int64_t actual = static_cast<std::int64_t>(s->req.input_tokens) + out;
    // Per token, the charge already is the actual cost (tokens the worker
    // reports beyond those it streamed are not charged twice).
    if (s->charged != kChargedUnderOtherModel && !ep.spec.per_token) {
      ep.flows[ts.tier].adjust(s->ts, s->charged - actual, now);
    }
    ts.expected_output = ts.expected_output < 0
                             ? out
                             : ts.expected_output + kOutputEmaAlpha * (out - ts.expected_output);
  }
  ts.stats.completed++;
  // Output tokens charge() counted already are not counted again.
  const std::uint64_t served =
      static_cast<std::uint64_t>(s->req.input_tokens) + (out > s->emitted ? out - s->emitted : 0);
  ts.stats.tokens_served += served;
  ts.recent.add(served, now);
  ep.recent.add(served, now);
  ts.in_flight--;
  ts.last_active = now;
  in_flight_--;
  freeSlot(indexOf(h));
  return true;
}

void Scheduler::batchServed(EndpointId e, std::uint64_t tokens, TimeNs service_ns) {
  if (e < endpoints_.size()) endpoints_[e].throttle.onBatchDone(tokens, service_ns);
}

bool Scheduler::cancel(Handle h, Status why, std::vector<Done>& done) {
  Slot* s = lookup(h);
  if (!s || s->state != SlotState::kQueued) return false;
  withdraw(*s, why, done);
  return true;
}

std::size_t Scheduler::cancelOwner(std::uint64_t owner, Status why, std::vector<Done>& done,
                                   TenantId tenant) {
  std::size_t n = 0;
  for (Slot& s : slots_) {
    if (s.state == SlotState::kQueued && s.req.owner == owner &&
        (tenant == kNoTenant || s.req.tenant == tenant)) {
      withdraw(s, why, done);
      ++n;
    }
  }
  return n;
}

std::size_t Scheduler::cancelAll(Status why, std::vector<Done>& done) {
  std::size_t n = 0;
  for (Slot& s : slots_) {
    if (s.state == SlotState::kQueued) {
      withdraw(s, why, done);
      ++n;
    }
  }
  return n;
}

void Scheduler::expireDeadlines(TimeNs now, std::vector<Done>& done) {
  while (!deadlines_.empty() && deadlines_.front().deadline <= now) {
    const Handle h = deadlines_.front().handle;
    std::pop_heap(deadlines_.begin(), deadlines_.end(), std::greater<>{});
    deadlines_.pop_back();
    Slot* s = lookup(h);
    if (s && s->state == SlotState::kQueued) withdraw(*s, Status::kDeadlineExceeded, done);
  }
}

TimeNs Scheduler::nextDeadline() {
  while (!deadlines_.empty()) {
    const Slot* s = lookup(deadlines_.front().handle);
    if (s && s->state == SlotState::kQueued) return deadlines_.front().deadline;
    std::pop_heap(deadlines_.begin(), deadlines_.end(), std::greater<>{});
    deadlines_.pop_back();
  }
  return kNever;
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
      ep.flows[ts.tier].forget(i);
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
  v.deficit = ep.flows[ts.tier].deficit(i);
  v.expected_output = ts.expected_output;
  if (now > 0) v.recent_tokens = ts.recent.sum(now);
  v.stats = ts.stats;
  return v;
}

std::vector<LimitUsage> Scheduler::limitUsage(TenantId t, EndpointId e, TimeNs now) {
  if (e >= endpoints_.size()) return {};
  EndpointState& ep = endpoints_[e];
  const std::uint32_t i = findState(ep, t);
  if (i == kNoState || !ep.states[i].limiter) return {};
  return ep.states[i].limiter->usage(now);
}

}  // namespace fairsched::core
