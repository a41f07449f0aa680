// RedisBackend and its Lua script against a real redis-server started for
// the test (skipped, with the reason, when none can be started).
#include "daemon/fleet/redis_backend.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/support/redis_server.hpp"

namespace fairsched::fleet {
namespace {

using testing::RedisServer;

constexpr TimeNs kMinute = 60 * kNsPerSec;

class RedisBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = RedisServer::start();
    if (auto* why = std::get_if<std::string>(&started)) GTEST_SKIP() << "no redis-server: " << *why;
    redis_ = std::move(std::get<std::unique_ptr<RedisServer>>(started));
  }

  RedisEndpoint tcp() const {
    RedisEndpoint ep;
    ep.host = "127.0.0.1";
    ep.port = redis_->port();
    ep.connect_timeout = std::chrono::milliseconds(200);
    ep.command_timeout = std::chrono::milliseconds(100);
    return ep;
  }

  static LeaseReply ok(const LeaseResult& r) {
    if (const auto* f = std::get_if<BackendFailure>(&r)) {
      ADD_FAILURE() << "backend failed: " << f->message;
      return {};
    }
    return std::get<LeaseReply>(r);
  }

  std::uint64_t hashSum(const std::string& key) const { return redis_->hashSum(key); }

  std::unique_ptr<RedisServer> redis_;
};

LeaseCall call(std::string_view key, std::uint64_t limit, TimeNs window, std::uint64_t want,
               std::uint64_t min = 1, std::span<const LeaseReturn> returns = {}) {
  LeaseCall c;
  c.key = key;
  c.limit = limit;
  c.window = window;
  c.want = want;
  c.min = min;
  c.returns = returns;
  return c;
}

TEST(LimitKey, IsHashTaggedByTenant) {
  const core::LimitSpec rpm{core::LimitUnit::kRequests, 600, kMinute};
  const core::LimitSpec tpd{core::LimitUnit::kTokens, 1000, 24 * 60 * kMinute};
  EXPECT_EQ(limitKey("fairsched", "acme", "chat", rpm), "fairsched:{acme}:chat:requests/60s");
  EXPECT_EQ(limitKey("fs", "acme", "embed", tpd), "fs:{acme}:embed:tokens/86400s");
}

TEST_F(RedisBackendTest, GrantsUpToTheLimitThenDenies) {
  RedisBackend b(tcp());
  const std::string key = "t:{a}:chat:requests/60s";
  EXPECT_EQ(ok(b.call(call(key, 10, kMinute, 4))).granted, 4u);
  EXPECT_EQ(ok(b.call(call(key, 10, kMinute, 4))).granted, 4u);
  const LeaseReply partial = ok(b.call(call(key, 10, kMinute, 4)));
  EXPECT_EQ(partial.granted, 2u);  // what is left, as it is at least min
  EXPECT_EQ(partial.used, 10u);
  const LeaseReply denied = ok(b.call(call(key, 10, kMinute, 4)));
  EXPECT_EQ(denied.granted, 0u);
  EXPECT_GT(denied.retry_after, 0);
  EXPECT_LE(denied.retry_after, kMinute + kMinute / 15);
  EXPECT_EQ(hashSum(key), 10u);
}

TEST_F(RedisBackendTest, PartialGrantBelowMinIsDenied) {
  RedisBackend b(tcp());
  const std::string key = "t:{a}:chat:tokens/60s";
  ASSERT_EQ(ok(b.call(call(key, 100, kMinute, 95))).granted, 95u);
  EXPECT_EQ(ok(b.call(call(key, 100, kMinute, 50, 10))).granted, 0u);
  EXPECT_EQ(ok(b.call(call(key, 100, kMinute, 50, 5))).granted, 5u);
}

TEST_F(RedisBackendTest, ReturnsGoBackToTheirBucket) {
  RedisBackend b(tcp());
  const std::string key = "t:{a}:chat:requests/60s";
  const LeaseReply first = ok(b.call(call(key, 10, kMinute, 10)));
  ASSERT_EQ(first.granted, 10u);
  const std::vector<LeaseReturn> back{{first.bucket, 6}};
  const LeaseReply second = ok(b.call(call(key, 10, kMinute, 0, 1, back)));
  EXPECT_EQ(second.granted, 0u);
  EXPECT_EQ(second.used, 4u);
  EXPECT_EQ(ok(b.call(call(key, 10, kMinute, 10))).granted, 6u);
}

TEST_F(RedisBackendTest, ReturnNeverDrivesABucketBelowZero) {
  RedisBackend b(tcp());
  const std::string key = "t:{a}:chat:requests/60s";
  const LeaseReply first = ok(b.call(call(key, 10, kMinute, 3)));
  const std::vector<LeaseReturn> back{{first.bucket, 100}};
  EXPECT_EQ(ok(b.call(call(key, 10, kMinute, 0, 1, back))).used, 0u);
  EXPECT_EQ(ok(b.call(call(key, 10, kMinute, 10))).granted, 10u);
}

TEST_F(RedisBackendTest, ReturnToABucketOutsideTheWindowIsIgnored) {
  RedisBackend b(tcp());
  const std::string key = "t:{a}:chat:requests/60s";
  ASSERT_EQ(ok(b.call(call(key, 10, kMinute, 10))).granted, 10u);
  const std::vector<LeaseReturn> ancient{{1, 10}};
  EXPECT_EQ(ok(b.call(call(key, 10, kMinute, 0, 1, ancient))).used, 10u);
}

TEST_F(RedisBackendTest, KeyExpiresAfterItsWindow) {
  RedisBackend b(tcp());
  const std::string key = "t:{a}:chat:requests/60s";
  ASSERT_EQ(ok(b.call(call(key, 10, kMinute, 1))).granted, 1u);
  auto pttl = redis_->command({"PTTL", key});
  ASSERT_TRUE(pttl && !pttl->empty());
  const long long ms = std::stoll(pttl->front());
  EXPECT_GT(ms, 60'000);
  EXPECT_LE(ms, 60'000 + 4'000 + 1'000);
}

TEST_F(RedisBackendTest, GrantsLeaveTheWindowAsItSlides) {
  RedisBackend b(tcp());
  const std::string key = "t:{a}:chat:requests/1s";
  ASSERT_EQ(ok(b.call(call(key, 5, kNsPerSec, 5))).granted, 5u);
  const LeaseReply denied = ok(b.call(call(key, 5, kNsPerSec, 1)));
  ASSERT_EQ(denied.granted, 0u);
  std::this_thread::sleep_for(std::chrono::nanoseconds(denied.retry_after));
  EXPECT_EQ(ok(b.call(call(key, 5, kNsPerSec, 5))).granted, 5u);
}

TEST_F(RedisBackendTest, ReloadsTheScriptAfterScriptFlush) {
  RedisBackend b(tcp());
  const std::string key = "t:{a}:chat:requests/60s";
  ASSERT_EQ(ok(b.call(call(key, 10, kMinute, 1))).granted, 1u);
  EXPECT_EQ(b.roundTrips(), 1u);  // SCRIPT LOAD and EVALSHA in one round trip
  const std::uint64_t trips = b.roundTrips();
  ASSERT_TRUE(redis_->command({"SCRIPT", "FLUSH"}));
  EXPECT_EQ(ok(b.call(call(key, 10, kMinute, 1))).granted, 1u);
  EXPECT_EQ(b.roundTrips(), trips + 2);  // NOSCRIPT; then SCRIPT LOAD and EVALSHA again
  EXPECT_EQ(ok(b.call(call(key, 10, kMinute, 1))).granted, 1u);
  EXPECT_EQ(b.roundTrips(), trips + 3);
}

TEST_F(RedisBackendTest, WorksOverAUnixSocket) {
  RedisEndpoint ep;
  ep.unix_path = redis_->unixPath();
  RedisBackend b(ep);
  EXPECT_EQ(ok(b.call(call("t:{a}:x:requests/60s", 10, kMinute, 3))).granted, 3u);
}

TEST_F(RedisBackendTest, ServerGoneIsAConnectFailureAndComingBackReconnects) {
  RedisBackend b(tcp());
  const std::string key = "t:{a}:chat:requests/60s";
  ASSERT_EQ(ok(b.call(call(key, 10, kMinute, 1))).granted, 1u);
  redis_->kill();
  const LeaseResult during = b.call(call(key, 10, kMinute, 1));
  ASSERT_TRUE(std::holds_alternative<BackendFailure>(during));
  const LeaseResult again = b.call(call(key, 10, kMinute, 1));
  ASSERT_TRUE(std::holds_alternative<BackendFailure>(again));
  EXPECT_EQ(std::get<BackendFailure>(again).error, BackendError::kConnect);
  ASSERT_EQ(redis_->restart(), std::nullopt);
  EXPECT_EQ(ok(b.call(call(key, 10, kMinute, 1))).granted, 1u);  // a fresh server: script reloaded
}

TEST_F(RedisBackendTest, StalledServerTimesOut) {
  RedisBackend b(tcp());
  const std::string key = "t:{a}:chat:requests/60s";
  ASSERT_EQ(ok(b.call(call(key, 10, kMinute, 1))).granted, 1u);
  redis_->pause();
  const LeaseResult r = b.call(call(key, 10, kMinute, 1));
  redis_->resume();
  ASSERT_TRUE(std::holds_alternative<BackendFailure>(r));
  EXPECT_EQ(std::get<BackendFailure>(r).error, BackendError::kIo);
  EXPECT_EQ(ok(b.call(call(key, 10, kMinute, 1))).granted, 1u);
}

}  // namespace
}  // namespace fairsched::fleet
