// The C ABI's errors and names: the thread's last error message (fail,
// invalid), fairsched_status_name, fairsched_error_name, and a completion's
// HTTP answer (fairsched_http_status, fairsched_retry_after_ms). Nothing
// here throws.
#include "fairsched_c_errors.hpp"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fairsched/http.hpp"
#include "fairsched/request.hpp"
#include "fairsched/status.hpp"

namespace {

// The C enums mirror the C++ ones value for value.
static_assert(FAIRSCHED_ERR_INVALID_ARGUMENT ==
              static_cast<int>(fairsched::ErrorCode::kInvalidArgument) + 1);
static_assert(FAIRSCHED_ERR_RING_FULL == static_cast<int>(fairsched::ErrorCode::kRingFull) + 1);
static_assert(FAIRSCHED_ERR_SYSTEM == static_cast<int>(fairsched::ErrorCode::kSystem) + 1);
static_assert(FAIRSCHED_STATUS_RATE_LIMITED == static_cast<int>(fairsched::Status::kRateLimited));
static_assert(FAIRSCHED_STATUS_SHUTTING_DOWN == static_cast<int>(fairsched::Status::kShuttingDown));
static_assert(FAIRSCHED_STATUS_EXECUTOR_FAILED ==
              static_cast<int>(fairsched::Status::kExecutorFailed));
static_assert(FAIRSCHED_STATUS_SLOW_CONSUMER == static_cast<int>(fairsched::Status::kSlowConsumer));

thread_local std::string t_last_error;

fairsched::Completion fromC(const fairsched_completion& c) {
  fairsched::Completion out;
  out.request_id = c.request_id;
  out.tag = c.tag;
  out.status = static_cast<fairsched::Status>(c.status);
  out.retry_after = std::chrono::nanoseconds(c.retry_after_ns);
  out.output_tokens = c.output_tokens;
  return out;
}

}  // namespace

namespace fairsched::c_abi {

fairsched_error fail(const Error& e) {
  t_last_error = e.toString();
  return static_cast<fairsched_error>(static_cast<int>(e.code) + 1);
}

fairsched_error invalid(const char* what) {
  t_last_error = std::string("invalid argument: ") + what;
  return FAIRSCHED_ERR_INVALID_ARGUMENT;
}

}  // namespace fairsched::c_abi

extern "C" {

const char* fairsched_status_name(int status) {
  if (status < 0 || !fairsched::decodeStatus(static_cast<std::uint32_t>(status))) {
    return "UNKNOWN";
  }
  // toString returns views of string literals: NUL-terminated.
  return fairsched::toString(static_cast<fairsched::Status>(status)).data();
}

const char* fairsched_error_name(fairsched_error error) {
  switch (error) {
    case FAIRSCHED_OK:
      return "OK";
    case FAIRSCHED_ERR_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case FAIRSCHED_ERR_CONNECT_FAILED:
      return "CONNECT_FAILED";
    case FAIRSCHED_ERR_TIMED_OUT:
      return "TIMED_OUT";
    case FAIRSCHED_ERR_UNAUTHORIZED:
      return "UNAUTHORIZED";
    case FAIRSCHED_ERR_VERSION_MISMATCH:
      return "VERSION_MISMATCH";
    case FAIRSCHED_ERR_NO_CAPACITY:
      return "NO_CAPACITY";
    case FAIRSCHED_ERR_SHUTTING_DOWN:
      return "SHUTTING_DOWN";
    case FAIRSCHED_ERR_REFUSED:
      return "REFUSED";
    case FAIRSCHED_ERR_PROTOCOL:
      return "PROTOCOL";
    case FAIRSCHED_ERR_NOT_CONNECTED:
      return "NOT_CONNECTED";
    case FAIRSCHED_ERR_DAEMON_LOST:
      return "DAEMON_LOST";
    case FAIRSCHED_ERR_UNKNOWN_TENANT:
      return "UNKNOWN_TENANT";
    case FAIRSCHED_ERR_UNKNOWN_ENDPOINT:
      return "UNKNOWN_ENDPOINT";
    case FAIRSCHED_ERR_PROMPT_TOO_LARGE:
      return "PROMPT_TOO_LARGE";
    case FAIRSCHED_ERR_RING_FULL:
      return "RING_FULL";
    case FAIRSCHED_ERR_SYSTEM:
      return "SYSTEM";
  }
  return "UNKNOWN";
}

const char* fairsched_last_error_message(void) {
  return t_last_error.c_str();
}

int fairsched_http_status(const fairsched_completion* completion) {
  if (completion == nullptr) return 500;
  return fairsched::toHttpStatus(fromC(*completion)).status;
}

int64_t fairsched_retry_after_ms(const fairsched_completion* completion) {
  if (completion == nullptr) return -1;
  const fairsched::HttpAnswer a = fairsched::toHttpStatus(fromC(*completion));
  for (const fairsched::HttpHeader& h : a.headers) {
    if (h.name == "retry-after-ms") return std::strtoll(h.value.c_str(), nullptr, 10);
  }
  return -1;
}

}  // extern "C"
