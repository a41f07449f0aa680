#include "daemon/core/tenant_table.hpp"

namespace fairsched::core {

TenantTable::TenantTable(const SchedulerSpec& spec) : spec_(&spec) {
  for (const auto& t : spec.tier_limits) owned_limits_.push_back(t);
  entries_.reserve(spec.tenants.size());
  for (const TenantSpec& t : spec.tenants) {
    const TenantId id = allocate();
    Entry& e = entries_[id];
    e.name = t.name;
    e.tier = t.tier;
    e.weight = t.weight;
    e.queue_limit = t.queue_limit;
    if (t.limits) {
      owned_limits_.push_back(*t.limits);
      e.limits = &owned_limits_.back();
    } else {
      e.limits = t.tier < spec.tier_limits.size() ? &owned_limits_[t.tier] : nullptr;
    }
    e.listed = true;
    e.live = true;
    index_.emplace(t.name, id);
  }
}

TenantId TenantTable::allocate() {
  if (!free_.empty()) {
    const TenantId id = free_.back();
    free_.pop_back();
    return id;
  }
  entries_.emplace_back();
  return static_cast<TenantId>(entries_.size() - 1);
}

TenantId TenantTable::acquire(std::string_view name, std::optional<TierId> tier_hint) {
  if (auto it = index_.find(name); it != index_.end()) {
    ++entries_[it->second].refs;
    return it->second;
  }
  const TierId tier = tier_hint.value_or(spec_->default_tier);
  if (tier >= spec_->tiers.size()) return kNoTenant;
  const TenantId id = allocate();
  Entry& e = entries_[id];
  e.name.assign(name);
  e.tier = tier;
  e.weight = spec_->tiers[tier].default_weight;
  e.queue_limit = spec_->tiers[tier].default_queue_limit;
  e.limits = tier < spec_->tier_limits.size() ? &owned_limits_[tier] : nullptr;
  e.refs = 1;
  e.listed = false;
  e.live = true;
  index_.emplace(e.name, id);
  return id;
}

void TenantTable::release(TenantId id) {
  if (!valid(id)) return;
  Entry& e = entries_[id];
  if (e.refs > 0) --e.refs;
  if (e.refs != 0 || e.listed) return;
  index_.erase(e.name);
  e = Entry{};
  free_.push_back(id);
}

std::optional<TenantId> TenantTable::find(std::string_view name) const {
  if (auto it = index_.find(name); it != index_.end()) return it->second;
  return std::nullopt;
}

}  // namespace fairsched::core
