// TOML text -> Config. toml++ throws on syntax errors; that exception is
// caught here and turned into a ConfigError with its line. Everything after
// the syntax check is a walk over the document by the key tables (root here,
// one per section in parse_<section>.cpp) that stops at the first error.
#include <toml++/toml.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <istream>
#include <iterator>
#include <string>

#include "daemon/config/account_lookup.hpp"
#include "daemon/config/config.hpp"
#include "daemon/config/key_table.hpp"
#include "daemon/config/sections.hpp"
#include "daemon/config/toml_reader.hpp"

namespace fairsched::config {

namespace {

bool requireEndpoints(ParseContext& ctx, const toml::node&, const std::string& path, Config&) {
  return ctx.fail(0, path, "at least one endpoint is required");
}

bool requireTiers(ParseContext& ctx, const toml::node&, const std::string& path, Config&) {
  return ctx.fail(0, path, "at least one tier is required");
}

bool readDefaultTier(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg) {
  if (!ctx.readString(n, path, cfg.default_tier)) return false;
  if (ctx.findTier(cfg.default_tier) == nullptr) {
    return ctx.fail(n, path, "unknown tier " + quote(cfg.default_tier));
  }
  return true;
}

// Without default_tier, unlisted tenants go to the last (lowest) tier.
bool defaultTierIsLast(ParseContext&, const toml::node&, const std::string&, Config& cfg) {
  cfg.default_tier = cfg.tiers.back().name;
  return true;
}

// In dependency order (see sections.hpp).
constexpr KeyRule<Config> kRootKeys[] = {
    {"daemon", parseDaemon},
    {"metrics", parseMetrics},
    {"fleet", parseFleet},
    {"endpoints", parseEndpoints, requireEndpoints},
    {"tiers", parseTiers, requireTiers},
    {"default_tier", readDefaultTier, defaultTierIsLast},
    {"tenants", parseTenants},
    {"clients", parseClients},
};

const AccountLookup& systemAccounts() {
  static const SystemAccountLookup accounts;
  return accounts;
}

}  // namespace

ConfigResult parseConfig(std::string_view text, std::string_view source_name,
                         const AccountLookup& accounts) {
  ConfigResult result = ConfigError{};
  if (auto err = withTomlRoot(text, source_name, [&](const toml::table& root) {
        ParseContext ctx(source_name, accounts);
        readKeys(ctx, root, "", kRootKeys, ctx.config());
        result = ctx.finish();
      })) {
    return *err;
  }
  return result;
}

ConfigResult parseConfig(std::string_view text, std::string_view source_name) {
  return parseConfig(text, source_name, systemAccounts());
}

ConfigResult parseConfig(std::istream& in, std::string_view source_name) {
  try {
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) return ConfigError{std::string(source_name), 0, "", "read error"};
    return parseConfig(std::string_view(text), source_name);
  } catch (const std::exception& e) {
    return ConfigError{std::string(source_name), 0, "", std::string("cannot read: ") + e.what()};
  }
}

ConfigResult loadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ConfigError{path, 0, "", std::string("cannot open: ") + std::strerror(errno)};
  ConfigResult r = parseConfig(in, path);
  if (auto* cfg = r.valueOrNull()) cfg->source_path = path;
  return r;
}

}  // namespace fairsched::config
