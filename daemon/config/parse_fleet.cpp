// [fleet]: the shared backend behind `scope = "fleet"` limits
// (docs/operations.md, "Fleet limits").
#include <algorithm>
#include <charconv>
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

// redis://host[:port] or unix:///absolute/path.
bool readUrl(ParseContext& ctx, const toml::node& n, const std::string& path, FleetConfig& f) {
  if (!ctx.readString(n, path, f.url)) return false;
  constexpr std::string_view kTcp = "redis://";
  constexpr std::string_view kUnix = "unix://";
  const std::string_view url = f.url;
  if (url.substr(0, kUnix.size()) == kUnix) {
    f.unix_path = std::string(url.substr(kUnix.size()));
    if (f.unix_path.empty() || f.unix_path.front() != '/') {
      return ctx.fail(n, path, "expected unix:///absolute/path, got " + quote(url));
    }
    if (f.unix_path.size() > 107) {
      return ctx.fail(n, path, "a unix socket path holds at most 107 bytes");
    }
    return true;
  }
  if (url.substr(0, kTcp.size()) != kTcp) {
    return ctx.fail(n, path, "expected redis://host:port or unix:///path, got " + quote(url));
  }
  std::string_view rest = url.substr(kTcp.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  std::string_view hostPart = rest;
  if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
    hostPart = rest.substr(0, colon);
    const std::string_view portText = rest.substr(colon + 1);
    unsigned port = 0;
    const auto [end, ec] =
        std::from_chars(portText.data(), portText.data() + portText.size(), port);
    if (ec != std::errc() || end != portText.data() + portText.size() || port == 0 ||
        port > 65535) {
      return ctx.fail(n, path, "invalid port " + quote(portText) + " in " + quote(url));
    }
    f.port = static_cast<std::uint16_t>(port);
  }
  if (hostPart.empty() || hostPart.find_first_of("/@ ") != std::string_view::npos) {
    return ctx.fail(n, path, "expected redis://host:port, got " + quote(url));
  }
  f.host = std::string(hostPart);
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
    {"connect_timeout_ms", intKey<&FleetConfig::connect_timeout_ms, 1, 60'000>},
    {"command_timeout_ms", intKey<&FleetConfig::command_timeout_ms, 1, 60'000>},
    {"lease", readLease},
    {"hosts", intKey<&FleetConfig::hosts, 1, 100'000>},
    {"on_backend_error", enumKey<&FleetConfig::on_backend_error, kErrorPolicies>},
    {"key_prefix", readKeyPrefix},
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
