// What the scheduling core's tests share (scheduler_test, scheduler_reload_test,
// scheduler_worker_test): a spec of one endpoint and two tiers, and a Scheduler
// with the buffers a caller keeps (completions, the batch) and request ids.
// Header-only: the core's tests link only the core.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/core/scheduler.hpp"

namespace fairsched::testing {

// `endpoint` and two tiers without limits: 0 "paid" and 1 "trial" (the
// default), each with a queue bound of 1000 per tenant.
inline core::SchedulerSpec twoTierSpec(core::EndpointSpec endpoint, Policy policy = Policy::kFair) {
  core::SchedulerSpec s;
  s.policy = policy;
  s.endpoints.push_back(std::move(endpoint));
  s.tiers.push_back({"paid", 0.0, 1.0, 1000, 0});
  s.tiers.push_back({"trial", 0.0, 1.0, 1000, 0});
  s.tier_limits.assign(2, core::LimitTable(1));
  s.default_tier = 1;
  return s;
}

struct SchedulerFixture {
  core::Scheduler sched;
  std::vector<core::Done> done;
  core::Batch batch;
  std::uint64_t next_id = 1;

  explicit SchedulerFixture(core::SchedulerSpec spec) : sched(std::move(spec)) {}

  // A tenant of `tier` (its listed or the default tier when none is given).
  TenantId tenant(const std::string& name, std::optional<TierId> tier = std::nullopt) {
    const TenantId t = sched.tenants().acquire(name, tier);
    EXPECT_NE(t, kNoTenant);
    return t;
  }
  // A request of `t` on endpoint 0 with the next id.
  core::Request request(TenantId t, std::uint32_t in = 100, std::uint32_t out = 100) {
    core::Request r;
    r.id = next_id++;
    r.tenant = t;
    r.endpoint = 0;
    r.input_tokens = in;
    r.max_output_tokens = out;
    return r;
  }
};

}  // namespace fairsched::testing
