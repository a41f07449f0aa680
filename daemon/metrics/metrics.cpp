#include "daemon/metrics/metrics.hpp"

#include "daemon/fleet/fleet_limiter.hpp"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <algorithm>
#include <array>
#include <exception>
#include <limits>
#include <span>
#include <utility>

#include "daemon/core/scheduler.hpp"
#include "daemon/server/server_stats.hpp"

#ifndef FAIRSCHED_VERSION
#define FAIRSCHED_VERSION "unknown"
#endif

namespace fairsched::daemon {
namespace {

constexpr std::array<TimeNs, std::size(kLatencyBuckets)> boundsNs() {
  std::array<TimeNs, std::size(kLatencyBuckets)> out{};
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<TimeNs>(kLatencyBuckets[i] * 1e9 + 0.5);
  return out;
}
constexpr auto kBoundsNs = boundsNs();

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

prometheus::MetricFamily family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

prometheus::ClientMetric& add(prometheus::MetricFamily& f,
                              std::vector<prometheus::ClientMetric::Label> labels, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (f.type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  f.metric.push_back(std::move(m));
  return f.metric.back();
}

void addHistogram(prometheus::MetricFamily& f, std::vector<prometheus::ClientMetric::Label> labels,
                  const LatencyHistogram& h) {
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

}  // namespace

void LatencyHistogram::observe(TimeNs ns) {
  if (ns < 0) ns = 0;
  std::size_t i = 0;
  while (i < kBoundsNs.size() && ns > kBoundsNs[i]) ++i;
  ++buckets[i];
  ++count;
  sum_ns += static_cast<std::uint64_t>(ns);
}

LatencyHistogram& LatencyHistogram::operator+=(const LatencyHistogram& o) {
  for (std::size_t i = 0; i < kLatencyBucketCount; ++i) buckets[i] += o.buckets[i];
  count += o.count;
  sum_ns += o.sum_ns;
  return *this;
}

std::uint64_t SeriesCounters::submitted() const {
  std::uint64_t n = admitted;
  for (const std::uint64_t r : rejected) n += r;
  return n;
}

SeriesCounters& SeriesCounters::operator+=(const SeriesCounters& o) {
  admitted += o.admitted;
  for (std::size_t i = 0; i < kStatusCount; ++i) {
    rejected[i] += o.rejected[i];
    completed[i] += o.completed[i];
  }
  tokens_served += o.tokens_served;
  queue_wait += o.queue_wait;
  service += o.service;
  end_to_end += o.end_to_end;
  tokens_streamed += o.tokens_streamed;
  ttft += o.ttft;
  return *this;
}

// What the exposer calls on a scrape. Holds the Metrics only while the
// exposer does: ~Metrics destroys the exposer first.
class Metrics::Collector : public prometheus::Collectable {
 public:
  explicit Collector(const Metrics& m) : m_(m) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return m_.collect(); }

 private:
  const Metrics& m_;
};

Result<std::unique_ptr<Metrics>> Metrics::create(const config::Config& cfg,
                                                 const core::Scheduler& sched) {
  std::unique_ptr<Metrics> m(new Metrics(cfg));
  m->bindListed(cfg, sched);
  if (cfg.metrics.listen.empty()) return m;
  std::string address = cfg.metrics.listen;
  if (address.rfind("localhost:", 0) == 0) address = "127.0.0.1" + address.substr(9);
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(address, 2);
    const std::vector<int> ports = m->exposer_->GetListeningPorts();
    m->port_ = ports.empty() ? 0 : ports.front();
    m->exposer_->RegisterCollectable(m->collector_);
  } catch (const std::exception& e) {
    return Error{Errc::kSystem,
                 "metrics.listen: cannot serve on " + cfg.metrics.listen + ": " + e.what()};
  }
  return m;
}

Metrics::Metrics(const config::Config& cfg) : collector_(std::make_shared<Collector>(*this)) {
  for (const config::EndpointConfig& ec : cfg.endpoints) endpoint_names_.push_back(ec.name);
  endpoint_names_.emplace_back(kUnknownEndpoint);
  endpoints_ = endpoint_names_.size();
  buildSeries(cfg, {});
}

Metrics::~Metrics() {
  exposer_.reset();
}

void Metrics::buildSeries(const config::Config& cfg, const std::vector<std::string>& keep) {
  series_names_.clear();
  series_listed_.clear();
  series_by_name_.clear();
  tenant_of_series_.clear();
  unlisted_used_ = 0;
  max_unlisted_ = cfg.metrics.max_tenant_series;
  auto add = [this](const std::string& name, bool listed) {
    series_by_name_.emplace(name, static_cast<std::uint32_t>(series_names_.size()));
    series_names_.push_back(name);
    series_listed_.push_back(listed);
    tenant_of_series_.push_back(kNoTenant);
  };
  other_ = 0;
  series_names_.emplace_back(kOtherTenant);
  series_listed_.push_back(false);
  tenant_of_series_.push_back(kNoTenant);
  for (const config::TenantConfig& tc : cfg.tenants) {
    if (tc.name != kOtherTenant && !series_by_name_.contains(tc.name)) add(tc.name, true);
  }
  for (const std::string& name : keep) {
    if (unlisted_used_ >= max_unlisted_) break;
    if (name == kOtherTenant || series_by_name_.contains(name)) continue;
    add(name, false);
    ++unlisted_used_;
  }
  counters_.assign(series_names_.size() * endpoints_, SeriesCounters{});
  dirty_.assign(counters_.size(), 1);
  clients_.assign(series_names_.size(), 0);
  reshaped_ = true;
  changed_ = true;
}

std::uint32_t Metrics::seriesFor(std::string_view name) {
  if (const auto it = series_by_name_.find(std::string(name)); it != series_by_name_.end())
    return it->second;
  if (name == kOtherTenant || unlisted_used_ >= max_unlisted_) return other_;
  const auto s = static_cast<std::uint32_t>(series_names_.size());
  series_by_name_.emplace(std::string(name), s);
  series_names_.emplace_back(name);
  series_listed_.push_back(false);
  tenant_of_series_.push_back(kNoTenant);
  clients_.push_back(0);
  counters_.resize(counters_.size() + endpoints_);
  dirty_.resize(counters_.size(), 1);
  ++unlisted_used_;
  return s;
}

void Metrics::tenantOpened(TenantId t, std::string_view name) {
  const std::uint32_t s = seriesFor(name);
  if (t >= series_of_.size()) series_of_.resize(static_cast<std::size_t>(t) + 1, kUnbound);
  series_of_[t] = s;
  if (s != other_) tenant_of_series_[s] = t;
  ++clients_[s];
  if (t >= rings_of_.size()) rings_of_.resize(static_cast<std::size_t>(t) + 1, 0);
  ++rings_of_[t];
  changed_ = true;
}

void Metrics::tenantClosed(TenantId t) {
  const std::uint32_t s =
      t < series_of_.size() && series_of_[t] != kUnbound ? series_of_[t] : other_;
  if (clients_[s] > 0) --clients_[s];
  if (t < rings_of_.size() && rings_of_[t] > 0) --rings_of_[t];
  changed_ = true;
}

void Metrics::completed(TenantId t, EndpointId e, Status status, TimeNs admitted_at,
                        TimeNs dispatched_at, TimeNs now, std::uint64_t tokens) {
  SeriesCounters& c = at(t, e);
  ++c.completed[static_cast<std::size_t>(status)];
  c.tokens_served += tokens;
  c.queue_wait.observe(dispatched_at - admitted_at);
  c.service.observe(now - dispatched_at);
  c.end_to_end.observe(now - admitted_at);
}

void Metrics::publish(TimeNs now, const core::Scheduler& sched, const ServerStats& stats,
                      std::size_t clients) {
  next_publish_ = now + kPublishInterval;
  changed_ = false;
  last_clients_ = clients;
  const std::size_t served = endpoints_ - 1;  // the daemon's endpoints
  // Gauges: read from the scheduler for each series that names one tenant;
  // `__other__` gets the rest of each endpoint's queue.
  std::vector<SeriesGauges> gauges(counters_.size());
  std::vector<std::uint64_t> endpoint_queued(served);
  for (std::size_t e = 0; e < served; ++e)
    endpoint_queued[e] = sched.queued(static_cast<EndpointId>(e));
  std::vector<std::uint64_t> named_queued(served, 0);
  for (std::uint32_t s = 0; s < series_names_.size(); ++s) {
    const TenantId t = tenant_of_series_[s];
    if (s == other_ || t == kNoTenant || !sched.tenants().valid(t) ||
        sched.tenants()[t].name != series_names_[s]) {
      continue;
    }
    for (std::size_t e = 0; e < served; ++e) {
      const auto v = sched.view(t, static_cast<EndpointId>(e));
      if (!v) continue;
      SeriesGauges& g = gauges[s * endpoints_ + e];
      g.queued = v->queued;
      g.in_flight = v->in_flight;
      g.deficit = v->deficit;
      g.has_deficit = true;
      named_queued[e] += v->queued;
    }
  }
  for (std::size_t e = 0; e < served; ++e) {
    gauges[other_ * endpoints_ + e].queued =
        endpoint_queued[e] > named_queued[e] ? endpoint_queued[e] - named_queued[e] : 0;
  }

  const std::lock_guard lock(mu_);
  if (reshaped_ || shared_.series_names.size() != series_names_.size()) {
    shared_.series_names = series_names_;
    shared_.endpoint_names = endpoint_names_;
    shared_.counters.resize(counters_.size());
  }
  for (std::size_t i = 0; i < counters_.size(); ++i) {
    if (dirty_[i] || reshaped_) {
      shared_.counters[i] = counters_[i];
      dirty_[i] = 0;
    }
  }
  reshaped_ = false;
  shared_.gauges = std::move(gauges);
  shared_.clients = clients_;
  shared_.endpoint_queued = std::move(endpoint_queued);
  shared_.endpoint_workers = stats.workers;
  shared_.endpoint_running = stats.running_on_workers;
  shared_.endpoint_preemptions = stats.preemptions;
  shared_.preempts_ignored = stats.preempts_ignored;
  shared_.tokens_streamed = stats.tokens_streamed;
  shared_.in_flight = sched.inFlight();
  shared_.tenants = sched.tenants().size();
  shared_.connections = clients;
  shared_.connections_accepted = stats.connections_accepted;
  shared_.connections_refused = stats.connections_refused;
  shared_.bad_slots = stats.bad_slots;
  shared_.batches = stats.batches;
  shared_.completions_delivered = stats.completions_delivered;
  shared_.completions_dropped = stats.completions_dropped;
  shared_.loop_iterations = loop_iterations_;
  if (fleet_ != nullptr) {
    const fleet::FleetStats f = fleet_->stats();
    shared_.fleet = true;
    shared_.fleet_breaker_state = static_cast<std::uint64_t>(f.breaker);
    shared_.fleet_leases_held = f.leases_held;
    shared_.fleet_backend_calls = f.backend_calls;
    shared_.fleet_round_trips = f.round_trips;
    shared_.fleet_backend_failures = f.backend_failures;
    shared_.fleet_breaker_opened = f.breaker_counters.opened;
    shared_.fleet_degraded_admitted = f.degraded_admitted;
    shared_.fleet_degraded_rejected = f.degraded_rejected;
  }
  shared_.listed_series =
      static_cast<std::uint64_t>(std::count(series_listed_.begin(), series_listed_.end(), true));
}

void Metrics::remapTenants(const config::Config& cfg, const core::Scheduler& sched) {
  const std::vector<std::string> old_series = series_names_;
  const std::vector<std::string> old_endpoints = endpoint_names_;
  const std::vector<SeriesCounters> old_counters = std::move(counters_);
  const std::size_t old_width = endpoints_;

  endpoint_names_.clear();
  for (const config::EndpointConfig& ec : cfg.endpoints) endpoint_names_.push_back(ec.name);
  endpoint_names_.emplace_back(kUnknownEndpoint);
  endpoints_ = endpoint_names_.size();
  // Old labels in first-come order (series order), after the newly listed.
  buildSeries(cfg, std::vector<std::string>(old_series.begin() + 1, old_series.end()));

  std::vector<std::size_t> endpoint_map(old_endpoints.size(), SIZE_MAX);
  for (std::size_t oe = 0; oe < old_endpoints.size(); ++oe) {
    const auto it = std::find(endpoint_names_.begin(), endpoint_names_.end(), old_endpoints[oe]);
    if (it != endpoint_names_.end())
      endpoint_map[oe] = static_cast<std::size_t>(it - endpoint_names_.begin());
  }
  for (std::size_t os = 0; os < old_series.size(); ++os) {
    const auto it = series_by_name_.find(old_series[os]);
    const std::uint32_t ns = os == 0 || it == series_by_name_.end() ? other_ : it->second;
    for (std::size_t oe = 0; oe < old_width; ++oe) {
      if (endpoint_map[oe] == SIZE_MAX) continue;
      counters_[ns * endpoints_ + endpoint_map[oe]] += old_counters[os * old_width + oe];
    }
  }
  for (TenantId t = 0; t < series_of_.size(); ++t) {
    if (series_of_[t] == kUnbound) continue;
    if (!sched.tenants().valid(t)) {
      series_of_[t] = kUnbound;
      continue;
    }
    const std::uint32_t s = seriesFor(sched.tenants()[t].name);
    series_of_[t] = s;
    if (s != other_) tenant_of_series_[s] = t;
  }
  bindListed(cfg, sched);
  // Open rings follow their tenant to its new series.
  clients_.assign(series_names_.size(), 0);
  for (TenantId t = 0; t < rings_of_.size(); ++t) {
    if (rings_of_[t] == 0) continue;
    const std::uint32_t s =
        t < series_of_.size() && series_of_[t] != kUnbound ? series_of_[t] : other_;
    clients_[s] += rings_of_[t];
  }
  next_publish_ = 0;
}

void Metrics::bindListed(const config::Config& cfg, const core::Scheduler& sched) {
  for (const config::TenantConfig& tc : cfg.tenants) {
    const auto id = sched.tenants().find(tc.name);
    const auto it = series_by_name_.find(tc.name);
    if (!id || it == series_by_name_.end()) continue;
    if (*id >= series_of_.size()) series_of_.resize(static_cast<std::size_t>(*id) + 1, kUnbound);
    series_of_[*id] = it->second;
    tenant_of_series_[it->second] = *id;
  }
}

std::vector<prometheus::MetricFamily> Metrics::collect() const {
  using prometheus::MetricType;
  using Labels = std::vector<prometheus::ClientMetric::Label>;
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

  const std::lock_guard lock(mu_);
  const Snapshot& s = shared_;
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
  std::vector<prometheus::MetricFamily> out;
  for (auto* f : {&submitted, &admitted, &rejected, &completed, &tokens, &queue_wait, &service,
                  &e2e, &streamed, &ttft, &queued, &in_flight, &deficit, &tenant_clients}) {
    out.push_back(std::move(*f));
  }

  auto endpoint_queue =
      family("fairsched_queue_depth", "Requests queued on the endpoint", MetricType::Gauge);
  for (std::size_t e = 0; e < s.endpoint_queued.size(); ++e) {
    add(endpoint_queue, Labels{{"endpoint", s.endpoint_names[e]}},
        static_cast<double>(s.endpoint_queued[e]));
  }
  out.push_back(std::move(endpoint_queue));
  auto workers = family("fairsched_workers", "Workers attached to the endpoint", MetricType::Gauge);
  auto running = family("fairsched_worker_running_requests",
                        "Requests running on the endpoint's workers", MetricType::Gauge);
  auto preemptions =
      family("fairsched_preemptions_total", "Sequences the endpoint's workers gave back on PREEMPT",
             MetricType::Counter);
  for (std::size_t e = 0; e < s.endpoint_workers.size() && e + 1 < s.endpoint_names.size(); ++e) {
    const Labels l{{"endpoint", s.endpoint_names[e]}};
    add(workers, l, static_cast<double>(s.endpoint_workers[e]));
    add(running, l, static_cast<double>(e < s.endpoint_running.size() ? s.endpoint_running[e] : 0));
    add(preemptions, l,
        static_cast<double>(e < s.endpoint_preemptions.size() ? s.endpoint_preemptions[e] : 0));
  }
  out.push_back(std::move(workers));
  out.push_back(std::move(running));
  out.push_back(std::move(preemptions));
  auto ignored =
      family("fairsched_preempts_ignored_total",
             "PREEMPTs a worker left unanswered (it is not asked again)", MetricType::Counter);
  add(ignored, Labels{}, static_cast<double>(s.preempts_ignored));
  out.push_back(std::move(ignored));
  const std::uint64_t listed = s.listed_series;
  const std::uint64_t unlisted = s.series_names.size() - 1 - listed;
  auto series_family = family("fairsched_metrics_tenant_labels",
                              "Tenant label values in use, besides __other__", MetricType::Gauge);
  add(series_family, Labels{{"kind", "listed"}}, static_cast<double>(listed));
  add(series_family, Labels{{"kind", "unlisted"}}, static_cast<double>(unlisted));
  out.push_back(std::move(series_family));

  struct Scalar {
    const char* name;
    const char* help;
    MetricType type;
    std::uint64_t value;
  };
  const Scalar scalars[] = {
      {"fairsched_in_flight_requests", "Requests dispatched to executors, not yet done",
       MetricType::Gauge, s.in_flight},
      {"fairsched_tenants", "Tenants the daemon holds state for", MetricType::Gauge, s.tenants},
      {"fairsched_clients", "Open client connections", MetricType::Gauge, s.connections},
      {"fairsched_connections_accepted_total", "Client connections accepted", MetricType::Counter,
       s.connections_accepted},
      {"fairsched_connections_refused_total", "Client connections refused", MetricType::Counter,
       s.connections_refused},
      {"fairsched_bad_slots_total", "Submission slots that failed validation (ended INVALID)",
       MetricType::Counter, s.bad_slots},
      {"fairsched_batches_total", "Batches dispatched to executors", MetricType::Counter,
       s.batches},
      {"fairsched_completions_delivered_total", "Completions written to client rings",
       MetricType::Counter, s.completions_delivered},
      {"fairsched_completions_dropped_total", "Completions whose client was gone",
       MetricType::Counter, s.completions_dropped},
      {"fairsched_loop_iterations_total", "Event loop iterations", MetricType::Counter,
       s.loop_iterations},
      {"fairsched_worker_tokens_total", "Output tokens workers reported, all endpoints",
       MetricType::Counter, s.tokens_streamed},
  };
  const Scalar fleet_scalars[] = {
      {"fairsched_fleet_breaker_state",
       "Fleet backend circuit breaker: 0 closed, 1 open (backend treated as down), 2 half-open",
       MetricType::Gauge, s.fleet_breaker_state},
      {"fairsched_fleet_leases_held", "Fleet budget held locally in leases (cost units)",
       MetricType::Gauge, s.fleet_leases_held},
      {"fairsched_fleet_backend_calls_total", "Lease script calls to the fleet backend",
       MetricType::Counter, s.fleet_backend_calls},
      {"fairsched_fleet_round_trips_total", "Commands sent to the fleet backend",
       MetricType::Counter, s.fleet_round_trips},
      {"fairsched_fleet_backend_failures_total", "Fleet backend calls that failed or timed out",
       MetricType::Counter, s.fleet_backend_failures},
      {"fairsched_fleet_breaker_opened_total", "Times the fleet circuit breaker opened",
       MetricType::Counter, s.fleet_breaker_opened},
      {"fairsched_fleet_degraded_admitted_total",
       "Admissions past the leases held while the backend was down (fail_open, local_share)",
       MetricType::Counter, s.fleet_degraded_admitted},
      {"fairsched_fleet_degraded_rejected_total",
       "Rejections past the leases held while the backend was down (fail_closed, local_share)",
       MetricType::Counter, s.fleet_degraded_rejected},
  };
  const std::span<const Scalar> extra =
      s.fleet ? std::span<const Scalar>(fleet_scalars) : std::span<const Scalar>();
  for (const std::span<const Scalar> list : {std::span<const Scalar>(scalars), extra}) {
    for (const Scalar& sc : list) {
      auto f = family(sc.name, sc.help, sc.type);
      add(f, {}, static_cast<double>(sc.value));
      out.push_back(std::move(f));
    }
  }
  auto build =
      family("fairsched_build_info", "Version of the running fairschedd", MetricType::Gauge);
#if FAIRSCHED_HAVE_CUDA
  constexpr const char* kCuda = "yes";
#else
  constexpr const char* kCuda = "no";
#endif
  add(build, Labels{{"version", FAIRSCHED_VERSION}, {"cuda", kCuda}}, 1.0);
  out.push_back(std::move(build));
  return out;
}

}  // namespace fairsched::daemon
