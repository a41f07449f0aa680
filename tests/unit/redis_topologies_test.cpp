// RedisBackend against Redis as platforms run it, on real servers the tests
// start on loopback: AUTH and ACL users, TLS (and mutual TLS), a Cluster of
// 3 masters and 3 replicas (redirections, a slot moved mid-load, a master
// killed) and Sentinel (the master killed). Each skips, with the reason, when
// its servers cannot be started. Every wait is bounded and polled: a slower
// machine takes longer, it does not fail.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "daemon/fleet/redis_backend.hpp"
#include "daemon/fleet/redis_topology.hpp"
#include "tests/support/redis_cluster.hpp"
#include "tests/support/redis_sentinel.hpp"
#include "tests/support/redis_server.hpp"
#include "tests/support/tls_files.hpp"

namespace fairsched::fleet {
namespace {

using testing::RedisClusterOptions;
using testing::RedisClusterServers;
using testing::RedisSentinelOptions;
using testing::RedisSentinelServers;
using testing::RedisServer;
using testing::RedisServerOptions;
using testing::TlsFiles;

constexpr TimeNs kMinute = 60 * kNsPerSec;
// A bound on waiting for a failover or a reconnect: generous, polled.
constexpr auto kPatience = std::chrono::seconds(60);

template <typename T>
std::unique_ptr<T> startedOrSkip(std::variant<std::unique_ptr<T>, std::string> started,
                                 std::string* why) {
  if (auto* error = std::get_if<std::string>(&started)) {
    *why = *error;
    return nullptr;
  }
  return std::move(std::get<std::unique_ptr<T>>(started));
}

#define START_OR_SKIP(var, expr)                \
  std::string var##_why;                        \
  auto var = startedOrSkip((expr), &var##_why); \
  if (!var) GTEST_SKIP() << "cannot start " #var ": " << var##_why

config::RedisAddress local(std::uint16_t port) {
  config::RedisAddress a;
  a.host = "127.0.0.1";
  a.port = port;
  return a;
}

RedisBackendOptions options(config::FleetMode mode, std::vector<std::uint16_t> ports) {
  RedisBackendOptions o;
  o.mode = mode;
  for (const std::uint16_t p : ports) o.nodes.push_back(local(p));
  o.data.connect_timeout = std::chrono::milliseconds(1000);
  o.data.command_timeout = std::chrono::milliseconds(1000);
  o.sentinel = o.data;
  return o;
}

LeaseCall call(std::string_view key, std::uint64_t limit, std::uint64_t want) {
  LeaseCall c;
  c.key = key;
  c.limit = limit;
  c.window = kMinute;
  c.want = want;
  return c;
}

std::string failure(const LeaseResult& r) {
  const auto* f = std::get_if<BackendFailure>(&r);
  return f == nullptr ? std::string("(no failure)")
                      : std::string(toString(f->error)) + ": " + f->message;
}

std::uint64_t granted(const LeaseResult& r) {
  const auto* reply = std::get_if<LeaseReply>(&r);
  EXPECT_NE(reply, nullptr) << failure(r);
  return reply != nullptr ? reply->granted : 0;
}

// Calls until one succeeds (a reconnect, a failover), pausing between
// tries; the reply, or the last failure after `bound`.
LeaseResult callUntilServed(RedisBackend& b, const LeaseCall& c, std::chrono::seconds bound,
                            int* failures = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    LeaseResult r = b.call(c);
    if (std::holds_alternative<LeaseReply>(r) || std::chrono::steady_clock::now() > deadline) {
      return r;
    }
    if (failures != nullptr) ++*failures;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// --- AUTH and ACL -------------------------------------------------------------

TEST(RedisAuth, APasswordIsSentAndAWrongOneIsAClearAuthError) {
  RedisServerOptions so;
  so.config_lines = {"requirepass right-horse"};
  so.admin_password = "right-horse";
  START_OR_SKIP(redis, RedisServer::start(so));

  RedisBackendOptions o = options(config::FleetMode::kSingle, {redis->port()});
  o.data.auth.password = "right-horse";
  RedisBackend good(o);
  EXPECT_EQ(granted(good.call(call("fairsched:{a}:chat:requests/60s", 10, 4))), 4u);

  o.data.auth.password = "wrong-battery";
  RedisBackend wrong(o);
  const LeaseResult r = wrong.call(call("fairsched:{a}:chat:requests/60s", 10, 4));
  ASSERT_TRUE(std::holds_alternative<BackendFailure>(r));
  EXPECT_EQ(std::get<BackendFailure>(r).error, BackendError::kAuth) << failure(r);
  EXPECT_NE(failure(r).find("WRONGPASS"), std::string::npos) << failure(r);
  EXPECT_EQ(failure(r).find("wrong-battery"), std::string::npos) << "the password leaked";
  EXPECT_EQ(failure(r).find("right-horse"), std::string::npos) << "the password leaked";
  ASSERT_TRUE(wrong.probe());
  EXPECT_EQ(wrong.probe()->error, BackendError::kAuth);

  o.data.auth.password.clear();
  RedisBackend none(o);
  const LeaseResult n = none.call(call("fairsched:{a}:chat:requests/60s", 10, 4));
  ASSERT_TRUE(std::holds_alternative<BackendFailure>(n));
  EXPECT_EQ(std::get<BackendFailure>(n).error, BackendError::kAuth) << failure(n);
  EXPECT_NE(failure(n).find("NOAUTH"), std::string::npos) << failure(n);
}

// The ACL docs/operations.md gives: the key prefix, EVALSHA, SCRIPT LOAD and
// the commands the script runs — nothing else.
TEST(RedisAuth, AnAclUserLimitedToThePrefixAndTheScriptsCommandsIsEnough) {
  RedisServerOptions so;
  so.config_lines = {
      "user default on >admin-pw ~* &* +@all",
      "user fleet on >fleet-pw resetkeys ~fairsched:* resetchannels -@all +evalsha +script|load "
      "+time +hget +hset +hdel +hgetall +hincrby +exists +pexpire"};
  so.admin_password = "admin-pw";
  START_OR_SKIP(redis, RedisServer::start(so));

  RedisBackendOptions o = options(config::FleetMode::kSingle, {redis->port()});
  o.data.auth.user = "fleet";
  o.data.auth.password = "fleet-pw";
  RedisBackend b(o);
  EXPECT_FALSE(b.probe()) << "probe failed";
  const std::string key = "fairsched:{acme}:chat:requests/60s";
  EXPECT_EQ(granted(b.call(call(key, 10, 6))), 6u);
  EXPECT_EQ(granted(b.call(call(key, 10, 6))), 4u);
  EXPECT_EQ(redis->hashSum(key), 10u);
  // A key outside the user's prefix is refused by the ACL, and said so.
  const LeaseResult outside = b.call(call("other:{acme}:chat:requests/60s", 10, 1));
  ASSERT_TRUE(std::holds_alternative<BackendFailure>(outside));
  EXPECT_EQ(std::get<BackendFailure>(outside).error, BackendError::kAuth) << failure(outside);
  EXPECT_NE(failure(outside).find("NOPERM"), std::string::npos) << failure(outside);
}

TEST(RedisAuth, ARotatedPasswordFileIsReadAtTheNextConnection) {
  const std::string path = ::testing::TempDir() + "/fleet-rotated-password";
  { std::ofstream(path) << "first-secret\n"; }
  RedisServerOptions so;
  so.config_lines = {"requirepass first-secret", "user admin on >admin-pw ~* &* +@all"};
  so.admin_user = "admin";
  so.admin_password = "admin-pw";
  START_OR_SKIP(redis, RedisServer::start(so));

  RedisBackendOptions o = options(config::FleetMode::kSingle, {redis->port()});
  o.data.auth.password_file = path;  // the default user's password (requirepass)
  RedisBackend b(o);
  const std::string key = "fairsched:{a}:chat:requests/60s";
  ASSERT_EQ(granted(b.call(call(key, 100, 1))), 1u);

  // Rotation: the new secret into the file, then into Redis, then the old
  // connections dropped (as a restart or a failover would).
  { std::ofstream(path) << "second-secret\n"; }
  ASSERT_TRUE(redis->command({"CONFIG", "SET", "requirepass", "second-secret"}));
  ASSERT_TRUE(redis->command({"CLIENT", "KILL", "TYPE", "normal"}));
  int failures = 0;
  EXPECT_EQ(granted(callUntilServed(b, call(key, 100, 1), kPatience, &failures)), 1u);
  EXPECT_LE(failures, 1) << "one call may find its connection closed; the next reconnects";
  std::remove(path.c_str());
}

// --- TLS ----------------------------------------------------------------------

class RedisTls : public ::testing::Test {
 protected:
  void SetUp() override {
    auto files = TlsFiles::make();
    if (auto* why = std::get_if<std::string>(&files)) GTEST_SKIP() << "no TLS files: " << *why;
    files_ = std::move(std::get<std::unique_ptr<TlsFiles>>(files));
  }

  std::unique_ptr<RedisServer> start(std::vector<std::string> lines, std::string* why) {
    RedisServerOptions so;
    so.tls = files_.get();
    so.unix_socket = false;
    so.config_lines = std::move(lines);
    return startedOrSkip(RedisServer::start(so), why);
  }

  RedisBackendOptions tlsOptions(std::uint16_t port, config::FleetTlsConfig tls) {
    RedisBackendOptions o = options(config::FleetMode::kSingle, {port});
    auto ctx = TlsContext::make(tls);
    if (auto* why = std::get_if<std::string>(&ctx)) ADD_FAILURE() << *why;
    if (auto* made = std::get_if<std::shared_ptr<TlsContext>>(&ctx)) o.data.tls = *made;
    return o;
  }

  std::unique_ptr<TlsFiles> files_;
};

TEST_F(RedisTls, TheServerIsVerifiedAgainstTheCaAndAWrongCaIsRefused) {
  std::string why;
  auto redis = start({}, &why);
  if (!redis) GTEST_SKIP() << "cannot start a TLS redis-server: " << why;
  config::FleetTlsConfig tls;
  tls.ca_file = files_->caCert();
  RedisBackend b(tlsOptions(redis->port(), tls));
  EXPECT_EQ(granted(b.call(call("fairsched:{t}:chat:requests/60s", 10, 3))), 3u);

  tls.ca_file = files_->otherCaCert();
  RedisBackend wrongCa(tlsOptions(redis->port(), tls));
  const LeaseResult r = wrongCa.call(call("fairsched:{t}:chat:requests/60s", 10, 3));
  ASSERT_TRUE(std::holds_alternative<BackendFailure>(r));
  EXPECT_EQ(std::get<BackendFailure>(r).error, BackendError::kTls) << failure(r);
  EXPECT_NE(failure(r).find("certificate verify failed"), std::string::npos) << failure(r);

  // The right CA but a name the certificate does not carry.
  tls.ca_file = files_->caCert();
  tls.server_name = "redis.elsewhere.example";
  RedisBackend wrongName(tlsOptions(redis->port(), tls));
  const LeaseResult n = wrongName.call(call("fairsched:{t}:chat:requests/60s", 10, 3));
  EXPECT_EQ(std::get<BackendFailure>(n).error, BackendError::kTls) << failure(n);

  // Verification off (tests only): the wrong CA is let through.
  tls.ca_file = files_->otherCaCert();
  tls.server_name.clear();
  tls.insecure_skip_verify = true;
  RedisBackend insecure(tlsOptions(redis->port(), tls));
  EXPECT_EQ(granted(insecure.call(call("fairsched:{t}:chat:requests/60s", 10, 3))), 3u);
}

TEST_F(RedisTls, MutualTlsNeedsTheClientCertificate) {
  std::string why;
  auto redis = start({"tls-auth-clients yes"}, &why);
  if (!redis) GTEST_SKIP() << "cannot start a TLS redis-server: " << why;
  config::FleetTlsConfig tls;
  tls.ca_file = files_->caCert();
  RedisBackend anonymous(tlsOptions(redis->port(), tls));
  EXPECT_TRUE(std::holds_alternative<BackendFailure>(
      anonymous.call(call("fairsched:{m}:chat:requests/60s", 10, 1))));

  tls.cert_file = files_->clientCert();
  tls.key_file = files_->clientKey();
  RedisBackend mutual(tlsOptions(redis->port(), tls));
  EXPECT_EQ(granted(mutual.call(call("fairsched:{m}:chat:requests/60s", 10, 1))), 1u);
}

TEST_F(RedisTls, AKeyThatIsNotTheCertificatesIsRefusedWhenTheContextIsMade) {
  config::FleetTlsConfig tls;
  tls.cert_file = files_->clientCert();
  tls.key_file = files_->serverKey();
  auto ctx = TlsContext::make(tls);
  ASSERT_TRUE(std::holds_alternative<std::string>(ctx));
  EXPECT_NE(std::get<std::string>(ctx).find("client key"), std::string::npos)
      << std::get<std::string>(ctx);
}

// --- Cluster ------------------------------------------------------------------

// Tenants whose keys live on different masters of `cluster`: one per master.
std::map<std::uint16_t, std::string> tenantPerMaster(const RedisClusterServers& cluster) {
  std::map<std::uint16_t, std::string> out;
  for (int i = 0; i < 1000 && out.size() < cluster.masterPorts().size(); ++i) {
    const std::string tenant = "tenant" + std::to_string(i);
    const auto owner = cluster.ownerOfSlot(RedisClusterServers::slotOf("{" + tenant + "}"));
    if (owner && !out.contains(*owner)) out[*owner] = tenant;
  }
  return out;
}

std::string keyOf(const std::string& tenant) {
  return "fairsched:{" + tenant + "}:chat:requests/60s";
}

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = RedisClusterServers::start();
    if (auto* why = std::get_if<std::string>(&started)) {
      GTEST_SKIP() << "cannot start a Redis Cluster: " << *why;
    }
    cluster_ = std::move(std::get<std::unique_ptr<RedisClusterServers>>(started));
  }
  std::unique_ptr<RedisClusterServers> cluster_;
};

TEST_F(RedisClusterTest, SeveralDaemonsEnforceOneLimitPerTenantOnEveryMaster) {
  const auto tenants = tenantPerMaster(*cluster_);
  ASSERT_EQ(tenants.size(), 3u);
  // Two "daemons", each told one seed only.
  const auto masters = cluster_->masterPorts();
  RedisBackend a(options(config::FleetMode::kCluster, {masters[0]}));
  RedisBackend b(options(config::FleetMode::kCluster, {masters[1]}));
  for (const auto& [port, tenant] : tenants) {
    std::uint64_t total = 0;
    for (int i = 0; i < 30; ++i)
      total += granted((i % 2 == 0 ? a : b).call(call(keyOf(tenant), 50, 3)));
    EXPECT_EQ(total, 50u) << tenant << ": the limit holds across both";
    EXPECT_EQ(cluster_->node(port).hashSum(keyOf(tenant)), 50u) << tenant << " lives on " << port;
  }
  const BackendTopology t = a.topology();
  EXPECT_EQ(t.mode, "cluster");
  EXPECT_EQ(t.nodes.size(), 3u);
  for (const auto& [port, tenant] : tenants) {
    EXPECT_EQ(nodeOfKey(t, "{" + tenant + "}"), "127.0.0.1:" + std::to_string(port));
  }

  // A batch: two calls per master, one round trip per master, all at once.
  std::vector<std::string> keys;
  for (const auto& [port, tenant] : tenants) {
    keys.push_back("fairsched:{" + tenant + "}:chat:tokens/60s");
    keys.push_back("fairsched:{" + tenant + "}:embed:tokens/60s");
  }
  std::vector<LeaseCall> calls;
  for (const std::string& k : keys) calls.push_back(call(k, 100, 7));
  const std::uint64_t trips = a.roundTrips();
  const std::vector<LeaseResult> results = a.callBatch(calls);
  ASSERT_EQ(results.size(), calls.size());
  for (std::size_t i = 0; i < results.size(); ++i) EXPECT_EQ(granted(results[i]), 7u) << keys[i];
  EXPECT_EQ(a.roundTrips(), trips + 3);
}

TEST_F(RedisClusterTest, ASingleServerThatAnswersMovedIsFollowedAsACluster) {
  const auto tenants = tenantPerMaster(*cluster_);
  ASSERT_EQ(tenants.size(), 3u);
  const std::uint16_t seed = tenants.begin()->first;
  RedisBackend b(options(config::FleetMode::kSingle, {seed}));
  for (const auto& [port, tenant] : tenants) {
    EXPECT_EQ(granted(b.call(call(keyOf(tenant), 10, 10))), 10u) << tenant;
    EXPECT_EQ(cluster_->node(port).hashSum(keyOf(tenant)), 10u);
  }
  EXPECT_EQ(b.topology().mode, "cluster");
  EXPECT_GE(b.topology().moved, 1u);
}

// A slot resharded under load: between MIGRATING/IMPORTING and the end, the
// key (moved already) is answered with ASK; afterwards with MOVED. No grant
// is lost or counted twice.
TEST_F(RedisClusterTest, ASlotMovedMidLoadIsFollowedThroughAskThenMoved) {
  const auto tenants = tenantPerMaster(*cluster_);
  ASSERT_EQ(tenants.size(), 3u);
  const auto [from, tenant] = *tenants.begin();
  const std::uint16_t to = std::next(tenants.begin())->first;
  const int slot = RedisClusterServers::slotOf("{" + tenant + "}");
  RedisBackend b(options(config::FleetMode::kCluster, {from}));
  std::uint64_t total = granted(b.call(call(keyOf(tenant), 1000, 5)));

  ASSERT_EQ(cluster_->beginMigration(slot, from, to), std::nullopt);
  total += granted(b.call(call(keyOf(tenant), 1000, 5)));  // still on `from`: served there
  ASSERT_EQ(cluster_->migrateKeys(slot, from, to), std::nullopt);
  total += granted(b.call(call(keyOf(tenant), 1000, 5)));  // ASK to `to`
  EXPECT_GE(b.topology().ask, 1u);
  EXPECT_EQ(b.topology().moved, 0u);
  ASSERT_EQ(cluster_->finishMigration(slot, to), std::nullopt);
  total += granted(b.call(call(keyOf(tenant), 1000, 5)));  // MOVED, then the map is fetched
  EXPECT_GE(b.topology().moved, 1u);
  total += granted(b.call(call(keyOf(tenant), 1000, 5)));
  EXPECT_EQ(total, 25u);
  EXPECT_EQ(cluster_->node(to).hashSum(keyOf(tenant)), 25u);
  EXPECT_EQ(nodeOfKey(b.topology(), "{" + tenant + "}"), "127.0.0.1:" + std::to_string(to));
}

// A master killed: calls for its slots fail until its replica is promoted,
// then resume; the other masters' tenants are served throughout.
TEST_F(RedisClusterTest, AKilledMastersSlotsResumeOnItsPromotedReplica) {
  const auto tenants = tenantPerMaster(*cluster_);
  ASSERT_EQ(tenants.size(), 3u);
  const auto [victim, tenant] = *tenants.begin();
  const std::string other = std::next(tenants.begin())->second;
  RedisBackend b(options(config::FleetMode::kCluster, cluster_->masterPorts()));
  ASSERT_EQ(granted(b.call(call(keyOf(tenant), 100, 10))), 10u);
  ASSERT_EQ(granted(b.call(call(keyOf(other), 100, 10))), 10u);

  cluster_->kill(victim);
  EXPECT_EQ(granted(b.call(call(keyOf(other), 100, 10))), 10u) << "another master's tenant";
  const int slot = RedisClusterServers::slotOf("{" + tenant + "}");
  ASSERT_TRUE(cluster_->waitForNewOwner(slot, victim, kPatience)) << "no failover";
  const LeaseResult r = callUntilServed(b, call(keyOf(tenant), 100, 10), kPatience);
  EXPECT_EQ(granted(r), 10u) << "served by the promoted replica";
  EXPECT_GE(b.topology().failovers, 1u);
  EXPECT_NE(nodeOfKey(b.topology(), "{" + tenant + "}"), "127.0.0.1:" + std::to_string(victim));
}

// --- Sentinel -----------------------------------------------------------------

TEST(RedisSentinel, TheMasterIsFoundThroughTheSentinelsAndAFailoverFollowed) {
  START_OR_SKIP(sentinels, RedisSentinelServers::start(RedisSentinelOptions{}));
  const auto master = sentinels->masterPort();
  ASSERT_TRUE(master);
  RedisBackendOptions o = options(config::FleetMode::kSentinel, sentinels->sentinelPorts());
  o.master_name = sentinels->masterName();
  RedisBackend b(o);
  const std::string key = keyOf("acme");
  ASSERT_EQ(granted(b.call(call(key, 100, 10))), 10u);
  EXPECT_EQ(b.topology().master, "127.0.0.1:" + std::to_string(*master));

  sentinels->kill(*master);
  ASSERT_TRUE(sentinels->waitForPromotion(*master, kPatience)) << "the sentinels did not fail over";
  EXPECT_EQ(granted(callUntilServed(b, call(key, 100, 10), kPatience)), 10u);
  const auto promoted = sentinels->masterPort();
  ASSERT_TRUE(promoted);
  EXPECT_EQ(b.topology().master, "127.0.0.1:" + std::to_string(*promoted));
  EXPECT_EQ(b.topology().failovers, 1u);
}

TEST(RedisSentinel, AnUnknownMasterNameIsAClearError) {
  START_OR_SKIP(sentinels, RedisSentinelServers::start(RedisSentinelOptions{}));
  RedisBackendOptions o = options(config::FleetMode::kSentinel, sentinels->sentinelPorts());
  o.master_name = "no-such-master";
  RedisBackend b(o);
  const LeaseResult r = b.call(call(keyOf("acme"), 100, 10));
  ASSERT_TRUE(std::holds_alternative<BackendFailure>(r));
  EXPECT_NE(failure(r).find("knows no master no-such-master"), std::string::npos) << failure(r);
}

}  // namespace
}  // namespace fairsched::fleet
