// Redis URLs as the ecosystem writes them (daemon/config/redis_url.hpp).
#include "daemon/config/redis_url.hpp"

#include <gtest/gtest.h>

namespace fairsched::config {
namespace {

RedisUrl ok(std::string_view url) {
  auto r = parseRedisUrl(url);
  if (auto* error = std::get_if<std::string>(&r)) ADD_FAILURE() << url << ": " << *error;
  return std::holds_alternative<RedisUrl>(r) ? std::get<RedisUrl>(r) : RedisUrl{};
}

std::string error(std::string_view url) {
  auto r = parseRedisUrl(url);
  return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : "(parsed)";
}

TEST(RedisUrl, HostPortAndDefaults) {
  const RedisUrl u = ok("redis://cache.internal");
  ASSERT_EQ(u.hosts.size(), 1u);
  EXPECT_EQ(u.hosts[0].host, "cache.internal");
  EXPECT_EQ(u.hosts[0].port, 6379);
  EXPECT_FALSE(u.tls);
  EXPECT_EQ(u.db, 0u);
  EXPECT_EQ(u.user, "");
  EXPECT_EQ(u.password, "");
  EXPECT_EQ(ok("redis://h:7000/").hosts[0].port, 7000);
}

TEST(RedisUrl, UserPasswordAreDecodedAndTheDatabaseRead) {
  const RedisUrl u = ok("rediss://fair%2Dsched:p%3Aw%40rd@10.1.2.3:6380/5");
  EXPECT_TRUE(u.tls);
  EXPECT_EQ(u.user, "fair-sched");
  EXPECT_EQ(u.password, "p:w@rd");
  EXPECT_EQ(u.db, 5u);
  EXPECT_EQ(u.hosts[0].str(), "10.1.2.3:6380");
  // ":password" is the default user; "user" alone has no password (redis-py's reading).
  EXPECT_EQ(ok("redis://:only@h").password, "only");
  EXPECT_EQ(ok("redis://:only@h").user, "");
  EXPECT_EQ(ok("redis://someone@h").user, "someone");
  EXPECT_EQ(ok("redis://someone@h").password, "");
  // An '@' in the password, unescaped: the last '@' before the path ends the userinfo.
  EXPECT_EQ(ok("redis://u:a@b@h:1").password, "a@b");
}

TEST(RedisUrl, Ipv6AndSeveralHosts) {
  const RedisUrl u = ok("redis://[::1]:7000,[fe80::2],other:7002");
  ASSERT_EQ(u.hosts.size(), 3u);
  EXPECT_EQ(u.hosts[0].host, "::1");
  EXPECT_EQ(u.hosts[0].str(), "[::1]:7000");
  EXPECT_EQ(u.hosts[1].port, 6379);
  EXPECT_EQ(u.hosts[2].str(), "other:7002");
}

TEST(RedisUrl, SentinelUrlsDefaultTo26379AndNameTheirMaster) {
  const RedisUrl u = ok("rediss-sentinel://u:p@s1,s2:5000/1#primary");
  EXPECT_TRUE(u.sentinel);
  EXPECT_TRUE(u.tls);
  EXPECT_EQ(u.master_name, "primary");
  EXPECT_EQ(u.hosts[0].port, 26379);
  EXPECT_EQ(u.hosts[1].port, 5000);
  EXPECT_EQ(u.db, 1u);
  EXPECT_EQ(error("redis-sentinel://s1"), "a redis-sentinel:// URL names its master after '#'");
  EXPECT_EQ(error("redis://h#m"), "'#' names a sentinel master: only in redis-sentinel://");
}

TEST(RedisUrl, UnixSockets) {
  const RedisUrl u = ok("unix:///run/redis.sock?db=3");
  EXPECT_EQ(u.hosts.at(0).unix_path, "/run/redis.sock");
  EXPECT_EQ(u.hosts[0].str(), "/run/redis.sock");
  EXPECT_EQ(u.db, 3u);
  EXPECT_EQ(error("unix://relative.sock"), "expected unix:///absolute/path");
  EXPECT_EQ(error("unix:///s?timeout=1"), "a unix:// URL takes only ?db=N");
}

TEST(RedisUrl, MalformedUrlsSayWhat) {
  EXPECT_EQ(error("cache:6379"),
            "expected redis://, rediss://, redis-sentinel://, rediss-sentinel:// or unix://");
  EXPECT_EQ(error("redis://h:0"), "invalid port '0'");
  EXPECT_EQ(error("redis://h:"), "empty port");
  EXPECT_EQ(error("redis://"), "no host");
  EXPECT_EQ(error("redis://a,"), "empty host after ','");
  EXPECT_EQ(error("redis://h/x"), "invalid database 'x' (expected /N)");
  EXPECT_EQ(error("redis://u:%zz@h"), "broken %-escape in the password");
  EXPECT_EQ(error("redis://[::1"), "unclosed '[' in a host");
}

TEST(RedisUrl, RedactionHidesOnlyThePassword) {
  EXPECT_EQ(redactedUrl("redis://app:s3cret@h:1/2"), "redis://app:***@h:1/2");
  EXPECT_EQ(redactedUrl("rediss://:s3cret@h"), "rediss://:***@h");
  EXPECT_EQ(redactedUrl("redis://u:a@b@h"), "redis://u:***@h");
  EXPECT_EQ(redactedUrl("redis://h:1"), "redis://h:1");
  EXPECT_EQ(redactedUrl("redis://user@h"), "redis://user@h");
  EXPECT_EQ(redactedUrl("redis-sentinel://:pw@s1#m"), "redis-sentinel://:***@s1#m");
}

}  // namespace
}  // namespace fairsched::config
