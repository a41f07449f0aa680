// [tenants.<name>]: tenants listed by name, with their tier, weight, queue
// limit and limit overrides.
#include <string>
#include <utility>

#include "daemon/config/key_table.hpp"
#include "daemon/config/parse_limits.hpp"
#include "daemon/config/sections.hpp"

namespace fairsched::config {

namespace {

bool readTier(ParseContext& ctx, const toml::node& n, const std::string& path,
              TenantConfig& tenant) {
  if (!ctx.readString(n, path, tenant.tier)) return false;
  if (ctx.findTier(tenant.tier) == nullptr) {
    return ctx.fail(n, path, "unknown tier " + quote(tenant.tier));
  }
  return true;
}

// Overrides of the tier's and the endpoints' limits; after `tier`.
bool readLimits(ParseContext& ctx, const toml::node& n, const std::string& path,
                TenantConfig& tenant) {
  const TierConfig& tier = *ctx.findTier(tenant.tier);
  return readLimitTable(
      ctx, n, path, [&tier](const EndpointConfig& ep) { return endpointAndTierLimits(ep, tier); },
      tenant.limits);
}

constexpr KeyRule<TenantConfig> kTenantKeys[] = {
    {"tier", readTier},
    {"weight", positiveDoubleKey<&TenantConfig::weight>},
    {"queue_limit", intKey<&TenantConfig::queue_limit, 1>},
    {"limits", readLimits},
};

}  // namespace

bool parseTenants(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg) {
  const toml::table* t = ctx.readTable(n, path);
  if (t == nullptr) return false;
  for (const TomlEntry& e : entriesInFileOrder(*t)) {
    const std::string name(e.key);
    const std::string tenantPath = join(path, name);
    if (!ctx.checkName(e.key_line, tenantPath, name)) return false;
    if (ctx.readTable(*e.value, tenantPath) == nullptr) return false;
    TenantConfig tenant;
    tenant.name = name;
    tenant.source_line = lineOf(*e.value);
    tenant.tier = cfg.default_tier;
    if (!readKeys(ctx, *e.value, tenantPath, kTenantKeys, tenant)) return false;
    cfg.tenants.push_back(std::move(tenant));
  }
  return true;
}

}  // namespace fairsched::config
