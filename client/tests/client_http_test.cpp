// The HTTP mapping for frontends: every Status, the retry headers and their
// rounding, and submit errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "fairsched/http.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;

Completion with(Status s, std::chrono::nanoseconds retry_after = 0ns) {
  Completion c;
  c.status = s;
  c.retry_after = retry_after;
  return c;
}

std::optional<std::string> header(const HttpAnswer& a, std::string_view name) {
  for (const HttpHeader& h : a.headers) {
    if (h.name == name) return h.value;
  }
  return std::nullopt;
}

TEST(HttpMapping, EveryStatusHasItsCode) {
  EXPECT_EQ(httpStatus(Status::kOk), 200);
  EXPECT_EQ(httpStatus(Status::kRateLimited), 429);
  EXPECT_EQ(httpStatus(Status::kOverloaded), 503);
  EXPECT_EQ(httpStatus(Status::kQueueFull), 503);
  EXPECT_EQ(httpStatus(Status::kDeadlineExceeded), 504);
  EXPECT_EQ(httpStatus(Status::kInvalid), 400);
  EXPECT_EQ(httpStatus(Status::kUnauthorized), 403);
  EXPECT_EQ(httpStatus(Status::kCancelled), 499);
  EXPECT_EQ(httpStatus(Status::kShuttingDown), 503);
  EXPECT_EQ(httpStatus(Status::kExecutorFailed), 500);
}

TEST(HttpMapping, RateLimitedCarriesRetryAfterMsAndSeconds) {
  const HttpAnswer a = toHttpStatus(with(Status::kRateLimited, 1500ms));
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(header(a, "retry-after-ms"), "1500");
  EXPECT_EQ(header(a, "retry-after"), "2");
}

TEST(HttpMapping, RateLimitedWithoutAKnownWaitStillSaysZero) {
  const HttpAnswer a = toHttpStatus(with(Status::kRateLimited));
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(header(a, "retry-after-ms"), "0");
}

TEST(HttpMapping, ServiceUnavailableCarriesRetryAfterOnlyWhenKnown) {
  const HttpAnswer known = toHttpStatus(with(Status::kOverloaded, 20ms));
  EXPECT_EQ(known.status, 503);
  EXPECT_EQ(header(known, "retry-after-ms"), "20");
  EXPECT_EQ(header(known, "retry-after"), "1");
  const HttpAnswer full = toHttpStatus(with(Status::kQueueFull));
  EXPECT_EQ(full.status, 503);
  EXPECT_TRUE(full.headers.empty());
  EXPECT_TRUE(toHttpStatus(with(Status::kShuttingDown)).headers.empty());
}

TEST(HttpMapping, OtherStatusesHaveNoHeaders) {
  for (Status s : {Status::kOk, Status::kDeadlineExceeded, Status::kInvalid, Status::kUnauthorized,
                   Status::kCancelled, Status::kExecutorFailed}) {
    EXPECT_TRUE(toHttpStatus(with(s, 5s)).headers.empty()) << toString(s);
  }
}

TEST(HttpMapping, RetryAfterRoundsUpToWholeUnits) {
  EXPECT_EQ(retryAfterMs(0ns), "0");
  EXPECT_EQ(retryAfterMs(-3ms), "0");
  EXPECT_EQ(retryAfterMs(1ns), "1");
  EXPECT_EQ(retryAfterMs(1ms), "1");
  EXPECT_EQ(retryAfterMs(1ms + 1ns), "2");
  EXPECT_EQ(retryAfterMs(60s), "60000");
  EXPECT_EQ(retryAfterSeconds(1ns), "1");
  EXPECT_EQ(retryAfterSeconds(1s), "1");
  EXPECT_EQ(retryAfterSeconds(1001ms), "2");
}

TEST(HttpMapping, SubmitErrorsMapToo) {
  EXPECT_EQ(httpStatus(ErrorCode::kRingFull), 503);
  EXPECT_EQ(httpStatus(ErrorCode::kNotConnected), 503);
  EXPECT_EQ(httpStatus(ErrorCode::kDaemonLost), 503);
  EXPECT_EQ(httpStatus(ErrorCode::kTimedOut), 504);
  EXPECT_EQ(httpStatus(ErrorCode::kPromptTooLarge), 400);
  EXPECT_EQ(httpStatus(ErrorCode::kUnknownEndpoint), 400);
  EXPECT_EQ(httpStatus(ErrorCode::kUnauthorized), 403);
  EXPECT_EQ(httpStatus(ErrorCode::kUnknownTenant), 500);
  EXPECT_EQ(toHttpStatus(Error{ErrorCode::kRingFull, 0, {}}).status, 503);
}

}  // namespace
}  // namespace fairsched
