// Names ↔ dense TenantIds, and each tenant's resolved policy (tier, weight,
// queue bound, limits).
//
// Tenants need not be listed: a platform has 100,000 organisations. An
// unlisted tenant is created on first sight with its tier's defaults and
// forgotten when nothing refers to it any more (no holder, no per-endpoint
// state — which the scheduler keeps until the tenant's limit windows are
// empty, so a tenant cannot dodge a limit by going quiet). Listed tenants stay.
// Ids of forgotten tenants are reused.
//
// Memory: a listed, idle tenant costs one Entry plus one hash node — about
// 140 bytes with a short name (measured in tenant_table_test); limit tables
// are shared per tier unless the tenant overrides them.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/core/scheduler_spec.hpp"

namespace fairsched::core {

class TenantTable {
 public:
  struct Entry {
    std::string name;
    const LimitTable* limits = nullptr;  // owned by the table
    double weight = 1.0;
    std::uint32_t queue_limit = 0;
    std::uint32_t refs = 0;  // holders + per-endpoint states
    TierId tier = 0;
    bool listed = false;
    bool live = false;
  };

  explicit TenantTable(const SchedulerSpec& spec);
  TenantTable(const TenantTable&) = delete;
  TenantTable& operator=(const TenantTable&) = delete;

  // The tenant called `name`, created from its tier's defaults if unlisted
  // and unknown. `tier_hint` sets the tier of an unlisted tenant when it is
  // created (ignored for listed ones and for ones already known). Takes a
  // reference: the caller calls release() when it no longer holds the id.
  // Returns kNoTenant when the tier hint is out of range.
  TenantId acquire(std::string_view name, std::optional<TierId> tier_hint = std::nullopt);
  void retain(TenantId id) { ++entries_[id].refs; }
  void release(TenantId id);

  // A configuration reload: `spec` replaces the table's spec (and must
  // outlive it, like the one it was built from); `tier_map` maps each old
  // TierId to its new one (kNoTier: the tier is gone). Listed tenants take
  // their new settings, keeping their ids; tenants no longer listed become
  // unlisted ones with their tier's defaults (and are forgotten at once if
  // nothing holds them); unlisted tenants keep their tier by name, or move to
  // the default tier when it is gone. Ids never change. Returns the old
  // limit tables: limiters still point into them until the caller rebuilds
  // them from the new ones.
  static constexpr TierId kNoTier = UINT16_MAX;
  std::deque<LimitTable> reconfigure(const SchedulerSpec& spec, std::span<const TierId> tier_map);

  std::optional<TenantId> find(std::string_view name) const;
  const Entry& operator[](TenantId id) const { return entries_[id]; }
  bool valid(TenantId id) const { return id < entries_.size() && entries_[id].live; }

  std::size_t size() const { return index_.size(); }
  std::size_t capacity() const { return entries_.size(); }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  TenantId allocate();
  void applyDefaults(Entry& e, TierId tier);
  void applyListed(Entry& e, const TenantSpec& t);

  const SchedulerSpec* spec_;
  std::vector<Entry> entries_;
  std::vector<TenantId> free_;
  std::unordered_map<std::string, TenantId, Hash, std::equal_to<>> index_;
  std::deque<LimitTable> owned_limits_;  // stable addresses: tier tables, then per-tenant overrides
};

}  // namespace fairsched::core
