// libFuzzer target: the config parser and the limit grammar on arbitrary
// bytes. Besides the sanitizers, it checks what a successful parse promises.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "daemon/config/config.hpp"
#include "daemon/core/limit_spec.hpp"
#include "fuzz_input.hpp"

namespace {

using fairsched::fuzz::require;

void checkConfig(std::string_view text) {
  using namespace fairsched::config;
  auto result = parseConfig(text, "fuzz.toml");
  if (auto* err = result.errorOrNull()) {
    require(err->file == "fuzz.toml");
    require(!err->message.empty());
    require(!err->toString().empty());
    return;
  }
  const Config& cfg = result.value();
  require(!cfg.tiers.empty());
  require(!cfg.endpoints.empty());
  require(cfg.findTier(cfg.default_tier) != nullptr);
  double minShares = 0;
  for (const TierConfig& tier : cfg.tiers) {
    require(tier.default_weight > 0);
    minShares += tier.min_share;
  }
  require(minShares < 1.0);
  for (const EndpointConfig& ep : cfg.endpoints) {
    require(ep.resolvedQuantum() >= 1);
    require(ep.max_batch_requests >= 1 && ep.max_batch_tokens >= 1);
    for (const auto& l : ep.limits) require(l.window_ns > 0);
  }
  for (const TenantConfig& t : cfg.tenants) {
    require(cfg.findTier(t.tier) != nullptr);
    require(!t.weight || *t.weight > 0);
    for (const EndpointLimits& el : t.limits) require(cfg.findEndpoint(el.endpoint) != nullptr);
  }
  for (const ClientRule& rule : cfg.clients) {
    require(!rule.uids.empty() || !rule.gids.empty());
    for (const auto& tier : rule.assign_tiers) require(cfg.findTier(tier) != nullptr);
  }
}

void checkLimit(std::string_view text) {
  using namespace fairsched::core;
  auto result = parseLimitSpec(text);
  if (auto* err = result.errorOrNull()) {
    require(!err->message.empty());
    return;
  }
  const LimitSpec& spec = result.value();
  require(spec.amount > 0 && spec.window_ns > 0);
  auto again = parseLimitSpec(toString(spec));
  require(again.ok() && again.value() == spec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  checkConfig(text);
  checkLimit(text);
  return 0;
}
