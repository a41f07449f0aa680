// [daemon]: the socket, logging and process-wide settings.
#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "daemon/config/key_table.hpp"
#include "daemon/config/sections.hpp"
#include "shm/tenant_handle.hpp"

namespace fairsched::config {

namespace {

bool readSocket(ParseContext& ctx, const toml::node& n, const std::string& path, DaemonConfig& d) {
  if (!ctx.readString(n, path, d.socket)) return false;
  if (d.socket.empty()) return ctx.fail(n, path, "must not be empty");
  // sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
  if (d.socket.size() > 107) {
    return ctx.fail(n, path,
                    "path is " + std::to_string(d.socket.size()) +
                        " bytes; a unix socket path holds at most 107");
  }
  if (d.socket.find('\0') != std::string::npos) {
    return ctx.fail(n, path, "path must not contain a NUL byte");
  }
  return true;
}

bool readStateDir(ParseContext& ctx, const toml::node& n, const std::string& path,
                  DaemonConfig& d) {
  if (!ctx.readString(n, path, d.state_dir)) return false;
  if (d.state_dir.empty()) return true;  // nothing is kept
  if (d.state_dir.front() != '/') {
    return ctx.fail(
        n, path, "expected an absolute path (or \"\" to keep no state), got " + quote(d.state_dir));
  }
  if (d.state_dir.find('\0') != std::string::npos) {
    return ctx.fail(n, path, "path must not contain a NUL byte");
  }
  if (d.state_dir.size() > 4000) return ctx.fail(n, path, "path is too long");
  return true;
}

// Octal digits in a string ("0660"): a TOML integer 0660 would be decimal.
bool readSocketMode(ParseContext& ctx, const toml::node& n, const std::string& path,
                    DaemonConfig& d) {
  const std::string* s = asString(n);
  if (s == nullptr) {
    return ctx.fail(n, path,
                    "expected string, got " + std::string(typeName(n)) +
                        " (write the mode as octal digits in quotes, e.g. \"0660\")");
  }
  const bool octal = !s->empty() && s->size() <= 4 &&
                     std::all_of(s->begin(), s->end(), [](char c) { return c >= '0' && c <= '7'; });
  if (!octal) return ctx.fail(n, path, "expected octal digits like \"0660\", got " + quote(*s));
  d.socket_mode = 0;
  for (char c : *s) d.socket_mode = d.socket_mode * 8 + static_cast<std::uint32_t>(c - '0');
  return true;
}

bool readLogLevel(ParseContext& ctx, const toml::node& n, const std::string& path,
                  DaemonConfig& d) {
  if (!ctx.readString(n, path, d.log_level)) return false;
  static constexpr std::array<std::string_view, 7> kLevels{"trace", "debug",    "info", "warn",
                                                           "error", "critical", "off"};
  if (std::find(kLevels.begin(), kLevels.end(), d.log_level) == kLevels.end()) {
    return ctx.fail(
        n, path,
        "expected one of trace|debug|info|warn|error|critical|off, got " + quote(d.log_level));
  }
  return true;
}

// More would only be a daemon that never sleeps.
constexpr std::uint64_t kMaxBusyPollUs = 1'000'000;

constexpr EnumName<Policy> kPolicies[] = {{"fair", Policy::kFair}, {"fifo", Policy::kFifo}};
constexpr EnumName<EventLoopKind> kEventLoops[] = {{"auto", EventLoopKind::kAuto},
                                                   {"io_uring", EventLoopKind::kIoUring},
                                                   {"epoll", EventLoopKind::kEpoll}};

constexpr KeyRule<DaemonConfig> kDaemonKeys[] = {
    {"socket", readSocket},
    {"socket_mode", readSocketMode},
    {"socket_group", stringKey<&DaemonConfig::socket_group>},
    {"log_level", readLogLevel},
    {"policy", enumKey<&DaemonConfig::policy, kPolicies>},
    {"tenant_idle_timeout_s", intKey<&DaemonConfig::tenant_idle_timeout_s, 0, kMaxSeconds>},
    {"shutdown_grace_ms", intKey<&DaemonConfig::shutdown_grace_ms, 0, kMaxMillis>},
    {"event_loop", enumKey<&DaemonConfig::event_loop, kEventLoops>},
    {"busy_poll_us", intKey<&DaemonConfig::busy_poll_us, 0, kMaxBusyPollUs>},
    {"max_tenants_per_connection",
     intKey<&DaemonConfig::max_tenants_per_connection, 1, shm::kMaxTenantsPerConnection>},
    {"state_dir", readStateDir},
    {"state_interval_s", intKey<&DaemonConfig::state_interval_s, 1, 3600>},
    {"max_rejections_per_s", intKey<&DaemonConfig::max_rejections_per_s, 0, 100'000'000>},
    {"max_connects_per_s", intKey<&DaemonConfig::max_connects_per_s, 0, 1'000'000>},
};

}  // namespace

bool parseDaemon(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg) {
  return readTableKeys(ctx, n, path, kDaemonKeys, cfg.daemon);
}

}  // namespace fairsched::config
