// The loop thread's bookkeeping and the publish into the snapshot; the
// rendering of a scrape is in metrics_render.cpp.
#include "daemon/metrics/metrics.hpp"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <algorithm>
#include <array>
#include <exception>
#include <utility>

#include "daemon/core/scheduler.hpp"
#include "daemon/fleet/fleet_limiter.hpp"
#include "daemon/metrics/metrics_snapshot.hpp"
#include "daemon/server/server_stats.hpp"

namespace fairsched::daemon {
namespace {

constexpr std::array<TimeNs, std::size(kLatencyBuckets)> boundsNs() {
  std::array<TimeNs, std::size(kLatencyBuckets)> out{};
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<TimeNs>(kLatencyBuckets[i] * 1e9 + 0.5);
  return out;
}
constexpr auto kBoundsNs = boundsNs();

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

Metrics::Metrics(const config::Config& cfg)
    : shared_(std::make_unique<MetricsSnapshot>()), collector_(std::make_shared<Collector>(*this)) {
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
  MetricsSnapshot& shared = *shared_;
  if (reshaped_ || shared.series_names.size() != series_names_.size()) {
    shared.series_names = series_names_;
    shared.endpoint_names = endpoint_names_;
    shared.counters.resize(counters_.size());
  }
  for (std::size_t i = 0; i < counters_.size(); ++i) {
    if (dirty_[i] || reshaped_) {
      shared.counters[i] = counters_[i];
      dirty_[i] = 0;
    }
  }
  reshaped_ = false;
  shared.gauges = std::move(gauges);
  shared.clients = clients_;
  shared.endpoint_queued = std::move(endpoint_queued);
  shared.server = stats;
  if (fleet_ != nullptr) shared.fleet = fleet_->stats();
  shared.in_flight = sched.inFlight();
  shared.tenants = sched.tenants().size();
  shared.connections = clients;
  shared.loop_iterations = loop_iterations_;
  shared.listed_series =
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
  const std::lock_guard lock(mu_);
  return renderMetrics(*shared_);
}

}  // namespace fairsched::daemon
