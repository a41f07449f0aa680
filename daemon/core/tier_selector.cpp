#include "daemon/core/tier_selector.hpp"

#include <algorithm>

namespace fairsched::core {

TierSelector::TierSelector(std::vector<double> min_shares)
    : min_share_(std::move(min_shares)), credit_(min_share_.size(), 0.0) {
  any_floor_ = std::any_of(min_share_.begin(), min_share_.end(), [](double m) { return m > 0; });
}

TierSelector::Choice TierSelector::select(std::span<const bool> backlogged) {
  if (any_floor_) {
    for (std::size_t t = 0; t < credit_.size(); ++t) {
      if (t >= backlogged.size() || !backlogged[t]) credit_[t] = 0.0;  // idle: nothing banked
    }
  }
  Choice strict;
  for (std::size_t t = 0; t < backlogged.size(); ++t) {
    if (backlogged[t]) {
      strict.tier = static_cast<TierId>(t);
      break;
    }
  }
  if (!any_floor_ || strict.tier == kNoTier) return strict;
  // The floor tier furthest behind its share goes first.
  Choice floor;
  double best = 0.0;
  for (std::size_t t = strict.tier + 1u; t < backlogged.size(); ++t) {
    if (backlogged[t] && min_share_[t] > 0 && credit_[t] > best) {
      best = credit_[t];
      floor = {static_cast<TierId>(t), true};
    }
  }
  return floor.tier != kNoTier ? floor : strict;
}

void TierSelector::charge(Choice c, std::int64_t cost, std::span<const bool> backlogged) {
  if (!any_floor_) return;
  const double dc = static_cast<double>(cost);
  for (std::size_t t = 0; t < min_share_.size(); ++t) {
    if (min_share_[t] <= 0) continue;
    const bool waiting = t < backlogged.size() && backlogged[t];
    if (!waiting && t != c.tier) {
      credit_[t] = 0.0;  // idle: no credit is banked
      continue;
    }
    credit_[t] += min_share_[t] * dc;
  }
  if (c.tier < min_share_.size() && min_share_[c.tier] > 0) {
    credit_[c.tier] -= dc;
    if (!c.via_floor) credit_[c.tier] = std::max(0.0, credit_[c.tier]);
  }
}

}  // namespace fairsched::core
