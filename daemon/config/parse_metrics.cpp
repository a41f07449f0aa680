// [metrics]: the Prometheus endpoint (docs/operations.md, "Metrics").
#include <arpa/inet.h>
#include <netinet/in.h>

#include <charconv>
#include <string>
#include <string_view>

#include "daemon/config/key_table.hpp"
#include "daemon/config/sections.hpp"

namespace fairsched::config {

namespace {

// Beyond this the bound on the number of series stops meaning anything.
constexpr std::uint64_t kMaxTenantSeries = 100000;

// "IPV4:PORT", "[IPV6]:PORT" or "localhost:PORT"; no other host names, so
// what the endpoint binds never depends on a resolver. Tenant names are label
// values, so a non-loopback address needs allow_non_loopback.
bool checkListen(ParseContext& ctx, const toml::node& n, const std::string& path,
                 const std::string& listen, bool allow_non_loopback) {
  const std::string expected =
      "expected HOST:PORT with an IP address or localhost (e.g. \"127.0.0.1:9464\" or "
      "\"[::1]:9464\"), got " +
      quote(listen);
  const std::size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return ctx.fail(n, path, expected);
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  bool v6 = false;
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return ctx.fail(n, path, expected);
    host = host.substr(1, host.size() - 2);
    v6 = true;
  }
  std::uint32_t portValue = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), portValue);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || portValue > 65535) {
    return ctx.fail(n, path, "port must be a number from 0 to 65535, got " + quote(port));
  }
  bool loopback = false;
  if (!v6 && host == "localhost") {
    loopback = true;
  } else if (in_addr a4{}; !v6 && inet_pton(AF_INET, host.c_str(), &a4) == 1) {
    loopback = (ntohl(a4.s_addr) >> 24) == 127;
  } else if (in6_addr a6{}; v6 && inet_pton(AF_INET6, host.c_str(), &a6) == 1) {
    loopback = IN6_IS_ADDR_LOOPBACK(&a6);
  } else {
    return ctx.fail(n, path, expected);
  }
  if (!loopback && !allow_non_loopback) {
    return ctx.fail(n, path,
                    quote(host) +
                        " is not a loopback address; the metrics name every tenant, so set "
                        "metrics.allow_non_loopback = true to serve them beyond this host");
  }
  return true;
}

bool readListen(ParseContext& ctx, const toml::node& n, const std::string& path, MetricsConfig& m) {
  if (!ctx.readString(n, path, m.listen)) return false;
  return m.listen.empty() || checkListen(ctx, n, path, m.listen, m.allow_non_loopback);
}

// `listen` comes last: its check depends on allow_non_loopback wherever that
// is written in the file.
constexpr KeyRule<MetricsConfig> kMetricsKeys[] = {
    {"max_tenant_series", intKey<&MetricsConfig::max_tenant_series, 0, kMaxTenantSeries>},
    {"allow_non_loopback", boolKey<&MetricsConfig::allow_non_loopback>},
    {"listen", readListen},
};

}  // namespace

bool parseMetrics(ParseContext& ctx, const toml::node& n, const std::string& path, Config& cfg) {
  return readTableKeys(ctx, n, path, kMetricsKeys, cfg.metrics);
}

}  // namespace fairsched::config
