// Least-served-first selection across the tenants ("flows") of one tier: the
// alternative to deficit round robin for endpoints whose work is charged as
// it is generated (workers). Each flow has a service counter S — the cost it
// was charged (prompt at dispatch, output tokens as generated) — and the
// backlogged flow with the smallest S / weight goes next. Two variants:
//
//   recent  S decays exponentially with a half-life H: service long past
//           counts less, service just now counts fully. A flow that returns
//           after idling keeps its (decayed) counter — no lift — so it is
//           ahead of the flows that kept being served by roughly what they
//           were served while it was away, discounted by the decay; a flow
//           that was served heavily a minute ago is not punished for it any
//           more. Fairness is judged over the last few H, not since the start.
//   vtc     the Virtual Token Counter (Sheng et al., OSDI 2024): no decay; a
//           flow that becomes backlogged is lifted to the smallest counter of
//           the backlogged flows (or to the counter of the last flow that left
//           when none is backlogged), so idling earns no credit at all.
//
// DRR (drr_scheduler.hpp) instead hands out quanta in rounds and forgets a
// flow's credit when it empties: it is fair between flows that stay
// backlogged, and bounded by a quantum plus one request's cost.
//
// Decay without touching every flow: counters are kept inflated by
// g(t) = 2^((t - base) / H). Adding x at time t adds x·g(t); the true value at
// t is the stored one / g(t). Comparing flows at one moment compares stored
// values, so the order never changes with time and a heap keyed by stored
// value stays valid. When g grows large every stored value is rescaled once.
//
// A decision costs O(log flows). Single-threaded, like the scheduler.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/core/types.hpp"

namespace fairsched::core {

class ServiceSelector {
 public:
  using FlowId = std::uint32_t;
  static constexpr FlowId kNone = UINT32_MAX;

  // half_life 0: no decay. lift: the VTC rule for flows that become backlogged.
  explicit ServiceSelector(TimeNs half_life = 0, bool lift = false);

  // The flow's weight (its DRR quantum is proportional to it, so either may
  // be passed). REQUIRES: weight > 0.
  void setWeight(FlowId f, double weight);

  // Time only moves forward; calls with an earlier `now` count as the latest.
  void enqueue(FlowId f, TimeNs now);
  // The backlogged flow with the least service per weight (ties: the one
  // backlogged longest); kNone when none is. Stable until something changes.
  FlowId select() const { return heap_.empty() ? kNone : heap_.front(); }
  // `cost` was charged to `f` at `now` (negative: given back).
  void charge(FlowId f, double cost, TimeNs now);
  // A backlogged flow emptied.
  void remove(FlowId f);
  // Reset an idle flow so its id can serve another tenant.
  void forget(FlowId f);
  // A restart: the flow had `per_weight` service (service() of the last
  // run) `elapsed` ago; it decays over `elapsed` as if the daemon had run.
  void restore(FlowId f, double per_weight, TimeNs elapsed, TimeNs now);

  // Calls f(flow) for the backlogged flows whose service per weight at `now`
  // is at most the least one's + `slack`, least served first, at most `max`
  // of them (locality within fairness: scheduler_locality.cpp). O(max²).
  template <class F>
  void forEachWithin(double slack, TimeNs now, std::size_t max, F&& f) const {
    if (heap_.empty() || max == 0) return;
    const double limit = service(heap_.front(), now) + slack;
    // Best first over the heap: no node is less than its parent, so a node
    // over the limit closes its subtree.
    std::vector<std::uint32_t> frontier{0};
    for (std::size_t taken = 0; taken < max && !frontier.empty(); ++taken) {
      std::size_t at = 0;
      for (std::size_t k = 1; k < frontier.size(); ++k) {
        if (less(heap_[frontier[k]], heap_[frontier[at]])) at = k;
      }
      const std::uint32_t i = frontier[at];
      frontier.erase(frontier.begin() + static_cast<std::ptrdiff_t>(at));
      if (service(heap_[i], now) > limit) break;  // the least left is over: all are
      f(heap_[i]);
      for (const std::uint32_t c : {2 * i + 1, 2 * i + 2}) {
        if (c < heap_.size()) frontier.push_back(c);
      }
    }
  }

  bool backlogged(FlowId f) const { return f < flows_.size() && flows_[f].pos != kNotQueued; }
  bool anyBacklogged() const { return !heap_.empty(); }
  // The flow's service per unit of weight at `now` (decayed for `recent`).
  double service(FlowId f, TimeNs now) const;

 private:
  static constexpr std::uint32_t kNotQueued = UINT32_MAX;
  struct Flow {
    double stored = 0;  // service × g(t) at the last change; true value = stored / g(now)
    double weight = 1;
    std::uint64_t seq = 0;  // when it became backlogged: ties go to the earlier
    std::uint32_t pos = kNotQueued;
  };
  Flow& flow(FlowId f);
  double inflation(TimeNs now);
  double key(FlowId f) const { return flows_[f].stored / flows_[f].weight; }
  bool less(FlowId a, FlowId b) const {
    const double ka = key(a), kb = key(b);
    return ka != kb ? ka < kb : flows_[a].seq < flows_[b].seq;
  }
  void siftUp(std::uint32_t i);
  void siftDown(std::uint32_t i);
  void place(std::uint32_t i, FlowId f) {
    heap_[i] = f;
    flows_[f].pos = i;
  }

  TimeNs half_life_;
  bool lift_;
  TimeNs base_ = 0;  // g(base_) = 1
  TimeNs last_now_ = 0;
  double last_g_ = 1;
  double last_left_ = 0;  // stored per weight of the flow that left most recently (vtc)
  std::uint64_t seq_ = 0;
  std::vector<Flow> flows_;
  std::vector<FlowId> heap_;
};

}  // namespace fairsched::core
