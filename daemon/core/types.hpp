// Vocabulary shared by every part of the scheduling core: time, ids,
// completion statuses and cost models. Header-only; its one dependency is the
// public fairsched/status.hpp.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

#include "fairsched/status.hpp"

namespace fairsched {

// Time in nanoseconds on a monotonic clock. The core never reads a clock; the
// caller passes `now` into every call, so tests step simulated time freely.
using TimeNs = std::int64_t;
inline constexpr TimeNs kNever = std::numeric_limits<TimeNs>::max();
inline constexpr TimeNs kNsPerUs = 1'000;
inline constexpr TimeNs kNsPerMs = 1'000'000;
inline constexpr TimeNs kNsPerSec = 1'000'000'000;

// Dense ids handed out by the daemon's tables; never read from shared memory.
using TenantId = std::uint32_t;
using EndpointId = std::uint16_t;
using TierId = std::uint16_t;
inline constexpr TenantId kNoTenant = std::numeric_limits<TenantId>::max();

// Status (the per-request outcome) is public: fairsched/status.hpp.

// How a request is charged against its tenant's DRR deficit.
enum class CostModel : std::uint8_t {
  kRequests,  // 1 per request
  kTokens,    // input + max output tokens
  kAdaptive,  // input + learned expected output; corrected by the actual cost at completion
};

// Scheduling policy of the whole daemon.
enum class Policy : std::uint8_t {
  kFair,  // tier -> DRR -> priority
  kFifo,  // one global queue by priority, deadline, arrival (the naive baseline)
};

}  // namespace fairsched
