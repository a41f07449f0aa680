#include "daemon/core/preemption.hpp"

#include <algorithm>

namespace fairsched::core {

bool PreemptionBudget::allows(double max_per_s, TimeNs now) {
  const double cap = std::max(1.0, max_per_s);
  tokens_ = std::min(cap, tokens_ + static_cast<double>(now - refilled_) / kNsPerSec * max_per_s);
  refilled_ = now;
  return tokens_ >= 1.0;
}

std::uint32_t VictimChooser::runningOf(std::uint32_t tenant) const {
  auto it = std::find_if(counts_.begin(), counts_.end(),
                         [&](const auto& c) { return c.first == tenant; });
  return it == counts_.end() ? 0 : it->second;
}

std::uint64_t VictimChooser::choose(const PreemptionWaiter& waiter,
                                    std::span<const PreemptionCandidate> running,
                                    const PreemptionRules& rules) {
  // Fair shares of the sequences the waiting tier runs, by weight over the
  // tier's active tenants (backlogged or running): only a tenant below its
  // share may take a sequence, only from one above its share that keeps at
  // least as many as it will have. Without this, tenants that all have
  // their share would trade sequences back and forth.
  counts_.clear();
  std::uint32_t in_tier = 0;
  double weights = waiter.backlogged_weight;
  for (const PreemptionCandidate& c : running) {
    if (c.tier != waiter.tier) continue;
    ++in_tier;
    auto it = std::find_if(counts_.begin(), counts_.end(),
                           [&](const auto& n) { return n.first == c.tenant; });
    if (it == counts_.end()) {
      counts_.emplace_back(c.tenant, 1);
      if (!c.tenant_queued) weights += c.weight;
    } else {
      ++it->second;
    }
  }
  auto shareOf = [&](double weight) { return weights > 0 ? in_tier * weight / weights : 0.0; };
  const std::uint32_t waiting_runs = runningOf(waiter.tenant);
  const bool waiting_below_share = waiting_runs < shareOf(waiter.weight);

  // Best victim: lowest tier first; then, within the waiting tier, the
  // most-served tenant (above the waiting one by the margin); the cheapest
  // to resume, then the newest.
  std::uint64_t best = 0;
  TierId best_tier = 0;
  double best_service = 0;
  std::uint64_t best_cost = 0;
  TimeNs best_at = 0;
  std::uint64_t best_seq = 0;
  for (const PreemptionCandidate& c : running) {
    if (c.progress < rules.min_progress_tokens) continue;
    if (c.tier < waiter.tier) continue;  // a higher tier: never for a lower one
    if (c.tier == waiter.tier) {
      if (c.tenant == waiter.tenant || !waiting_below_share) continue;
      if (waiting_runs > 0 && !rules.for_share) continue;  // it is served already
      const std::uint32_t runs = runningOf(c.tenant);
      if (runs <= shareOf(c.weight) || runs < waiting_runs + 2) continue;
      if (c.service < waiter.service + rules.margin) continue;
    }
    // Cheaper to resume; then newer: dispatched last, among those
    // dispatched together arrived last.
    const bool newer = c.dispatched_at != best_at ? c.dispatched_at > best_at : c.seq > best_seq;
    const bool cheaper = c.recompute_tokens != best_cost ? c.recompute_tokens < best_cost : newer;
    const bool better = best == 0 || c.tier > best_tier ||
                        (c.tier == best_tier &&
                         (c.service > best_service || (c.service == best_service && cheaper)));
    if (better) {
      best = c.handle;
      best_tier = c.tier;
      best_service = c.service;
      best_cost = c.recompute_tokens;
      best_at = c.dispatched_at;
      best_seq = c.seq;
    }
  }
  return best;
}

}  // namespace fairsched::core
