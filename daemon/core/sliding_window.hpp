// Sliding-window counter with sub-buckets: the state behind one rate limit of
// one (tenant, endpoint).
//
// Guarantee: the cost admitted through add() in any half-open window
// (t - W, t] never exceeds the limit — the sliding-window-log guarantee — while
// the state is a fixed kSlots buckets, O(1) in traffic.
//
// How: time is cut into buckets of width g = ceil(W / kSubBuckets). Each bucket
// keeps the cost admitted in it and the time of its last admission. A bucket
// counts against the limit until its last admission has left the window
// (last <= now - W); every admission newer than now - W therefore lies in a
// counted bucket, which is the guarantee. kSlots = kSubBuckets + 1 buckets
// cover any window because W <= kSubBuckets * g.
//
// Cost of the guarantee: the oldest counted bucket may still hold admissions
// that are already older than the window, because only its *last* admission
// time is kept. So the limiter may under-admit by at most the cost admitted
// within one bucket width (W / 15: 4 s of a minute, 1.6 h of a day) at the
// trailing edge; it never over-admits. retry_after is exact with respect to
// this rule: a request retried at now + retryAfter() is admitted if nothing
// else was admitted meanwhile, and one retried earlier is not.
#pragma once

#include <array>
#include <cstdint>

#include "daemon/core/types.hpp"

namespace fairsched::core {

class SlidingWindow {
 public:
  static constexpr int kSubBuckets = 15;
  static constexpr int kSlots = kSubBuckets + 1;  // a power of two: slot = index & kMask
  static constexpr std::int64_t kMask = kSlots - 1;

  static TimeNs bucketWidth(TimeNs window) { return (window + kSubBuckets - 1) / kSubBuckets; }

  // Drop what has left the window ending at `now`.
  // REQUIRES: now >= 0 and now is not earlier than in any previous call (the
  // caller clamps time that goes backwards).
  void advance(TimeNs now, TimeNs window, TimeNs width);

  // Cost counted against the limit after the last advance().
  std::uint64_t used() const { return sum_; }

  // REQUIRES: advance(now, ...) was called with the same now.
  void add(std::uint64_t cost, TimeNs now, TimeNs width);

  // The earliest time >= now at which `used() + cost <= limit` holds if nothing
  // else is added; kNever when cost > limit. REQUIRES: advance(now, ...) first.
  TimeNs admitAt(std::uint64_t cost, std::uint64_t limit, TimeNs now, TimeNs window) const;

  // Give back cost that was added at `added_at` (a reservation not used). Cost
  // whose bucket already left the window is not counted any more and is
  // ignored.
  void refund(std::uint64_t cost, TimeNs added_at, TimeNs width);

  // True when nothing is counted any more (the state may be dropped).
  bool empty() const { return sum_ == 0; }

  // The buckets counted after the last advance(), oldest first:
  // f(cost, time of its last admission).
  template <class F>
  void forEachCounted(F&& f) const {
    if (head_ < 0) return;
    for (std::int64_t i = tail_; i <= head_; ++i) {
      const auto s = static_cast<std::size_t>(i & kMask);
      if (cost_[s] != 0) f(cost_[s], last_[s]);
    }
  }

 private:
  std::int64_t head_ = -1;  // index of the newest bucket seen; -1 = none yet
  std::int64_t tail_ = 0;   // oldest bucket that may still count
  std::uint64_t sum_ = 0;   // cost over buckets [tail_, head_]
  std::array<std::uint64_t, kSlots> cost_{};
  std::array<TimeNs, kSlots> last_{};
};

}  // namespace fairsched::core
