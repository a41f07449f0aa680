// Redis URLs as the Redis ecosystem writes them (redis-py, Lettuce, go-redis):
//
//   redis://[[user]:password@]host[:port][,host[:port]...][/db]
//   rediss://...                      the same over TLS
//   redis-sentinel://[[user]:password@]host[:port][,...][/db]#master
//   rediss-sentinel://...             sentinels and master over TLS
//   unix:///absolute/path[?db=N]
//
// Several hosts are a Redis Cluster's seed nodes or the sentinels. The user
// and password are percent-decoded; a URL's password is a secret: show a
// URL only through redactedUrl().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fairsched::config {

struct RedisAddress {
  std::string host;  // TCP; empty for a unix socket
  std::uint16_t port = 6379;
  std::string unix_path;

  // "host:port", "[v6]:port" or the socket path: for logs, status and keys.
  std::string str() const;
  bool operator==(const RedisAddress&) const = default;
};

struct RedisUrl {
  bool tls = false;
  bool sentinel = false;  // redis-sentinel:// or rediss-sentinel://
  std::vector<RedisAddress> hosts;
  std::string user;      // empty: the default user
  std::string password;  // empty: none in the URL
  std::uint32_t db = 0;
  std::string master_name;  // sentinel: after '#'
};

// The URL, or what is wrong with it (never quoting its password).
std::variant<RedisUrl, std::string> parseRedisUrl(std::string_view url);
// "host[:port]" (or "[v6]:port").
std::variant<RedisAddress, std::string> parseRedisAddress(std::string_view text,
                                                          std::uint16_t default_port);
// A secret kept in a file (a password): its content without the trailing
// line break; empty when the file cannot be read.
std::string readSecretFile(const std::string& path);

// The URL with its password (if any) replaced by "***".
std::string redactedUrl(std::string_view url);

}  // namespace fairsched::config
