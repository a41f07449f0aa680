// Locality within fairness: which queued request take() dispatches for a
// worker with room, when the worker says what it holds of each prefix
// (Scheduler::LocalityProbe). The fair choice stays the default; another
// request is taken only when the worker holds strictly more of its prefix,
// and only from where fairness allows it:
//  - behind the fair choice in its own tenant's queue, among the next
//    kLocalityScan requests of the head's priority without a deadline: the
//    tenant is charged what it would have been for its head, so no other
//    tenant notices; the head is passed over at most kMaxPassedOver times;
//  - another tenant of the tier whose service per weight is within
//    locality_slack of the least served (recent and vtc fairness): the
//    service difference grows by at most that slack (docs/architecture.md).
#include <cassert>

#include "daemon/core/scheduler.hpp"

namespace fairsched::core {

void Scheduler::setPrefix(Handle h, std::vector<std::uint64_t> chain) {
  Slot* s = lookup(h);
  if (s == nullptr || s->state != SlotState::kQueued || chain.empty()) return;
  if (prefixes_.size() < slots_.size()) prefixes_.resize(slots_.size());
  prefixes_[indexOf(h)] = std::move(chain);
}

std::span<const std::uint64_t> Scheduler::prefixOf(Handle h) const {
  const std::uint32_t i = indexOf(h);
  if (i >= slots_.size() || slots_[i].gen != static_cast<std::uint32_t>(h >> 32) ||
      slots_[i].state == SlotState::kFree || i >= prefixes_.size()) {
    return {};
  }
  return prefixes_[i];
}

std::size_t Scheduler::matchedOf(const QueueEntry& e, const LocalityProbe& probe) const {
  const std::uint32_t i = indexOf(e.handle);
  return i < prefixes_.size() && !prefixes_[i].empty() ? probe.matched(prefixes_[i]) : 0;
}

Scheduler::LocalityPick Scheduler::localityPick(EndpointState& ep, const TenantSelector& selector,
                                                TenantSelector::FlowId fair, TimeNs now,
                                                const LocalityProbe& probe) {
  LocalityPick best{fair, ep.states[fair].queue.top(), true};
  std::size_t best_matched = matchedOf(best.entry, probe);
  auto consider = [&](TenantSelector::FlowId f) {
    const TenantState& ts = ep.states[f];
    if (ts.queue.empty()) return;
    const QueueEntry& head = ts.queue.top();
    if (head.key.deadline <= now) return;  // takeFair expires it when its turn comes
    if (f != fair) {
      const std::size_t m = matchedOf(head, probe);
      if (m > best_matched) {
        best = {f, head, true};
        best_matched = m;
      }
    }
    // Behind the head: same priority, no deadline, still queued; only while
    // the head may still be passed over.
    if (slots_[indexOf(head.handle)].passed_over >= kMaxPassedOver || !ts.queue.fifoOnly() ||
        head.key.deadline != kNever) {
      return;
    }
    for (std::uint32_t k = 1; k <= kLocalityScan; ++k) {
      const QueueEntry* e = ts.queue.fifoAhead(k);
      if (e == nullptr || e->key.priority != head.key.priority || e->key.deadline != kNever) break;
      const Slot* s = lookup(e->handle);
      if (s == nullptr || s->state != SlotState::kQueued) continue;
      const std::size_t m = matchedOf(*e, probe);
      if (m > best_matched) {
        best = {f, *e, false};
        best_matched = m;
      }
    }
  };
  consider(fair);
  if (ep.spec.locality_slack > 0) {
    // The selectors count service per unit of quantum (a tenant's quantum
    // is the endpoint's × its weight): the slack in those units.
    const double slack = ep.spec.locality_slack / static_cast<double>(ep.spec.quantum);
    selector.forEachWithin(slack, now, kLocalityFlows, [&](TenantSelector::FlowId f) {
      if (f != fair) consider(f);
    });
  }
  if (!best.head) {
    Slot& head = slots_[indexOf(ep.states[best.flow].queue.top().handle)];
    assert(head.passed_over < kMaxPassedOver);
    ++head.passed_over;
  }
  return best;
}

}  // namespace fairsched::core
