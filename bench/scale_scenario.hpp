// `scale`: what the daemon's work per request costs as clients and tenants
// grow (issue 16). For each cell of processes × open tenants — 1, 8 and 64
// client processes, 10 and 10,000 tenants — one forked fairschedd (zero-time
// CPU executor running inline, max_wait_us = 0, busy_poll_us = 0 so that it
// sleeps as soon as it has nothing to do and its CPU time is its work) serves
// a steady open-loop load: one fixed total rate for every cell, split evenly
// over the processes, each sending on a schedule of absolute times to its
// tenants in turn (4-token prompt, 1 output token) and sleeping on its
// completion descriptors between sends. A process opens its share of the
// tenants (at least one: a cell has max(tenants, processes) of them) on as
// many connections as it takes — the daemon gives a connection 8 rings — so
// 10,000 tenants are about 1,250 connections.
//
// Measured per cell, after an unmeasured warm-up: the daemon's CPU time (all
// its threads, /proc/PID/task/*/schedstat) per completed request and its
// ratio to the 1 process × 10 tenants cell, the round trip submit ->
// completion (p50, p99, max), and what was lost (submitted minus completions
// of any status). Then, in this process, the cost of one daemon-side pass
// over a ready bitmap (ReadyBitmap::takeEach) of 10 and 10,000 rings, empty
// and with one bit set. Target: daemon CPU per request at 64 × 10,000 at most
// 2× that at 1 × 10 — reported, not asserted; anything lost fails the run.
//
// JSON: {"scenario":"scale","cells":[{"processes":..,"tenants":..,
// "offered_per_s":..,"completed_per_s":..,"daemon_cpu_ns_per_request":..,
// "vs_base":..,"rtt":{"p50_us":..,"p99_us":..,"max_us":..},"submitted":..,
// "completed":..,"lost":..,"not_ok":..,"ring_full":..}],"bitmap_scan":[{"rings":..,
// "words":..,"bits_set":..,"ns_per_pass":..,"ns_per_ring":..}],"target":{..}}
#pragma once

#include <chrono>
#include <vector>

#include "bench/scenario.hpp"

namespace fairsched::bench {

struct ScaleSettings {
  std::vector<int> processes{1, 8, 64};
  std::vector<int> tenants{10, 10'000};
  double rate_per_s = 0;  // offered load of every cell, all processes together
  std::chrono::milliseconds warmup{0};
  std::chrono::milliseconds measured{0};
  std::chrono::milliseconds scan_budget{0};  // time spent on each bitmap measurement
};

// The grid and durations of a full run, or of --quick.
ScaleSettings scaleSettings(const ScenarioOptions& options);

// Runs every cell of `settings`, then the bitmap measurements. Fails when a
// request is lost, a process fails or the daemon does not stop cleanly.
ScenarioResult runScale(const ScaleSettings& settings);

ScenarioResult runScaleScenario(const ScenarioOptions& options);

}  // namespace fairsched::bench
