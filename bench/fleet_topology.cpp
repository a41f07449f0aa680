#include "bench/fleet_topology.hpp"

#include <atomic>
#include <chrono>
#include <thread>

#include "daemon/env.hpp"
#include "daemon/fleet/fleet_limiter.hpp"
#include "daemon/fleet/redis_topology.hpp"

namespace fairsched::bench {
namespace {

using Clock = std::chrono::steady_clock;

config::RedisAddress local(std::uint16_t port) {
  config::RedisAddress a;
  a.host = "127.0.0.1";
  a.port = port;
  return a;
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

fleet::RedisBackendOptions FleetTarget::backendOptions() const {
  fleet::RedisBackendOptions o;
  o.data.connect_timeout = std::chrono::milliseconds(100);
  o.data.command_timeout = std::chrono::milliseconds(50);
  if (tls) {
    config::FleetTlsConfig t;
    t.ca_file = files->caCert();
    auto ctx = fleet::TlsContext::make(t);
    if (auto* made = std::get_if<std::shared_ptr<fleet::TlsContext>>(&ctx)) o.data.tls = *made;
  }
  o.sentinel = o.data;
  if (cluster) {
    o.mode = config::FleetMode::kCluster;
    for (const std::uint16_t p : cluster->masterPorts()) o.nodes.push_back(local(p));
  } else if (sentinels) {
    o.mode = config::FleetMode::kSentinel;
    o.master_name = sentinels->masterName();
    for (const std::uint16_t p : sentinels->sentinelPorts()) o.nodes.push_back(local(p));
  } else {
    o.nodes.push_back(local(single->port()));
  }
  return o;
}

std::string FleetTarget::describe() const {
  std::string out = cluster     ? "cluster (3 masters, 3 replicas)"
                    : sentinels ? "sentinel (master, replica, 3 sentinels)"
                                : "single server";
  return out + (tls ? ", TLS" : ", plain");
}

std::variant<std::unique_ptr<FleetTarget>, std::string> startFleetTarget(
    const std::string& topology, bool tls) {
  auto t = std::make_unique<FleetTarget>();
  t->topology = topology;
  t->tls = tls;
  if (tls) {
    auto files = testing::TlsFiles::make();
    if (auto* why = std::get_if<std::string>(&files)) return "no TLS files: " + *why;
    t->files = std::move(std::get<std::unique_ptr<testing::TlsFiles>>(files));
  }
  if (topology == "single") {
    testing::RedisServerOptions o;
    o.tls = t->files.get();
    auto s = testing::RedisServer::start(o);
    if (auto* why = std::get_if<std::string>(&s)) return "cannot start a redis-server: " + *why;
    t->single = std::move(std::get<std::unique_ptr<testing::RedisServer>>(s));
  } else if (topology == "cluster") {
    testing::RedisClusterOptions o;
    o.tls = t->files.get();
    auto c = testing::RedisClusterServers::start(o);
    if (auto* why = std::get_if<std::string>(&c)) return "cannot start a Redis Cluster: " + *why;
    t->cluster = std::move(std::get<std::unique_ptr<testing::RedisClusterServers>>(c));
  } else if (topology == "sentinel") {
    testing::RedisSentinelOptions o;
    o.tls = t->files.get();
    auto s = testing::RedisSentinelServers::start(o);
    if (auto* why = std::get_if<std::string>(&s)) return "cannot start Redis Sentinel: " + *why;
    t->sentinels = std::move(std::get<std::unique_ptr<testing::RedisSentinelServers>>(s));
  } else {
    return "unknown topology '" + topology + "' (single, cluster or sentinel)";
  }
  return t;
}

std::variant<FailoverTiming, std::string> measureFailover(FleetTarget& target) {
  if (!target.cluster && !target.sentinels) return std::string("a single server has no failover");
  FailoverTiming out;
  const std::string tenant = "failover";
  std::uint16_t victim = 0;
  if (target.cluster) {
    const auto owner = target.cluster->ownerOfSlot(fleet::keySlot("{" + tenant + "}"));
    if (!owner) return std::string("no node serves the tenant's slot");
    victim = *owner;
  } else {
    const auto master = target.sentinels->masterPort();
    if (!master) return std::string("the sentinels name no master");
    victim = *master;
  }

  fleet::FleetOptions fo;
  fo.key_prefix = "bench-failover";
  fo.lease = 20;
  fo.on_backend_error = config::FleetErrorPolicy::kFailClosed;
  fleet::FleetLimiter limiter(fo, std::make_unique<fleet::RedisBackend>(target.backendOptions()));
  limiter.start();
  out.limit = 1'000'000'000;
  const core::LimitSpec spec{core::LimitUnit::kRequests, out.limit, 3600 * kNsPerSec,
                             core::LimitScope::kFleet};
  auto account = limiter.open(tenant, "chat", spec);
  auto take = [&] {
    const TimeNs now = daemon::monotonicNow();
    if (account->take(1, now).admitted) out.admitted++;
  };
  // Warm: leases flowing.
  const auto warm = Clock::now();
  while (limiter.stats().pools.grants < 3 && since(warm) < 10) {
    take();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  out.admitted_before = out.admitted;
  const std::uint64_t grants_before = limiter.stats().pools.grants;
  const std::uint64_t failures_before = limiter.stats().backend_failures;

  const auto killed = Clock::now();
  if (target.cluster) {
    target.cluster->kill(victim);
  } else {
    target.sentinels->kill(victim);
  }
  // The topology's own failover, watched from a second thread.
  std::atomic<double> failover{-1};
  std::thread watch([&] {
    const int slot = fleet::keySlot("{" + tenant + "}");
    while (since(killed) < 60) {
      bool moved = false;
      if (target.cluster) {
        const auto owner = target.cluster->ownerOfSlot(slot);
        moved = owner && *owner != victim;
      } else {
        const auto master = target.sentinels->masterPort();
        moved = master && *master != victim;
      }
      if (moved) {
        failover = since(killed);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  // Resumed: a lease granted after the backend failed at least once.
  double resumed = -1;
  while (since(killed) < 60) {
    take();
    const fleet::FleetStats s = limiter.stats();
    if (s.backend_failures > failures_before && s.pools.grants > grants_before + 1) {
      resumed = since(killed);
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  watch.join();
  account.reset();
  limiter.stop();
  if (failover < 0) return std::string("the topology did not fail over within 60 s");
  if (resumed < 0) return std::string("no lease was granted within 60 s of the kill");
  out.failover_s = failover;
  out.resume_s = resumed;
  return out;
}

}  // namespace fairsched::bench
