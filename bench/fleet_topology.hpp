// The Redis the `fleet` scenario runs against, started by the scenario on
// loopback: one server, a Cluster (3 masters, 3 replicas) or a master with a
// replica behind 3 sentinels, plain or TLS (certificates made for the run).
// Plus the failover measurement: a master killed under load, how long the
// topology takes to promote a replica, and how long until a FleetLimiter is
// granted leases again.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "daemon/fleet/redis_backend.hpp"
#include "tests/support/redis_cluster.hpp"
#include "tests/support/redis_sentinel.hpp"
#include "tests/support/redis_server.hpp"
#include "tests/support/tls_files.hpp"

namespace fairsched::bench {

struct FleetTarget {
  std::string topology;  // "single", "cluster" or "sentinel"
  bool tls = false;
  std::unique_ptr<testing::TlsFiles> files;  // declared first: the servers use them
  std::unique_ptr<testing::RedisServer> single;
  std::unique_ptr<testing::RedisClusterServers> cluster;
  std::unique_ptr<testing::RedisSentinelServers> sentinels;

  // How a RedisBackend reaches it (every node a seed; verification on).
  fleet::RedisBackendOptions backendOptions() const;
  // "cluster (3 masters, 3 replicas), TLS".
  std::string describe() const;
};

// `topology`: single, cluster or sentinel.
std::variant<std::unique_ptr<FleetTarget>, std::string> startFleetTarget(
    const std::string& topology, bool tls);

struct FailoverTiming {
  double failover_s = 0;  // the kill until the topology names a new master
  double resume_s = 0;    // the kill until the limiter is granted a lease again
  std::uint64_t admitted_before = 0;
  std::uint64_t limit = 0;  // of the limit driven; admitted over the run stays within it + slack
  std::uint64_t admitted = 0;
};

// Cluster or sentinel only: a FleetLimiter takes cost 1 every 0.2 ms from a
// tenant on the master that is then SIGKILLed. nullopt-like error string when
// the topology does not fail over within 60 s.
std::variant<FailoverTiming, std::string> measureFailover(FleetTarget& target);

}  // namespace fairsched::bench
