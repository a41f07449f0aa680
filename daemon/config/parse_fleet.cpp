// [fleet]: the shared backend behind `scope = "fleet"` limits
// (docs/operations.md, "Fleet limits").
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>

#include "daemon/config/key_table.hpp"
#include "daemon/config/sections.hpp"

namespace fairsched::config {

namespace {

bool readBackend(ParseContext& ctx, const toml::node& n, const std::string& path, FleetConfig&) {
  std::string backend;
  if (!ctx.readString(n, path, backend)) return false;
  if (backend != "redis") return ctx.fail(n, path, "expected one of redis, got " + quote(backend));
  return true;
}

// A Redis URL (daemon/config/redis_url.hpp). Messages never quote the
// password: they show the redacted URL.
bool readUrl(ParseContext& ctx, const toml::node& n, const std::string& path, FleetConfig& f) {
  if (!ctx.readString(n, path, f.url)) return false;
  f.redacted_url = redactedUrl(f.url);
  auto parsed = parseRedisUrl(f.url);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    return ctx.fail(n, path, *error + " in " + quote(f.redacted_url));
  }
  RedisUrl& u = std::get<RedisUrl>(parsed);
  f.nodes = std::move(u.hosts);
  f.tls = u.tls;
  f.db = u.db;
  f.auth.user = std::move(u.user);
  f.auth.password = std::move(u.password);
  f.master_name = std::move(u.master_name);
  if (u.sentinel) f.mode = FleetMode::kSentinel;
  return true;
}

constexpr EnumName<FleetMode> kModes[] = {{"single", FleetMode::kSingle},
                                          {"cluster", FleetMode::kCluster},
                                          {"sentinel", FleetMode::kSentinel}};

bool readMode(ParseContext& ctx, const toml::node& n, const std::string& path, FleetConfig& f) {
  FleetMode mode = FleetMode::kSingle;
  if (!ctx.readEnum(n, path, kModes, mode)) return false;
  if ((mode == FleetMode::kSentinel) != (f.mode == FleetMode::kSentinel)) {
    return ctx.fail(n, path,
                    mode == FleetMode::kSentinel
                        ? "mode = \"sentinel\" takes a redis-sentinel:// or rediss-sentinel:// url"
                        : "a redis-sentinel:// url is mode = \"sentinel\"");
  }
  f.mode = mode;
  return true;
}

// A file the daemon must be able to read, checked now so --check-config
// catches a wrong path or permission.
bool readableFile(ParseContext& ctx, const toml::node& n, const std::string& path,
                  std::string& out) {
  if (!ctx.readString(n, path, out)) return false;
  std::ifstream in(out);
  if (!in) return ctx.fail(n, path, "cannot read " + quote(out) + ": " + std::strerror(errno));
  return true;
}

template <RedisAuthConfig FleetConfig::*kAuth>
bool readPasswordFile(ParseContext& ctx, const toml::node& n, const std::string& path,
                      FleetConfig& f) {
  RedisAuthConfig& auth = f.*kAuth;
  if (!auth.password.empty()) {
    return ctx.fail(n, path, "the password is given twice (the url or an environment variable)");
  }
  if (!readableFile(ctx, n, path, auth.password_file)) return false;
  if (readSecretFile(auth.password_file).empty()) {
    return ctx.fail(n, path, quote(auth.password_file) + " is empty");
  }
  return true;
}

template <RedisAuthConfig FleetConfig::*kAuth>
bool readPasswordEnv(ParseContext& ctx, const toml::node& n, const std::string& path,
                     FleetConfig& f) {
  RedisAuthConfig& auth = f.*kAuth;
  std::string name;
  if (!ctx.readString(n, path, name)) return false;
  if (!auth.password.empty() || !auth.password_file.empty()) {
    return ctx.fail(n, path, "the password is given twice (the url or a password file)");
  }
  const char* value = std::getenv(name.c_str());
  if (value == nullptr || *value == '\0') {
    return ctx.fail(n, path, "the environment variable " + quote(name) + " is unset or empty");
  }
  auth.password = value;
  return true;
}

template <RedisAuthConfig FleetConfig::*kAuth>
bool readUser(ParseContext& ctx, const toml::node& n, const std::string& path, FleetConfig& f) {
  RedisAuthConfig& auth = f.*kAuth;
  if (!auth.user.empty()) return ctx.fail(n, path, "the user is given twice (the url)");
  return ctx.readString(n, path, auth.user);
}

template <std::string FleetTlsConfig::*kFile>
bool readTlsFile(ParseContext& ctx, const toml::node& n, const std::string& path, FleetConfig& f) {
  if (!f.tls) return ctx.fail(n, path, "TLS settings take a rediss:// url");
  return readableFile(ctx, n, path, f.tls_options.*kFile);
}

bool readServerName(ParseContext& ctx, const toml::node& n, const std::string& path,
                    FleetConfig& f) {
  if (!f.tls) return ctx.fail(n, path, "TLS settings take a rediss:// url");
  return ctx.readString(n, path, f.tls_options.server_name);
}

bool readSkipVerify(ParseContext& ctx, const toml::node& n, const std::string& path,
                    FleetConfig& f) {
  if (!f.tls) return ctx.fail(n, path, "TLS settings take a rediss:// url");
  return ctx.readBool(n, path, f.tls_options.insecure_skip_verify);
}

// What one key alone cannot say.
bool checkTopology(ParseContext& ctx, const toml::node& table, const std::string& path,
                   FleetConfig& f) {
  const bool unixSocket = !f.nodes.empty() && !f.nodes.front().unix_path.empty();
  if (f.tls_options.cert_file.empty() != f.tls_options.key_file.empty()) {
    return ctx.fail(table, join(path, "tls_cert_file"),
                    "a client certificate takes both tls_cert_file and tls_key_file");
  }
  if (f.mode == FleetMode::kCluster) {
    if (unixSocket) return ctx.fail(table, join(path, "mode"), "a cluster is reached over TCP");
    if (f.db != 0) return ctx.fail(table, join(path, "url"), "Redis Cluster has database 0 only");
  }
  if (f.mode != FleetMode::kSentinel && f.nodes.size() > 1 && f.mode != FleetMode::kCluster) {
    return ctx.fail(table, join(path, "url"),
                    "several hosts are a cluster's seeds: set mode = \"cluster\"");
  }
  if (f.mode != FleetMode::kSentinel &&
      (!f.sentinel_auth.user.empty() || !f.sentinel_auth.password.empty() ||
       !f.sentinel_auth.password_file.empty())) {
    return ctx.fail(table, join(path, "sentinel_password_file"),
                    "sentinel credentials take a redis-sentinel:// url");
  }
  return true;
}

// A positive integer, or "auto" (lease stays 0).
bool readLease(ParseContext& ctx, const toml::node& n, const std::string& path, FleetConfig& f) {
  if (const std::string* str = asString(n)) {
    if (*str != "auto") {
      return ctx.fail(n, path, "expected a positive integer or \"auto\", got " + quote(*str));
    }
    return true;
  }
  if (isInteger(n)) return ctx.readInt(n, path, 1, f.lease);
  return ctx.wrongType(n, path, "integer or \"auto\"");
}

// The prefix goes into Redis keys; braces would change their hash slot.
bool readKeyPrefix(ParseContext& ctx, const toml::node& n, const std::string& path,
                   FleetConfig& f) {
  if (!ctx.readString(n, path, f.key_prefix)) return false;
  const bool ok = std::all_of(f.key_prefix.begin(), f.key_prefix.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u != 0x7f && c != '{' && c != '}';
  });
  if (!ok) {
    return ctx.fail(
        n, path,
        "must not contain white space, control characters, '{' or '}', got " + quote(f.key_prefix));
  }
  return true;
}

constexpr EnumName<FleetErrorPolicy> kErrorPolicies[] = {
    {"fail_open", FleetErrorPolicy::kFailOpen},
    {"fail_closed", FleetErrorPolicy::kFailClosed},
    {"local_share", FleetErrorPolicy::kLocalShare}};

constexpr KeyRule<FleetConfig> kFleetKeys[] = {
    {"backend", readBackend},
    {"url", readUrl, requiredKey},
    {"mode", readMode},
    {"username", readUser<&FleetConfig::auth>},
    {"password_file", readPasswordFile<&FleetConfig::auth>},
    {"password_env", readPasswordEnv<&FleetConfig::auth>},
    {"sentinel_username", readUser<&FleetConfig::sentinel_auth>},
    {"sentinel_password_file", readPasswordFile<&FleetConfig::sentinel_auth>},
    {"sentinel_password_env", readPasswordEnv<&FleetConfig::sentinel_auth>},
    {"tls_ca_file", readTlsFile<&FleetTlsConfig::ca_file>},
    {"tls_cert_file", readTlsFile<&FleetTlsConfig::cert_file>},
    {"tls_key_file", readTlsFile<&FleetTlsConfig::key_file>},
    {"tls_server_name", readServerName},
    {"tls_insecure_skip_verify", readSkipVerify},
    {"connect_timeout_ms", intKey<&FleetConfig::connect_timeout_ms, 1, 60'000>},
    {"command_timeout_ms", intKey<&FleetConfig::command_timeout_ms, 1, 60'000>},
    {"lease", readLease},
    {"hosts", intKey<&FleetConfig::hosts, 1, 100'000>},
    {"on_backend_error", enumKey<&FleetConfig::on_backend_error, kErrorPolicies>},
    {"key_prefix", readKeyPrefix},
    {kTableCheck, checkTopology},
};

}  // namespace

bool parseFleet(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg) {
  if (ctx.readTable(n, path) == nullptr) return false;
  FleetConfig f;
  f.source_line = lineOf(n);
  if (!readKeys(ctx, n, path, kFleetKeys, f)) return false;
  cfg.fleet = std::move(f);
  return true;
}

}  // namespace fairsched::config
