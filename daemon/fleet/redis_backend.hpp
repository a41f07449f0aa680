// LeaseBackend on Redis (standalone or Cluster), through hiredis's
// synchronous API with timeouts.
//
// Why synchronous: every call is made from FleetLimiter's single background
// thread, never from the event loop, so blocking for at most the command
// timeout there costs the loop nothing, and a blocking call with a timeout is
// far simpler to make correct (reconnects, script reloads, partial replies)
// than hiredis's async API driven by a second event loop. One connection per
// daemon; after a failure the connection is dropped and the next call
// reconnects — the pacing of those attempts (backoff with jitter) is the
// circuit breaker's job, so this class never retries on its own except for
// the NOSCRIPT reload.
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
#include <string>

#include "daemon/fleet/lease_backend.hpp"

struct redisContext;

namespace fairsched::fleet {

struct RedisEndpoint {
  std::string host;  // TCP, with port; empty when unix_path is set
  std::uint16_t port = 6379;
  std::string unix_path;
  std::chrono::milliseconds connect_timeout{100};
  std::chrono::milliseconds command_timeout{50};
};

class RedisBackend final : public LeaseBackend {
 public:
  explicit RedisBackend(RedisEndpoint endpoint);
  ~RedisBackend() override;
  RedisBackend(const RedisBackend&) = delete;
  RedisBackend& operator=(const RedisBackend&) = delete;

  LeaseResult call(const LeaseCall& c) override;
  void disconnect() override;
  std::uint64_t roundTrips() const override { return round_trips_; }

  // The Lua script (for tests that run it by hand).
  static const char* script();

 private:
  std::optional<BackendFailure> connect();

  RedisEndpoint endpoint_;
  redisContext* ctx_ = nullptr;
  std::string sha_;  // of script(), once loaded
  std::uint64_t round_trips_ = 0;
};

// "<prefix>:{<tenant>}:<endpoint>:requests/60s"
std::string limitKey(std::string_view prefix, std::string_view tenant, std::string_view endpoint,
                     const core::LimitSpec& spec);

}  // namespace fairsched::fleet
