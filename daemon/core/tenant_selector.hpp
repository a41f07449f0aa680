// The across-tenant selector: the choice among the tenants of one tier on one
// endpoint (the tier selector, tier_selector.hpp, chooses the tier first).
// Deficit round robin (drr_scheduler.hpp) or least service first
// (service_selector.hpp, `recent` or `vtc`), as the endpoint's `fairness`
// says. One interface, so the scheduler's queueing and dispatch code is the
// same for all three. Tenants are "flows" here, identified by the index of
// their state on the endpoint.
//
// Under DRR the service counters are kept too when `track_service` is set
// (preemption needs "the most-served running tenant"); otherwise DRR pays
// nothing for them.
#pragma once

#include <cstdint>

#include "daemon/core/drr_scheduler.hpp"
#include "daemon/core/scheduler_spec.hpp"
#include "daemon/core/service_selector.hpp"

namespace fairsched::core {

class TenantSelector {
 public:
  using FlowId = std::uint32_t;
  static constexpr FlowId kNone = UINT32_MAX;

  TenantSelector() = default;
  TenantSelector(Fairness fairness, TimeNs half_life, bool track_service)
      : fairness_(fairness),
        track_(fairness != Fairness::kDrr || track_service),
        svc_(fairness == Fairness::kVtc ? 0 : half_life, fairness == Fairness::kVtc) {}

  Fairness fairness() const { return fairness_; }

  void setQuantum(FlowId f, std::int64_t quantum) {
    drr_.setQuantum(f, quantum);
    if (track_) svc_.setWeight(f, static_cast<double>(quantum));
  }
  void enqueue(FlowId f, std::int64_t head_cost, TimeNs now) {
    if (usesDrr()) {
      drr_.enqueue(f, head_cost);
    } else {
      svc_.enqueue(f, now);
    }
  }
  void headChanged(FlowId f, std::int64_t head_cost) {
    if (usesDrr()) drr_.headChanged(f, head_cost);
  }
  FlowId select() { return usesDrr() ? drr_.select() : svc_.select(); }
  void consume(FlowId f, std::int64_t cost, bool has_next, std::int64_t next_head_cost,
               TimeNs now) {
    if (usesDrr()) drr_.consume(f, cost, has_next, next_head_cost);
    if (track_) svc_.charge(f, static_cast<double>(cost), now);
    if (!usesDrr() && !has_next) svc_.remove(f);
  }
  // Correct a flow's charge: `delta` > 0 gives back, < 0 charges more.
  void adjust(FlowId f, std::int64_t delta, TimeNs now) {
    if (usesDrr()) drr_.adjust(f, delta);
    if (track_) svc_.charge(f, -static_cast<double>(delta), now);
  }
  void remove(FlowId f) {
    if (usesDrr()) {
      drr_.remove(f);
    } else {
      svc_.remove(f);
    }
  }
  void forget(FlowId f) {
    drr_.forget(f);
    if (track_) svc_.forget(f);
  }

  // The flows a choice may take instead of select()'s for locality: those
  // within `slack` service per weight of the least served, at most `max`,
  // least served first. DRR keeps no such order: none (the caller has
  // select()'s).
  template <class F>
  void forEachWithin(double slack, TimeNs now, std::size_t max, F&& f) const {
    if (!usesDrr()) svc_.forEachWithin(slack, now, max, f);
  }

  bool backlogged(FlowId f) const { return usesDrr() ? drr_.backlogged(f) : svc_.backlogged(f); }
  bool anyBacklogged() const { return usesDrr() ? drr_.anyBacklogged() : svc_.anyBacklogged(); }
  std::int64_t deficit(FlowId f) const { return usesDrr() ? drr_.deficit(f) : 0; }
  // Service per unit of quantum (so per unit of weight) at `now`; 0 when
  // the counters are not kept.
  double service(FlowId f, TimeNs now) const { return track_ ? svc_.service(f, now) : 0.0; }
  bool tracksService() const { return track_; }
  // A restart: see ServiceSelector::restore (nothing when not kept).
  void restoreService(FlowId f, double per_weight, TimeNs elapsed, TimeNs now) {
    if (track_) svc_.restore(f, per_weight, elapsed, now);
  }

  // DRR's order of the coming turns, for prefetching; kNone otherwise.
  FlowId upcoming() const { return usesDrr() ? drr_.upcoming() : kNone; }
  FlowId after(FlowId f) const { return usesDrr() ? drr_.after(f) : kNone; }
  void prefetch(FlowId f) const {
    if (usesDrr()) drr_.prefetch(f);
  }

 private:
  bool usesDrr() const { return fairness_ == Fairness::kDrr; }
  Fairness fairness_ = Fairness::kDrr;
  bool track_ = false;
  DrrScheduler drr_;
  ServiceSelector svc_;
};

}  // namespace fairsched::core
