// A count over the last few seconds in one-second buckets: what operators see
// as "share over the last 10 s". O(1) per add, fixed size, time passed in.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "daemon/core/types.hpp"

namespace fairsched::core {

class RecentCounter {
 public:
  static constexpr std::int64_t kSeconds = 10;

  void add(std::uint64_t v, TimeNs now) {
    roll(now / kNsPerSec);
    buckets_[static_cast<std::size_t>(second_ % kSeconds)] += v;
  }

  // The sum over the current second and the kSeconds - 1 before it.
  std::uint64_t sum(TimeNs now) const {
    const std::int64_t sec = now / kNsPerSec;
    std::uint64_t s = 0;
    for (std::int64_t b = second_; b > second_ - kSeconds && b >= 0; --b) {
      if (sec - b < kSeconds && b <= sec) s += buckets_[static_cast<std::size_t>(b % kSeconds)];
    }
    return s;
  }

 private:
  void roll(std::int64_t sec) {
    if (sec <= second_) return;
    const std::int64_t steps = std::min(sec - second_, kSeconds);
    for (std::int64_t i = 1; i <= steps; ++i) {
      buckets_[static_cast<std::size_t>((second_ + i) % kSeconds)] = 0;
    }
    second_ = sec;
  }

  std::array<std::uint64_t, kSeconds> buckets_{};
  std::int64_t second_ = 0;
};

}  // namespace fairsched::core
