#include "daemon/core/rate_limiter.hpp"

#include <algorithm>

namespace fairsched::core {

KeyLimiter::KeyLimiter(std::span<const LimitSpec> specs) : specs_(specs) {
  bool any = false;
  widths_.reserve(specs.size());
  for (const auto& s : specs) {
    widths_.push_back(SlidingWindow::bucketWidth(s.window_ns));
    any = any || s.amount != 0;
  }
  if (any) windows_ = std::make_unique<SlidingWindow[]>(specs.size());
}

KeyLimiter::KeyLimiter(std::span<const LimitSpec> specs,
                       std::vector<std::unique_ptr<FleetAccount>> fleet)
    : KeyLimiter(specs) {
  if (std::any_of(fleet.begin(), fleet.end(), [](const auto& a) { return a != nullptr; })) {
    fleet_ = std::move(fleet);
    fleet_.resize(specs.size());
  }
}

LimitDecision KeyLimiter::tryAdmit(std::uint64_t tokens, TimeNs now) {
  LimitDecision d;
  d.admitted = true;
  if (!windows_) return d;
  const TimeNs at = clamp(now);  // window time; fleet accounts get the clock's
  now = at - kEpoch;
  TimeNs admit_at = at;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const LimitSpec& s = specs_[i];
    if (s.amount == 0) continue;
    if (!local(i)) {
      if (costOf(s, tokens) <= s.amount) continue;
      d.admitted = false;
      admit_at = kNever;
      d.limiting_index = static_cast<std::int32_t>(i);
      continue;
    }
    SlidingWindow& w = windows_[i];
    w.advance(at, s.window_ns, widths_[i]);
    const std::uint64_t cost = costOf(s, tokens);
    if (w.used() + cost <= s.amount) continue;
    const TimeNs when = w.admitAt(cost, s.amount, at, s.window_ns);
    d.admitted = false;
    if (when >= admit_at) {
      admit_at = when;
      d.limiting_index = static_cast<std::int32_t>(i);
    }
  }
  if (!d.admitted) {
    d.retry_after = admit_at == kNever ? kNever : admit_at - at;
    return d;
  }
  if (!fleet_.empty()) {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (specs_[i].amount == 0 || local(i)) continue;
      const FleetDecision f = fleet_[i]->take(costOf(specs_[i], tokens), now);
      if (f.admitted) continue;
      for (std::size_t j = 0; j < i; ++j) {
        if (specs_[j].amount == 0 || local(j)) continue;
        fleet_[j]->refund(costOf(specs_[j], tokens), now);
      }
      d.admitted = false;
      d.retry_after = f.retry_after;
      d.limiting_index = static_cast<std::int32_t>(i);
      return d;
    }
  }
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].amount == 0 || !local(i)) continue;
    windows_[i].add(costOf(specs_[i], tokens), at, widths_[i]);
  }
  return d;
}

void KeyLimiter::carryOver(const KeyLimiter& old) {
  now_ = std::max(now_, old.now_);
  if (!windows_ || !old.windows_) return;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].amount == 0 || !local(i)) continue;  // a fleet account counts its own
    for (std::size_t j = 0; j < old.specs_.size(); ++j) {
      const LimitSpec& o = old.specs_[j];
      if (o.amount != 0 && old.local(j) && o.unit == specs_[i].unit &&
          o.window_ns == specs_[i].window_ns) {
        windows_[i] = old.windows_[j];
        break;
      }
    }
  }
}

void KeyLimiter::refundTokens(std::uint64_t unused_tokens, TimeNs admitted_at) {
  if (!windows_ || unused_tokens == 0) return;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].amount == 0 || specs_[i].unit != LimitUnit::kTokens) continue;
    if (!local(i)) {
      fleet_[i]->refund(unused_tokens, admitted_at);
      continue;
    }
    windows_[i].refund(unused_tokens, admitted_at + kEpoch, widths_[i]);
  }
}

bool KeyLimiter::idle(TimeNs now) {
  if (!windows_) return true;
  now = clamp(now);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].amount == 0 || !local(i)) continue;
    windows_[i].advance(now, specs_[i].window_ns, widths_[i]);
    if (!windows_[i].empty()) return false;
  }
  return true;
}

void KeyLimiter::save(TimeNs now, SavedTenantState& out) {
  if (!windows_) return;
  now = clamp(now);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].amount == 0 || !local(i)) continue;
    SlidingWindow& w = windows_[i];
    w.advance(now, specs_[i].window_ns, widths_[i]);
    if (w.empty()) continue;
    SavedWindow saved{specs_[i].unit, specs_[i].window_ns,
                      static_cast<std::uint32_t>(out.buckets.size()), 0};
    w.forEachCounted([&](std::uint64_t cost, TimeNs last) {
      out.buckets.push_back({cost, now - last});
      ++saved.count;
    });
    out.windows.push_back(saved);
  }
}

void KeyLimiter::restore(LimitUnit unit, TimeNs window_ns, std::span<const SavedBucket> buckets,
                         TimeNs now) {
  if (!windows_) return;
  now = clamp(now);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const LimitSpec& s = specs_[i];
    if (s.amount == 0 || !local(i) || s.unit != unit || s.window_ns != window_ns) continue;
    SlidingWindow& w = windows_[i];
    // Oldest first, and never before what the window already counts (a
    // window is only ever added to at its newest time).
    TimeNs previous = 0;
    w.forEachCounted([&](std::uint64_t, TimeNs last) { previous = std::max(previous, last); });
    for (const SavedBucket& b : buckets) {
      if (b.cost == 0 || b.age >= window_ns) continue;  // left the window meanwhile
      // One out of order counts from the later time (so longer).
      const TimeNs last = std::max(previous, now - std::max<TimeNs>(b.age, 0));
      w.advance(last, window_ns, widths_[i]);
      w.add(b.cost, last, widths_[i]);
      previous = last;
    }
    w.advance(now, window_ns, widths_[i]);
    return;
  }
}

std::vector<LimitUsage> KeyLimiter::usage(TimeNs now) {
  std::vector<LimitUsage> out;
  now = clamp(now);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].amount == 0 || !local(i)) continue;
    windows_[i].advance(now, specs_[i].window_ns, widths_[i]);
    out.push_back({specs_[i], windows_[i].used()});
  }
  return out;
}

}  // namespace fairsched::core
