// Turns a validated Config into the scheduling core's SchedulerSpec: applies
// defaults and resolves the limit inheritance (endpoint default → tier →
// tenant, merged by unit and window).
#pragma once

#include "daemon/config/config.hpp"
#include "daemon/core/scheduler_spec.hpp"

namespace fairsched::config {

// REQUIRES: cfg came from parseConfig (names resolve, values in range).
core::SchedulerSpec buildSchedulerSpec(const Config& cfg);

// Merge `overrides` into `base`: a spec with the same unit and window replaces
// the inherited one, others are added.
void mergeLimits(std::vector<core::LimitSpec>& base, const std::vector<core::LimitSpec>& overrides);

}  // namespace fairsched::config
