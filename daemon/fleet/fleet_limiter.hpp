// FleetLimiter: the core's FleetGate for `scope = "fleet"` limits, backed by
// a LeaseBackend (Redis in the daemon).
//
// Threads. take()/refund() of the accounts run on the event loop (the
// core's thread): they spend leases held locally (LeasePool, under a mutex
// per limit that the background thread holds only for the moment it installs
// a grant or collects returns) and never wait for the backend. When a pool
// runs low it is queued for the one background thread, which makes the
// backend calls — one atomic script per call, one connection per daemon —
// through the circuit breaker. So there is exactly one extra thread and one
// connection whatever the backend does, and a dead backend costs the loop
// nothing.
//
// Guarantee (breaker closed): across all daemons sharing the backend, the
// cost admitted under a fleet limit in any window of its length is at most
//   amount + sum over daemons of the lease remainders they hold at the
//   window's start  <=  amount + 2 * daemons * max(lease, largest request cost)
// (each daemon holds at most a current and a next lease per limit). See
// docs/operations.md, "Fleet limits", for the derivation and the policies.
//
// While the breaker is not closed ("degraded"), leases already held are still
// spent; beyond them on_backend_error decides: fail_open admits (fleet limit
// not enforced), fail_closed rejects RATE_LIMITED until the next probe,
// local_share enforces amount / hosts locally in a sliding window.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/core/fleet_gate.hpp"
#include "daemon/core/sliding_window.hpp"
#include "daemon/env.hpp"
#include "daemon/fleet/circuit_breaker.hpp"
#include "daemon/fleet/lease_backend.hpp"
#include "daemon/fleet/lease_pool.hpp"

namespace fairsched::fleet {

struct FleetOptions {
  std::string key_prefix = "fairsched";
  std::uint64_t lease = 0;  // cost units per lease; 0 = auto: max(1, amount / (100 * hosts))
  std::uint32_t hosts = 1;
  config::FleetErrorPolicy on_backend_error = config::FleetErrorPolicy::kLocalShare;
  BreakerOptions breaker;
  std::uint64_t seed = 1;  // breaker jitter
  // How often idle limits are released and expired leases returned.
  TimeNs sweep_interval = 100 * kNsPerMs;
  // Most time stop() spends giving leases back.
  TimeNs shutdown_budget = 1 * kNsPerSec;
};

FleetOptions fleetOptionsFrom(const config::FleetConfig& cfg);

// What operators and the metrics code read (a consistent-enough snapshot:
// each number is exact, they are not taken at one instant).
struct FleetStats {
  std::size_t limits = 0;               // (tenant, endpoint, limit) keys open in this daemon
  std::uint64_t leases_held = 0;        // cost units held locally, over all limits
  LeasePoolCounters pools;              // summed over the open limits (closed ones are gone)
  std::uint64_t degraded_admitted = 0;  // fail_open / local_share admissions past the leases
  std::uint64_t degraded_rejected = 0;  // fail_closed / local_share rejections past the leases
  std::uint64_t backend_calls = 0;      // lease script calls made (incl. failed ones)
  std::uint64_t round_trips = 0;        // commands on the wire (script reloads included)
  std::uint64_t backend_failures = 0;
  BreakerState breaker = BreakerState::kClosed;
  BreakerCounters breaker_counters;
  bool degraded = false;
  BackendTopology topology;  // where the data lives (Redis: the nodes and their slots)
  std::string last_error;    // the last failure ("" after a success); never holds a secret
};

class FleetLimiter final : public core::FleetGate {
 public:
  // `env`: the clock (the core's `now`, read from the background thread too);
  // it outlives the limiter.
  FleetLimiter(FleetOptions options, std::unique_ptr<LeaseBackend> backend,
               const daemon::Env& env = daemon::Env::real());
  ~FleetLimiter() override;  // stop()
  FleetLimiter(const FleetLimiter&) = delete;
  FleetLimiter& operator=(const FleetLimiter&) = delete;

  // Starts the background thread. Accounts may be opened before.
  void start();
  // Stops the background thread, then gives every lease held back to the
  // backend (within shutdown_budget, when it is reachable). Idempotent.
  // Accounts must not be used after stop() (they may still be destroyed).
  void stop();

  // Core thread. REQUIRES: spec.scope == kFleet, spec.amount > 0.
  std::unique_ptr<core::FleetAccount> open(std::string_view tenant, std::string_view endpoint,
                                           const core::LimitSpec& spec) override;

  FleetStats stats() const;
  bool degraded() const { return degraded_.load(std::memory_order_acquire); }
  // The lease size used for `spec`.
  std::uint64_t leaseFor(const core::LimitSpec& spec) const;

 private:
  struct Entry;
  class Account;
  friend class Account;
  using EntryPtr = std::shared_ptr<Entry>;

  core::FleetDecision take(const EntryPtr& e, std::uint64_t cost, TimeNs now);
  void refund(Entry& e, std::uint64_t cost, TimeNs taken_at, TimeNs now);
  core::FleetDecision degradedTake(Entry& e, std::uint64_t cost, TimeNs now);
  void run();
  // The backend calls `batch` needs, made at once (one round trip per
  // server); what failed or the breaker held back goes to `retry`.
  void serve(std::vector<EntryPtr>& batch, std::vector<EntryPtr>& retry);
  void sweep(std::vector<EntryPtr>& retry);
  void publish(bool transition);

  FleetOptions options_;
  std::unique_ptr<LeaseBackend> backend_;  // background thread only (and stop() after the join)
  const daemon::Env& env_;
  CircuitBreaker breaker_;  // background thread only
  TimeNs outage_since_ =
      kNever;  // background thread only: when the breaker last opened from closed

  mutable std::mutex registry_mu_;
  std::unordered_map<std::string, EntryPtr> entries_;  // guarded by registry_mu_
  // Entries a reload replaced (same key, another amount): released by the
  // sweep once their last account is gone. Guarded by registry_mu_.
  std::vector<EntryPtr> replaced_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::vector<EntryPtr> work_;  // guarded by queue_mu_
  bool stopping_ = false;       // guarded by queue_mu_
  std::thread thread_;
  bool stopped_ = false;  // stop() ran; owner thread only

  // Written by the background thread, read by the loop: whether the breaker
  // is not closed, and when the next probe may go out. Release/acquire: a
  // loop that sees degraded_ also sees the probe time stored before it.
  std::atomic<bool> degraded_{false};
  std::atomic<TimeNs> probe_at_{0};
  TimeNs retry_not_before_ = 0;  // background thread only: after a failed call
  std::atomic<std::uint64_t> degraded_admitted_{0};
  std::atomic<std::uint64_t> degraded_rejected_{0};

  mutable std::mutex stats_mu_;  // guards the snapshot below
  BreakerState breaker_state_ = BreakerState::kClosed;
  BreakerCounters breaker_counters_;
  std::uint64_t backend_calls_ = 0;
  std::uint64_t round_trips_ = 0;
  std::uint64_t backend_failures_ = 0;
  std::uint64_t topology_version_ = ~std::uint64_t{0};
  BackendTopology topology_;
  std::string last_error_;
};

// A FleetLimiter on the Redis of `cfg` (not started), or why none can be
// made (a TLS file OpenSSL rejects).
std::variant<std::unique_ptr<FleetLimiter>, std::string> makeFleetLimiter(
    const config::FleetConfig& cfg);

}  // namespace fairsched::fleet
