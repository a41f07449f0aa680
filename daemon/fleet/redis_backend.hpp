// LeaseBackend on Redis: one server, a Redis Cluster, or a master found
// through Sentinel; plain or TLS, with AUTH (RedisConnection).
//
// Why synchronous: every call is made from FleetLimiter's single background
// thread, never from the event loop, so blocking for at most the command
// timeout there costs the loop nothing, and a blocking call with a timeout is
// far simpler to make correct (reconnects, redirections, script reloads)
// than an async client driven by a second event loop. One connection per
// node; after a failure the connection is dropped and the next call
// reconnects — the pacing of those attempts (backoff with jitter) is the
// circuit breaker's job, so this class retries on its own only what a
// topology answers with: NOSCRIPT (load the script), MOVED (follow, then
// fetch the slot map again), ASK (ASKING on the target, map unchanged),
// TRYAGAIN and CLUSTERDOWN (a short bounded pause), READONLY (the master
// became a replica: ask the sentinels or the cluster again). A connection
// that fails marks the map (the master) stale, so the next call asks again
// and a failover is picked up.
//
// The Redis side. One hash per limit: key "<prefix>:{<tenant>}:<endpoint>:
// <unit>/<window>" (the hash tag puts all of a tenant's limits in one Cluster
// slot; every call touches exactly one key). Field = sub-bucket index
// (Redis server time in µs / bucket width, width = ceil(window / 15)),
// value = cost granted in that bucket, net of returns. One Lua script per
// call, run with EVALSHA (SCRIPT LOAD and retry on NOSCRIPT, e.g. after a
// Redis restart):
//   1. apply returns: decrement their buckets (never below 0; buckets that
//      already left the window are ignored);
//   2. drop buckets that left the window; sum the rest: a bucket counts while
//      any part of it may lie inside (now - window, now], so the sum is never
//      less than what was granted in the window;
//   3. grant min(want, limit - used) if that is at least `min`, counted in
//      the current bucket; else grant 0 and report when `min` fits;
//   4. PEXPIRE the hash a bit past the window, so an idle limit (or one of a
//      daemon that died) disappears by itself.
// Hence what was granted in any window never exceeds the limit, at Redis's
// clock, whatever the daemons do.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/fleet/lease_backend.hpp"
#include "daemon/fleet/redis_connection.hpp"
#include "daemon/fleet/redis_topology.hpp"

namespace fairsched::fleet {

// One plain server, the simple case (tests, benchmarks).
struct RedisEndpoint {
  std::string host;  // TCP, with port; empty when unix_path is set
  std::uint16_t port = 6379;
  std::string unix_path;
  std::chrono::milliseconds connect_timeout{100};
  std::chrono::milliseconds command_timeout{50};
};

struct RedisBackendOptions {
  config::FleetMode mode = config::FleetMode::kSingle;
  std::vector<config::RedisAddress> nodes;  // the server, the cluster's seeds or the sentinels
  std::string master_name;                  // sentinel
  ConnectOptions data;                      // to the servers that hold the data
  ConnectOptions sentinel;                  // to the sentinels

  static RedisBackendOptions from(const RedisEndpoint& endpoint);
};

// The options [fleet] describes, or why they cannot be used (a TLS file
// OpenSSL rejects).
std::variant<RedisBackendOptions, std::string> backendOptionsFrom(const config::FleetConfig& cfg);

class RedisBackend final : public LeaseBackend {
 public:
  explicit RedisBackend(RedisBackendOptions options);
  explicit RedisBackend(const RedisEndpoint& endpoint)
      : RedisBackend(RedisBackendOptions::from(endpoint)) {}
  ~RedisBackend() override;
  RedisBackend(const RedisBackend&) = delete;
  RedisBackend& operator=(const RedisBackend&) = delete;

  LeaseResult call(const LeaseCall& c) override;
  // One pipeline per server, all servers' in flight at once; a reply that
  // is a redirection (or NOSCRIPT, TRYAGAIN...) is retried alone by call().
  std::vector<LeaseResult> callBatch(std::span<const LeaseCall> calls) override;
  void disconnect() override;
  std::uint64_t roundTrips() const override;
  BackendTopology topology() const override;
  std::uint64_t topologyVersion() const override { return topo_.version; }
  std::optional<BackendFailure> probe() override;

  // The Lua script (for tests that run it by hand).
  static const char* script();

 private:
  struct Conn {
    std::unique_ptr<RedisConnection> link;
    bool script_loaded = false;
  };
  using Target = std::variant<config::RedisAddress, BackendFailure>;

  // The server for `slot`; asks the cluster (the sentinels) again when the
  // map (master) is stale and `may_ask`: a batch asks once, not per call.
  Target route(std::uint16_t slot, bool may_ask = true);
  std::variant<Conn*, BackendFailure> connection(const config::RedisAddress& at);
  void lost(const config::RedisAddress& at);
  std::optional<BackendFailure> refreshSlots();
  std::optional<BackendFailure> discoverMaster();
  void followMoved(const Redirect& r);
  void changed() { topo_.version++; }
  RedisCommand evalCommand(const LeaseCall& c) const;

  RedisBackendOptions o_;
  std::string sha_;                    // SHA-1 of script(): EVALSHA's name for it
  std::map<std::string, Conn> conns_;  // by address
  config::FleetMode mode_;             // kSingle becomes kCluster on a MOVED
  SlotMap slots_;
  bool slots_stale_ = true;
  std::optional<config::RedisAddress> master_;  // single and sentinel
  bool master_stale_ = true;
  std::uint64_t closed_round_trips_ = 0;  // of connections since dropped
  BackendTopology topo_;                  // counters; nodes filled by topology()
};

// "<prefix>:{<tenant>}:<endpoint>:requests/60s"
std::string limitKey(std::string_view prefix, std::string_view tenant, std::string_view endpoint,
                     const core::LimitSpec& spec);

}  // namespace fairsched::fleet
