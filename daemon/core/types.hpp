// Vocabulary shared by every part of the scheduling core: time, ids,
// completion statuses and cost models. Header-only, no dependencies.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

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

// The one status every submitted request ends with (design.md §1).
enum class Status : std::uint8_t {
  kOk = 0,
  kRateLimited,       // a limit would be exceeded; retry_after says when it will not
  kOverloaded,        // the backlog cannot meet the endpoint's latency target
  kQueueFull,         // the tenant's queue bound is reached
  kDeadlineExceeded,  // the deadline passed before the request could run
  kInvalid,           // the request can never be served as given
  kUnauthorized,      // the client may not submit for this tenant/endpoint
  kCancelled,         // withdrawn (client gone, tenant removed)
  kShuttingDown,      // the daemon is stopping
  kExecutorFailed,    // the batch's executor reported an error
};

constexpr std::string_view toString(Status s) {
  switch (s) {
    case Status::kOk: return "OK";
    case Status::kRateLimited: return "RATE_LIMITED";
    case Status::kOverloaded: return "OVERLOADED";
    case Status::kQueueFull: return "QUEUE_FULL";
    case Status::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case Status::kInvalid: return "INVALID";
    case Status::kUnauthorized: return "UNAUTHORIZED";
    case Status::kCancelled: return "CANCELLED";
    case Status::kShuttingDown: return "SHUTTING_DOWN";
    case Status::kExecutorFailed: return "EXECUTOR_FAILED";
  }
  return "UNKNOWN";
}

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
