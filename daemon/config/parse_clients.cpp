// [[clients]]: who may connect (by uid and gid, names resolved through the
// AccountLookup) and what each rule lets them use.
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/config/key_table.hpp"
#include "daemon/config/sections.hpp"

namespace fairsched::config {

namespace {

// Appends each value once, keeping first-seen order.
template <typename T>
class AppendOnce {
 public:
  explicit AppendOnce(std::vector<T>& out) : out_(out), seen_(out.begin(), out.end()) {}
  void add(const T& v) {
    if (seen_.insert(v).second) out_.push_back(v);
  }

 private:
  std::vector<T>& out_;
  std::set<T> seen_;
};

bool readName(ParseContext& ctx, const toml::node& n, const std::string& path, ClientRule& rule) {
  if (!ctx.readString(n, path, rule.name)) return false;
  return ctx.checkName(lineOf(n), path, rule.name);
}

bool readIds(ParseContext& ctx, const toml::node& n, const std::string& path,
             std::vector<std::uint32_t>& out) {
  std::vector<const toml::node*> elements;
  if (!ctx.readArray(n, path, "array of integers", elements)) return false;
  AppendOnce<std::uint32_t> ids(out);
  for (const toml::node* el : elements) {
    if (!isInteger(*el)) return ctx.wrongElementType(*el, path, "array of integers");
    std::uint32_t id = 0;
    if (!ctx.readInt(*el, path, 0, id)) return false;
    ids.add(id);
  }
  return true;
}

bool readUids(ParseContext& ctx, const toml::node& n, const std::string& path, ClientRule& rule) {
  return readIds(ctx, n, path, rule.uids);
}

bool readGids(ParseContext& ctx, const toml::node& n, const std::string& path, ClientRule& rule) {
  return readIds(ctx, n, path, rule.gids);
}

// Names resolved by `lookup` (a member of AccountLookup); `what` is "user" or
// "group" in errors.
bool resolveNames(ParseContext& ctx, const toml::node& n, const std::string& path,
                  std::string_view what, AccountId (AccountLookup::*lookup)(std::string_view) const,
                  std::vector<std::uint32_t>& out) {
  std::vector<StringAt> names;
  if (!ctx.readStringArray(n, path, names)) return false;
  AppendOnce<std::uint32_t> ids(out);
  for (const auto& [name, line] : names) {
    // A NUL would cut the name short in the C lookup.
    const AccountId r = name.empty() || name.find('\0') != std::string::npos
                            ? AccountId::notFound()
                            : (ctx.accounts().*lookup)(name);
    if (r.status == AccountId::Status::kNotFound)
      return ctx.fail(line, path, "unknown " + std::string(what) + " " + quote(name));
    if (r.status == AccountId::Status::kFailed) {
      return ctx.fail(line, path,
                      "cannot look up " + std::string(what) + " " + quote(name) + ": " +
                          std::strerror(r.error));
    }
    ids.add(r.id);
  }
  return true;
}

bool readUsers(ParseContext& ctx, const toml::node& n, const std::string& path, ClientRule& rule) {
  return resolveNames(ctx, n, path, "user", &AccountLookup::user, rule.uids);
}

bool readGroups(ParseContext& ctx, const toml::node& n, const std::string& path, ClientRule& rule) {
  return resolveNames(ctx, n, path, "group", &AccountLookup::group, rule.gids);
}

// Runs after the keys that say whom the rule matches, before what it grants.
bool checkMatchesSomeone(ParseContext& ctx, const toml::node& table, const std::string& path,
                         ClientRule& rule) {
  if (rule.uids.empty() && rule.gids.empty()) {
    return ctx.fail(table, path, "the rule matches no client: give uids, gids, users or groups");
  }
  return true;
}

// Tenant names, or "*" for every tenant.
bool readTenants(ParseContext& ctx, const toml::node& n, const std::string& path,
                 ClientRule& rule) {
  std::vector<StringAt> items;
  if (!ctx.readStringArray(n, path, items)) return false;
  rule.tenants.clear();
  AppendOnce<std::string> tenants(rule.tenants);
  for (const auto& [name, line] : items) {
    if (name != kWildcard && !ctx.checkName(line, path, name)) return false;
    tenants.add(name);
  }
  return true;
}

// Endpoint names, or "*" for every endpoint, into `list`; `workers_only`:
// each must be an executor = "worker" endpoint.
bool readEndpointList(ParseContext& ctx, const toml::node& n, const std::string& path,
                      std::vector<std::string>& list, bool workers_only) {
  std::vector<StringAt> items;
  if (!ctx.readStringArray(n, path, items)) return false;
  list.clear();
  AppendOnce<std::string> endpoints(list);
  for (const auto& [name, line] : items) {
    if (name != kWildcard) {
      const EndpointConfig* ep = ctx.findEndpoint(name);
      if (ep == nullptr) return ctx.fail(line, path, "unknown endpoint " + quote(name));
      if (workers_only && ep->executor != ExecutorKind::kWorker) {
        return ctx.fail(
            line, path,
            "endpoint " + quote(name) + " is not served by workers (executor = \"" + "worker\")");
      }
    }
    endpoints.add(name);
  }
  return true;
}

bool readEndpoints(ParseContext& ctx, const toml::node& n, const std::string& path,
                   ClientRule& rule) {
  return readEndpointList(ctx, n, path, rule.endpoints, false);
}

// Endpoints the client may serve as a worker (docs/worker.md).
bool readWorkers(ParseContext& ctx, const toml::node& n, const std::string& path,
                 ClientRule& rule) {
  return readEndpointList(ctx, n, path, rule.workers, true);
}

// Tier names; "*" expands to every tier, in priority order.
bool readAssignTiers(ParseContext& ctx, const toml::node& n, const std::string& path,
                     ClientRule& rule) {
  std::vector<StringAt> items;
  if (!ctx.readStringArray(n, path, items)) return false;
  AppendOnce<std::string> tiers(rule.assign_tiers);
  bool expanded = false;
  for (const auto& [name, line] : items) {
    if (name == kWildcard) {
      if (!expanded) {
        for (const TierConfig& tier : ctx.config().tiers) tiers.add(tier.name);
      }
      expanded = true;
      continue;
    }
    if (ctx.findTier(name) == nullptr) return ctx.fail(line, path, "unknown tier " + quote(name));
    tiers.add(name);
  }
  return true;
}

constexpr KeyRule<ClientRule> kClientKeys[] = {
    {"name", readName},
    {"uids", readUids},
    {"gids", readGids},
    {"users", readUsers},
    {"groups", readGroups},
    {kTableCheck, checkMatchesSomeone},
    {"tenants", readTenants},
    {"endpoints", readEndpoints},
    {"assign_tiers", readAssignTiers},
    {"workers", readWorkers},
    {"admin", boolKey<&ClientRule::admin>},
};

}  // namespace

bool parseClients(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg) {
  std::vector<const toml::node*> elements;
  if (!ctx.readArray(n, path, "array of tables (write each rule as [[clients]])", elements)) {
    return false;
  }
  for (std::size_t i = 0; i < elements.size(); ++i) {
    const toml::node& el = *elements[i];
    const std::string rulePath = indexed(path, i);
    if (ctx.readTable(el, rulePath) == nullptr) return false;
    ClientRule rule;
    rule.name = rulePath;
    rule.source_line = lineOf(el);
    rule.endpoints = {std::string(kWildcard)};
    if (!readKeys(ctx, el, rulePath, kClientKeys, rule)) return false;
    cfg.clients.push_back(std::move(rule));
  }
  return true;
}

}  // namespace fairsched::config
