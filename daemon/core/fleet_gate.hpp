// The core's one hook for limits counted across a fleet of daemons
// (`scope = "fleet"`). The core stays pure: it only calls these interfaces on
// its own thread; an implementation (daemon/fleet/fleet_limiter.hpp) answers
// from state it holds locally and talks to the shared backend elsewhere.
//
// Contract of an implementation:
// - take() and refund() never block on I/O: they decide from what is held
//   locally (leases of the fleet-wide budget) and at most queue work for a
//   background thread.
// - A rejected take() says when to retry (retry_after > 0; kNever is not used:
//   a cost larger than the limit is rejected by the core before it asks).
// - refund() gives back part of an earlier take of this account; the fleet's
//   count goes down by at most that amount and never for a different window.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "daemon/core/limit_spec.hpp"
#include "daemon/core/types.hpp"

namespace fairsched::core {

struct FleetDecision {
  bool admitted = false;
  TimeNs retry_after = 0;  // when rejected: > 0
};

// One fleet-scoped limit of one (tenant, endpoint) in this daemon. Owned by
// the core's KeyLimiter; destroyed when the tenant's state is dropped (unused
// budget then goes back to the fleet).
class FleetAccount {
 public:
  virtual ~FleetAccount() = default;
  virtual FleetDecision take(std::uint64_t cost, TimeNs now) = 0;
  // `cost` of a take made at `taken_at` was not used (a token refund, or a
  // take undone because another limit rejected the request).
  virtual void refund(std::uint64_t cost, TimeNs taken_at) = 0;
};

class FleetGate {
 public:
  virtual ~FleetGate() = default;
  // The account of `spec` (scope kFleet, amount > 0) for (tenant, endpoint).
  // Called from the core's thread when a tenant's state is created.
  virtual std::unique_ptr<FleetAccount> open(std::string_view tenant, std::string_view endpoint,
                                             const LimitSpec& spec) = 0;
};

}  // namespace fairsched::core
