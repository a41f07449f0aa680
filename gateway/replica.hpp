// One upstream (an engine replica) as the gateway runs it: its config, its
// keep-alive connections (a pool per gateway thread), its health, and its
// own worker connection to fairschedd — so the daemon's roomiest-worker
// choice balances the replicas — with what runs on it. Owned by the daemon
// bridge through shared_ptr: an exchange keeps the replicas it uses alive,
// so one removed by a reload drains and goes only when nothing uses it.
//
// Threads: `cfg` is written on the bridge's thread (a reload) under the
// bridge's lock; the bridge's thread reads it freely, others under the
// lock (the relay reads its pool's copy instead). The counts, health,
// capacity and worker are the bridge's, under its lock; `worker_fd`, `kick`
// and `scrape` belong to the bridge's thread; `pools[i]` to thread i;
// `tenant_calls` has its own lock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/posix/stream_descriptor.hpp>

#include "fairsched/worker.hpp"
#include "gateway/auto_capacity.hpp"
#include "gateway/coro.hpp"
#include "gateway/gateway_config.hpp"
#include "gateway/upstream_call.hpp"
#include "gateway/upstream_health.hpp"

namespace fairsched::gateway {

inline UpstreamHealth::Policy healthPolicy(const UpstreamConfig& u) {
  UpstreamHealth::Policy p;
  p.eject_after = u.eject_after_failures;
  p.backoff_min = static_cast<TimeNs>(u.eject_ms) * 1'000'000;
  p.backoff_max = static_cast<TimeNs>(u.eject_max_ms) * 1'000'000;
  p.checks = !u.health_path.empty();
  return p;
}

inline AutoCapacity::Policy capacityPolicy(const UpstreamConfig& u) {
  AutoCapacity::Policy p;
  p.min = u.min_sequences;
  p.max = u.max_sequences;
  return p;
}

// The upstream's config as each of `threads` pools holds it: its keep-alive
// bound shared out among them.
inline UpstreamConfig poolConfig(UpstreamConfig u, std::size_t threads) {
  u.pool_connections = static_cast<std::uint32_t>((u.pool_connections + threads - 1) / threads);
  return u;
}

struct Replica {
  // `threads`: the gateway's io_contexts, the bridge's first.
  Replica(const std::vector<asio::io_context*>& threads, UpstreamConfig c)
      : cfg(std::move(c)),
        health(healthPolicy(cfg)),
        autocap(capacityPolicy(cfg)),
        kick(*threads.front()),
        scrape(*threads.front()) {
    for (asio::io_context* io : threads) {
      pools.push_back(std::make_unique<UpstreamPool>(*io, poolConfig(cfg, threads.size())));
    }
  }
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Each pool takes the config of a reload on its own thread.
  void setPoolConfigs() {
    for (const auto& p : pools) p->setConfig(poolConfig(cfg, pools.size()));
  }
  // A call of `tenant` opens on it: how many of the tenant's were open
  // before. callClosed() when it ends.
  std::uint32_t callOpened(const std::string& tenant) {
    const std::lock_guard lock(calls_mu);
    return tenant_calls[tenant]++;
  }
  void callClosed(const std::string& tenant) {
    const std::lock_guard lock(calls_mu);
    if (auto it = tenant_calls.find(tenant); it != tenant_calls.end() && --it->second == 0) {
      tenant_calls.erase(it);
    }
  }

  UpstreamConfig cfg;
  std::vector<std::unique_ptr<UpstreamPool>> pools;  // one per gateway thread
  UpstreamHealth health;
  AutoCapacity autocap;      // its limit applies under capacity = "auto"
  std::string scrape_error;  // the last failed metrics scrape ("" when it passed)
  std::optional<Worker> worker;
  std::optional<asio::posix::basic_stream_descriptor<Executor>> worker_fd;
  SteadyTimer kick;            // wakes its health loop (an ejection changes its next wake)
  SteadyTimer scrape;          // paces its metrics loop
  std::uint32_t running = 0;   // calls on it: assigned to its worker, or taken over from another
  std::uint64_t reserved = 0;  // their prompt + max output tokens
  // Calls of each tenant whose upstream call is open on it (engine_priority).
  std::mutex calls_mu;
  std::unordered_map<std::string, std::uint32_t> tenant_calls;
  std::optional<std::pair<std::uint32_t, std::uint64_t>> stated;  // the capacity last stated
  bool removed = false;   // gone from the config: states no capacity, drains
  bool detached = false;  // drained and detached: its loops end

  // The requests it may run at once: max_sequences, or what the engine's
  // metrics allow.
  std::uint32_t maxSequences() const {
    return cfg.capacity_auto ? autocap.limit() : cfg.max_sequences;
  }
};

}  // namespace fairsched::gateway
