// FleetLimiter against a real redis-server started for the test (skipped,
// with the reason, when none can be started): leases, the fleet-wide bound
// across two limiters, each on_backend_error policy with Redis killed and
// restarted, shutdown returns, and no growth in threads or connections.
// Every loop is bounded in count and time.
#include "daemon/fleet/fleet_limiter.hpp"

#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "bench/fleet_hammer.hpp"
#include "bench/stats.hpp"
#include "daemon/fleet/redis_backend.hpp"
#include "tests/support/redis_server.hpp"
#include "tests/support/wait_until.hpp"

namespace fairsched::fleet {
namespace {

using namespace std::chrono_literals;
using config::FleetErrorPolicy;
using testing::RedisServer;
using testing::waitUntil;

constexpr TimeNs kMinute = 60 * kNsPerSec;

TimeNs now() {
  return daemon::monotonicNow();
}

std::size_t threadCount() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

core::LimitSpec requestsPer(std::uint64_t n, TimeNs window) {
  return {core::LimitUnit::kRequests, n, window, core::LimitScope::kFleet};
}

class FleetLimiterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = RedisServer::start();
    if (auto* why = std::get_if<std::string>(&started)) GTEST_SKIP() << "no redis-server: " << *why;
    redis_ = std::move(std::get<std::unique_ptr<RedisServer>>(started));
  }

  std::unique_ptr<FleetLimiter> limiter(std::uint64_t lease, FleetErrorPolicy policy,
                                        std::uint32_t hosts = 1) {
    FleetOptions o;
    o.key_prefix = "test";
    o.lease = lease;
    o.hosts = hosts;
    o.on_backend_error = policy;
    o.breaker.max_open = 300 * kNsPerMs;
    o.sweep_interval = 20 * kNsPerMs;
    RedisEndpoint ep;
    ep.host = "127.0.0.1";
    ep.port = redis_->port();
    ep.connect_timeout = std::chrono::milliseconds(50);
    ep.command_timeout = std::chrono::milliseconds(50);
    auto l = std::make_unique<FleetLimiter>(o, std::make_unique<RedisBackend>(ep));
    l->start();
    return l;
  }

  // Takes cost 1 until `n` are admitted or `limit` passes; returns how many were.
  static std::uint64_t admit(core::FleetAccount& a, std::uint64_t n,
                             std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::uint64_t admitted = 0;
    while (admitted < n && std::chrono::steady_clock::now() < deadline) {
      if (a.take(1, now()).admitted) {
        ++admitted;
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    return admitted;
  }

  // Waits (bounded) until the limiter's degraded state is `want`; how long it took.
  static std::optional<std::chrono::milliseconds> waitDegraded(
      FleetLimiter& l, core::FleetAccount& a, bool want,
      std::chrono::milliseconds limit = std::chrono::seconds(3)) {
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < limit) {
      if (l.degraded() == want) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start);
      }
      a.take(1, now());  // keeps a fetch wanted
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return std::nullopt;
  }

  std::uint64_t counted(const std::string& key) const { return redis_->hashSum(key); }

  std::unique_ptr<RedisServer> redis_;
};

TEST_F(FleetLimiterTest, AutoLeaseIsAHundredthOfTheShare) {
  auto l = limiter(0, FleetErrorPolicy::kFailClosed, 4);
  EXPECT_EQ(l->leaseFor(requestsPer(100'000, kMinute)), 250u);
  EXPECT_EQ(l->leaseFor(requestsPer(10, kMinute)), 1u);
}

TEST_F(FleetLimiterTest, AdmitsFromLeasesWithFewRoundTrips) {
  auto l = limiter(100, FleetErrorPolicy::kFailClosed);
  auto a = l->open("acme", "chat", requestsPer(1'000'000, kMinute));
  EXPECT_EQ(admit(*a, 5000), 5000u);
  const FleetStats s = l->stats();
  EXPECT_LE(s.backend_calls, 5000u / 100 + 5);
  EXPECT_GE(s.pools.grants, 5000u / 100);
  EXPECT_EQ(s.limits, 1u);
  EXPECT_FALSE(s.degraded);
}

TEST_F(FleetLimiterTest, RejectsOnceTheFleetBudgetIsSpent) {
  auto l = limiter(10, FleetErrorPolicy::kFailClosed);
  auto a = l->open("acme", "chat", requestsPer(25, kMinute));
  EXPECT_EQ(admit(*a, 25), 25u);
  EXPECT_EQ(admit(*a, 1, std::chrono::milliseconds(200)), 0u);
  const core::FleetDecision d = a->take(1, now());
  EXPECT_FALSE(d.admitted);
  EXPECT_GT(d.retry_after, kNsPerSec);  // the backend said when: most of a minute away
  EXPECT_EQ(counted("test:{acme}:chat:requests/60s"), 25u);
}

TEST_F(FleetLimiterTest, TwoLimitersSharingOneRedisStayWithinTheBound) {
  constexpr std::uint64_t kLimit = 2000;
  constexpr std::uint64_t kLease = 20;
  constexpr TimeNs kWindow = 500 * kNsPerMs;
  auto l1 = limiter(kLease, FleetErrorPolicy::kFailClosed);
  auto l2 = limiter(kLease, FleetErrorPolicy::kFailClosed);
  auto a1 = l1->open("acme", "chat", requestsPer(kLimit, kWindow));
  auto a2 = l2->open("acme", "chat", requestsPer(kLimit, kWindow));
  std::vector<std::size_t> each;
  const std::vector<TimeNs> all =
      bench::hammerAccounts({a1.get(), a2.get()}, 2000 * kNsPerMs, 20us, 20'000'000, &each);
  const std::size_t most = bench::maxCountInWindow(all, kWindow);
  // The documented bound: two leases per limiter, plus one request (cost 1)
  // each may have admitted on credit and not yet paid for.
  const std::uint64_t bound = kLimit + 2 * (2 * kLease + 1);
  EXPECT_LE(most, bound) << "largest count in a window of 500 ms";
  EXPECT_GE(most, kLimit * 9 / 10) << "the limit was not approached: the test proves nothing";
  EXPECT_GE(all.size(), 3 * kLimit) << "the run should span several windows";
  EXPECT_GT(each[0], 0u);
  EXPECT_GT(each[1], 0u);
}

TEST_F(FleetLimiterTest, StopGivesUnusedLeasesBack) {
  auto l = limiter(100, FleetErrorPolicy::kFailClosed);
  auto a = l->open("acme", "chat", requestsPer(10'000, kMinute));
  ASSERT_EQ(admit(*a, 3), 3u);
  const std::string key = "test:{acme}:chat:requests/60s";
  EXPECT_GE(counted(key), 100u);
  l->stop();
  EXPECT_EQ(counted(key), 3u);
}

TEST_F(FleetLimiterTest, ClosedAccountsGiveTheirLeasesBack) {
  auto l = limiter(100, FleetErrorPolicy::kFailClosed);
  const std::string key = "test:{acme}:chat:requests/60s";
  {
    auto a = l->open("acme", "chat", requestsPer(10'000, kMinute));
    ASSERT_EQ(admit(*a, 7), 7u);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (counted(key) != 7 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(counted(key), 7u);
  EXPECT_EQ(l->stats().limits, 0u);
}

TEST_F(FleetLimiterTest, TokenRefundsOfRetiredLeasesReachRedis) {
  auto l = limiter(100, FleetErrorPolicy::kFailClosed);
  auto a = l->open("acme", "chat",
                   {core::LimitUnit::kTokens, 100'000, kMinute, core::LimitScope::kFleet});
  const std::string key = "test:{acme}:chat:tokens/60s";
  // The first take finds no lease: admitted on credit, it fetches a lease
  // that pays for it. Wait for that lease.
  ASSERT_TRUE(a->take(100, now()).admitted);
  const auto lease_by = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (l->stats().leases_held < 100 && std::chrono::steady_clock::now() < lease_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(l->stats().leases_held, 100u);
  TimeNs taken = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < deadline) {
    taken = now();
    if (a->take(100, taken).admitted) break;
    taken = 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_NE(taken, 0);
  a->refund(60, taken);  // the current lease: credited locally
  EXPECT_EQ(l->stats().pools.refunds_local, 1u);
  l->stop();
  EXPECT_EQ(counted(key), 140u);  // the borrowed 100, and the 40 the second take kept
}

// A borrowed take whose payment the backend refuses (the budget is spent)
// stays owed after the tenant's account closes: a tenant that comes back
// finds the debt and cannot borrow again, so forgetting an idle tenant never
// lets it past the limit again and again.
TEST_F(FleetLimiterTest, ADebtOutlivesItsAccountSoAReturningTenantCannotBorrowAgain) {
  auto other = limiter(5, FleetErrorPolicy::kFailClosed);
  auto spender = other->open("acme", "chat", requestsPer(10, kMinute));
  ASSERT_EQ(admit(*spender, 10), 10u);  // another daemon spends the whole budget

  auto l = limiter(5, FleetErrorPolicy::kFailClosed);
  {
    auto a = l->open("acme", "chat", requestsPer(10, kMinute));
    // A second tenant without debt: its entry goes at the first sweep after
    // its account closes, which shows when a sweep has passed over acme's.
    auto witness = l->open("globex", "chat", requestsPer(10, kMinute));
    EXPECT_TRUE(a->take(1, now()).admitted) << "no lease yet: admitted on credit";
    ASSERT_TRUE(waitUntil([&] { return l->stats().pools.denials >= 1; }, 3s,
                          "the payment should be refused"));
    ASSERT_EQ(l->stats().limits, 2u);
  }  // both tenants' state is dropped: their accounts close
  ASSERT_TRUE(waitUntil([&] { return l->stats().limits < 2; }, 3s,
                        "a sweep to release the closed account without debt"));
  EXPECT_EQ(l->stats().limits, 1u) << "the sweep kept the entry that still owes";
  auto again = l->open("acme", "chat", requestsPer(10, kMinute));
  EXPECT_EQ(admit(*again, 1, std::chrono::milliseconds(300)), 0u);
  EXPECT_EQ(l->stats().pools.borrowed, 1u);
}

// Kill Redis with leases held, spend them, and check the policy beyond them.
class FleetPolicyTest : public FleetLimiterTest {
 protected:
  // Leaves the limiter degraded with its leases spent; false when that could
  // not be reached in time.
  bool degrade(FleetLimiter& l, core::FleetAccount& a) {
    if (admit(a, 1) != 1) return false;
    redis_->kill();
    return waitDegraded(l, a, true).has_value();
  }

  void recover(FleetLimiter& l, core::FleetAccount& a) {
    ASSERT_EQ(redis_->restart(), std::nullopt);
    ASSERT_TRUE(waitDegraded(l, a, false, std::chrono::seconds(3)).has_value())
        << "no recovery within 3 s";
    // Not how fast (a unit test does not time the machine): that the breaker
    // closed again and counts the recovery.
    ASSERT_TRUE(waitUntil(
        [&] {
          const FleetStats s = l.stats();
          return s.breaker == BreakerState::kClosed && s.breaker_counters.recovered >= 1;
        },
        3s, "the circuit breaker closed again"));
    EXPECT_EQ(admit(a, 1, std::chrono::seconds(1)), 1u);  // from a fresh lease
  }
};

TEST_F(FleetPolicyTest, FailOpenAdmitsPastTheLeasesWhileRedisIsDown) {
  auto l = limiter(10, FleetErrorPolicy::kFailOpen);
  auto a = l->open("acme", "chat", requestsPer(50, kMinute));
  ASSERT_TRUE(degrade(*l, *a));
  int admitted = 0;
  for (int i = 0; i < 500; ++i) admitted += a->take(1, now()).admitted;
  EXPECT_EQ(admitted, 500);
  EXPECT_GE(l->stats().degraded_admitted, 500u - 10u);
  recover(*l, *a);
}

TEST_F(FleetPolicyTest, FailClosedRejectsWithRetryAfterWhileRedisIsDown) {
  auto l = limiter(10, FleetErrorPolicy::kFailClosed);
  auto a = l->open("acme", "chat", requestsPer(1000, kMinute));
  ASSERT_TRUE(degrade(*l, *a));
  int admitted = 0;
  for (int i = 0; i < 500; ++i) {
    const core::FleetDecision d = a->take(1, now());
    admitted += d.admitted;
    if (!d.admitted) {
      EXPECT_GT(d.retry_after, 0);
      EXPECT_LE(d.retry_after, 300 * kNsPerMs);
    }
  }
  EXPECT_LE(admitted, 10);  // at most what was left of the leases
  EXPECT_GT(l->stats().degraded_rejected, 0u);
  recover(*l, *a);
}

TEST_F(FleetPolicyTest, LocalShareEnforcesTheLimitDividedByHosts) {
  auto l = limiter(5, FleetErrorPolicy::kLocalShare, 4);
  auto a = l->open("acme", "chat", requestsPer(200, kMinute));
  ASSERT_TRUE(degrade(*l, *a));
  const std::uint64_t before = l->stats().degraded_admitted;
  int rejected = 0;
  for (int i = 0; i < 500; ++i) {
    const core::FleetDecision d = a->take(1, now());
    if (!d.admitted) {
      ++rejected;
      EXPECT_GT(d.retry_after, kNsPerSec);  // the local window frees in most of a minute
    }
  }
  const std::uint64_t local = l->stats().degraded_admitted;
  EXPECT_EQ(local, 200u / 4) << "admitted past the leases while degraded (" << before
                             << " while degrading)";
  EXPECT_GE(rejected, 500 - 50 - 5);
  recover(*l, *a);
}

TEST_F(FleetLimiterTest, NoGrowthInThreadsOrConnectionsAcrossRedisRestarts) {
  auto l = limiter(10, FleetErrorPolicy::kLocalShare);
  auto a = l->open("acme", "chat", requestsPer(1'000'000, kMinute));
  ASSERT_EQ(admit(*a, 20), 20u);
  const std::size_t threads = threadCount();
  for (int cycle = 0; cycle < 3; ++cycle) {
    redis_->kill();
    ASSERT_TRUE(waitDegraded(*l, *a, true).has_value()) << "cycle " << cycle;
    ASSERT_EQ(redis_->restart(), std::nullopt);
    ASSERT_TRUE(waitDegraded(*l, *a, false).has_value()) << "cycle " << cycle;
    ASSERT_EQ(admit(*a, 20), 20u);
    EXPECT_EQ(threadCount(), threads) << "cycle " << cycle;
    EXPECT_EQ(redis_->clientCount(), 1u) << "cycle " << cycle;
  }
  const FleetStats s = l->stats();
  EXPECT_EQ(s.breaker_counters.recovered, 3u);
  EXPECT_GE(s.breaker_counters.opened, 3u);
}

TEST_F(FleetLimiterTest, StalledRedisDegradesAndRecovers) {
  auto l = limiter(10, FleetErrorPolicy::kFailClosed);
  auto a = l->open("acme", "chat", requestsPer(1'000'000, kMinute));
  ASSERT_EQ(admit(*a, 5), 5u);
  redis_->pause();
  const auto degraded = waitDegraded(*l, *a, true);
  redis_->resume();
  ASSERT_TRUE(degraded.has_value());
  ASSERT_TRUE(waitDegraded(*l, *a, false).has_value());
  EXPECT_EQ(admit(*a, 5), 5u);
}

}  // namespace
}  // namespace fairsched::fleet

namespace fairsched::fleet {
namespace {

// A wrong password is said at start — in the log and in the limiter's
// last_error, which status shows — before any fleet-limited request, and
// the limiter then serves under its policy.
TEST(FleetLimiterAuth, AWrongPasswordIsReportedAtStartAndThePolicyServes) {
  testing::RedisServerOptions so;
  so.config_lines = {"requirepass right"};
  so.admin_password = "right";
  auto started = testing::RedisServer::start(so);
  if (auto* why = std::get_if<std::string>(&started)) GTEST_SKIP() << "no redis-server: " << *why;
  const auto redis = std::move(std::get<std::unique_ptr<testing::RedisServer>>(started));

  RedisBackendOptions bo =
      RedisBackendOptions::from(RedisEndpoint{"127.0.0.1", redis->port(), "", 200ms, 200ms});
  bo.data.auth.password = "wrong";
  FleetOptions o;
  o.key_prefix = "test";
  o.lease = 10;
  o.on_backend_error = FleetErrorPolicy::kFailOpen;
  FleetLimiter l(o, std::make_unique<RedisBackend>(bo));
  l.start();
  ASSERT_TRUE(
      waitUntil([&] { return !l.stats().last_error.empty(); }, 60s, "the failed start recorded"));
  const std::string error = l.stats().last_error;
  EXPECT_NE(error.find("auth: "), std::string::npos) << error;
  EXPECT_NE(error.find("WRONGPASS"), std::string::npos) << error;
  EXPECT_EQ(error.find(" wrong"), std::string::npos) << "the password leaked: " << error;

  // Requests go on: fail_open admits once the breaker has opened.
  auto account = l.open("acme", "chat", requestsPer(5, kMinute));
  std::uint64_t admitted = 0;
  for (int i = 0; i < 20'000 && admitted < 20; ++i) {
    if (account->take(1, now()).admitted) ++admitted;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_EQ(admitted, 20u) << "fail_open serves past the (unreachable) fleet limit";
  EXPECT_TRUE(l.degraded());
  account.reset();
  l.stop();
}

}  // namespace
}  // namespace fairsched::fleet
