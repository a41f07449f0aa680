// The Redis test support itself: TLS files, servers with TLS and AUTH, a
// Redis Cluster (slots, migration, failover) and a Sentinel setup
// (failover), both with TLS and a password, all started for real on
// loopback. Each test skips, with the reason, where they cannot be started.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/redis_cluster.hpp"
#include "tests/support/redis_sentinel.hpp"
#include "tests/support/redis_server.hpp"
#include "tests/support/run_program.hpp"
#include "tests/support/tls_files.hpp"

namespace fairsched::testing {
namespace {

using std::chrono::seconds;

// Polls `pred` until it holds or `bound` passes.
template <class Pred>
bool eventually(Pred&& pred, std::chrono::seconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

std::optional<std::string> one(const RedisServer& server, const std::vector<std::string>& args,
                               std::string* error = nullptr) {
  const auto reply = server.command(args, error);
  if (!reply || reply->size() != 1) return std::nullopt;
  return reply->front();
}

// Whether one replica has acknowledged every write so far (WAIT), asked
// until it has or 30 s pass.
bool replicated(const RedisServer& master) {
  return eventually([&] { return one(master, {"WAIT", "1", "1000"}) == "1"; }, seconds(30));
}

// redis-cli PING towards `port` with the given flags: whether PONG came back.
bool cliPing(std::uint16_t port, const std::vector<std::string>& flags) {
  std::vector<std::string> argv{kRedisCliBinary, "-h", "127.0.0.1", "-p", std::to_string(port)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"--no-auth-warning", "-e", "PING"});
  const auto r = runProgram(argv, seconds(10));
  return r.ok() && r.out.find("PONG") != std::string::npos;
}

TEST(RedisTopologySupport, SlotOfMatchesRedisClusterHashing) {
  // Values from the Redis Cluster specification.
  EXPECT_EQ(RedisClusterServers::slotOf("123456789"), 0x31C3);
  EXPECT_EQ(RedisClusterServers::slotOf("foo"), 12182);
  EXPECT_EQ(RedisClusterServers::slotOf("{user1000}.following"),
            RedisClusterServers::slotOf("user1000"));
  EXPECT_NE(RedisClusterServers::slotOf("foo{}{bar}"), RedisClusterServers::slotOf("bar"));
  EXPECT_EQ(RedisClusterServers::slotOf("foo{{bar}}zap"), RedisClusterServers::slotOf("{bar"));
}

TEST(RedisTopologySupport, TlsServerWithPasswordAnswersAdminCommands) {
  auto made = TlsFiles::make();
  if (auto* why = std::get_if<std::string>(&made)) GTEST_SKIP() << "no TLS files: " << *why;
  const auto& tls = std::get<0>(made);
  RedisServerOptions options;
  options.config_lines = {"requirepass s3cret"};
  options.tls = tls.get();
  options.admin_password = "s3cret";
  auto started = RedisServer::start(options);
  if (auto* why = std::get_if<std::string>(&started)) GTEST_SKIP() << "no redis-server: " << *why;
  auto& redis = *std::get<0>(started);

  EXPECT_EQ(redis.url(), "rediss://127.0.0.1:" + std::to_string(redis.port()));
  EXPECT_EQ(one(redis, {"PING"}), "PONG");
  EXPECT_EQ(one(redis, {"SET", "fairsched:k", "v\n\"w\""}), "OK");
  EXPECT_EQ(one(redis, {"GET", "fairsched:k"}), "v\n\"w\"");
  EXPECT_EQ(one(redis, {"HSET", "fairsched:h", "a", "2", "b", "3"}), "2");
  EXPECT_EQ(redis.hashSum("fairsched:h"), 5u);
  EXPECT_EQ(redis.command({"GET", "fairsched:none"}), std::vector<std::string>{""});
  EXPECT_TRUE(redis.clientCount().has_value());
  std::string error;
  EXPECT_FALSE(redis.command({"INCR", "fairsched:k"}, &error));
  EXPECT_NE(error.find("not an integer"), std::string::npos) << error;

  // TLS only, with this CA, and the password asked.
  const std::vector<std::string> good{"--tls",           "--cacert", tls->caCert(),   "--cert",
                                      tls->clientCert(), "--key",    tls->clientKey()};
  auto with_pass = good;
  with_pass.insert(with_pass.end(), {"-a", "s3cret"});
  EXPECT_TRUE(cliPing(redis.port(), with_pass));
  EXPECT_FALSE(cliPing(redis.port(), good));
  EXPECT_FALSE(cliPing(redis.port(), {"-a", "s3cret"}));
  EXPECT_FALSE(cliPing(redis.port(), {"--tls", "--cacert", tls->otherCaCert(), "-a", "s3cret"}));

  // A restart keeps the port, TLS and password.
  const auto port = redis.port();
  redis.kill();
  EXPECT_EQ(one(redis, {"PING"}), std::nullopt);
  ASSERT_EQ(redis.restart(), std::nullopt);
  EXPECT_EQ(redis.port(), port);
  EXPECT_EQ(one(redis, {"PING"}), "PONG");
}

TEST(RedisTopologySupport, AclUserAsAdmin) {
  RedisServerOptions options;
  options.config_lines = {"user admin on >adminpw ~* &* +@all", "user default off"};
  options.unix_socket = false;
  options.admin_user = "admin";
  options.admin_password = "adminpw";
  auto started = RedisServer::start(options);
  if (auto* why = std::get_if<std::string>(&started)) GTEST_SKIP() << "no redis-server: " << *why;
  auto& redis = *std::get<0>(started);
  EXPECT_EQ(redis.unixPath(), "");
  EXPECT_EQ(one(redis, {"ACL", "WHOAMI"}), "admin");
  EXPECT_FALSE(cliPing(redis.port(), {}));
}

TEST(RedisTopologySupport, AStartThatFailsSaysWhy) {
  if (::access(kRedisServerBinary, X_OK) != 0) GTEST_SKIP() << kRedisServerBinary << " is missing";
  RedisServerOptions options;
  options.config_lines = {"no-such-directive yes"};
  auto started = RedisServer::start(options);
  ASSERT_TRUE(std::holds_alternative<std::string>(started));
  EXPECT_NE(std::get<std::string>(started).find("no-such-directive"), std::string::npos)
      << std::get<std::string>(started);
}

TEST(RedisTopologySupport, TlsClusterMigratesASlotAndFailsOver) {
  auto made = TlsFiles::make();
  if (auto* why = std::get_if<std::string>(&made)) GTEST_SKIP() << "no TLS files: " << *why;
  RedisClusterOptions options;
  options.password = "clusterpw";
  options.tls = std::get<0>(made).get();
  auto started = RedisClusterServers::start(options);
  if (auto* why = std::get_if<std::string>(&started)) GTEST_SKIP() << "no cluster: " << *why;
  auto& cluster = *std::get<0>(started);
  ASSERT_EQ(cluster.allPorts().size(), 6u);
  EXPECT_EQ(cluster.url().rfind("rediss://127.0.0.1:", 0), 0u) << cluster.url();
  const auto masters = cluster.masterPorts();
  ASSERT_EQ(masters.size(), 3u);
  auto& any = cluster.node(cluster.allPorts().back());

  for (const std::string key :
       {"{acme}", "{acme}:rpm", "foo", "a{b}c", "{}x", "x{}", "{a", "foo{}{bar}"}) {
    const int slot = RedisClusterServers::slotOf(key);
    EXPECT_GE(slot, 0);
    EXPECT_LT(slot, RedisClusterServers::kSlots);
    EXPECT_EQ(one(any, {"CLUSTER", "KEYSLOT", key}), std::to_string(slot)) << key;
  }

  const int slot = RedisClusterServers::slotOf("{acme}");
  const auto from = cluster.ownerOfSlot(slot);
  ASSERT_TRUE(from.has_value());
  ASSERT_NE(std::find(masters.begin(), masters.end(), *from), masters.end());
  const std::uint16_t to = *from == masters[0] ? masters[1] : masters[0];
  const std::string slot_text = std::to_string(slot);

  EXPECT_EQ(one(cluster.node(*from), {"SET", "{acme}k", "v"}), "OK");
  std::string error;
  EXPECT_FALSE(cluster.node(to).command({"GET", "{acme}k"}, &error));
  EXPECT_EQ(error, "MOVED " + slot_text + " 127.0.0.1:" + std::to_string(*from));

  // Mid-migration a moved key answers ASK, then the slot answers MOVED.
  ASSERT_EQ(cluster.beginMigration(slot, *from, to), std::nullopt);
  ASSERT_EQ(cluster.migrateKeys(slot, *from, to), std::nullopt);
  EXPECT_FALSE(cluster.node(*from).command({"GET", "{acme}k"}, &error));
  EXPECT_EQ(error, "ASK " + slot_text + " 127.0.0.1:" + std::to_string(to));
  ASSERT_EQ(cluster.finishMigration(slot, to), std::nullopt);
  EXPECT_FALSE(cluster.node(*from).command({"GET", "{acme}k"}, &error));
  EXPECT_EQ(error, "MOVED " + slot_text + " 127.0.0.1:" + std::to_string(to));
  EXPECT_EQ(one(cluster.node(to), {"GET", "{acme}k"}), "v");
  EXPECT_TRUE(eventually([&] { return cluster.ownerOfSlot(slot) == to; }, seconds(30)));

  // Its replica has the key (WAIT), then takes over when it dies.
  EXPECT_TRUE(replicated(cluster.node(to)));
  cluster.kill(to);
  ASSERT_TRUE(cluster.waitForNewOwner(slot, to, seconds(60)));
  const auto promoted = cluster.ownerOfSlot(slot);
  ASSERT_TRUE(promoted.has_value());
  EXPECT_NE(*promoted, to);
  EXPECT_EQ(one(cluster.node(*promoted), {"GET", "{acme}k"}), "v");
  const auto now = cluster.masterPorts();
  EXPECT_EQ(now.size(), 3u);
  EXPECT_EQ(std::find(now.begin(), now.end(), to), now.end());
}

TEST(RedisTopologySupport, TlsSentinelsPromoteTheReplica) {
  auto made = TlsFiles::make();
  if (auto* why = std::get_if<std::string>(&made)) GTEST_SKIP() << "no TLS files: " << *why;
  RedisSentinelOptions options;
  options.password = "sentinelpw";
  options.tls = std::get<0>(made).get();
  auto started = RedisSentinelServers::start(options);
  if (auto* why = std::get_if<std::string>(&started)) GTEST_SKIP() << "no sentinels: " << *why;
  auto& setup = *std::get<0>(started);
  ASSERT_EQ(setup.sentinelPorts().size(), 3u);
  ASSERT_EQ(setup.serverPorts().size(), 2u);
  const auto old_master = setup.serverPorts()[0];
  EXPECT_EQ(setup.masterPort(), old_master);
  EXPECT_EQ(setup.url().rfind("rediss-sentinel://127.0.0.1:", 0), 0u) << setup.url();
  EXPECT_EQ(one(setup.node(old_master), {"SET", "fairsched:k", "v"}), "OK");
  EXPECT_TRUE(replicated(setup.node(old_master)));

  setup.kill(old_master);
  ASSERT_TRUE(setup.waitForPromotion(old_master, seconds(60)));
  EXPECT_EQ(setup.masterPort(), setup.serverPorts()[1]);
  EXPECT_EQ(one(setup.node(setup.serverPorts()[1]), {"GET", "fairsched:k"}), "v");
}

}  // namespace
}  // namespace fairsched::testing
