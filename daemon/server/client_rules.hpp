// Who may do what, from the config's [[clients]] rules: a peer's uid/gid
// (SO_PEERCRED, from the kernel — never from the peer's words) picks the
// first rule that names it; the rule then says which tenants and endpoints the
// connection may submit for, which tiers it may give tenants the config does
// not list, and whether it may use the admin commands.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/config.hpp"

namespace fairsched::daemon {

class ClientRules {
 public:
  explicit ClientRules(const config::Config& cfg);

  // The first rule naming `uid` or `gid`; nullptr when none does.
  const config::ClientRule* match(uid_t uid, gid_t gid) const;

  static bool allowsTenant(const config::ClientRule& rule, std::string_view tenant);
  static bool allowsEndpoint(const config::ClientRule& rule, std::string_view endpoint);
  static bool allowsTier(const config::ClientRule& rule, std::string_view tier);
  // May it attach as a worker of `endpoint`?
  static bool allowsWorker(const config::ClientRule& rule, std::string_view endpoint);

 private:
  std::vector<config::ClientRule> rules_;
};

}  // namespace fairsched::daemon
