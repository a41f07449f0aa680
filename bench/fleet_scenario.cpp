#include "bench/fleet_scenario.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "bench/fleet_hammer.hpp"
#include "bench/fleet_topology.hpp"
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

std::unique_ptr<FleetLimiter> makeLimiter(const FleetTarget& target, std::uint64_t lease,
                                          const std::string& prefix) {
  fleet::FleetOptions o;
  o.key_prefix = prefix;
  o.lease = lease;
  o.on_backend_error = config::FleetErrorPolicy::kFailClosed;
  auto l = std::make_unique<FleetLimiter>(
      o, std::make_unique<fleet::RedisBackend>(target.backendOptions()));
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
Overshoot measureOvershoot(const FleetTarget& redis, TimeNs run) {
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

// A limit that never binds in these runs: what is measured is the cost of
// counting, not rejections.
const core::LimitSpec kFleetSpec{core::LimitUnit::kRequests, 1'000'000'000'000, kMinute,
                                 core::LimitScope::kFleet};

struct FleetRun {
  Throughput limiter;
  double roundtrip_fraction = 1.0;
  std::uint64_t round_trips = 0;
  double naive_per_s = 0;  // one synchronous script call per admission
};

// Fleet admissions through a FleetLimiter on `target`, then the naive design
// on the same target.
std::variant<FleetRun, std::string> measureFleet(const FleetTarget& target, std::uint64_t decisions,
                                                 std::uint64_t naive_calls) {
  FleetRun out;
  auto limiter = makeLimiter(target, kLease, "bench");
  std::vector<std::unique_ptr<core::KeyLimiter>> fleet_limiters;
  for (std::size_t i = 0; i < kTenants; ++i) {
    std::vector<std::unique_ptr<core::FleetAccount>> accounts;
    accounts.push_back(limiter->open("org-" + std::to_string(i), "chat", kFleetSpec));
    fleet_limiters.push_back(std::make_unique<core::KeyLimiter>(
        std::vector<core::LimitSpec>{kFleetSpec}, std::move(accounts)));
  }
  // Warm up: every tenant holds a lease before timing starts.
  for (int i = 0; i < 2000 && limiter->stats().pools.grants < kTenants; ++i) {
    drive(fleet_limiters, kTenants);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const fleet::FleetStats before = limiter->stats();
  out.limiter = drive(fleet_limiters, decisions);
  // Let the prefetches started by the run finish before counting them.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const fleet::FleetStats after = limiter->stats();
  out.round_trips = after.round_trips - before.round_trips;
  out.roundtrip_fraction = out.limiter.admitted > 0 ? static_cast<double>(out.round_trips) /
                                                          static_cast<double>(out.limiter.admitted)
                                                    : 1.0;
  fleet_limiters.clear();
  limiter->stop();

  fleet::RedisBackend naive(target.backendOptions());
  std::uint64_t naive_admitted = 0;
  const std::string naive_key = fleet::limitKey("bench-naive", "acme", "chat", kFleetSpec);
  const auto naive_start = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < naive_calls; ++i) {
    fleet::LeaseCall c;
    c.key = naive_key;
    c.limit = kFleetSpec.amount;
    c.window = kFleetSpec.window_ns;
    c.want = 1;
    c.min = 1;
    const fleet::LeaseResult r = naive.call(c);
    if (const auto* ok = std::get_if<fleet::LeaseReply>(&r)) naive_admitted += ok->granted;
  }
  const double naive_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - naive_start).count();
  if (naive_admitted != naive_calls) {
    return "naive mode: only " + std::to_string(naive_admitted) + " of " +
           std::to_string(naive_calls) + " calls admitted";
  }
  out.naive_per_s = naive_s > 0 ? static_cast<double>(naive_admitted) / naive_s : 0;
  return out;
}

}  // namespace

ScenarioResult runFleetScenario(const ScenarioOptions& options) {
  const std::string topology = options.topology.empty() ? "single" : options.topology;
  const bool baseline_only = topology == "single" && !options.tls;
  // The baseline: one plain server, always measured in the same run.
  auto started = startFleetTarget("single", false);
  if (auto* why = std::get_if<std::string>(&started)) return ScenarioError{*why};
  const auto plain = std::move(std::get<std::unique_ptr<FleetTarget>>(started));
  std::unique_ptr<FleetTarget> chosen;
  if (!baseline_only) {
    auto other = startFleetTarget(topology, options.tls);
    if (auto* why = std::get_if<std::string>(&other)) return ScenarioError{*why};
    chosen = std::move(std::get<std::unique_ptr<FleetTarget>>(other));
  }
  const FleetTarget& target = chosen ? *chosen : *plain;
  const std::uint64_t decisions = options.quick ? 400'000 : 5'000'000;
  const std::uint64_t naive_calls = options.quick ? 2'000 : 20'000;
  const TimeNs overshoot_run = options.quick ? 1500 * kNsPerMs : 4 * kNsPerSec;

  // host
  const std::vector<core::LimitSpec> host_specs{
      {core::LimitUnit::kRequests, 1'000'000'000'000, kMinute, core::LimitScope::kHost}};
  std::vector<std::unique_ptr<core::KeyLimiter>> host;
  for (std::size_t i = 0; i < kTenants; ++i) {
    host.push_back(std::make_unique<core::KeyLimiter>(host_specs));
  }
  drive(host, decisions / 10);  // warm up
  const Throughput host_t = drive(host, decisions);

  // Interleaved rounds (the baseline, then the topology, again and again),
  // the median of each: on a small machine one short run is noisy.
  const int rounds = options.rounds > 0 ? options.rounds : (options.quick ? 1 : 3);
  std::vector<FleetRun> base_runs, runs;
  for (int r = 0; r < rounds; ++r) {
    auto base_run = measureFleet(*plain, decisions, naive_calls);
    if (auto* why = std::get_if<std::string>(&base_run)) return ScenarioError{*why};
    base_runs.push_back(std::get<FleetRun>(base_run));
    if (chosen) {
      auto chosen_run = measureFleet(*chosen, decisions, naive_calls);
      if (auto* why = std::get_if<std::string>(&chosen_run)) return ScenarioError{*why};
      runs.push_back(std::get<FleetRun>(chosen_run));
    }
  }
  auto median = [](std::vector<FleetRun> v) {
    std::sort(v.begin(), v.end(), [](const FleetRun& a, const FleetRun& b) {
      return a.limiter.admissionsPerS() < b.limiter.admissionsPerS();
    });
    return v[v.size() / 2];
  };
  const FleetRun base = median(base_runs);
  const FleetRun run = chosen ? median(runs) : base;
  const Throughput& fleet_t = run.limiter;
  const double fraction = run.roundtrip_fraction;
  const std::uint64_t trips = run.round_trips;
  const double naive_rate = run.naive_per_s;
  const std::uint64_t naive_admitted = naive_calls;

  const Overshoot over = measureOvershoot(target, overshoot_run);
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
  json["topology"] = topology;
  json["tls"] = options.tls;
  const double vs_base = base.limiter.admissionsPerS() > 0
                             ? fleet_t.admissionsPerS() / base.limiter.admissionsPerS()
                             : 0;
  json["baseline"] = {{"topology", "single"},
                      {"tls", false},
                      {"admissions_per_s", base.limiter.admissionsPerS()},
                      {"redis_roundtrip_fraction", base.roundtrip_fraction},
                      {"naive_admissions_per_s", base.naive_per_s}};
  json["fleet_vs_baseline"] = vs_base;
  json["rounds"] = rounds;
  std::optional<FailoverTiming> failover;
  if (chosen && topology != "single") {
    auto timed = measureFailover(*chosen);
    if (auto* why = std::get_if<std::string>(&timed)) return ScenarioError{"failover: " + *why};
    failover = std::get<FailoverTiming>(timed);
    json["failover"] = {
        {"failover_s", failover->failover_s},
        {"resume_s", failover->resume_s},
        {"resume_over_failover",
         failover->failover_s > 0 ? failover->resume_s / failover->failover_s : 0.0}};
  }

  char line[256];
  std::string table = "fleet limits: limiter admissions per second (" + std::to_string(kTenants) +
                      " tenants; " + target.describe() + " on loopback)\n";
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
  if (chosen) {
    std::snprintf(line, sizeof line,
                  "baseline (single server, plain, same run): %.0f admissions/s (%.1f%% of "
                  "decisions admitted, %.4f%% round trips), naive %.0f/s; %s / baseline = %.3fx "
                  "(medians of %d interleaved rounds)\n",
                  base.limiter.admissionsPerS(),
                  100.0 * static_cast<double>(base.limiter.admitted) /
                      static_cast<double>(std::max<std::uint64_t>(1, base.limiter.decisions)),
                  base.roundtrip_fraction * 100, base.naive_per_s, target.describe().c_str(),
                  vs_base, rounds);
    table += line;
  }
  if (failover) {
    std::snprintf(line, sizeof line,
                  "failover: master killed; the topology promoted a replica after %.2f s, leases "
                  "granted again after %.2f s (%.2fx)\n",
                  failover->failover_s, failover->resume_s,
                  failover->resume_s / std::max(1e-9, failover->failover_s));
    table += line;
  }
  table += "targets (from the issues; a MISS does not fail the run)\n";
  std::snprintf(line, sizeof line, "  fleet >= 1M admissions/s: %s; round trips <= 1%%: %s\n",
                fleet_t.admissionsPerS() >= 1e6 ? "ok" : "MISS", fraction <= 0.01 ? "ok" : "MISS");
  table += line;
  if (chosen) {
    std::snprintf(line, sizeof line,
                  "  within 10%% of single plain Redis: %s; round trips <= 0.2%%: %s\n",
                  vs_base >= 0.9 ? "ok" : "MISS", fraction <= 0.002 ? "ok" : "MISS");
    table += line;
  }
  if (failover) {
    std::snprintf(line, sizeof line, "  resume <= 2x the failover: %s\n",
                  failover->resume_s <= 2 * failover->failover_s ? "ok" : "MISS");
    table += line;
  }

  ScenarioReport report;
  report.json = std::move(json);
  report.table = std::move(table);
  return report;
}

}  // namespace fairsched::bench
