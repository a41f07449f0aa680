#include "daemon/server/client_rules.hpp"

#include <algorithm>

namespace fairsched::daemon {
namespace {
bool listed(const std::vector<std::string>& names, std::string_view name) {
  return std::any_of(names.begin(), names.end(),
                     [&](const std::string& n) { return n == "*" || n == name; });
}
}  // namespace

ClientRules::ClientRules(const config::Config& cfg) : rules_(cfg.clients) {}

const config::ClientRule* ClientRules::match(uid_t uid, gid_t gid) const {
  for (const config::ClientRule& r : rules_) {
    if (std::find(r.uids.begin(), r.uids.end(), uid) != r.uids.end() ||
        std::find(r.gids.begin(), r.gids.end(), gid) != r.gids.end()) {
      return &r;
    }
  }
  return nullptr;
}

bool ClientRules::allowsTenant(const config::ClientRule& rule, std::string_view tenant) {
  return listed(rule.tenants, tenant);
}

bool ClientRules::allowsEndpoint(const config::ClientRule& rule, std::string_view endpoint) {
  return listed(rule.endpoints, endpoint);
}

bool ClientRules::allowsWorker(const config::ClientRule& rule, std::string_view endpoint) {
  return listed(rule.workers, endpoint);
}

bool ClientRules::allowsTier(const config::ClientRule& rule, std::string_view tier) {
  return listed(rule.assign_tiers, tier);
}

}  // namespace fairsched::daemon
