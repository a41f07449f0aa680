// Prometheus metrics of fairschedd: per tenant and endpoint request counters,
// gauges and latency histograms, plus daemon-wide counters, served on
// `[metrics] listen` by prometheus-cpp's HTTP exposer (docs/operations.md,
// "Metrics", lists every metric and what to alert on).
//
// Threads. Everything except collect() runs on the event loop thread. The
// loop's per-request calls (admitted, rejected, completed, ended) touch only
// plain integers in arrays indexed by a series number: no lock, no atomic, no
// hash lookup, no allocation. publish() — from tick(), at most once per
// kPublishInterval — copies what changed since the last publish, plus the
// gauges read from the Scheduler, into a snapshot under a mutex
// (metrics_snapshot.hpp: it holds the ServerStats and FleetStats whole); a
// loop about to sleep wakes for publishDueAt() when something is still
// unpublished. A scrape (an exposer thread) renders that snapshot under the
// same mutex (metrics_render.cpp). So a scrape sees the state of the last
// publish, at most about kPublishInterval old, busy or idle. (A new unlisted
// tenant's label is the one allocation, once per label, in tenantOpened.)
//
// Label cardinality. The `tenant` label takes one value per series: each
// tenant listed in the config, then the first `max_tenant_series` unlisted
// tenants seen (first come; a tenant keeps its label until a reload remaps
// the labels or the daemon restarts, so its counters never reset under a
// running Prometheus), then `__other__` for every further unlisted tenant.
// With L listed tenants and E endpoints there are at most
// (L + max_tenant_series + 1) × (E + 1) label sets per family, whatever the
// number of tenants (the + 1 endpoint is `__unknown__`, for requests naming
// an endpoint id the daemon does not have).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/core/types.hpp"
#include "daemon/error.hpp"
#include "daemon/server/server_stats.hpp"

namespace prometheus {
class Exposer;
struct MetricFamily;
}  // namespace prometheus

namespace fairsched::core {
class Scheduler;
}

namespace fairsched::fleet {
class FleetLimiter;
}

namespace fairsched::daemon {

struct MetricsSnapshot;  // metrics_snapshot.hpp

// Bucket upper bounds of the latency histograms, in seconds (+Inf implied).
inline constexpr double kLatencyBuckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                             0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                             1.0,    2.5,     5.0,    10.0};
inline constexpr std::size_t kLatencyBucketCount = std::size(kLatencyBuckets) + 1;
inline constexpr std::size_t kStatusCount = static_cast<std::size_t>(Status::kSlowConsumer) + 1;
inline constexpr std::string_view kOtherTenant = "__other__";
inline constexpr std::string_view kUnknownEndpoint = "__unknown__";
inline constexpr TimeNs kPublishInterval = kNsPerSec;

// A fixed-bucket latency histogram: observe() is a short scan over integer
// bounds and two additions.
struct LatencyHistogram {
  std::uint64_t buckets[kLatencyBucketCount] = {};  // not cumulative
  std::uint64_t count = 0;
  std::uint64_t sum_ns = 0;
  void observe(TimeNs ns);
  LatencyHistogram& operator+=(const LatencyHistogram& o);
};

// Counters of one (tenant series, endpoint). Monotonic, never reset.
struct SeriesCounters {
  std::uint64_t admitted = 0;
  std::uint64_t rejected[kStatusCount] = {};   // by the rejection's status
  std::uint64_t completed[kStatusCount] = {};  // admitted requests, by final status
  std::uint64_t tokens_served = 0;             // input + actual output of requests that ran
  LatencyHistogram queue_wait;                 // admission -> dispatch
  LatencyHistogram service;                    // dispatch -> batch done
  LatencyHistogram end_to_end;                 // admission -> completion
  std::uint64_t tokens_streamed = 0;           // output tokens workers reported (worker endpoints)
  LatencyHistogram ttft;                       // dispatch -> first token (worker endpoints)
  std::uint64_t submitted() const;             // admitted + every rejection
  SeriesCounters& operator+=(const SeriesCounters& o);
};

// Gauges of one (tenant series, endpoint), read from the Scheduler at publish.
struct SeriesGauges {
  std::uint64_t queued = 0;
  std::uint64_t in_flight = 0;
  std::int64_t deficit = 0;
  bool has_deficit = false;  // only for series naming one tenant
};

class Metrics {
 public:
  // Starts the HTTP endpoint on cfg.metrics.listen, or none when it is empty
  // (tests read collect()). REQUIRES: `sched` was built from `cfg`. The error
  // (kSystem) names the address and why it could not be bound.
  static Result<std::unique_ptr<Metrics>> create(const config::Config& cfg,
                                                 const core::Scheduler& sched);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The port the endpoint listens on (useful with port 0); 0 without one.
  int port() const { return port_; }

  // --- loop thread ---------------------------------------------------------
  // Tenant `t` was acquired under `name` (a ring opened it): binds the id to
  // its series. REQUIRES: called on every acquire of an id that later appears
  // in the calls below, because the TenantTable reuses ids.
  void tenantOpened(TenantId t, std::string_view name);
  // The holder that tenantOpened() counted released `t`.
  void tenantClosed(TenantId t);

  void admitted(TenantId t, EndpointId e) {
    SeriesCounters& c = at(t, e);
    ++c.admitted;
  }
  void rejected(TenantId t, EndpointId e, Status why) {
    SeriesCounters& c = at(t, e);
    ++c.rejected[static_cast<std::size_t>(why)];
  }
  // An admitted request ran on an executor and ended `status`.
  void completed(TenantId t, EndpointId e, Status status, TimeNs admitted_at, TimeNs dispatched_at,
                 TimeNs now, std::uint64_t tokens);
  // A worker reported `n` output tokens of a request of (t, e).
  void tokensStreamed(TenantId t, EndpointId e, std::uint64_t n) { at(t, e).tokens_streamed += n; }
  // A request's first token came `ns` after its dispatch to a worker.
  void firstToken(TenantId t, EndpointId e, TimeNs ns) { at(t, e).ttft.observe(ns); }
  // An admitted request ended without running (expired, cancelled, shut down).
  void ended(TenantId t, EndpointId e, Status status) {
    SeriesCounters& c = at(t, e);
    ++c.completed[static_cast<std::size_t>(status)];
  }

  // Publish the fleet limiter's counters and breaker state too (null: none).
  // `fleet` must outlive this object; its stats() are read at each publish.
  void setFleet(const fleet::FleetLimiter* fleet) { fleet_ = fleet; }

  // Once per loop iteration: counts it and publishes when kPublishInterval
  // has passed since the last publish. `clients` = open connections.
  void tick(TimeNs now, const core::Scheduler& sched, const ServerStats& stats,
            std::size_t clients) {
    ++loop_iterations_;
    if (clients != last_clients_) changed_ = true;
    if (now >= next_publish_) publish(now, sched, stats, clients);
  }
  // When the loop must wake for the next publish: kNever when nothing
  // changed since the last one. A loop about to sleep arms a timer for it,
  // so what happened last is published within kPublishInterval.
  TimeNs publishDueAt() const { return changed_ ? next_publish_ : kNever; }
  // Copies what changed into the snapshot scrapes read, with fresh gauges.
  void publish(TimeNs now, const core::Scheduler& sched, const ServerStats& stats,
               std::size_t clients);

  // Reload: tenant labels from `cfg` (its listed tenants get a series of
  // their own; labelled unlisted tenants keep theirs while max_tenant_series
  // allows, in first-come order; the counts of series that lose their label
  // move into `__other__`, so every sum stays monotonic) and endpoints by
  // name (counters of a removed endpoint are dropped). Bound ids are rebound
  // through `sched.tenants()`. REQUIRES: `sched` now runs `cfg`; the listen
  // address is not changed by a reload.
  void remapTenants(const config::Config& cfg, const core::Scheduler& sched);

  // --- any thread ----------------------------------------------------------
  // The families of the last publish, as a scrape serves them.
  std::vector<prometheus::MetricFamily> collect() const;

 private:
  class Collector;
  static constexpr std::uint32_t kUnbound = UINT32_MAX;

  explicit Metrics(const config::Config& cfg);
  // Series of listed tenants, then of `keep` (while the budget lasts).
  void buildSeries(const config::Config& cfg, const std::vector<std::string>& keep);
  std::uint32_t seriesFor(std::string_view name);
  // Binds the ids of the listed tenants (they exist from the scheduler's start).
  void bindListed(const config::Config& cfg, const core::Scheduler& sched);
  SeriesCounters& at(TenantId t, EndpointId e) {
    const std::uint32_t s = t < series_of_.size() ? series_of_[t] : other_;
    const std::size_t i = static_cast<std::size_t>(s == kUnbound ? other_ : s) * endpoints_ +
                          (e < endpoints_ - 1 ? e : endpoints_ - 1);
    dirty_[i] = 1;
    changed_ = true;
    return counters_[i];
  }

  std::size_t endpoints_ = 0;  // the daemon's + 1 (__unknown__)
  std::uint32_t max_unlisted_ = 0;
  const fleet::FleetLimiter* fleet_ = nullptr;
  std::uint32_t unlisted_used_ = 0;
  std::uint32_t other_ = 0;  // series index of __other__
  std::vector<std::string> series_names_;
  std::vector<bool> series_listed_;
  std::unordered_map<std::string, std::uint32_t> series_by_name_;
  std::vector<std::string> endpoint_names_;
  std::vector<std::uint32_t> series_of_;    // by TenantId
  std::vector<TenantId> tenant_of_series_;  // the id last bound to a named series
  std::vector<SeriesCounters> counters_;
  std::vector<std::uint8_t> dirty_;      // by counters_ index: changed since the last publish
  std::vector<std::uint64_t> clients_;   // open rings per series
  std::vector<std::uint32_t> rings_of_;  // open rings per TenantId: clients_ again after a remap
  std::uint64_t loop_iterations_ = 0;
  std::size_t last_clients_ = 0;
  TimeNs next_publish_ = 0;
  bool changed_ = false;  // something to publish since the last publish
  bool reshaped_ = true;  // series or endpoints changed: publish copies everything

  mutable std::mutex mu_;
  std::unique_ptr<MetricsSnapshot> shared_;  // guarded by mu_

  int port_ = 0;
  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;  // destroyed first: it calls collector_
};

}  // namespace fairsched::daemon
