// Turning outcomes into HTTP answers for frontends that speak an OpenAI-style
// API. The mapping (docs/client.md has the table):
//
//   OK                 200
//   RATE_LIMITED       429  retry-after-ms, retry-after (whole seconds, rounded up)
//   OVERLOADED         503  retry-after-ms, retry-after when retry_after is known
//   QUEUE_FULL         503  likewise
//   DEADLINE_EXCEEDED  504
//   INVALID            400
//   UNAUTHORIZED       403
//   CANCELLED          499  (nginx's "client closed request")
//   SHUTTING_DOWN      503  (also what the library reports when the daemon went away)
//   EXECUTOR_FAILED    500
//   SLOW_CONSUMER      499  (the caller stopped reading its stream)
//
// Submit errors (no completion exists) map through httpStatus(ErrorCode).
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "fairsched/error.hpp"
#include "fairsched/export.hpp"
#include "fairsched/request.hpp"

namespace fairsched {

struct HttpHeader {
  std::string name;  // lower case
  std::string value;
  friend bool operator==(const HttpHeader&, const HttpHeader&) = default;
};

struct HttpAnswer {
  int status = 200;
  std::vector<HttpHeader> headers;
};

FAIRSCHED_API int httpStatus(Status status);
// kRingFull, kNotConnected, kDaemonLost, kConnectFailed, kShuttingDown,
// kNoCapacity → 503; kTimedOut → 504; kInvalidArgument, kUnknownEndpoint,
// kPromptTooLarge → 400; kUnauthorized → 403; everything else → 500.
FAIRSCHED_API int httpStatus(ErrorCode code);

// Whole milliseconds, rounded up ("1" for 1 ns; "0" for zero or negative).
FAIRSCHED_API std::string retryAfterMs(std::chrono::nanoseconds retry_after);
// Whole seconds, rounded up, for the standard Retry-After header.
FAIRSCHED_API std::string retryAfterSeconds(std::chrono::nanoseconds retry_after);

// Status code and headers for a completion: retry-after-ms and retry-after
// on 429 always, on 503 when retry_after > 0.
FAIRSCHED_API HttpAnswer toHttpStatus(const Completion& completion);
// Status code for a submit error; no headers.
FAIRSCHED_API HttpAnswer toHttpStatus(const Error& error);

}  // namespace fairsched
