// What a serving process sends and gets back: SubmitRequest, Completion, the
// Tenant handle. Plain values; no behaviour.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>

#include "fairsched/status.hpp"

namespace fairsched {

// Chosen by the library, unique within one Client for its whole life
// (reconnects included), echoed by the daemon in the completion. Never 0.
using RequestId = std::uint64_t;

// A tenant opened with Client::openTenant(). It is the client's own index,
// not the daemon's ring number, so it stays valid across reconnects (the
// daemon may hand out another ring for the same tenant then).
struct Tenant {
  static constexpr std::uint32_t kInvalid = std::numeric_limits<std::uint32_t>::max();
  std::uint32_t index = kInvalid;

  bool valid() const { return index != kInvalid; }
  friend bool operator==(const Tenant&, const Tenant&) = default;
};

struct SubmitRequest {
  Tenant tenant;
  std::string_view endpoint;              // a name from the daemon's endpoint list ("chat")
  std::span<const std::uint32_t> prompt;  // token ids; copied into shared memory by submit()
  std::uint32_t max_output_tokens = 0;
  std::int32_t priority = 0;  // higher first, within the tenant
  // Absolute, on steady_clock (CLOCK_MONOTONIC on Linux, the daemon's clock).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Relative to the call to submit(); when both are set the earlier one wins.
  std::optional<std::chrono::nanoseconds> timeout;
  std::uint64_t tag = 0;  // the caller's, echoed in the completion
};

struct Completion {
  RequestId request_id = 0;
  std::uint64_t tag = 0;
  Status status = Status::kOk;
  // RATE_LIMITED (and sometimes OVERLOADED/QUEUE_FULL): do not retry before
  // this much time has passed since the completion arrived. 0 when unknown.
  std::chrono::nanoseconds retry_after{0};
  std::chrono::nanoseconds queue_wait{0};  // admission to dispatch
  std::chrono::nanoseconds service{0};     // dispatch to completion
  std::uint32_t output_tokens = 0;
  std::uint64_t checksum = 0;  // the executor's per-request result checksum
  // True when the library made this completion up itself: the daemon went
  // away with the request outstanding (status SHUTTING_DOWN).
  bool local = false;
};

}  // namespace fairsched
