// API key → tenant: the gateway's authentication. Keys are looked up by the
// SHA-256 of what the caller presents, so the table (and the config) never
// holds a key itself. Rebuilt whole on reload; lookups never allocate.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gateway/gateway_config.hpp"

namespace fairsched::gateway {

class KeyTable {
 public:
  KeyTable() = default;
  explicit KeyTable(const std::vector<ApiKeyConfig>& keys);

  // The entry for a presented key, or nullptr. The pointer stays valid while
  // this table lives.
  const ApiKeyConfig* find(std::string_view presented_key) const;
  std::size_t size() const { return by_digest_.size(); }

 private:
  std::unordered_map<std::string, ApiKeyConfig> by_digest_;
};

// The key of an `Authorization: Bearer KEY` header value; nullopt when the
// value is not of that form (the scheme is case-insensitive; the key is
// what follows the spaces, up to trailing white space).
std::optional<std::string_view> bearerToken(std::string_view authorization);

}  // namespace fairsched::gateway
