#include "fairsched/retry.hpp"

#include <algorithm>
#include <cmath>
#include <thread>

#include "fairsched/client.hpp"

namespace fairsched {

using std::chrono::nanoseconds;

// ---- budget ---------------------------------------------------------------

RetryBudget::RetryBudget(double ratio, double max_tokens)
    : ratio_(std::llround(std::max(0.0, ratio) * kScale)),
      max_(std::llround(std::max(0.0, max_tokens) * kScale)),
      tokens_(max_) {}

void RetryBudget::onFirstAttempt() {
  std::int64_t cur = tokens_.load(std::memory_order_relaxed);
  while (cur < max_ && !tokens_.compare_exchange_weak(cur, std::min(max_, cur + ratio_),
                                                      std::memory_order_relaxed)) {
  }
}

bool RetryBudget::tryAcquireRetry() {
  std::int64_t cur = tokens_.load(std::memory_order_relaxed);
  for (;;) {
    if (cur < kScale) return false;
    if (tokens_.compare_exchange_weak(cur, cur - kScale, std::memory_order_relaxed)) return true;
  }
}

double RetryBudget::tokens() const {
  return static_cast<double>(tokens_.load(std::memory_order_relaxed)) / kScale;
}

// ---- environment ----------------------------------------------------------

SystemRetryEnv::SystemRetryEnv(std::uint64_t seed) : rng_(seed) {}
SystemRetryEnv::SystemRetryEnv()
    : rng_((std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()) {}

std::chrono::steady_clock::time_point SystemRetryEnv::now() {
  return std::chrono::steady_clock::now();
}

void SystemRetryEnv::sleepFor(nanoseconds d) {
  if (d.count() > 0) std::this_thread::sleep_for(d);
}

double SystemRetryEnv::random() {
  std::lock_guard lk(mu_);
  // 53 random bits: uniform in [0, 1), never 1.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

RetryEnv& defaultRetryEnv() {
  static SystemRetryEnv env;
  return env;
}

// ---- decisions ------------------------------------------------------------

bool isRetryable(Status status) {
  return status == Status::kRateLimited || status == Status::kOverloaded ||
         status == Status::kQueueFull;
}

bool isRetryable(ErrorCode code) {
  return code == ErrorCode::kRingFull;
}

nanoseconds backoffWindow(const RetryPolicy& policy, int retry) {
  const nanoseconds cap = std::max(nanoseconds(0), policy.max_backoff);
  nanoseconds window = std::max(nanoseconds(0), policy.base_backoff);
  for (int i = 1; i < retry && window < cap; ++i) {
    window = window > cap / 2 ? cap : window * 2;
  }
  return std::min(window, cap);
}

nanoseconds retryDelay(const RetryPolicy& policy, int retry, nanoseconds retry_after,
                       RetryEnv& env) {
  const nanoseconds window = backoffWindow(policy, retry);
  const double r = std::clamp(env.random(), 0.0, 1.0);
  const auto jitter =
      nanoseconds(static_cast<std::int64_t>(r * static_cast<double>(window.count())));
  return std::max(nanoseconds(0), retry_after) + std::min(jitter, window);
}

std::string_view toString(RetryStop stop) {
  switch (stop) {
    case RetryStop::kFinal:
      return "final";
    case RetryStop::kMaxAttempts:
      return "max attempts";
    case RetryStop::kBudgetExhausted:
      return "retry budget exhausted";
    case RetryStop::kDeadline:
      return "deadline";
    case RetryStop::kRetryAfterTooLong:
      return "retry_after too long";
  }
  return "unknown";
}

RetryOutcome runWithRetry(const AttemptFn& attempt, const RetryPolicy& policy, RetryBudget& budget,
                          RetryEnv& env,
                          std::optional<std::chrono::steady_clock::time_point> deadline) {
  const int max_attempts = std::max(1, policy.max_attempts);
  RetryOutcome out;
  budget.onFirstAttempt();
  for (int n = 1;; ++n) {
    out.last = attempt(n);
    out.attempts = n;
    nanoseconds retry_after{0};
    if (out.last.ok()) {
      if (!isRetryable(out.last->status)) {
        out.stop = RetryStop::kFinal;
        return out;
      }
      retry_after = out.last->retry_after;
    } else if (!isRetryable(out.last.code())) {
      out.stop = RetryStop::kFinal;
      return out;
    }
    if (n >= max_attempts) {
      out.stop = RetryStop::kMaxAttempts;
      return out;
    }
    if (retry_after > policy.max_retry_after) {
      out.stop = RetryStop::kRetryAfterTooLong;
      return out;
    }
    const nanoseconds delay = retryDelay(policy, n, retry_after, env);
    if (deadline && env.now() + delay >= *deadline) {
      out.stop = RetryStop::kDeadline;
      return out;
    }
    // Last, so that a retry refused for another reason costs no token.
    if (!budget.tryAcquireRetry()) {
      out.stop = RetryStop::kBudgetExhausted;
      return out;
    }
    env.sleepFor(delay);
    out.slept += delay;
  }
}

RetryOutcome submitWithRetry(Client& client, const SubmitRequest& request,
                             const RetryPolicy& policy, RetryBudget& budget, RetryEnv& env) {
  // One deadline for the whole loop: a relative timeout starts now, not at
  // every attempt.
  SubmitRequest req = request;
  std::optional<std::chrono::steady_clock::time_point> deadline = req.deadline;
  if (req.timeout) {
    const auto t = env.now() + *req.timeout;
    if (!deadline || t < *deadline) deadline = t;
    req.timeout.reset();
  }
  req.deadline = deadline;
  return runWithRetry(
      [&](int) -> Result<Completion> {
        nanoseconds wait_for = policy.attempt_timeout;
        if (wait_for.count() < 0 && deadline) {
          // Past its deadline the daemon answers DEADLINE_EXCEEDED itself;
          // the margin covers that answer's trip back.
          wait_for = std::max(nanoseconds(0),
                              std::chrono::duration_cast<nanoseconds>(*deadline - env.now()) +
                                  std::chrono::seconds(1));
        }
        return client.submitAndWait(req, wait_for);
      },
      policy, budget, env, deadline);
}

RetryOutcome submitWithRetry(Client& client, const SubmitRequest& request,
                             const RetryPolicy& policy) {
  return submitWithRetry(client, request, policy, client.retryBudget(), defaultRetryEnv());
}

}  // namespace fairsched
