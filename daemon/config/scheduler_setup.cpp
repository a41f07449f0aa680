#include "daemon/config/scheduler_setup.hpp"

#include <algorithm>
#include <cmath>

namespace fairsched::config {
namespace {

core::LimitTable limitTable(const Config& cfg, const core::LimitTable& base,
                            const std::vector<EndpointLimits>& overrides) {
  core::LimitTable table = base;
  for (const EndpointLimits& el : overrides) {
    for (std::size_t e = 0; e < cfg.endpoints.size(); ++e) {
      if (cfg.endpoints[e].name == el.endpoint) mergeLimits(table[e], el.limits);
    }
  }
  return table;
}

}  // namespace

void mergeLimits(std::vector<core::LimitSpec>& base,
                 const std::vector<core::LimitSpec>& overrides) {
  for (const core::LimitSpec& o : overrides) {
    auto it = std::find_if(base.begin(), base.end(), [&](const auto& b) { return b.sameSlot(o); });
    if (it != base.end())
      *it = o;
    else
      base.push_back(o);
  }
}

core::SchedulerSpec buildSchedulerSpec(const Config& cfg) {
  core::SchedulerSpec spec;
  spec.policy = cfg.daemon.policy;
  spec.idle_timeout = static_cast<TimeNs>(cfg.daemon.tenant_idle_timeout_s) * kNsPerSec;

  core::LimitTable endpoint_defaults;
  for (const EndpointConfig& ec : cfg.endpoints) {
    core::EndpointSpec es;
    es.name = ec.name;
    es.cost = ec.cost;
    es.quantum = static_cast<std::int64_t>(ec.resolvedQuantum());
    es.max_batch_requests = ec.max_batch_requests;
    es.max_batch_tokens = ec.max_batch_tokens;
    es.max_wait = static_cast<TimeNs>(ec.max_wait_us) * kNsPerUs;
    es.max_output_tokens = ec.max_output_tokens;
    es.latency_target = static_cast<TimeNs>(ec.latency_target_ms) * kNsPerMs;
    es.parallelism = ec.executor == ExecutorKind::kCuda     ? ec.cuda.streams
                     : ec.executor == ExecutorKind::kWorker ? ec.worker.max_sequences
                                                            : ec.cpu.threads;
    es.per_token = ec.executor == ExecutorKind::kWorker;
    es.fairness = ec.fairness;
    es.half_life = static_cast<TimeNs>(std::llround(ec.half_life_s * kNsPerSec));
    es.preemption.enabled = es.per_token && ec.worker.preemption;
    es.preemption.max_per_s = ec.worker.max_preemptions_per_s;
    es.preemption.min_progress_tokens = ec.worker.min_progress_tokens;
    es.preemption.for_share = ec.worker.preempt_for_share;
    if (es.per_token && ec.worker.routing == core::Routing::kPrefix) {
      es.locality_slack = ec.worker.locality_slack;
    }
    spec.endpoints.push_back(std::move(es));
    endpoint_defaults.push_back(ec.limits);
  }

  for (std::size_t t = 0; t < cfg.tiers.size(); ++t) {
    const TierConfig& tc = cfg.tiers[t];
    spec.tiers.push_back(
        {tc.name, tc.min_share, tc.default_weight, tc.default_queue_limit, tc.max_batch_tokens});
    spec.tier_limits.push_back(limitTable(cfg, endpoint_defaults, tc.limits));
    if (tc.name == cfg.default_tier) spec.default_tier = static_cast<TierId>(t);
  }
  if (cfg.default_tier.empty() && !cfg.tiers.empty()) {
    spec.default_tier = static_cast<TierId>(cfg.tiers.size() - 1);
  }

  for (const TenantConfig& tc : cfg.tenants) {
    core::TenantSpec ts;
    ts.name = tc.name;
    TierId tier = 0;
    for (std::size_t t = 0; t < cfg.tiers.size(); ++t) {
      if (cfg.tiers[t].name == tc.tier) tier = static_cast<TierId>(t);
    }
    const TierConfig& tier_cfg = cfg.tiers[tier];
    ts.tier = tier;
    ts.weight = tc.weight.value_or(tier_cfg.default_weight);
    ts.queue_limit = tc.queue_limit.value_or(tier_cfg.default_queue_limit);
    if (!tc.limits.empty()) ts.limits = limitTable(cfg, spec.tier_limits[tier], tc.limits);
    spec.tenants.push_back(std::move(ts));
  }
  return spec;
}

}  // namespace fairsched::config
