#include "daemon/core/sliding_window.hpp"

#include <algorithm>

namespace fairsched::core {

void SlidingWindow::advance(TimeNs now, TimeNs window, TimeNs width) {
  const std::int64_t k = now / width;
  if (k > head_) {
    if (head_ < 0 || k - head_ >= kSlots) {
      cost_.fill(0);
      sum_ = 0;
      tail_ = k;
    } else {
      // Slots about to be reused hold buckets k - kSlots and older: out of any window.
      for (std::int64_t i = head_ + 1; i <= k; ++i) {
        const auto s = static_cast<std::size_t>(i & kMask);
        sum_ -= cost_[s];
        cost_[s] = 0;
      }
      tail_ = std::max(tail_, k - kSubBuckets);
    }
    head_ = k;
  }
  // Buckets whose last admission left the window no longer count. Their last
  // times grow with the index, so this stops at the first one still inside.
  const TimeNs horizon = now - window;
  while (tail_ < head_) {
    const auto s = static_cast<std::size_t>(tail_ & kMask);
    if (cost_[s] != 0 && last_[s] > horizon) break;
    sum_ -= cost_[s];
    cost_[s] = 0;
    ++tail_;
  }
}

void SlidingWindow::add(std::uint64_t cost, TimeNs now, TimeNs width) {
  const std::int64_t k = now / width;  // == head_ after advance(now)
  const auto s = static_cast<std::size_t>(k & kMask);
  cost_[s] += cost;
  last_[s] = now;
  sum_ += cost;
}

TimeNs SlidingWindow::admitAt(std::uint64_t cost, std::uint64_t limit, TimeNs now,
                              TimeNs window) const {
  if (cost > limit) return kNever;
  std::uint64_t counted = sum_;
  if (counted + cost <= limit) return now;
  for (std::int64_t i = tail_; i <= head_; ++i) {
    const auto s = static_cast<std::size_t>(i & kMask);
    if (cost_[s] == 0) continue;
    counted -= cost_[s];
    if (counted + cost <= limit) return std::max(now, last_[s] + window);
  }
  return kNever;  // unreachable: with every bucket gone, cost <= limit fits
}

void SlidingWindow::refund(std::uint64_t cost, TimeNs added_at, TimeNs width) {
  const std::int64_t k = added_at / width;
  if (head_ < 0 || k < tail_ || k > head_) return;
  const auto s = static_cast<std::size_t>(k & kMask);
  const std::uint64_t back = std::min(cost, cost_[s]);
  cost_[s] -= back;
  sum_ -= back;
}

}  // namespace fairsched::core
