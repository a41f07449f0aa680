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

TenantSelector makeTenantSelector(const EndpointSpec& spec) {
  return TenantSelector(spec.fairness, spec.half_life, spec.preemption.enabled);
}

Scheduler::Scheduler(SchedulerSpec spec) : spec_(std::move(spec)), tenants_(spec_) {
  spec_.tenants.clear();  // the table holds them now
  spec_.tenants.shrink_to_fit();
  endpoints_.resize(spec_.endpoints.size());
  for (std::size_t e = 0; e < spec_.endpoints.size(); ++e) {
    EndpointState& ep = endpoints_[e];
    ep.spec = spec_.endpoints[e];
    resetTiers(ep);
    ep.throttle = BacklogThrottle(ep.spec.latency_target, ep.spec.parallelism);
  }
}

void Scheduler::resetTiers(EndpointState& ep) const {
  std::vector<double> shares;
  for (const auto& t : spec_.tiers) shares.push_back(t.min_share);
  const std::size_t tiers = spec_.tiers.size();
  ep.tenant_selectors.assign(tiers, makeTenantSelector(ep.spec));
  ep.tiers.assign(tiers, TierState{});
  ep.tier_selector = TierSelector(shares);
  ep.backlogged = std::make_unique<bool[]>(tiers);
}

Scheduler::Slot* Scheduler::lookup(Handle h) {
  const std::uint32_t i = indexOf(h);
  if (i >= slots_.size()) return nullptr;
  Slot& s = slots_[i];
  if (s.state == SlotState::kFree || s.gen != static_cast<std::uint32_t>(h >> 32)) return nullptr;
  return &s;
}

Scheduler::Slot* Scheduler::inFlight(Handle h) {
  Slot* s = lookup(h);
  return s && s->state == SlotState::kInFlight ? s : nullptr;
}

void Scheduler::freeSlot(std::uint32_t index) {
  Slot& s = slots_[index];
  s.state = SlotState::kFree;
  s.passed_over = 0;
  if (index < prefixes_.size()) std::vector<std::uint64_t>().swap(prefixes_[index]);
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
  ep.tenant_selectors[ts.tier].setQuantum(i, quantumOf(ep.spec, e.weight));
  if (t >= ep.state_of.size())
    ep.state_of.resize(std::max<std::size_t>(t + 1, tenants_.capacity()), kNoState);
  ep.state_of[t] = i;
  tenants_.retain(t);
  return i;
}

std::int64_t Scheduler::quantumOf(const EndpointSpec& spec, double weight) {
  const double q = static_cast<double>(spec.quantum) * weight;
  return std::max<std::int64_t>(1, std::llround(q));
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
  trackDeadline(r, h);
  ts.stats.admitted++;
  return {Status::kOk, 0, h};
}

void Scheduler::pushDeadline(TimeNs deadline, Handle h) {
  deadlines_.push_back({deadline, h});
  std::push_heap(deadlines_.begin(), deadlines_.end(), std::greater<>{});
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
    TenantSelector& selector = ep.tenant_selectors[ts.tier];
    if (was_empty) {
      selector.enqueue(s.ts, costOf(ep, ts, s), now);
    } else if (ts.queue.top().handle == h) {
      selector.headChanged(s.ts, costOf(ep, ts, s));
    }
  } else {
    ep.fifo.push(entry);
  }
  if (was_empty) ep.tiers[ts.tier].backlogged_weight += ts.weight;
  ts.queued++;
  if (was_empty && ts.in_flight == 0 && spec_.policy == Policy::kFair) noteNewcomer(ep, s.ts);
  ts.queued_tokens += tokens;
  ep.tiers[ts.tier].queued_tokens += tokens;
  if (ep.queued++ == 0) ep.pending_since = now;
  ep.queued_tokens += tokens;
}

void Scheduler::noteNewcomer(EndpointState& ep, std::uint32_t i) {
  TenantState& ts = ep.states[i];
  if (ts.newcomer_listed) return;
  ts.newcomer_listed = true;
  ep.newcomers.push_back(i);
  if (ep.newcomers.size() > 2 * ep.states.size() + 64) {  // stale entries of reused states
    ep.newcomers.clear();
    for (std::uint32_t j = 0; j < ep.states.size(); ++j) {
      TenantState& o = ep.states[j];
      o.newcomer_listed = o.live && o.queued > 0 && o.in_flight == 0;
      if (o.newcomer_listed) ep.newcomers.push_back(j);
    }
  }
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
  TenantSelector& selector = ep.tenant_selectors[ts.tier];
  if (ts.queue.empty()) {
    selector.remove(ts_index);
  } else {
    selector.headChanged(ts_index, costOf(ep, ts, slots_[indexOf(ts.queue.top().handle)]));
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

bool Scheduler::complete(Handle h, std::uint32_t output_tokens, TimeNs now, Status ended) {
  Slot* s = inFlight(h);
  if (!s) return false;
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
      ep.tenant_selectors[ts.tier].adjust(s->ts, s->charged - actual, now);
    }
    ts.expected_output = ts.expected_output < 0
                             ? out
                             : ts.expected_output + kOutputEmaAlpha * (out - ts.expected_output);
  }
  if (ended == Status::kCancelled) {
    ts.stats.cancelled++;
  } else if (ended == Status::kDeadlineExceeded) {
    ts.stats.expired++;
  } else {
    ts.stats.completed++;
  }
  // Output tokens charge() counted already are not counted again.
  const std::uint64_t served =
      static_cast<std::uint64_t>(s->req.input_tokens) + (out > s->emitted ? out - s->emitted : 0);
  ts.stats.tokens_served += served;
  ts.recent.add(served, now);
  ep.recent.add(served, now);
  ts.in_flight--;
  ts.last_active = now;
  in_flight_--;
  if (ts.in_flight == 0 && ts.queued > 0 && spec_.policy == Policy::kFair) {
    noteNewcomer(ep, s->ts);
  }
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

}  // namespace fairsched::core
