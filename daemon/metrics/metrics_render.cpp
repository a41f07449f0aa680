// A scrape's rendering: the snapshot of the last publish as Prometheus
// metric families (names, help, labels; docs/operations.md lists them).
#include <prometheus/metric_family.h>

#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "daemon/metrics/metrics_snapshot.hpp"

#ifndef FAIRSCHED_VERSION
#define FAIRSCHED_VERSION "unknown"
#endif

namespace fairsched::daemon {
namespace {

using prometheus::MetricType;
using Labels = std::vector<prometheus::ClientMetric::Label>;
using Families = std::vector<prometheus::MetricFamily>;

// Statuses shown with a zero before they first happen, so that rate() over
// them works from the first scrape; any other status appears once nonzero.
constexpr Status kRejectReasons[] = {Status::kRateLimited,  Status::kOverloaded,
                                     Status::kQueueFull,    Status::kInvalid,
                                     Status::kUnauthorized, Status::kShuttingDown};
constexpr Status kFinalStatuses[] = {
    Status::kOk,           Status::kDeadlineExceeded, Status::kCancelled,
    Status::kShuttingDown, Status::kExecutorFailed,   Status::kSlowConsumer};

bool listedIn(std::span<const Status> list, std::size_t s) {
  return std::any_of(list.begin(), list.end(),
                     [s](Status x) { return static_cast<std::size_t>(x) == s; });
}

prometheus::MetricFamily family(std::string name, std::string help, MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void add(prometheus::MetricFamily& f, Labels labels, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

void addHistogram(prometheus::MetricFamily& f, Labels labels, const LatencyHistogram& h) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.histogram.sample_count = h.count;
  m.histogram.sample_sum = static_cast<double>(h.sum_ns) / 1e9;
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kLatencyBucketCount; ++i) {
    cumulative += h.buckets[i];
    prometheus::ClientMetric::Bucket b;
    b.cumulative_count = cumulative;
    b.upper_bound = i < std::size(kLatencyBuckets) ? kLatencyBuckets[i]
                                                   : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back(b);
  }
  f.metric.push_back(std::move(m));
}

// The families labelled by tenant (and endpoint), one label set per series
// and endpoint that has something to show.
void renderSeries(const MetricsSnapshot& s, Families& out) {
  auto submitted =
      family("fairsched_requests_submitted_total",
             "Requests taken from the submission rings (admitted + rejected)", MetricType::Counter);
  auto admitted = family("fairsched_requests_admitted_total", "Requests admitted to a queue",
                         MetricType::Counter);
  auto rejected = family("fairsched_requests_rejected_total",
                         "Requests rejected at admission, by reason", MetricType::Counter);
  auto completed = family("fairsched_requests_completed_total",
                          "Admitted requests that ended, by final status", MetricType::Counter);
  auto tokens = family("fairsched_tokens_served_total",
                       "Input plus actual output tokens of requests that ran", MetricType::Counter);
  auto queue_wait = family("fairsched_queue_wait_seconds",
                           "Admission to dispatch, of requests that ran", MetricType::Histogram);
  auto service =
      family("fairsched_service_seconds", "Dispatch to batch completion, of requests that ran",
             MetricType::Histogram);
  auto e2e = family("fairsched_end_to_end_seconds", "Admission to completion, of requests that ran",
                    MetricType::Histogram);
  auto streamed = family("fairsched_tokens_streamed_total",
                         "Output tokens workers reported, charged as they came (worker endpoints)",
                         MetricType::Counter);
  auto ttft = family("fairsched_time_to_first_token_seconds",
                     "Dispatch to a worker until its first token (worker endpoints)",
                     MetricType::Histogram);
  auto queued = family("fairsched_tenant_queue_depth", "Requests queued", MetricType::Gauge);
  auto in_flight =
      family("fairsched_tenant_in_flight", "Requests dispatched, not yet done", MetricType::Gauge);
  auto deficit =
      family("fairsched_tenant_deficit",
             "DRR deficit in cost units (tenants with a label of their own)", MetricType::Gauge);
  auto tenant_clients = family("fairsched_tenant_clients",
                               "Client connections with the tenant open", MetricType::Gauge);

  const std::size_t width = s.endpoint_names.size();
  for (std::size_t series = 0; series < s.series_names.size(); ++series) {
    const std::string& tenant = s.series_names[series];
    if (series < s.clients.size() && (s.clients[series] > 0 || series == 0)) {
      add(tenant_clients, Labels{{"tenant", tenant}}, static_cast<double>(s.clients[series]));
    }
    for (std::size_t e = 0; e < width; ++e) {
      const std::size_t i = series * width + e;
      const SeriesCounters& c = s.counters[i];
      const SeriesGauges g = i < s.gauges.size() ? s.gauges[i] : SeriesGauges{};
      std::uint64_t ended = 0;
      for (const std::uint64_t n : c.completed) ended += n;
      const std::uint64_t sub = c.submitted();
      if (sub == 0 && ended == 0 && g.queued == 0 && g.in_flight == 0 && !g.has_deficit) continue;
      const Labels labels{{"tenant", tenant}, {"endpoint", s.endpoint_names[e]}};
      add(submitted, labels, static_cast<double>(sub));
      add(admitted, labels, static_cast<double>(c.admitted));
      for (std::size_t st = 0; st < kStatusCount; ++st) {
        if (c.rejected[st] > 0 || listedIn(kRejectReasons, st)) {
          Labels l = labels;
          l.push_back({"reason", std::string(toString(static_cast<Status>(st)))});
          add(rejected, std::move(l), static_cast<double>(c.rejected[st]));
        }
        if (c.completed[st] > 0 || listedIn(kFinalStatuses, st)) {
          Labels l = labels;
          l.push_back({"status", std::string(toString(static_cast<Status>(st)))});
          add(completed, std::move(l), static_cast<double>(c.completed[st]));
        }
      }
      add(tokens, labels, static_cast<double>(c.tokens_served));
      addHistogram(queue_wait, labels, c.queue_wait);
      addHistogram(service, labels, c.service);
      addHistogram(e2e, labels, c.end_to_end);
      if (c.ttft.count > 0 || c.tokens_streamed > 0) {
        add(streamed, labels, static_cast<double>(c.tokens_streamed));
        addHistogram(ttft, labels, c.ttft);
      }
      add(queued, labels, static_cast<double>(g.queued));
      add(in_flight, labels, static_cast<double>(g.in_flight));
      if (g.has_deficit) add(deficit, labels, static_cast<double>(g.deficit));
    }
  }
  for (auto* f : {&submitted, &admitted, &rejected, &completed, &tokens, &queue_wait, &service,
                  &e2e, &streamed, &ttft, &queued, &in_flight, &deficit, &tenant_clients}) {
    out.push_back(std::move(*f));
  }
}

// The families labelled by endpoint, and the tenant label budget.
void renderEndpoints(const MetricsSnapshot& s, Families& out) {
  auto endpoint_queue =
      family("fairsched_queue_depth", "Requests queued on the endpoint", MetricType::Gauge);
  for (std::size_t e = 0; e < s.endpoint_queued.size(); ++e) {
    add(endpoint_queue, Labels{{"endpoint", s.endpoint_names[e]}},
        static_cast<double>(s.endpoint_queued[e]));
  }
  out.push_back(std::move(endpoint_queue));
  const ServerStats& st = s.server;
  auto workers = family("fairsched_workers", "Workers attached to the endpoint", MetricType::Gauge);
  auto running = family("fairsched_worker_running_requests",
                        "Requests running on the endpoint's workers", MetricType::Gauge);
  auto preemptions =
      family("fairsched_preemptions_total", "Sequences the endpoint's workers gave back on PREEMPT",
             MetricType::Counter);
  for (std::size_t e = 0; e < st.workers.size() && e + 1 < s.endpoint_names.size(); ++e) {
    const Labels l{{"endpoint", s.endpoint_names[e]}};
    add(workers, l, static_cast<double>(st.workers[e]));
    add(running, l,
        static_cast<double>(e < st.running_on_workers.size() ? st.running_on_workers[e] : 0));
    add(preemptions, l, static_cast<double>(e < st.preemptions.size() ? st.preemptions[e] : 0));
  }
  out.push_back(std::move(workers));
  out.push_back(std::move(running));
  out.push_back(std::move(preemptions));
  auto ignored =
      family("fairsched_preempts_ignored_total",
             "PREEMPTs a worker left unanswered (it is not asked again)", MetricType::Counter);
  add(ignored, Labels{}, static_cast<double>(st.preempts_ignored));
  out.push_back(std::move(ignored));
  const std::uint64_t listed = s.listed_series;
  const std::uint64_t unlisted = s.series_names.size() - 1 - listed;
  auto series_family = family("fairsched_metrics_tenant_labels",
                              "Tenant label values in use, besides __other__", MetricType::Gauge);
  add(series_family, Labels{{"kind", "listed"}}, static_cast<double>(listed));
  add(series_family, Labels{{"kind", "unlisted"}}, static_cast<double>(unlisted));
  out.push_back(std::move(series_family));
}

// Unlabelled families of one value each.
struct Scalar {
  const char* name;
  const char* help;
  std::uint64_t value;
};

void renderScalars(MetricType type, std::span<const Scalar> scalars, Families& out) {
  for (const Scalar& sc : scalars) {
    auto f = family(sc.name, sc.help, type);
    add(f, {}, static_cast<double>(sc.value));
    out.push_back(std::move(f));
  }
}

// The daemon-wide values: the loop's gauges and the ServerStats counters.
void renderDaemon(const MetricsSnapshot& s, Families& out) {
  const Scalar gauges[] = {
      {"fairsched_in_flight_requests", "Requests dispatched to executors, not yet done",
       s.in_flight},
      {"fairsched_tenants", "Tenants the daemon holds state for", s.tenants},
      {"fairsched_clients", "Open client connections", s.connections},
      {"fairsched_tenant_handles_open", "Tenants held open, over every client connection",
       s.server.tenant_handles_open},
  };
  const ServerStats& st = s.server;
  const Scalar counters[] = {
      {"fairsched_connections_accepted_total", "Client connections accepted",
       st.connections_accepted},
      {"fairsched_connections_refused_total", "Client connections refused", st.connections_refused},
      {"fairsched_bad_slots_total", "Submission slots that failed validation (ended INVALID)",
       st.bad_slots},
      {"fairsched_bad_tenant_handles_total",
       "Submissions naming a tenant handle their connection does not hold open",
       st.bad_tenant_handles},
      {"fairsched_batches_total", "Batches dispatched to executors", st.batches},
      {"fairsched_reject_throttled_total",
       "Loop passes that left a connection's submissions in its rings because it had spent its "
       "rejection budget (max_rejections_per_s)",
       st.reject_throttled},
      {"fairsched_connects_deferred_total",
       "Connection set-ups that waited for their uid's budget (max_connects_per_s)",
       st.connects_deferred},
      {"fairsched_completions_delivered_total", "Completions written to client rings",
       st.completions_delivered},
      {"fairsched_completions_dropped_total", "Completions whose client was gone",
       st.completions_dropped},
      {"fairsched_loop_iterations_total", "Event loop iterations", s.loop_iterations},
      {"fairsched_worker_tokens_total", "Output tokens workers reported, all endpoints",
       st.tokens_streamed},
  };
  renderScalars(MetricType::Gauge, gauges, out);
  renderScalars(MetricType::Counter, counters, out);
}

// The fleet limiter's breaker state and counters (fleet::FleetStats).
void renderFleet(const fleet::FleetStats& f, Families& out) {
  const Scalar gauges[] = {
      {"fairsched_fleet_breaker_state",
       "Fleet backend circuit breaker: 0 closed, 1 open (backend treated as down), 2 half-open",
       static_cast<std::uint64_t>(f.breaker)},
      {"fairsched_fleet_leases_held", "Fleet budget held locally in leases (cost units)",
       f.leases_held},
      {"fairsched_fleet_nodes", "Redis servers the fleet's keys live on (a cluster's masters)",
       f.topology.nodes.size()},
  };
  const Scalar counters[] = {
      {"fairsched_fleet_backend_calls_total", "Lease script calls to the fleet backend",
       f.backend_calls},
      {"fairsched_fleet_round_trips_total", "Commands sent to the fleet backend", f.round_trips},
      {"fairsched_fleet_backend_failures_total", "Fleet backend calls that failed or timed out",
       f.backend_failures},
      {"fairsched_fleet_breaker_opened_total", "Times the fleet circuit breaker opened",
       f.breaker_counters.opened},
      {"fairsched_fleet_degraded_admitted_total",
       "Admissions past the leases held while the backend was down (fail_open, local_share)",
       f.degraded_admitted},
      {"fairsched_fleet_degraded_rejected_total",
       "Rejections past the leases held while the backend was down (fail_closed, local_share)",
       f.degraded_rejected},
      {"fairsched_fleet_topology_refreshes_total",
       "Slot maps fetched from the cluster, or masters asked of the sentinels",
       f.topology.refreshes},
      {"fairsched_fleet_failovers_total",
       "Times the fleet's master changed (sentinel) or the cluster's set of masters did",
       f.topology.failovers},
      {"fairsched_fleet_retries_total", "TRYAGAIN and CLUSTERDOWN answers retried",
       f.topology.retried},
  };
  renderScalars(MetricType::Gauge, gauges, out);
  renderScalars(MetricType::Counter, counters, out);
  auto redirects = family("fairsched_fleet_redirects_total",
                          "Redis Cluster redirections followed, by kind", MetricType::Counter);
  add(redirects, Labels{{"kind", "moved"}}, static_cast<double>(f.topology.moved));
  add(redirects, Labels{{"kind", "ask"}}, static_cast<double>(f.topology.ask));
  out.push_back(std::move(redirects));
}

void renderBuild(Families& out) {
  auto build =
      family("fairsched_build_info", "Version of the running fairschedd", MetricType::Gauge);
#if FAIRSCHED_HAVE_CUDA
  constexpr const char* kCuda = "yes";
#else
  constexpr const char* kCuda = "no";
#endif
  add(build, Labels{{"version", FAIRSCHED_VERSION}, {"cuda", kCuda}}, 1.0);
  out.push_back(std::move(build));
}

}  // namespace

std::vector<prometheus::MetricFamily> renderMetrics(const MetricsSnapshot& s) {
  Families out;
  renderSeries(s, out);
  renderEndpoints(s, out);
  renderDaemon(s, out);
  if (s.fleet) renderFleet(*s.fleet, out);
  renderBuild(out);
  return out;
}

}  // namespace fairsched::daemon
