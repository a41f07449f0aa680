// Chooses the tier whose tenants are served next: strict priority between
// tiers (index 0 first), with an optional `min_share` floor that keeps a
// backlogged lower tier from starving.
//
// The floor is a credit: every dispatch of cost c (from any tier) adds
// min_share × c to each backlogged tier that has a floor; a tier served
// through its floor pays c back. A tier with positive credit is served ahead
// of strict order. So while a tier stays backlogged, its share of the cost
// dispatched since it became backlogged is at least min_share, short by at
// most one request's cost, and it arrives smoothly (one request whenever its
// credit turns positive) rather than as a burst. Credit is not banked: a tier
// that goes idle loses it, and strict-order service uses it up.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "daemon/core/types.hpp"

namespace fairsched::core {

class TierSelector {
 public:
  static constexpr TierId kNoTier = UINT16_MAX;

  struct Choice {
    TierId tier = kNoTier;
    bool via_floor = false;  // chosen ahead of strict order by its min_share
  };

  // REQUIRES: each min_share in [0, 1) and their sum < 1.
  explicit TierSelector(std::vector<double> min_shares = {});

  std::size_t tiers() const { return min_share_.size(); }

  // `backlogged[t]` says whether tier t has requests waiting. A floor tier
  // seen idle here loses its credit, even if nothing was dispatched while it
  // was idle.
  Choice select(std::span<const bool> backlogged);

  // Record a dispatch of `cost` from the chosen tier.
  void charge(Choice c, std::int64_t cost, std::span<const bool> backlogged);

  double credit(TierId t) const { return credit_[t]; }

 private:
  std::vector<double> min_share_;
  std::vector<double> credit_;
  bool any_floor_ = false;
};

}  // namespace fairsched::core
