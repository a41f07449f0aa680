#include "daemon/fleet/lease_pool.hpp"

#include <algorithm>

namespace fairsched::fleet {

LeasePool::LeasePool(std::uint64_t lease, TimeNs ttl)
    : lease_(std::max<std::uint64_t>(1, lease)), ttl_(std::max<TimeNs>(1, ttl)) {}

std::uint64_t LeasePool::wantSize() const {
  return std::max(lease_, largest_cost_);
}

std::uint64_t LeasePool::held() const {
  return (current_ ? current_->remaining : 0) + (next_ ? next_->remaining : 0);
}

void LeasePool::addReturn(std::int64_t bucket, std::uint64_t amount) {
  if (amount == 0) return;
  for (LeaseReturn& r : returns_) {
    if (r.bucket == bucket) {
      r.amount += amount;
      return;
    }
  }
  returns_.push_back({bucket, amount});
}

void LeasePool::retireCurrent(TimeNs now) {
  if (!current_) return;
  addReturn(current_->bucket, current_->remaining);
  records_[current_->record].retired_at = now;
  current_.reset();
}

void LeasePool::promoteNext(TimeNs now) {
  if (!next_) return;
  current_ = next_;
  next_.reset();
  Record& rec = records_[next_record_];
  rec = Record{now, kNever, current_->bucket, true};
  current_->record = next_record_;
  next_record_ = (next_record_ + 1) % kRecords;
}

void LeasePool::expire(TimeNs now) {
  if (current_ && now >= current_->expires_at) {
    // A lease that outlived its use: demand is low again, half-way
    // prefetching is enough.
    if (current_->remaining > 0) eager_ = false;
    retireCurrent(now);
  }
  if (next_ && now >= next_->expires_at) {
    addReturn(next_->bucket, next_->remaining);
    next_.reset();
  }
}

core::FleetDecision LeasePool::take(std::uint64_t cost, TimeNs now, bool may_borrow) {
  expire(now);
  largest_cost_ = std::max(largest_cost_, cost);
  if ((!current_ || current_->remaining < cost) && next_) {
    // Even when the next lease is too small too: it becomes current, so a
    // fetch (sized for `cost` now) can start.
    retireCurrent(now);
    promoteNext(now);
  }
  if (current_ && current_->remaining >= cost) {
    current_->remaining -= cost;
    counters_.admitted++;
    return {true, 0};
  }
  if (may_borrow && !current_ && !next_ && debt_ == 0 && now >= denied_until_) {
    debt_ = cost;
    short_ = true;  // fetch now: the grant pays the debt first
    markBypassed(now);
    counters_.borrowed++;
    return {true, 0};
  }
  short_ = true;
  // Ran dry before the next lease came: from now on the next lease is
  // fetched as soon as the current one is in use, a whole lease ahead.
  if (now >= denied_until_) eager_ = true;
  pending_cost_ = cost;
  counters_.waited++;
  const TimeNs wait = denied_until_ > now ? denied_until_ - now : kFetchWait;
  return {false, wait};
}

void LeasePool::refund(std::uint64_t cost, TimeNs taken_at, TimeNs now) {
  if (cost == 0) return;
  if (bypassed(taken_at)) {
    counters_.refunds_dropped++;
    return;
  }
  expire(now);
  const Record* match = nullptr;
  int matches = 0;
  for (const Record& r : records_) {
    if (!r.used || taken_at < r.activated_at || taken_at > r.retired_at) continue;
    match = &r;
    ++matches;
  }
  if (matches != 1) {
    counters_.refunds_dropped++;
    return;
  }
  if (match->retired_at == kNever && current_ && &records_[current_->record] == match) {
    current_->remaining += cost;
    counters_.refunds_local++;
    return;
  }
  addReturn(match->bucket, cost);
  counters_.refunds_returned++;
}

bool LeasePool::wantsFetch(TimeNs now) const {
  if (fetching_ || next_ || now < denied_until_) return false;
  if (!current_ || short_ || eager_) return true;
  return current_->remaining < wantSize() / 2 + 1 || now >= current_->expires_at;
}

FetchOrder LeasePool::beginFetch(TimeNs /*sent_at*/, bool want_lease) {
  FetchOrder order;
  order.returns.swap(returns_);
  if (want_lease) {
    fetching_ = true;
    order.want = wantSize() + debt_;
    order.min = std::clamp<std::uint64_t>(std::max(pending_cost_, debt_), 1, order.want);
  }
  return order;
}

void LeasePool::onGrant(std::uint64_t amount, std::int64_t bucket, TimeNs sent_at) {
  fetching_ = false;
  short_ = false;
  pending_cost_ = 0;
  if (amount == 0) return;
  counters_.grants++;
  const std::uint64_t pay = std::min(debt_, amount);  // what was borrowed is spent first
  debt_ -= pay;
  amount -= pay;
  if (amount == 0) return;
  const Lease lease{amount, bucket, sent_at + ttl_, 0};
  if (next_) {  // not expected (one fetch at a time, only without a next lease)
    addReturn(next_->bucket, next_->remaining);
  }
  next_ = lease;
}

void LeasePool::onDenied(TimeNs retry_at) {
  fetching_ = false;
  counters_.denials++;
  denied_until_ = std::max(denied_until_, retry_at);
}

void LeasePool::onFetchFailed() {
  fetching_ = false;
}

void LeasePool::releaseAll(TimeNs now) {
  retireCurrent(now);
  if (next_) {
    addReturn(next_->bucket, next_->remaining);
    next_.reset();
  }
}

void LeasePool::markBypassed(TimeNs now) {
  if (bypass_from_ == kNever || now > bypass_until_ + kBypassMerge) bypass_from_ = now;
  bypass_until_ = std::max(bypass_until_ == kNever ? now : bypass_until_, now);
}

}  // namespace fairsched::fleet
