#include "daemon/config/redis_url.hpp"

#include <charconv>
#include <fstream>
#include <iterator>

namespace fairsched::config {
namespace {

constexpr std::string_view kSchemeEnd = "://";

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes decoded; false on a broken escape.
bool percentDecode(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hexDigit(in[i + 1]);
    const int lo = hexDigit(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

template <typename T>
bool parseNumber(std::string_view text, T& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

// The userinfo part's end: the last '@' before the first '/' or '#'.
std::size_t userinfoEnd(std::string_view rest) {
  const std::string_view authority = rest.substr(0, rest.find_first_of("/#"));
  return authority.rfind('@');
}

}  // namespace

std::string RedisAddress::str() const {
  if (!unix_path.empty()) return unix_path;
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::variant<RedisAddress, std::string> parseRedisAddress(std::string_view text,
                                                          std::uint16_t default_port) {
  RedisAddress a;
  a.port = default_port;
  std::string_view host = text;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return std::string("unclosed '[' in a host");
    host = text.substr(1, close - 1);
    const std::string_view after = text.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return std::string("expected ':port' after ']'");
      port = after.substr(1);
      if (port.empty()) return std::string("empty port");
    }
  } else if (const std::size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (port.empty()) return std::string("empty port");
  }
  if (host.empty()) return std::string("empty host");
  if (host.find_first_of("/@ ,#?[]") != std::string_view::npos) {
    return "invalid host '" + std::string(host) + "'";
  }
  if (!port.empty()) {
    unsigned p = 0;
    if (!parseNumber(port, p) || p == 0 || p > 65535) {
      return "invalid port '" + std::string(port) + "'";
    }
    a.port = static_cast<std::uint16_t>(p);
  }
  a.host = std::string(host);
  return a;
}

std::variant<RedisUrl, std::string> parseRedisUrl(std::string_view url) {
  const std::size_t schemeEnd = url.find(kSchemeEnd);
  if (schemeEnd == std::string_view::npos) {
    return std::string(
        "expected redis://, rediss://, redis-sentinel://, rediss-sentinel:// or unix://");
  }
  const std::string_view scheme = url.substr(0, schemeEnd);
  std::string_view rest = url.substr(schemeEnd + kSchemeEnd.size());
  RedisUrl out;

  if (scheme == "unix") {
    std::string_view path = rest.substr(0, rest.find('?'));
    if (path.empty() || path.front() != '/') {
      return std::string("expected unix:///absolute/path");
    }
    if (path.size() > 107) return std::string("a unix socket path holds at most 107 bytes");
    if (rest.size() > path.size()) {
      const std::string_view query = rest.substr(path.size() + 1);
      constexpr std::string_view kDb = "db=";
      if (query.substr(0, kDb.size()) != kDb || !parseNumber(query.substr(kDb.size()), out.db)) {
        return std::string("a unix:// URL takes only ?db=N");
      }
    }
    RedisAddress a;
    a.unix_path = std::string(path);
    out.hosts.push_back(std::move(a));
    return out;
  }
  if (scheme == "redis" || scheme == "rediss") {
    out.tls = scheme == "rediss";
  } else if (scheme == "redis-sentinel" || scheme == "rediss-sentinel") {
    out.tls = scheme == "rediss-sentinel";
    out.sentinel = true;
  } else {
    return "unknown scheme '" + std::string(scheme) +
           "': expected redis, rediss, redis-sentinel, rediss-sentinel or unix";
  }

  if (const std::size_t hash = rest.find('#'); hash != std::string_view::npos) {
    if (!out.sentinel) return std::string("'#' names a sentinel master: only in redis-sentinel://");
    out.master_name = std::string(rest.substr(hash + 1));
    rest = rest.substr(0, hash);
  }
  if (out.sentinel && out.master_name.empty()) {
    return std::string("a redis-sentinel:// URL names its master after '#'");
  }
  if (const std::size_t at = userinfoEnd(rest); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const std::size_t colon = userinfo.find(':');
    if (!percentDecode(userinfo.substr(0, colon), out.user)) {
      return std::string("broken %-escape in the user name");
    }
    if (colon != std::string_view::npos &&
        !percentDecode(userinfo.substr(colon + 1), out.password)) {
      return std::string("broken %-escape in the password");
    }
  }
  std::string_view hosts = rest.substr(0, rest.find('/'));
  if (hosts.size() < rest.size()) {
    std::string_view db = rest.substr(hosts.size() + 1);
    if (!db.empty() && !parseNumber(db, out.db)) {
      return "invalid database '" + std::string(db) + "' (expected /N)";
    }
  }
  if (hosts.empty()) return std::string("no host");
  const std::uint16_t defaultPort = out.sentinel ? 26379 : 6379;
  while (!hosts.empty()) {
    const std::size_t comma = hosts.find(',');
    auto one = parseRedisAddress(hosts.substr(0, comma), defaultPort);
    if (auto* error = std::get_if<std::string>(&one)) return *error;
    out.hosts.push_back(std::get<RedisAddress>(std::move(one)));
    if (comma == std::string_view::npos) break;
    hosts = hosts.substr(comma + 1);
    if (hosts.empty()) return std::string("empty host after ','");
  }
  return out;
}

std::string readSecretFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string redactedUrl(std::string_view url) {
  const std::size_t schemeEnd = url.find(kSchemeEnd);
  if (schemeEnd == std::string_view::npos) return std::string(url);
  const std::size_t start = schemeEnd + kSchemeEnd.size();
  const std::size_t at = userinfoEnd(url.substr(start));
  if (at == std::string_view::npos) return std::string(url);
  const std::string_view userinfo = url.substr(start, at);
  const std::size_t colon = userinfo.find(':');
  if (colon == std::string_view::npos) return std::string(url);
  return std::string(url.substr(0, start + colon + 1)) + "***" +
         std::string(url.substr(start + at));
}

}  // namespace fairsched::config
