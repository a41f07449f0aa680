// Rate limits of one (tenant, endpoint): any number of "unit × amount ×
// window" limits checked together. Pure: time is passed in.
//
// A request is admitted only if every limit admits it; then every limit is
// charged (1 for request limits; input + max output tokens for token limits,
// the reservation). At completion the unused part of the token reservation is
// refunded into the bucket it was charged to. Each limit keeps the
// SlidingWindow guarantee: admitted cost never exceeds the amount in any
// window of its length (see sliding_window.hpp for the under-admission bound).
//
// Time that goes backwards is treated as no time passing.
//
// Fleet-scoped specs (scope kFleet) that come with a FleetAccount are counted
// by the account instead of a local window: host limits are checked first
// (nothing charged), then the fleet accounts are taken in spec order; if one
// rejects, the takes already made are refunded, so a rejected request leaves
// no trace anywhere. A fleet-scoped spec without an account (no fleet gate,
// e.g. a simulator) is counted locally like a host limit.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daemon/core/fleet_gate.hpp"
#include "daemon/core/limit_spec.hpp"
#include "daemon/core/saved_state.hpp"
#include "daemon/core/sliding_window.hpp"
#include "daemon/core/types.hpp"

namespace fairsched::core {

struct LimitDecision {
  bool admitted = false;
  // When rejected: wait this long, then the same request is admitted if
  // nothing else was admitted meanwhile. kNever: the request can never fit
  // (its cost exceeds a limit's amount).
  TimeNs retry_after = 0;
  std::int32_t limiting_index = -1;  // which spec rejected (the one that frees last)
};

// Usage of one limit at a point in time, for operators ("4,100 of 6,000 used").
struct LimitUsage {
  LimitSpec spec;
  std::uint64_t used = 0;
};

class KeyLimiter {
 public:
  // `specs` must outlive the limiter (the daemon's resolved policy tables own
  // them). Specs with amount 0 are "unlimited" and are skipped.
  explicit KeyLimiter(std::span<const LimitSpec> specs = {});
  // `fleet[i]` counts specs[i] when set; REQUIRES: fleet is empty or has one
  // entry per spec.
  KeyLimiter(std::span<const LimitSpec> specs, std::vector<std::unique_ptr<FleetAccount>> fleet);

  // Check every limit; on success charge them all.
  LimitDecision tryAdmit(std::uint64_t tokens, TimeNs now);

  // Return `unused_tokens` of a reservation made by tryAdmit at `admitted_at`.
  void refundTokens(std::uint64_t unused_tokens, TimeNs admitted_at);

  // True when no limit counts anything any more at `now`: dropping the state
  // then changes no future decision (so an idle tenant cannot dodge a limit by
  // being forgotten). Fleet accounts never hold it back: the fleet backend
  // keeps their counts.
  bool idle(TimeNs now);

  // After a configuration reload: take over the counts of `old` for every
  // limit of this limiter with the same unit and window (amounts may differ),
  // so a reload never hands a tenant a fresh window. Limits without such a
  // match start empty.
  void carryOver(const KeyLimiter& old);

  // A restart: appends each local limit's counted buckets at `now` to
  // `out` (windows with nothing counted are left out).
  void save(TimeNs now, SavedTenantState& out);
  // Counts the saved buckets of a limit with `unit` and `window_ns` again
  // (ages already include the time the daemon was down); a limit this
  // limiter no longer has is ignored, one whose amount changed keeps the
  // usage. Buckets older than the window are dropped; two that fall into
  // one bucket now merge (counted until the later one leaves the window: the
  // limiter may under-admit by that, never over-admit). Oldest bucket
  // first; a bucket older than what the window already counts is counted
  // at the window's newest time (longer, never shorter).
  void restore(LimitUnit unit, TimeNs window_ns, std::span<const SavedBucket> buckets, TimeNs now);

  // Limits counted here (fleet-scoped ones are counted by the fleet backend).
  std::vector<LimitUsage> usage(TimeNs now);
  std::span<const LimitSpec> specs() const { return specs_; }
  bool unlimited() const { return windows_ == nullptr; }

 private:
  // Windows count time from kEpoch before the clock's zero, so a restored
  // admission older than the clock itself (a month of quota after a reboot
  // a minute ago) still has a place: window times are `now + kEpoch`.
  static constexpr TimeNs kEpoch = TimeNs{1} << 62;
  // The window time of `now`; time that goes backwards counts as none passing.
  TimeNs clamp(TimeNs now) {
    if (now + kEpoch > now_) now_ = now + kEpoch;
    return now_;
  }
  static std::uint64_t costOf(const LimitSpec& s, std::uint64_t tokens) {
    return s.unit == LimitUnit::kRequests ? 1 : tokens;
  }

  std::span<const LimitSpec> specs_;
  std::vector<TimeNs> widths_;
  bool local(std::size_t i) const { return fleet_.empty() || !fleet_[i]; }

  std::unique_ptr<SlidingWindow[]> windows_;          // one per spec; null when no spec limits
  std::vector<std::unique_ptr<FleetAccount>> fleet_;  // empty, or one per spec (null: local)
  TimeNs now_ = 0;                                    // window time (see kEpoch)
};

}  // namespace fairsched::core
