// [[tiers]]: priority classes, highest first, with their shares, defaults for
// unlisted tenants and limit overrides.
#include <string>
#include <utility>
#include <vector>

#include "daemon/config/key_table.hpp"
#include "daemon/config/parse_limits.hpp"
#include "daemon/config/sections.hpp"

namespace fairsched::config {

namespace {

bool readName(ParseContext& ctx, const toml::node& n, const std::string& path, TierConfig& tier) {
  if (!ctx.readString(n, path, tier.name)) return false;
  if (!ctx.checkName(lineOf(n), path, tier.name)) return false;
  if (ctx.findTier(tier.name) != nullptr) {
    return ctx.fail(n, path, "duplicate tier name " + quote(tier.name));
  }
  return true;
}

// In [0, 1), and all tiers' together below 1.
bool readMinShare(ParseContext& ctx, const toml::node& n, const std::string& path,
                  TierConfig& tier) {
  if (!ctx.readDouble(n, path, tier.min_share)) return false;
  if (!(tier.min_share >= 0.0 && tier.min_share < 1.0)) {
    return ctx.fail(n, path, "must be in [0, 1), got " + formatDouble(tier.min_share));
  }
  // Summed in file order; a tier without min_share adds 0.
  double sum = 0.0;
  for (const TierConfig& before : ctx.config().tiers) sum += before.min_share;
  sum += tier.min_share;
  if (sum >= 1.0) {
    return ctx.fail(
        n, path, "the min_share of all tiers must add up to less than 1, got " + formatDouble(sum));
  }
  return true;
}

// Overrides of the endpoints' defaults.
bool readLimits(ParseContext& ctx, const toml::node& n, const std::string& path, TierConfig& tier) {
  return readLimitTable(
      ctx, n, path, [](const EndpointConfig& ep) { return ep.limits; }, tier.limits);
}

constexpr KeyRule<TierConfig> kTierKeys[] = {
    {"name", readName, requiredKey},
    {"min_share", readMinShare},
    {"default_weight", positiveDoubleKey<&TierConfig::default_weight>},
    {"default_queue_limit", intKey<&TierConfig::default_queue_limit, 1>},
    {"max_batch_tokens", intKey<&TierConfig::max_batch_tokens, 0>},
    {"limits", readLimits},
};

}  // namespace

bool parseTiers(ParseContext& ctx, const toml::node& n, const std::string& path, Config&) {
  std::vector<const toml::node*> elements;
  if (!ctx.readArray(n, path, "array of tables (write each tier as [[tiers]])", elements)) {
    return false;
  }
  if (elements.empty()) return ctx.fail(n, path, "at least one tier is required");
  if (elements.size() > kMaxIds) {
    return ctx.fail(n, path, "at most " + std::to_string(kMaxIds) + " tiers are supported");
  }
  for (std::size_t i = 0; i < elements.size(); ++i) {
    const toml::node& el = *elements[i];
    const std::string tierPath = indexed(path, i);
    if (ctx.readTable(el, tierPath) == nullptr) return false;
    TierConfig tier;
    tier.source_line = lineOf(el);
    if (!readKeys(ctx, el, tierPath, kTierKeys, tier)) return false;
    ctx.addTier(std::move(tier));
  }
  return true;
}

}  // namespace fairsched::config
