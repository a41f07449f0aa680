// Batch formation (scheduler.hpp): take() and nextBatch() for a consumer
// with room — the fair choice (tier, then the tier's tenant selector, then
// the tenant's priority order; with a LocalityProbe, scheduler_locality.cpp)
// or the fifo baseline — and takeHeadroom() for the sequences a worker
// endpoint keeps for tenants with nothing running.
#include <algorithm>
#include <cassert>

#include "daemon/core/scheduler.hpp"

namespace fairsched::core {

TimeNs Scheduler::batchDueAt(EndpointId e) const {
  const EndpointState& ep = endpoints_[e];
  if (ep.queued == 0) return kNever;
  if (ep.queued >= ep.spec.max_batch_requests || ep.queued_tokens >= ep.spec.max_batch_tokens) {
    return std::numeric_limits<TimeNs>::min();
  }
  return ep.pending_since + ep.spec.max_wait;
}

bool Scheduler::takeHeadroom(EndpointId e, TimeNs now, std::uint32_t max_requests,
                             std::uint64_t max_tokens, Batch& out, std::vector<Done>& done) {
  out.clear();
  out.endpoint = e;
  if (e >= endpoints_.size() || spec_.policy != Policy::kFair) return false;
  EndpointState& ep = endpoints_[e];
  while (out.requests.size() < max_requests && !ep.newcomers.empty()) {
    const std::uint32_t i = ep.newcomers.front();
    TenantState& ts = ep.states[i];
    if (!ts.live || ts.queued == 0 || ts.in_flight != 0 || ts.queue.empty()) {
      ts.newcomer_listed = false;
      ep.newcomers.pop_front();
      continue;
    }
    if (ts.withdrawn > 0 && dropWithdrawnHead(ts) && ts.queue.empty()) continue;
    const QueueEntry head = ts.queue.top();
    Slot& s = slots_[indexOf(head.handle)];
    if (head.key.deadline <= now) {
      withdraw(s, Status::kDeadlineExceeded, done);  // the tenant stays listed
      continue;
    }
    if (out.tokens + head.input_tokens + head.max_output_tokens > max_tokens) break;
    ts.newcomer_listed = false;
    ep.newcomers.pop_front();
    TenantSelector& selector = ep.tenant_selectors[ts.tier];
    const std::int64_t cost = costOf(ep, ts, head);
    ts.queue.pop();
    unqueue(ep, ts, std::uint64_t{head.input_tokens} + head.max_output_tokens);
    s.charged += cost;
    dispatch(ep, s, out, now);
    if (ts.withdrawn > 0) dropWithdrawnHead(ts);
    // Out of its turn: the flow pays now (a DRR deficit may go negative) and
    // keeps its place in line for what it still has queued.
    selector.adjust(i, -cost, now);
    if (ts.queue.empty()) {
      selector.remove(i);
    } else {
      selector.headChanged(i, costOf(ep, ts, ts.queue.top()));
    }
  }
  return !out.requests.empty();
}

void Scheduler::prefetchUpcoming(const EndpointState& ep, const TenantSelector& selector) const {
  // A software pipeline over the flows due next in this round. Each stage
  // needs the line the previous stage fetched (state -> head entry -> slot),
  // so stages run a few turns apart: the flow k turns ahead gets its state
  // fetched, the one k-1 ahead its head entry, the one k-2 ahead its slot. By
  // a flow's turn its data is in cache instead of costing three dependent
  // misses. Hints only: nothing here changes a decision.
  TenantSelector::FlowId ahead[kPrefetchDepth];
  TenantSelector::FlowId f = selector.upcoming();
  std::size_t n = 0;
  for (; n < kPrefetchDepth && f != TenantSelector::kNone; ++n, f = selector.after(f)) ahead[n] = f;
  if (n == kPrefetchDepth) {
    const char* p = reinterpret_cast<const char*>(&ep.states[ahead[n - 1]]);
    for (std::size_t line = 0; line < kHotLines * 64; line += 64) __builtin_prefetch(p + line);
    selector.prefetch(ahead[n - 1]);
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

TierSelector::Choice Scheduler::nextTier(EndpointState& ep) {
  const std::size_t tiers = ep.tenant_selectors.size();
  for (std::size_t t = 0; t < tiers; ++t) ep.backlogged[t] = ep.tenant_selectors[t].anyBacklogged();
  return ep.tier_selector.select(std::span<const bool>(ep.backlogged.get(), tiers));
}

bool Scheduler::takeFair(EndpointState& ep, TimeNs now, Limits limits, Batch& out,
                         std::vector<Done>& done, const LocalityProbe* probe) {
  const std::span<const bool> backlogged(ep.backlogged.get(), ep.tenant_selectors.size());
  while (out.requests.size() < limits.requests) {
    const TierSelector::Choice choice = nextTier(ep);
    if (choice.tier == TierSelector::kNoTier) break;
    TenantSelector& selector = ep.tenant_selectors[choice.tier];
    TenantSelector::FlowId f = selector.select();
    assert(f != TenantSelector::kNone);
    prefetchUpcoming(ep, selector);
    if (ep.states[f].queue.top().key.deadline <= now) {  // the head is always live
      withdraw(slots_[indexOf(ep.states[f].queue.top().handle)], Status::kDeadlineExceeded, done);
      continue;
    }
    LocalityPick pick{f, ep.states[f].queue.top(), true};
    if (probe != nullptr && out.requests.empty()) {
      pick = localityPick(ep, selector, f, now, *probe);
      f = pick.flow;
    }
    TenantState& ts = ep.states[f];
    const QueueEntry head = pick.entry;
    Slot& s = slots_[indexOf(head.handle)];
    const std::uint64_t with_head = out.tokens + head.input_tokens + head.max_output_tokens;
    if (with_head > limits.tokens) break;
    const std::uint32_t tier_cap = spec_.tiers[choice.tier].max_batch_tokens;
    if (tier_cap != 0 && with_head > tier_cap && !out.requests.empty()) break;
    const std::int64_t cost = costOf(ep, ts, head);
    if (pick.head) {
      ts.queue.pop();
    } else {
      // Taken from behind the head: its entry stays in the queue, dead, and
      // is dropped when it reaches the head (as a withdrawn one).
      ts.withdrawn++;
    }
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
      // A deep queue (one tenant's burst) is taken many at a turn: the slot
      // a few entries on, so that its miss is over by then.
      if (const QueueEntry* later = ts.queue.fifoAhead(kPrefetchDepth)) prefetchSlot(later->handle);
    }
    selector.consume(f, cost, has_next, next_cost, now);
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
  // A batch that is not due is one with room for nothing.
  const bool due = e < endpoints_.size() && (force || batchDueAt(e) <= now);
  const EndpointSpec* es = due ? &endpoints_[e].spec : nullptr;
  return take(e, now, due ? es->max_batch_requests : 0, due ? es->max_batch_tokens : 0, out, done);
}

bool Scheduler::take(EndpointId e, TimeNs now, std::uint32_t max_requests, std::uint64_t max_tokens,
                     Batch& out, std::vector<Done>& done, const LocalityProbe* probe) {
  out.clear();
  out.endpoint = e;
  if (e >= endpoints_.size() || max_requests == 0) return false;
  EndpointState& ep = endpoints_[e];
  const Limits limits{max_requests, max_tokens};
  if (prefixes_.empty()) probe = nullptr;  // no chain to match
  return spec_.policy == Policy::kFair ? takeFair(ep, now, limits, out, done, probe)
                                       : takeFifo(ep, now, limits, out, done);
}

}  // namespace fairsched::core
