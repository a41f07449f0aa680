// fairsched::Status — the one outcome every submitted request ends with
// (docs/architecture.md §1), shared by the client library, the shared-memory layout and
// the daemon. Self-contained: needs only the standard library.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fairsched {

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
  kSlowConsumer,      // the client did not read its token stream; the request was aborted
};

// The status as the docs, logs and metrics spell it ("RATE_LIMITED").
constexpr std::string_view toString(Status s) {
  switch (s) {
    case Status::kOk:
      return "OK";
    case Status::kRateLimited:
      return "RATE_LIMITED";
    case Status::kOverloaded:
      return "OVERLOADED";
    case Status::kQueueFull:
      return "QUEUE_FULL";
    case Status::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Status::kInvalid:
      return "INVALID";
    case Status::kUnauthorized:
      return "UNAUTHORIZED";
    case Status::kCancelled:
      return "CANCELLED";
    case Status::kShuttingDown:
      return "SHUTTING_DOWN";
    case Status::kExecutorFailed:
      return "EXECUTOR_FAILED";
    case Status::kSlowConsumer:
      return "SLOW_CONSUMER";
  }
  return "UNKNOWN";
}

// On the wire (a completion slot in shared memory) a status is its number;
// the layout version fixes these numbers.
static_assert(static_cast<int>(Status::kOk) == 0 && static_cast<int>(Status::kSlowConsumer) == 10,
              "Status values are part of the shared-memory layout: bump kLayoutVersion");
constexpr std::uint32_t encodeStatus(Status s) {
  return static_cast<std::uint32_t>(s);
}
// A number read from memory another process writes: nullopt when it names no status.
constexpr std::optional<Status> decodeStatus(std::uint32_t wire) {
  if (wire > static_cast<std::uint32_t>(Status::kSlowConsumer)) return std::nullopt;
  return static_cast<Status>(wire);
}

}  // namespace fairsched
