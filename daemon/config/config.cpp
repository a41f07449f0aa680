#include "daemon/config/config.hpp"

#include <algorithm>

namespace fairsched::config {

std::uint64_t EndpointConfig::resolvedQuantum() const {
  if (quantum != 0) return quantum;
  const bool perRequest = cost == CostModel::kRequests;
  if (kind == EndpointKind::kBatch) {
    return std::max<std::uint64_t>(1, perRequest ? max_batch_requests : max_batch_tokens);
  }
  if (perRequest || max_batch_requests == 0) return 1;
  return std::max<std::uint64_t>(1, max_batch_tokens / max_batch_requests);
}

namespace {
template <typename T>
const T* findByName(const std::vector<T>& items, std::string_view name) {
  const auto it =
      std::find_if(items.begin(), items.end(), [&](const T& t) { return t.name == name; });
  return it == items.end() ? nullptr : &*it;
}
}  // namespace

const TierConfig* Config::findTier(std::string_view name) const {
  return findByName(tiers, name);
}

const EndpointConfig* Config::findEndpoint(std::string_view name) const {
  return findByName(endpoints, name);
}

const TenantConfig* Config::findTenant(std::string_view name) const {
  return findByName(tenants, name);
}

// "file:line: key: message"; ":line" is left out when line is 0 and "key: "
// when the error concerns no key (a TOML syntax error, an unreadable file).
std::string ConfigError::toString() const {
  std::string out = file;
  if (line != 0) out += ":" + std::to_string(line);
  out += ": ";
  if (!key.empty()) out += key + ": ";
  out += message;
  return out;
}

}  // namespace fairsched::config
