// The state of reading one config document, shared by the section parsers:
// a TomlReader (the first error), the Config built so far with indexes over
// its tier and endpoint names, and the account lookup for [[clients]].
// One per parseConfig call; not shared between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "daemon/config/account_lookup.hpp"
#include "daemon/config/config.hpp"
#include "daemon/config/toml_reader.hpp"
#include "fairsched/name.hpp"

namespace fairsched::config {

// "*" means "every" in client rules, so no name may be it.
inline constexpr std::string_view kWildcard = "*";

class ParseContext : public TomlReader {
 public:
  // `source` and `accounts` must outlive the context.
  ParseContext(std::string_view source, const AccountLookup& accounts)
      : TomlReader(source), accounts_(accounts) {}

  Config& config() { return cfg_; }
  const AccountLookup& accounts() const { return accounts_; }

  // The first error if there was one, else the Config. Call once, at the end.
  ConfigResult finish();

  // Appends to config().tiers / config().endpoints and indexes the name.
  // REQUIRES: no tier (endpoint) of that name was added before.
  void addTier(TierConfig tier);
  void addEndpoint(EndpointConfig endpoint);
  // Constant time, unlike Config::findTier/findEndpoint. The pointers stay
  // valid until the next add.
  const TierConfig* findTier(const std::string& name) const;
  const EndpointConfig* findEndpoint(const std::string& name) const;

  // Names of tiers, endpoints, tenants and clients follow fairsched/name.hpp's
  // rule (they appear in logs, metrics and fairschedctl output), and "*" is
  // reserved. False, with the error recorded at `line` and `path`, otherwise.
  bool checkName(std::uint32_t line, const std::string& path, std::string_view name,
                 std::size_t max_bytes = kMaxNameBytes);

 private:
  const AccountLookup& accounts_;
  Config cfg_;
  std::unordered_map<std::string, std::size_t> tierIndex_;      // name -> index in cfg_.tiers
  std::unordered_map<std::string, std::size_t> endpointIndex_;  // name -> index in cfg_.endpoints
};

}  // namespace fairsched::config
