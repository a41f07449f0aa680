#include "fairsched/http.hpp"

#include <cstdint>

namespace fairsched {

using std::chrono::nanoseconds;

namespace {

std::int64_t ceilDiv(std::int64_t a, std::int64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

void addRetryHeaders(HttpAnswer& answer, nanoseconds retry_after) {
  answer.headers.push_back({"retry-after-ms", retryAfterMs(retry_after)});
  answer.headers.push_back({"retry-after", retryAfterSeconds(retry_after)});
}

}  // namespace

int httpStatus(Status status) {
  switch (status) {
    case Status::kOk:
      return 200;
    case Status::kRateLimited:
      return 429;
    case Status::kOverloaded:
    case Status::kQueueFull:
    case Status::kShuttingDown:
      return 503;
    case Status::kDeadlineExceeded:
      return 504;
    case Status::kInvalid:
      return 400;
    case Status::kUnauthorized:
      return 403;
    case Status::kCancelled:
    case Status::kSlowConsumer:
      return 499;
    case Status::kExecutorFailed:
      return 500;
  }
  return 500;
}

int httpStatus(ErrorCode code) {
  switch (code) {
    case ErrorCode::kRingFull:
    case ErrorCode::kNotConnected:
    case ErrorCode::kDaemonLost:
    case ErrorCode::kConnectFailed:
    case ErrorCode::kShuttingDown:
    case ErrorCode::kNoCapacity:
      return 503;
    case ErrorCode::kTimedOut:
      return 504;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnknownEndpoint:
    case ErrorCode::kPromptTooLarge:
      return 400;
    case ErrorCode::kUnauthorized:
      return 403;
    case ErrorCode::kVersionMismatch:
    case ErrorCode::kRefused:
    case ErrorCode::kProtocol:
    case ErrorCode::kUnknownTenant:
    case ErrorCode::kSystem:
      return 500;
  }
  return 500;
}

std::string retryAfterMs(nanoseconds retry_after) {
  if (retry_after.count() <= 0) return "0";
  return std::to_string(ceilDiv(retry_after.count(), 1'000'000));
}

std::string retryAfterSeconds(nanoseconds retry_after) {
  if (retry_after.count() <= 0) return "0";
  return std::to_string(ceilDiv(retry_after.count(), 1'000'000'000));
}

HttpAnswer toHttpStatus(const Completion& completion) {
  HttpAnswer answer;
  answer.status = httpStatus(completion.status);
  if (answer.status == 429 || (answer.status == 503 && completion.retry_after.count() > 0)) {
    addRetryHeaders(answer, completion.retry_after);
  }
  return answer;
}

HttpAnswer toHttpStatus(const Error& error) {
  HttpAnswer answer;
  answer.status = httpStatus(error.code);
  return answer;
}

}  // namespace fairsched
