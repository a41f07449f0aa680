#include "daemon/config/parse_context.hpp"

#include <utility>

namespace fairsched::config {

ConfigResult ParseContext::finish() {
  if (error()) return *error();
  return std::move(cfg_);
}

void ParseContext::addTier(TierConfig tier) {
  tierIndex_.emplace(tier.name, cfg_.tiers.size());
  cfg_.tiers.push_back(std::move(tier));
}

void ParseContext::addEndpoint(EndpointConfig endpoint) {
  endpointIndex_.emplace(endpoint.name, cfg_.endpoints.size());
  cfg_.endpoints.push_back(std::move(endpoint));
}

const TierConfig* ParseContext::findTier(const std::string& name) const {
  const auto it = tierIndex_.find(name);
  return it == tierIndex_.end() ? nullptr : &cfg_.tiers[it->second];
}

const EndpointConfig* ParseContext::findEndpoint(const std::string& name) const {
  const auto it = endpointIndex_.find(name);
  return it == endpointIndex_.end() ? nullptr : &cfg_.endpoints[it->second];
}

bool ParseContext::checkName(std::uint32_t line, const std::string& path, std::string_view name,
                             std::size_t max_bytes) {
  if (name == kWildcard) return fail(line, path, "'*' is reserved (it means 'every')");
  if (auto err = nameError(name, max_bytes)) return fail(line, path, *err);
  return true;
}

}  // namespace fairsched::config
