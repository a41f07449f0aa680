// Retries: exponential backoff with full jitter that honours retry_after, a
// maximum number of attempts, and a retry budget that keeps retries a small
// fraction of first attempts when the daemon keeps rejecting.
//
// The pieces are usable on their own by frontends with their own event loop
// (isRetryable, retryDelay, RetryBudget); runWithRetry() is the loop over
// any attempt function, and submitWithRetry() is that loop over
// Client::submitAndWait(). Time, sleeping and randomness come from a RetryEnv
// so tests run the loop in simulated time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <random>

#include "fairsched/error.hpp"
#include "fairsched/export.hpp"
#include "fairsched/request.hpp"

namespace fairsched {

class Client;

struct RetryPolicy {
  int max_attempts = 3;  // the first attempt included; values below 1 count as 1
  // The jitter window of retry n (n = 1 for the first retry) is
  // min(max_backoff, base_backoff * 2^(n-1)); the delay is uniform in it.
  std::chrono::nanoseconds base_backoff = std::chrono::milliseconds(100);
  std::chrono::nanoseconds max_backoff = std::chrono::seconds(10);
  // A retry_after longer than this ends the retries (a daily limit says
  // "come back in five hours": the caller should hear that now).
  std::chrono::nanoseconds max_retry_after = std::chrono::seconds(60);
  // submitWithRetry: how long to wait for one attempt's completion;
  // negative = until the request's deadline, or forever without one.
  std::chrono::nanoseconds attempt_timeout = std::chrono::nanoseconds(-1);
};

// gRPC-style retry throttling as a token bucket. It starts full; every first
// attempt adds `ratio` tokens (up to `max_tokens`), every retry costs one, and
// no retry happens with fewer than one token. Under sustained rejection the
// retries therefore stay below ratio × first attempts + max_tokens.
// Thread-safe and lock-free: one budget is meant to be shared by every
// request of a client (Client::retryBudget()) or of a tenant.
class FAIRSCHED_API RetryBudget {
 public:
  explicit RetryBudget(double ratio = 0.1, double max_tokens = 10.0);

  void onFirstAttempt();
  // Takes one token; false (and nothing taken) when fewer than one is left.
  bool tryAcquireRetry();
  double tokens() const;

 private:
  // Fixed point, thousandths of a token.
  static constexpr std::int64_t kScale = 1000;
  std::int64_t ratio_;
  std::int64_t max_;
  std::atomic<std::int64_t> tokens_;
};

// Where the retry loop gets its time, sleeps and randomness. Implementations
// used by several threads at once must be thread-safe (SystemRetryEnv is).
// Deadlines are steady_clock time points, so for submitWithRetry() with a
// request deadline or timeout, now() must be steady_clock's (a simulated
// clock only makes sense without one: the daemon gets the deadline too).
class FAIRSCHED_API RetryEnv {
 public:
  virtual ~RetryEnv() = default;
  virtual std::chrono::steady_clock::time_point now() = 0;
  virtual void sleepFor(std::chrono::nanoseconds d) = 0;
  // Uniform in [0, 1).
  virtual double random() = 0;
};

// steady_clock, std::this_thread::sleep_for and a seeded mt19937_64 behind a
// mutex.
class FAIRSCHED_API SystemRetryEnv : public RetryEnv {
 public:
  explicit SystemRetryEnv(std::uint64_t seed);
  SystemRetryEnv();  // seeded from std::random_device

  std::chrono::steady_clock::time_point now() override;
  void sleepFor(std::chrono::nanoseconds d) override;
  double random() override;

 private:
  std::mutex mu_;
  std::mt19937_64 rng_;
};

// A process-wide SystemRetryEnv.
FAIRSCHED_API RetryEnv& defaultRetryEnv();

// RATE_LIMITED, OVERLOADED and QUEUE_FULL: the daemon may take the request a
// little later. Everything else is final (OK, INVALID, UNAUTHORIZED,
// DEADLINE_EXCEEDED, CANCELLED, SHUTTING_DOWN, EXECUTOR_FAILED).
FAIRSCHED_API bool isRetryable(Status status);
// kRingFull: the ring will drain. Every other submit error is final.
FAIRSCHED_API bool isRetryable(ErrorCode code);

// The jitter window of retry `retry` (1 = first retry): min(max_backoff,
// base_backoff * 2^(retry-1)), without overflow.
FAIRSCHED_API std::chrono::nanoseconds backoffWindow(const RetryPolicy& policy, int retry);

// The wait before retry `retry`: retry_after + uniform[0, backoffWindow()).
// Full jitter: the random part spans the whole window, so clients rejected
// together spread out instead of coming back in step.
FAIRSCHED_API std::chrono::nanoseconds retryDelay(const RetryPolicy& policy, int retry,
                                                  std::chrono::nanoseconds retry_after,
                                                  RetryEnv& env);

enum class RetryStop : std::uint8_t {
  kFinal,              // the last attempt's outcome is final (OK, or not retryable)
  kMaxAttempts,        // still retryable, but max_attempts were made
  kBudgetExhausted,    // the retry budget had no token
  kDeadline,           // the next attempt would start after the deadline
  kRetryAfterTooLong,  // retry_after exceeded max_retry_after
};
FAIRSCHED_API std::string_view toString(RetryStop stop);

struct RetryOutcome {
  Result<Completion> last = Error{ErrorCode::kInvalidArgument, 0, "no attempt made"};
  int attempts = 0;
  RetryStop stop = RetryStop::kFinal;
  std::chrono::nanoseconds slept{0};  // total time spent waiting between attempts
};

// One attempt: submit and return the request's completion, or the submit
// error. Called with 1, 2, ... up to max_attempts.
using AttemptFn = std::function<Result<Completion>(int attempt)>;

// The retry loop. Counts one first attempt in `budget`, then retries while
// the outcome is retryable, attempts are left, retry_after is acceptable,
// the deadline allows the next start, and the budget has a token, sleeping
// retryDelay() through `env` between attempts.
FAIRSCHED_API RetryOutcome runWithRetry(
    const AttemptFn& attempt, const RetryPolicy& policy, RetryBudget& budget, RetryEnv& env,
    std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

// runWithRetry over client.submitAndWait(request, ...). The request's deadline
// (or timeout, turned into a deadline at the first attempt) bounds the whole
// loop. The overload without budget and env uses client.retryBudget() and
// defaultRetryEnv(). Blocks the calling thread; see Client::submitAndWait for
// how it shares completions with other threads.
FAIRSCHED_API RetryOutcome submitWithRetry(Client& client, const SubmitRequest& request,
                                           const RetryPolicy& policy, RetryBudget& budget,
                                           RetryEnv& env);
FAIRSCHED_API RetryOutcome submitWithRetry(Client& client, const SubmitRequest& request,
                                           const RetryPolicy& policy = RetryPolicy{});

}  // namespace fairsched
