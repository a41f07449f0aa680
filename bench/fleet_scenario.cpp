#include "bench/fleet_scenario.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "bench/fleet_hammer.hpp"
#include "bench/stats.hpp"
#include "daemon/core/rate_limiter.hpp"
#include "daemon/fleet/fleet_limiter.hpp"
#include "daemon/fleet/redis_backend.hpp"
#include "tests/support/redis_server.hpp"

namespace fairsched::bench {
namespace {

using fleet::FleetLimiter;

constexpr std::size_t kTenants = 16;
constexpr TimeNs kMinute = 60 * kNsPerSec;
// Lease for the throughput runs: a thousand admissions per round trip.
constexpr std::uint64_t kLease = 1000;
// Time is read once per this many decisions, as the daemon reads it once per
// loop iteration rather than per request.
constexpr int kClockEvery = 64;

TimeNs now() {
  return daemon::monotonicNow();
}

fleet::RedisEndpoint endpointOf(const testing::RedisServer& redis) {
  fleet::RedisEndpoint ep;
  ep.host = "127.0.0.1";
  ep.port = redis.port();
  ep.connect_timeout = std::chrono::milliseconds(100);
  ep.command_timeout = std::chrono::milliseconds(50);
  return ep;
}

std::unique_ptr<FleetLimiter> makeLimiter(const testing::RedisServer& redis, std::uint64_t lease,
                                          const std::string& prefix) {
  fleet::FleetOptions o;
  o.key_prefix = prefix;
  o.lease = lease;
  o.on_backend_error = config::FleetErrorPolicy::kFailClosed;
  auto l =
      std::make_unique<FleetLimiter>(o, std::make_unique<fleet::RedisBackend>(endpointOf(redis)));
  l->start();
  return l;
}

struct Throughput {
  std::uint64_t decisions = 0;
  std::uint64_t admitted = 0;
  double seconds = 0;
  double admissionsPerS() const {
    return seconds > 0 ? static_cast<double>(admitted) / seconds : 0;
  }
  double decisionsPerS() const {
    return seconds > 0 ? static_cast<double>(decisions) / seconds : 0;
  }
};

// `decisions` tryAdmit calls of cost 1, round robin over the limiters.
Throughput drive(std::vector<std::unique_ptr<core::KeyLimiter>>& limiters,
                 std::uint64_t decisions) {
  Throughput t;
  const auto start = std::chrono::steady_clock::now();
  TimeNs clock = now();
  for (std::uint64_t i = 0; i < decisions; ++i) {
    if (i % kClockEvery == 0) clock = now();
    t.admitted += limiters[i % limiters.size()]->tryAdmit(1, clock).admitted;
  }
  t.decisions = decisions;
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return t;
}

struct Overshoot {
  std::uint64_t limit = 0;
  std::uint64_t lease = 0;
  std::uint64_t most = 0;  // largest count admitted in one window
  std::uint64_t admitted = 0;
  std::int64_t overshoot() const {
    return std::max<std::int64_t>(
        0, static_cast<std::int64_t>(most) - static_cast<std::int64_t>(limit));
  }
};

// Two limiters on one Redis, each hammered by its own thread, under a binding
// fleet limit; the largest count admitted in any window of its length.
Overshoot measureOvershoot(const testing::RedisServer& redis, TimeNs run) {
  Overshoot o;
  o.limit = 50'000;
  o.lease = 250;
  constexpr TimeNs kWindow = kNsPerSec;
  const core::LimitSpec spec{core::LimitUnit::kRequests, o.limit, kWindow,
                             core::LimitScope::kFleet};
  auto l1 = makeLimiter(redis, o.lease, "bench-overshoot");
  auto l2 = makeLimiter(redis, o.lease, "bench-overshoot");
  auto a1 = l1->open("acme", "chat", spec);
  auto a2 = l2->open("acme", "chat", spec);
  const std::vector<TimeNs> all =
      hammerAccounts({a1.get(), a2.get()}, run, std::chrono::microseconds(10), 200'000'000);
  o.most = maxCountInWindow(all, kWindow);
  o.admitted = all.size();
  return o;
}

}  // namespace

ScenarioResult runFleetScenario(const ScenarioOptions& options) {
  auto started = testing::RedisServer::start();
  if (auto* why = std::get_if<std::string>(&started)) {
    return ScenarioError{"cannot start a redis-server: " + *why};
  }
  const auto redis = std::move(std::get<std::unique_ptr<testing::RedisServer>>(started));
  const std::uint64_t decisions = options.quick ? 400'000 : 5'000'000;
  const std::uint64_t naive_calls = options.quick ? 2'000 : 20'000;
  const TimeNs overshoot_run = options.quick ? 1500 * kNsPerMs : 4 * kNsPerSec;

  // A limit that never binds in these runs: what is measured is the cost of
  // counting, not rejections.
  const std::vector<core::LimitSpec> host_specs{
      {core::LimitUnit::kRequests, 1'000'000'000'000, kMinute, core::LimitScope::kHost}};
  const std::vector<core::LimitSpec> fleet_specs{
      {core::LimitUnit::kRequests, 1'000'000'000'000, kMinute, core::LimitScope::kFleet}};

  // host
  std::vector<std::unique_ptr<core::KeyLimiter>> host;
  for (std::size_t i = 0; i < kTenants; ++i) {
    host.push_back(std::make_unique<core::KeyLimiter>(host_specs));
  }
  drive(host, decisions / 10);  // warm up
  const Throughput host_t = drive(host, decisions);

  // fleet
  auto limiter = makeLimiter(*redis, kLease, "bench");
  std::vector<std::unique_ptr<core::KeyLimiter>> fleet_limiters;
  for (std::size_t i = 0; i < kTenants; ++i) {
    std::vector<std::unique_ptr<core::FleetAccount>> accounts;
    accounts.push_back(limiter->open("org-" + std::to_string(i), "chat", fleet_specs[0]));
    fleet_limiters.push_back(std::make_unique<core::KeyLimiter>(fleet_specs, std::move(accounts)));
  }
  // Warm up: every tenant holds a lease before timing starts.
  for (int i = 0; i < 2000 && limiter->stats().pools.grants < kTenants; ++i) {
    drive(fleet_limiters, kTenants);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const fleet::FleetStats before = limiter->stats();
  const Throughput fleet_t = drive(fleet_limiters, decisions);
  // Let the prefetches started by the run finish before counting them.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const fleet::FleetStats after = limiter->stats();
  const std::uint64_t trips = after.round_trips - before.round_trips;
  const double fraction = fleet_t.admitted > 0
                              ? static_cast<double>(trips) / static_cast<double>(fleet_t.admitted)
                              : 1.0;
  fleet_limiters.clear();
  limiter->stop();

  // naive: one synchronous script call per admission
  fleet::RedisBackend naive(endpointOf(*redis));
  std::uint64_t naive_admitted = 0;
  const std::string naive_key = fleet::limitKey("bench-naive", "acme", "chat", fleet_specs[0]);
  const auto naive_start = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < naive_calls; ++i) {
    fleet::LeaseCall c;
    c.key = naive_key;
    c.limit = fleet_specs[0].amount;
    c.window = fleet_specs[0].window_ns;
    c.want = 1;
    c.min = 1;
    const fleet::LeaseResult r = naive.call(c);
    if (const auto* ok = std::get_if<fleet::LeaseReply>(&r)) naive_admitted += ok->granted;
  }
  const double naive_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - naive_start).count();
  if (naive_admitted != naive_calls) {
    return ScenarioError{"naive mode: only " + std::to_string(naive_admitted) + " of " +
                         std::to_string(naive_calls) + " calls admitted"};
  }
  const double naive_rate = naive_s > 0 ? static_cast<double>(naive_admitted) / naive_s : 0;

  const Overshoot over = measureOvershoot(*redis, overshoot_run);
  // Two limiters: two leases each, plus one request (cost 1) on credit each.
  const std::uint64_t bound = 2 * (2 * over.lease + 1);

  nlohmann::json json;
  json["host"] = {{"admissions_per_s", host_t.admissionsPerS()}, {"decisions", host_t.decisions}};
  json["fleet"] = {{"admissions_per_s", fleet_t.admissionsPerS()},
                   {"decisions_per_s", fleet_t.decisionsPerS()},
                   {"redis_roundtrip_fraction", fraction},
                   {"max_overshoot", over.overshoot()},
                   {"lease", kLease},
                   {"admitted", fleet_t.admitted},
                   {"decisions", fleet_t.decisions},
                   {"round_trips", trips},
                   {"overshoot_limit", over.limit},
                   {"overshoot_lease", over.lease},
                   {"overshoot_bound", bound},
                   {"overshoot_max_window", over.most},
                   {"overshoot_admitted", over.admitted}};
  json["naive"] = {{"admissions_per_s", naive_rate}, {"admissions", naive_admitted}};

  char line[256];
  std::string table = "fleet limits: limiter admissions per second (" + std::to_string(kTenants) +
                      " tenants, redis-server on loopback)\n";
  std::snprintf(line, sizeof line, "  %-7s %14.0f admissions/s\n", "host", host_t.admissionsPerS());
  table += line;
  std::snprintf(line, sizeof line,
                "  %-7s %14.0f admissions/s  (lease %llu; %.4f%% of admissions needed a Redis "
                "round trip; %llu of %llu decisions admitted)\n",
                "fleet", fleet_t.admissionsPerS(), static_cast<unsigned long long>(kLease),
                fraction * 100, static_cast<unsigned long long>(fleet_t.admitted),
                static_cast<unsigned long long>(fleet_t.decisions));
  table += line;
  std::snprintf(line, sizeof line, "  %-7s %14.0f admissions/s  (one round trip each)\n", "naive",
                naive_rate);
  table += line;
  std::snprintf(line, sizeof line,
                "overshoot: two limiters, %llu requests/s fleet limit, lease %llu: at most %llu "
                "in a window, overshoot %lld (bound %llu)\n",
                static_cast<unsigned long long>(over.limit),
                static_cast<unsigned long long>(over.lease),
                static_cast<unsigned long long>(over.most),
                static_cast<long long>(over.overshoot()), static_cast<unsigned long long>(bound));
  table += line;
  table += "targets (from the issue; a MISS does not fail the run)\n";
  std::snprintf(line, sizeof line, "  fleet >= 1M admissions/s: %s; round trips <= 1%%: %s\n",
                fleet_t.admissionsPerS() >= 1e6 ? "ok" : "MISS", fraction <= 0.01 ? "ok" : "MISS");
  table += line;

  ScenarioReport report;
  report.json = std::move(json);
  report.table = std::move(table);
  return report;
}

}  // namespace fairsched::bench
