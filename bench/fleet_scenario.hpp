// The `fleet` scenario: admission decisions per second of one daemon's
// limiter layer (core::KeyLimiter, driven directly, no daemon) with
//   host  — the limit counted in-process (the sliding window),
//   fleet — the same limit with scope = "fleet": a FleetLimiter spending
//           leases taken from a live redis-server on loopback,
//   naive — one Redis round trip (the lease script with lease = 1) per
//           admission, made synchronously: the design leases replace,
// all in one run, against a redis-server the scenario starts itself. Plus the
// fraction of fleet admissions that needed a round trip, and the largest
// overshoot seen when two limiters ("daemons") share a binding fleet limit
// (admitted in any window minus the limit; the documented bound is
// 2 x daemons x lease).
//
// JSON: {"host":{"admissions_per_s":..},"fleet":{"admissions_per_s":..,
// "redis_roundtrip_fraction":..,"max_overshoot":..},"naive":{"admissions_per_s":..}}
// with a few extra fields (lease, bound, counts).
#pragma once

#include "bench/scenario.hpp"

namespace fairsched::bench {

ScenarioResult runFleetScenario(const ScenarioOptions& options);

}  // namespace fairsched::bench
