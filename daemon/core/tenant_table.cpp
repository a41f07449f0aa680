#include "daemon/core/tenant_table.hpp"

namespace fairsched::core {

TenantTable::TenantTable(const SchedulerSpec& spec) : spec_(&spec) {
  for (const auto& t : spec.tier_limits) owned_limits_.push_back(t);
  entries_.reserve(spec.tenants.size());
  for (const TenantSpec& t : spec.tenants) {
    const TenantId id = allocate();
    Entry& e = entries_[id];
    e.name = t.name;
    applyListed(e, t);
    index_.emplace(t.name, id);
  }
}

void TenantTable::applyListed(Entry& e, const TenantSpec& t) {
  e.tier = t.tier;
  e.weight = t.weight;
  e.queue_limit = t.queue_limit;
  if (t.limits) {
    owned_limits_.push_back(*t.limits);
    e.limits = &owned_limits_.back();
  } else {
    e.limits = t.tier < spec_->tier_limits.size() ? &owned_limits_[t.tier] : nullptr;
  }
  e.listed = true;
  e.live = true;
}

void TenantTable::applyDefaults(Entry& e, TierId tier) {
  e.tier = tier;
  e.weight = spec_->tiers[tier].default_weight;
  e.queue_limit = spec_->tiers[tier].default_queue_limit;
  e.limits = tier < spec_->tier_limits.size() ? &owned_limits_[tier] : nullptr;
  e.listed = false;
}

std::deque<LimitTable> TenantTable::reconfigure(const SchedulerSpec& spec,
                                                std::span<const TierId> tier_map) {
  spec_ = &spec;
  std::deque<LimitTable> old;
  old.swap(owned_limits_);
  for (const auto& t : spec.tier_limits) owned_limits_.push_back(t);
  for (Entry& e : entries_) {
    if (!e.live) continue;
    TierId tier = e.tier < tier_map.size() ? tier_map[e.tier] : kNoTier;
    if (tier == kNoTier || tier >= spec.tiers.size()) tier = spec.default_tier;
    applyDefaults(e, tier);
  }
  for (const TenantSpec& t : spec.tenants) {
    TenantId id;
    if (auto it = index_.find(t.name); it != index_.end()) {
      id = it->second;
    } else {
      id = allocate();
      entries_[id].name = t.name;
      index_.emplace(t.name, id);
    }
    applyListed(entries_[id], t);
  }
  // No longer listed and held by nothing: forget now, as release() would.
  for (TenantId id = 0; id < entries_.size(); ++id) {
    Entry& e = entries_[id];
    if (e.live && !e.listed && e.refs == 0) {
      index_.erase(e.name);
      e = Entry{};
      free_.push_back(id);
    }
  }
  return old;
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
  applyDefaults(e, tier);
  e.refs = 1;
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
