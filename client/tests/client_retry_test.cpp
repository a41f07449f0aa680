// Retries in simulated time: the full-jitter window and its distribution,
// retry_after honoured, max attempts, what is retryable, deadlines, and the
// retry budget holding retries near 10% of first attempts under sustained
// rejection; then submitWithRetry against the fake daemon.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "client_test_util.hpp"

namespace fairsched::testing {
namespace {

// Simulated time: sleeping advances the clock; randomness is seeded.
class FakeRetryEnv : public RetryEnv {
 public:
  explicit FakeRetryEnv(std::uint64_t seed) : rng_(seed) {}
  Clock::time_point now() override { return now_; }
  void sleepFor(std::chrono::nanoseconds d) override {
    sleeps.push_back(d);
    now_ += d;
  }
  double random() override { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

  std::vector<std::chrono::nanoseconds> sleeps;

 private:
  Clock::time_point now_ = Clock::time_point(1000h);
  std::mt19937_64 rng_;
};

// A RetryEnv whose random() returns a fixed value.
class FixedRandomEnv : public FakeRetryEnv {
 public:
  explicit FixedRandomEnv(double r) : FakeRetryEnv(0), r_(r) {}
  double random() override { return r_; }

 private:
  double r_;
};

Completion completion(Status s, std::chrono::nanoseconds retry_after = 0ns) {
  Completion c;
  c.status = s;
  c.retry_after = retry_after;
  return c;
}

TEST(RetryBackoff, WindowDoublesFromTheBaseUpToTheCap) {
  RetryPolicy p;
  p.base_backoff = 100ms;
  p.max_backoff = 1s;
  EXPECT_EQ(backoffWindow(p, 1), 100ms);
  EXPECT_EQ(backoffWindow(p, 2), 200ms);
  EXPECT_EQ(backoffWindow(p, 3), 400ms);
  EXPECT_EQ(backoffWindow(p, 4), 800ms);
  EXPECT_EQ(backoffWindow(p, 5), 1s);
  EXPECT_EQ(backoffWindow(p, 1000), 1s) << "no overflow however many retries";
  p.base_backoff = 5s;
  EXPECT_EQ(backoffWindow(p, 1), 1s) << "the cap bounds even the first window";
}

TEST(RetryBackoff, FullJitterStaysWithinZeroAndTheCapAndSpansIt) {
  FakeRetryEnv env(testSeed());
  RetryPolicy p;
  p.base_backoff = 100ms;
  p.max_backoff = 2s;
  constexpr int kSamples = 20000;
  double sum = 0;
  auto lo = std::chrono::nanoseconds::max();
  auto hi = std::chrono::nanoseconds::min();
  for (int i = 0; i < kSamples; ++i) {
    const auto d = retryDelay(p, 12, 0ns, env);  // window == cap
    ASSERT_GE(d, 0ns);
    ASSERT_LE(d, p.max_backoff);
    sum += static_cast<double>(d.count());
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  const double mean = sum / kSamples;
  const double cap = static_cast<double>(p.max_backoff.count());
  EXPECT_NEAR(mean / cap, 0.5, 0.02) << "uniform over the window";
  EXPECT_LT(static_cast<double>(lo.count()), 0.01 * cap) << "full jitter reaches down to 0";
  EXPECT_GT(static_cast<double>(hi.count()), 0.99 * cap) << "and up to the cap";
  for (int i = 0; i < 1000; ++i) {
    const auto d = retryDelay(p, 1, 0ns, env);
    ASSERT_GE(d, 0ns);
    ASSERT_LE(d, p.base_backoff);
  }
}

TEST(RetryBackoff, DelayIsRetryAfterPlusTheJitter) {
  RetryPolicy p;
  p.base_backoff = 100ms;
  FixedRandomEnv zero(0.0), half(0.5), almost_one(0.999999);
  EXPECT_EQ(retryDelay(p, 1, 3s, zero), 3s);
  EXPECT_EQ(retryDelay(p, 1, 3s, half), 3s + 50ms);
  EXPECT_LE(retryDelay(p, 1, 3s, almost_one), 3s + 100ms);
  EXPECT_EQ(retryDelay(p, 1, -5s, zero), 0ns) << "a negative retry_after counts as none";
}

TEST(RetryLoop, HonoursRetryAfter) {
  FakeRetryEnv env(testSeed());
  RetryBudget budget;
  RetryPolicy p;
  p.base_backoff = 100ms;
  std::vector<Clock::time_point> starts;
  const RetryOutcome out = runWithRetry(
      [&](int attempt) -> Result<Completion> {
        starts.push_back(env.now());
        return attempt == 1 ? completion(Status::kRateLimited, 2s) : completion(Status::kOk);
      },
      p, budget, env);
  ASSERT_EQ(out.attempts, 2);
  EXPECT_EQ(out.stop, RetryStop::kFinal);
  ASSERT_TRUE(out.last);
  EXPECT_EQ(out.last->status, Status::kOk);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_GE(starts[1] - starts[0], 2s);
  EXPECT_LE(starts[1] - starts[0], 2s + 100ms);
  EXPECT_EQ(out.slept, starts[1] - starts[0]);
}

TEST(RetryLoop, StopsAfterMaxAttempts) {
  FakeRetryEnv env(testSeed());
  RetryBudget budget;
  int calls = 0;
  const RetryOutcome out = runWithRetry(
      [&](int) -> Result<Completion> {
        ++calls;
        return completion(Status::kRateLimited, 10ms);
      },
      RetryPolicy{}, budget, env);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(out.attempts, 3);
  EXPECT_EQ(out.stop, RetryStop::kMaxAttempts);
  EXPECT_EQ(out.last->status, Status::kRateLimited);
  EXPECT_EQ(env.sleeps.size(), 2u);
}

TEST(RetryLoop, MaxAttemptsBelowOneMeansOneAttempt) {
  FakeRetryEnv env(1);
  RetryBudget budget;
  RetryPolicy p;
  p.max_attempts = 0;
  int calls = 0;
  runWithRetry(
      [&](int) -> Result<Completion> {
        ++calls;
        return completion(Status::kOverloaded);
      },
      p, budget, env);
  EXPECT_EQ(calls, 1);
}

TEST(RetryLoop, OnlyTransientOutcomesAreRetried) {
  EXPECT_TRUE(isRetryable(Status::kRateLimited));
  EXPECT_TRUE(isRetryable(Status::kOverloaded));
  EXPECT_TRUE(isRetryable(Status::kQueueFull));
  for (Status s : {Status::kOk, Status::kDeadlineExceeded, Status::kInvalid, Status::kUnauthorized,
                   Status::kCancelled, Status::kShuttingDown, Status::kExecutorFailed}) {
    EXPECT_FALSE(isRetryable(s)) << toString(s);
  }
  EXPECT_TRUE(isRetryable(ErrorCode::kRingFull));
  EXPECT_FALSE(isRetryable(ErrorCode::kNotConnected));
  EXPECT_FALSE(isRetryable(ErrorCode::kUnknownEndpoint));

  FakeRetryEnv env(2);
  RetryBudget budget;
  int calls = 0;
  RetryOutcome out = runWithRetry(
      [&](int) -> Result<Completion> {
        ++calls;
        return completion(Status::kInvalid);
      },
      RetryPolicy{}, budget, env);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(out.stop, RetryStop::kFinal);

  calls = 0;
  out = runWithRetry(
      [&](int attempt) -> Result<Completion> {
        ++calls;
        if (attempt == 1) return Error{ErrorCode::kRingFull, 0, {}};
        return completion(Status::kOk);
      },
      RetryPolicy{}, budget, env);
  EXPECT_EQ(calls, 2) << "a full ring is retried";
  EXPECT_TRUE(out.last);

  calls = 0;
  out = runWithRetry(
      [&](int) -> Result<Completion> {
        ++calls;
        return Error{ErrorCode::kUnknownEndpoint, 0, "x"};
      },
      RetryPolicy{}, budget, env);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(out.last);
  EXPECT_EQ(out.last.code(), ErrorCode::kUnknownEndpoint);
}

TEST(RetryLoop, RetryAfterBeyondTheLimitEndsRetrying) {
  FakeRetryEnv env(3);
  RetryBudget budget;
  RetryPolicy p;
  p.max_retry_after = 30s;
  const RetryOutcome out =
      runWithRetry([&](int) -> Result<Completion> { return completion(Status::kRateLimited, 5h); },
                   p, budget, env);
  EXPECT_EQ(out.attempts, 1);
  EXPECT_EQ(out.stop, RetryStop::kRetryAfterTooLong);
  EXPECT_TRUE(env.sleeps.empty());
  EXPECT_EQ(budget.tokens(), 10.0) << "no token spent on a retry that did not happen";
}

TEST(RetryLoop, DeadlineStopsARetryThatWouldStartTooLate) {
  FakeRetryEnv env(4);
  RetryBudget budget;
  const RetryOutcome out =
      runWithRetry([&](int) -> Result<Completion> { return completion(Status::kRateLimited, 2s); },
                   RetryPolicy{}, budget, env, env.now() + 1s);
  EXPECT_EQ(out.attempts, 1);
  EXPECT_EQ(out.stop, RetryStop::kDeadline);
  EXPECT_TRUE(env.sleeps.empty());
}

TEST(RetryBudget, StartsFullSpendsOnePerRetryAndRefillsByTheRatio) {
  RetryBudget budget(0.1, 10);
  EXPECT_DOUBLE_EQ(budget.tokens(), 10.0);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(budget.tryAcquireRetry()) << i;
  EXPECT_FALSE(budget.tryAcquireRetry());
  EXPECT_DOUBLE_EQ(budget.tokens(), 0.0);
  for (int i = 0; i < 9; ++i) budget.onFirstAttempt();
  EXPECT_FALSE(budget.tryAcquireRetry()) << "0.9 tokens are not enough";
  budget.onFirstAttempt();
  EXPECT_TRUE(budget.tryAcquireRetry());
  for (int i = 0; i < 1000; ++i) budget.onFirstAttempt();
  EXPECT_DOUBLE_EQ(budget.tokens(), 10.0) << "capped";
}

TEST(RetryBudget, StaysWithinItsBoundsUnderConcurrentUse) {
  RetryBudget budget(0.1, 10);
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        budget.onFirstAttempt();
        if (budget.tryAcquireRetry()) ++granted;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(budget.tokens(), 0.0);
  EXPECT_LE(budget.tokens(), 10.0);
  // Every grant was paid for: the initial 10 plus 0.1 per first attempt.
  EXPECT_LE(granted.load(), 10 + 80000 / 10);
}

TEST(RetryBudget, KeepsRetriesNearTenPercentOfFirstAttemptsUnderSustainedRejection) {
  FakeRetryEnv env(testSeed());
  RetryBudget budget(0.1, 10);
  RetryPolicy p;  // 3 attempts: without a budget, 200% extra load
  constexpr int kRequests = 10000;
  long attempts = 0;
  for (int i = 0; i < kRequests; ++i) {
    const RetryOutcome out = runWithRetry(
        [&](int) -> Result<Completion> { return completion(Status::kRateLimited, 100ms); }, p,
        budget, env);
    attempts += out.attempts;
  }
  const long retries = attempts - kRequests;
  std::cout << "[ budget   ] " << retries << " retries for " << kRequests << " first attempts ("
            << 100.0 * static_cast<double>(retries) / kRequests << "%)\n";
  EXPECT_LE(retries, kRequests / 10 + 10);
  EXPECT_GE(retries, kRequests / 10 - 10) << "the budget is spent, not hoarded";
}

TEST(SubmitWithRetry, RetriesARateLimitedRequestAgainstTheFakeDaemon) {
  FakeDaemon fake;
  std::map<std::uint64_t, int> seen;  // by tag; the fake calls this on its one thread
  fake.setResponder([&](const shm::SubmissionSlot& s, std::span<const std::uint32_t> p) {
    std::optional<shm::CompletionSlot> c = okCompletion(s, p);
    if (seen[s.tag]++ == 0) {
      c->status = static_cast<std::uint32_t>(Status::kRateLimited);
      c->retry_after_ns = 250'000'000;
    }
    return c;
  });
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const Tenant t = mustOpen(client, "acme");
  FakeRetryEnv env(testSeed());
  RetryBudget budget;
  SubmitRequest req;
  req.tenant = t;
  req.endpoint = "chat";
  req.max_output_tokens = 4;
  req.tag = 1234;
  const RetryOutcome out = submitWithRetry(client, req, RetryPolicy{}, budget, env);
  ASSERT_TRUE(out.last) << out.last.error().toString();
  EXPECT_EQ(out.attempts, 2);
  EXPECT_EQ(out.last->status, Status::kOk);
  EXPECT_EQ(out.last->tag, 1234u);
  ASSERT_EQ(env.sleeps.size(), 1u);
  EXPECT_GE(env.sleeps[0], 250ms);
  EXPECT_LE(env.sleeps[0], 350ms);
  EXPECT_EQ(fake.submissions(), 2u);
  EXPECT_EQ(client.outstanding(), 0u);
}

TEST(SubmitWithRetry, DefaultOverloadUsesTheClientsBudget) {
  FakeDaemon fake;
  fake.setResponder([](const shm::SubmissionSlot& s, std::span<const std::uint32_t> p) {
    std::optional<shm::CompletionSlot> c = okCompletion(s, p);
    c->status = static_cast<std::uint32_t>(Status::kQueueFull);
    return c;
  });
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const Tenant t = mustOpen(client, "acme");
  SubmitRequest req;
  req.tenant = t;
  req.endpoint = "chat";
  RetryPolicy p;
  p.base_backoff = 1ms;  // real sleeps here: keep them short
  p.max_backoff = 2ms;
  const RetryOutcome out = submitWithRetry(client, req, p);
  EXPECT_EQ(out.attempts, 3);
  EXPECT_EQ(out.stop, RetryStop::kMaxAttempts);
  EXPECT_EQ(out.last->status, Status::kQueueFull);
  EXPECT_NEAR(client.retryBudget().tokens(), 10.0 - 2.0, 1e-9) << "full, +0.1 capped, -2";
}

}  // namespace
}  // namespace fairsched::testing
