// The scheduling core as a worker endpoint uses it: take() with a worker's
// room, per-token charging on a per_token endpoint (and the fairness it
// buys when tenants' generations differ tenfold), and requeue() of a request
// whose worker was lost. Simulated time throughout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/scheduler.hpp"
#include "tests/support/scheduler_fixture.hpp"

namespace fairsched::core {
namespace {

constexpr TimeNs kMs = kNsPerMs;
constexpr std::int64_t kQuantum = 256;
constexpr std::uint64_t kRoomy = std::uint64_t{1} << 40;  // KV tokens that never limit

// One endpoint served by workers: per-token charging, batch limits that never
// bind (take() ignores them anyway).
SchedulerSpec workerSpec(CostModel cost = CostModel::kTokens, bool per_token = true) {
  EndpointSpec e;
  e.name = "generate";
  e.cost = cost;
  e.quantum = cost == CostModel::kRequests ? 1 : kQuantum;
  e.max_batch_requests = 4;
  e.max_batch_tokens = 1 << 16;
  e.max_wait = 2 * kMs;
  e.max_output_tokens = 4096;
  e.parallelism = 8;
  e.per_token = per_token;
  return testing::twoTierSpec(e);
}

struct Fixture : testing::SchedulerFixture {
  using SchedulerFixture::SchedulerFixture;

  Handle submit(TenantId t, TimeNs now, std::uint32_t in = 100, std::uint32_t out = 100,
                TimeNs deadline = kNever) {
    Request r = request(t, in, out);
    r.deadline = deadline;
    const Admission a = sched.submit(r, now);
    EXPECT_EQ(a.status, Status::kOk);
    return a.handle;
  }
  std::vector<Dispatched> take(TimeNs now, std::uint32_t max_requests,
                               std::uint64_t max_tokens = kRoomy) {
    const bool any = sched.take(0, now, max_requests, max_tokens, batch, done);
    EXPECT_EQ(any, !batch.requests.empty());
    return batch.requests;
  }
  std::int64_t deficit(TenantId t) { return sched.view(t, 0)->deficit; }
  TenantStats stats(TenantId t) { return sched.view(t, 0)->stats; }
};

std::vector<Handle> handlesOf(const std::vector<Dispatched>& ds) {
  std::vector<Handle> out;
  for (const Dispatched& d : ds) out.push_back(d.handle);
  return out;
}

// ---- take() -----------------------------------------------------------------------

TEST(SchedulerTake, TakesAtMostMaxRequests) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  for (int i = 0; i < 5; ++i) f.submit(a, 0);
  EXPECT_EQ(f.take(0, 3).size(), 3u);
  EXPECT_EQ(f.sched.queued(0), 2u);
  EXPECT_EQ(f.sched.inFlight(), 3u);
  EXPECT_TRUE(f.take(0, 0).empty()) << "no free sequence: nothing is taken";
  EXPECT_EQ(f.sched.queued(0), 2u);
  EXPECT_EQ(f.take(0, 100).size(), 2u);
}

TEST(SchedulerTake, TakesUpToMaxTokensInclusive) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  for (int i = 0; i < 5; ++i) f.submit(a, 0, 100, 100);  // 200 tokens each
  const std::vector<Dispatched> first = f.take(0, 10, 600);
  EXPECT_EQ(first.size(), 3u);
  EXPECT_EQ(f.batch.tokens, 600u);
  EXPECT_TRUE(f.take(0, 10, 199).empty());
  EXPECT_EQ(f.sched.queued(0), 2u);
  EXPECT_EQ(f.take(0, 10, 200).size(), 1u);
}

TEST(SchedulerTake, TakesAtOnceWithoutWaitingForABatch) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  f.submit(a, 1000);
  EXPECT_GT(f.sched.batchDueAt(0), 1000) << "a partial batch would wait for max_wait";
  EXPECT_FALSE(f.sched.nextBatch(0, 1000, f.batch, f.done));
  EXPECT_EQ(f.take(1000, 1).size(), 1u);
}

TEST(SchedulerTake, ClosesBeforeAHeadThatDoesNotFitAndItsTenantKeepsItsTurn) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  const TenantId b = f.tenant("b");
  const Handle a1 = f.submit(a, 0, 100, 900);  // 1000 tokens
  const Handle b1 = f.submit(b, 0, 100, 100);  // 200
  const Handle b2 = f.submit(b, 0, 100, 100);
  // a's turn comes first and its request does not fit: nothing is taken, and
  // b's smaller requests do not slip past it.
  EXPECT_TRUE(f.take(0, 10, 600).empty());
  EXPECT_EQ(f.sched.view(b, 0)->queued, 2u);
  // a still has the turn: with room for a1 and not for a1 + b1, a1 alone.
  EXPECT_EQ(handlesOf(f.take(0, 10, 1100)), std::vector<Handle>{a1});
  // Then b, which closes again before b2 does not fit.
  EXPECT_EQ(handlesOf(f.take(0, 10, 200)), std::vector<Handle>{b1});
  EXPECT_EQ(handlesOf(f.take(0, 10, 200)), std::vector<Handle>{b2});
}

TEST(SchedulerTake, ExpiresQueuedRequestsPastTheirDeadline) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  f.submit(a, 0, 100, 100, 5 * kMs);
  const Handle later = f.submit(a, 0, 100, 100);
  EXPECT_EQ(handlesOf(f.take(5 * kMs, 10)), std::vector<Handle>{later});
  ASSERT_EQ(f.done.size(), 1u);
  EXPECT_EQ(f.done[0].status, Status::kDeadlineExceeded);
}

// ---- charge() ---------------------------------------------------------------------

class SchedulerCharge : public ::testing::TestWithParam<CostModel> {};

TEST_P(SchedulerCharge, MovesTheDeficitByExactlyTheTokensAndCountsThem) {
  Fixture f(workerSpec(GetParam()));
  const TenantId a = f.tenant("a");
  f.submit(a, 0, 100, 500);
  f.submit(a, 0, 100, 500);  // keeps a backlogged, so its deficit is not reset
  const std::vector<Dispatched> taken = f.take(0, 1);
  ASSERT_EQ(taken.size(), 1u);
  const Handle h = taken[0].handle;
  const std::int64_t d0 = f.deficit(a);
  EXPECT_EQ(d0, kQuantum - 100) << "per token, dispatch charges the prompt only";
  EXPECT_TRUE(f.sched.charge(h, 37, 1 * kMs));
  EXPECT_EQ(f.deficit(a), d0 - 37);
  EXPECT_TRUE(f.sched.charge(h, 1, 2 * kMs));
  EXPECT_EQ(f.deficit(a), d0 - 38);
  EXPECT_TRUE(f.sched.charge(h, 0, 3 * kMs));
  EXPECT_EQ(f.deficit(a), d0 - 38);
  EXPECT_EQ(f.stats(a).tokens_served, 38u);
  EXPECT_EQ(f.sched.recentTokens(0, 3 * kMs), 38u);
  // The final count settles nothing further: the deficit stays, and the
  // tokens already counted are not counted again (the prompt is, now).
  EXPECT_TRUE(f.sched.complete(h, 38, 4 * kMs));
  EXPECT_EQ(f.deficit(a), d0 - 38);
  EXPECT_EQ(f.stats(a).tokens_served, 38u + 100u);
}

TEST_P(SchedulerCharge, TokensReportedOnlyAtTheFinishAreCountedOnce) {
  Fixture f(workerSpec(GetParam()));
  const TenantId a = f.tenant("a");
  f.submit(a, 0, 100, 500);
  const Handle h = f.take(0, 1).at(0).handle;
  EXPECT_TRUE(f.sched.charge(h, 10, 0));
  EXPECT_TRUE(f.sched.complete(h, 25, 0));
  EXPECT_EQ(f.stats(a).tokens_served, 10u + 100u + 15u);
}

INSTANTIATE_TEST_SUITE_P(TokensAndAdaptive, SchedulerCharge,
                         ::testing::Values(CostModel::kTokens, CostModel::kAdaptive));

// A request ended while running, by its client or its deadline, is counted
// by why it ended, not as completed; its tokens are still counted served.
TEST(SchedulerComplete, ARunningRequestEndedByItsClientOrDeadlineIsCountedByWhy) {
  Fixture f(workerSpec(CostModel::kTokens));
  const TenantId a = f.tenant("a");
  for (int i = 0; i < 3; ++i) f.submit(a, 0, 10, 50);
  const std::vector<Dispatched> running = f.take(0, 3);
  ASSERT_EQ(running.size(), 3u);
  EXPECT_TRUE(f.sched.complete(running[0].handle, 5, 0, Status::kCancelled));
  EXPECT_TRUE(f.sched.complete(running[1].handle, 5, 0, Status::kDeadlineExceeded));
  EXPECT_TRUE(f.sched.complete(running[2].handle, 5, 0, Status::kExecutorFailed));
  const TenantStats st = f.stats(a);
  EXPECT_EQ(st.cancelled, 1u);
  EXPECT_EQ(st.expired, 1u);
  EXPECT_EQ(st.completed, 1u);
  EXPECT_EQ(st.tokens_served, 3u * (10u + 5u));
  EXPECT_EQ(f.sched.view(a, 0)->in_flight, 0u);
}

TEST(SchedulerCharge, ElsewhereTheDeficitDoesNotMove) {
  Fixture f(workerSpec(CostModel::kTokens, /*per_token=*/false));
  const TenantId a = f.tenant("a");
  f.submit(a, 0, 100, 100);
  f.submit(a, 0, 100, 100);
  const Handle h = f.take(0, 1).at(0).handle;
  const std::int64_t d0 = f.deficit(a);
  EXPECT_EQ(d0, kQuantum - 200) << "charged input + max output at dispatch";
  EXPECT_TRUE(f.sched.charge(h, 50, 0));
  EXPECT_EQ(f.deficit(a), d0);
  EXPECT_TRUE(f.sched.complete(h, 50, 0));
  EXPECT_EQ(f.stats(a).tokens_served, 150u) << "every token counted once, at completion";
}

TEST(SchedulerCharge, UnderTheRequestsModelTokensAreCountedNotCharged) {
  Fixture f(workerSpec(CostModel::kRequests));
  const TenantId a = f.tenant("a");
  f.submit(a, 0, 100, 100);
  f.submit(a, 0, 100, 100);
  const Handle h = f.take(0, 1).at(0).handle;
  const std::int64_t d0 = f.deficit(a);
  EXPECT_TRUE(f.sched.charge(h, 50, 0));
  EXPECT_EQ(f.deficit(a), d0);
  EXPECT_EQ(f.stats(a).tokens_served, 50u);
}

TEST(SchedulerCharge, UnknownQueuedAndFinishedHandlesAreRefused) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  EXPECT_FALSE(f.sched.charge(0, 1, 0));
  EXPECT_FALSE(f.sched.requeue(0, 0));
  EXPECT_FALSE(f.sched.charge(0x0000000700000003ULL, 1, 0));
  EXPECT_FALSE(f.sched.requeue(0x0000000700000003ULL, 0));
  const Handle first = f.submit(a, 0);
  const Handle queued = f.submit(a, 0);
  EXPECT_FALSE(f.sched.charge(queued, 1, 0)) << "not in flight";
  EXPECT_FALSE(f.sched.requeue(queued, 0)) << "not in flight";
  ASSERT_EQ(handlesOf(f.take(0, 1)), std::vector<Handle>{first});
  ASSERT_TRUE(f.sched.complete(first, 1, 0));
  EXPECT_FALSE(f.sched.charge(first, 1, 0)) << "finished";
  EXPECT_FALSE(f.sched.requeue(first, 0)) << "finished";
  // Its slot is reused by the next request: the old handle still names nothing.
  const Handle reuse = f.submit(a, 0);
  ASSERT_EQ(reuse & 0xffffffffu, first & 0xffffffffu);
  ASSERT_EQ(f.take(0, 2).size(), 2u);
  EXPECT_FALSE(f.sched.charge(first, 1, 0));
  EXPECT_FALSE(f.sched.requeue(first, 0));
  EXPECT_EQ(f.stats(a).tokens_served, 1u + 100u);
}

// ---- fairness per token -----------------------------------------------------------

struct Running {
  Handle handle;
  int tenant;          // 0 or 1
  std::uint32_t left;  // output tokens still to generate
  std::uint32_t output;
};

struct RunResult {
  double spread = 0;  // max over intervals of |service_a - service_b|
  std::uint64_t served[2] = {0, 0};
  std::uint64_t completed[2] = {0, 0};
};

// Two always-backlogged tenants on a worker of `sequences` sequences that
// generates `per_step` tokens per sequence and step. Tenant 0's requests
// generate `outputs[0]` tokens, tenant 1's `outputs[1]`; every prompt is
// `input` tokens. Service is counted as it happens: the prompt at dispatch,
// each output token as it is generated (exactly what charge() is told).
RunResult simulate(std::uint32_t sequences, std::uint32_t per_step, std::uint32_t input,
                   const std::uint32_t (&outputs)[2], int steps) {
  Fixture f(workerSpec());
  const TenantId t[2] = {f.tenant("long"), f.tenant("short")};
  std::vector<Running> running;
  RunResult r;
  // D(k) = service_0 - service_1 after step k; the spread is max D - min D.
  double lo = 0, hi = 0;
  for (int step = 0; step < steps; ++step) {
    const TimeNs now = step * kMs;
    for (Running& run : running) {
      const std::uint32_t n = std::min(run.left, per_step);
      EXPECT_TRUE(f.sched.charge(run.handle, n, now));
      r.served[run.tenant] += n;
      run.left -= n;
      if (run.left == 0) {
        EXPECT_TRUE(f.sched.complete(run.handle, run.output, now));
        r.completed[run.tenant]++;
      }
    }
    std::erase_if(running, [](const Running& run) { return run.left == 0; });
    // Deeper than one take() can drain: both tenants stay backlogged.
    for (int i = 0; i < 2; ++i) {
      while (!f.sched.view(t[i], 0) || f.sched.view(t[i], 0)->queued <= sequences) {
        f.submit(t[i], now, input, 1024);
      }
    }
    const auto free = static_cast<std::uint32_t>(sequences - running.size());
    for (const Dispatched& d : f.take(now, free)) {
      const int i = d.tenant == t[0] ? 0 : 1;
      r.served[i] += d.input_tokens;
      running.push_back({d.handle, i, outputs[i], outputs[i]});
    }
    const double diff = static_cast<double>(r.served[0]) - static_cast<double>(r.served[1]);
    lo = std::min(lo, diff);
    hi = std::max(hi, diff);
  }
  EXPECT_TRUE(f.done.empty());
  r.spread = hi - lo;
  return r;
}

// One sequence: every charge of a request lands before the next decision, so
// the bound of drr_scheduler.hpp holds as stated, with a request's cost its
// prompt and everything it generates.
TEST(SchedulerPerToken, TenfoldLongerGenerationsGetTheSameTokensWithinTheDrrBound) {
  constexpr std::uint32_t kInput = 16;
  constexpr std::uint32_t kOutputs[2] = {1000, 100};
  const RunResult r = simulate(1, 50, kInput, kOutputs, 20000);
  const double bound = 2.0 * kQuantum + (kInput + kOutputs[0]) + (kInput + kOutputs[1]);
  EXPECT_LE(r.spread, bound) << "served " << r.served[0] << " / " << r.served[1];
  const double ratio = static_cast<double>(r.served[0]) / static_cast<double>(r.served[1]);
  EXPECT_NEAR(ratio, 1.0, 0.01);
  // The same tokens: about ten short requests for each long one.
  EXPECT_GT(r.completed[1], 8 * r.completed[0]);
  EXPECT_GT(r.completed[0], 100u);
}

// Many sequences: a tenant may dispatch again before the output of its
// requests in flight is charged (at most `sequences` of them), so each
// tenant's Max in the bound grows to its prompt plus what that many of its
// requests generate. With one sequence this is the bound above.
TEST(SchedulerPerToken, TenfoldLongerGenerationsOnAWideWorkerStayWithinTheBoundPlusInFlight) {
  constexpr std::uint32_t kSequences = 8;
  constexpr std::uint32_t kInput = 16;
  constexpr std::uint32_t kOutputs[2] = {1000, 100};
  const RunResult r = simulate(kSequences, 10, kInput, kOutputs, 20000);
  const double bound =
      2.0 * kQuantum + (kInput + kSequences * kOutputs[0]) + (kInput + kSequences * kOutputs[1]);
  EXPECT_LE(r.spread, bound) << "served " << r.served[0] << " / " << r.served[1];
  const double ratio = static_cast<double>(r.served[0]) / static_cast<double>(r.served[1]);
  EXPECT_NEAR(ratio, 1.0, 0.02);
  EXPECT_GT(r.completed[1], 8 * r.completed[0]);
}

// ---- requeue() --------------------------------------------------------------------

TEST(SchedulerRequeue, RequestGoesBackAtItsPlaceAheadOfLaterArrivals) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  const Handle r1 = f.submit(a, 0);
  const Handle r2 = f.submit(a, 1);
  const Handle r3 = f.submit(a, 2);
  ASSERT_EQ(handlesOf(f.take(3, 1)), std::vector<Handle>{r1});
  const Handle r4 = f.submit(a, 4);
  EXPECT_TRUE(f.sched.requeue(r1, 5));
  const TenantView v = *f.sched.view(a, 0);
  EXPECT_EQ(v.queued, 4u);
  EXPECT_EQ(v.in_flight, 0u);
  EXPECT_EQ(v.stats.dispatched, 0u);
  EXPECT_EQ(f.sched.inFlight(), 0u);
  EXPECT_FALSE(f.sched.requeue(r1, 5)) << "queued again, not in flight";
  // The same handle, taken first; then the others in arrival order.
  const std::vector<Dispatched> again = f.take(6, 1);
  ASSERT_EQ(handlesOf(again), std::vector<Handle>{r1});
  EXPECT_EQ(again[0].id, 1u);
  EXPECT_EQ(again[0].arrival, 0) << "it keeps its arrival";
  EXPECT_TRUE(f.sched.complete(r1, 100, 7));
  EXPECT_EQ(handlesOf(f.take(8, 10)), (std::vector<Handle>{r2, r3, r4}));
  EXPECT_EQ(f.stats(a).dispatched, 4u);
  EXPECT_EQ(f.stats(a).completed, 1u);
}

TEST(SchedulerRequeue, RequestGoesBackAheadOfOtherTenantsWhenItsTenantHasTheTurn) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  const TenantId b = f.tenant("b");
  const Handle a1 = f.submit(a, 0);
  f.submit(a, 0);
  f.submit(b, 0);
  ASSERT_EQ(handlesOf(f.take(0, 1)), std::vector<Handle>{a1});
  EXPECT_TRUE(f.sched.requeue(a1, 1));
  EXPECT_EQ(handlesOf(f.take(2, 1)), std::vector<Handle>{a1});
}

TEST(SchedulerRequeue, RefundsWhatDispatchAndTokensCharged) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  const Handle r1 = f.submit(a, 0, 100, 500);
  f.submit(a, 0, 100, 500);  // keeps a backlogged
  ASSERT_EQ(handlesOf(f.take(0, 1)), std::vector<Handle>{r1});
  const std::int64_t after_dispatch = f.deficit(a);
  ASSERT_TRUE(f.sched.charge(r1, 30, 1));
  ASSERT_EQ(f.deficit(a), after_dispatch - 30);
  EXPECT_TRUE(f.sched.requeue(r1, 2));
  EXPECT_EQ(f.deficit(a), after_dispatch + 100) << "the prompt and the 30 tokens given back";
  // Dispatched again, it pays again.
  ASSERT_EQ(handlesOf(f.take(3, 1)), std::vector<Handle>{r1});
  EXPECT_EQ(f.deficit(a), after_dispatch);
}

// Regression: requeue() queued the request again without its deadline entry
// (dropped while it ran), so with no worker left to take it, it never expired.
TEST(SchedulerRequeue, RequestWithADeadlineStillExpiresAfterARequeue) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  const Handle r1 = f.submit(a, 0, 100, 100, 50 * kMs);
  ASSERT_EQ(handlesOf(f.take(0, 1)), std::vector<Handle>{r1});
  // The daemon's loop asks for the next deadline while r1 runs: none queued.
  EXPECT_EQ(f.sched.nextDeadline(), kNever);
  EXPECT_TRUE(f.sched.requeue(r1, 1 * kMs));  // its worker is lost; no other worker comes
  EXPECT_EQ(f.sched.nextDeadline(), 50 * kMs);
  f.sched.expireDeadlines(50 * kMs, f.done);
  ASSERT_EQ(f.done.size(), 1u);
  EXPECT_EQ(f.done[0].id, 1u);
  EXPECT_EQ(f.done[0].status, Status::kDeadlineExceeded);
  EXPECT_EQ(f.sched.queued(0), 0u);
  EXPECT_FALSE(f.sched.complete(r1, 0, 50 * kMs));
}

TEST(SchedulerRequeue, RequestRequeuedPastItsDeadlineExpiresAtTheNextCheck) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a");
  const Handle r1 = f.submit(a, 0, 100, 100, 50 * kMs);
  ASSERT_EQ(handlesOf(f.take(0, 1)), std::vector<Handle>{r1});
  f.sched.expireDeadlines(60 * kMs, f.done);  // r1 runs: nothing expires
  EXPECT_TRUE(f.done.empty());
  EXPECT_TRUE(f.sched.requeue(r1, 60 * kMs));
  f.sched.expireDeadlines(61 * kMs, f.done);
  ASSERT_EQ(f.done.size(), 1u);
  EXPECT_EQ(f.done[0].status, Status::kDeadlineExceeded);
}

// ---- preemption ------------------------------------------------------------------

SchedulerSpec preemptSpec(Fairness fairness = Fairness::kRecent, double max_per_s = 1000) {
  SchedulerSpec s = workerSpec();
  EndpointSpec& e = s.endpoints[0];
  e.quantum = 16;
  e.fairness = fairness;
  e.half_life = 20 * kNsPerSec;
  e.preemption.enabled = true;
  e.preemption.max_per_s = max_per_s;
  e.preemption.min_progress_tokens = 8;
  return s;
}

std::vector<Scheduler::Running> runningOf(const std::vector<Dispatched>& ds,
                                          std::uint32_t progress) {
  std::vector<Scheduler::Running> out;
  for (const Dispatched& d : ds) out.push_back({d.handle, progress});
  return out;
}

// One request of `runner` runs and generates `tokens`, then `waiter` submits:
// the victim preemptionVictim() names for it.
Handle victimForOneRunning(Fixture& f, TenantId runner, TenantId waiter, int tokens) {
  f.submit(runner, 0);
  const auto running = f.take(0, 1);
  for (int i = 0; i < tokens; ++i) f.sched.charge(running[0].handle, 1, kMs);
  f.submit(waiter, kMs);
  return f.sched.preemptionVictim(0, kMs, runningOf(running, static_cast<std::uint32_t>(tokens)));
}

TEST(SchedulerPreemption, NoVictimWhenPreemptionIsOff) {
  SchedulerSpec spec = preemptSpec();
  spec.endpoints[0].preemption.enabled = false;
  Fixture f(spec);
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  EXPECT_EQ(victimForOneRunning(f, a, b, 50), 0u);
}

TEST(SchedulerPreemption, TheMostServedTenantsNewestSequenceMakesRoom) {
  Fixture f(preemptSpec());
  const TenantId a = f.tenant("a"), c = f.tenant("c"), b = f.tenant("b");
  for (int i = 0; i < 3; ++i) f.submit(a, 0);
  std::vector<Dispatched> running;
  for (int i = 0; i < 3; ++i) running.push_back(f.take(i * kMs, 1).at(0));
  f.submit(c, 0);
  const auto from_c = f.take(0, 1);
  running.push_back(from_c[0]);
  for (const Dispatched& d : running) {
    for (int i = 0; i < 20; ++i) f.sched.charge(d.handle, 1, 10 * kMs);
  }
  f.submit(b, 20 * kMs);  // b has been served nothing; no room
  const Handle victim = f.sched.preemptionVictim(0, 20 * kMs, runningOf(running, 20));
  // a was served 3 prompts and 60 tokens, c one prompt and 20: a gives back
  // the sequence it got last.
  EXPECT_EQ(victim, running[2].handle);
}

// The victim is the most-served tenant's sequence cheapest to resume: its
// prompt, less what its worker's prefix cache holds, and what it generated.
TEST(SchedulerPreemption, TheCheapestToResumeGoesAndACachedPromptIsCheap) {
  Fixture f(preemptSpec());
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  f.submit(a, 0, /*in=*/200);
  f.submit(a, 0, /*in=*/1000);
  f.submit(a, 0, /*in=*/1200);
  std::vector<Dispatched> running;
  for (int i = 0; i < 3; ++i) running.push_back(f.take(i * kMs, 1).at(0));
  for (const Dispatched& d : running) {
    for (int i = 0; i < 20; ++i) f.sched.charge(d.handle, 1, 10 * kMs);
  }
  f.submit(b, 20 * kMs);  // b runs nothing: a gives one back
  std::vector<Scheduler::Running> r = runningOf(running, 20);
  EXPECT_EQ(f.sched.preemptionVictim(0, 20 * kMs, r), running[0].handle) << "the shortest prompt";
  r[2].cached_tokens = 1100;  // 100 + 20 generated to recompute, against 200 + 20
  EXPECT_EQ(f.sched.preemptionVictim(0, 20 * kMs, r), running[2].handle);
}

TEST(SchedulerPreemption, ALessServedRunningTenantIsLeftAlone) {
  Fixture f(preemptSpec());
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  f.submit(a, 0);
  const auto running = f.take(0, 1);
  for (int i = 0; i < 10; ++i) f.sched.charge(running[0].handle, 1, kMs);
  // b was served more than a, and waits for more: a keeps its sequence.
  f.submit(b, kMs, 100, 100);
  const auto b_run = f.take(kMs, 1);
  for (int i = 0; i < 500; ++i) f.sched.charge(b_run[0].handle, 1, 2 * kMs);
  f.sched.complete(b_run[0].handle, 500, 2 * kMs);
  f.submit(b, 3 * kMs);
  EXPECT_EQ(f.sched.preemptionVictim(0, 3 * kMs, runningOf(running, 10)), 0u);
}

TEST(SchedulerPreemption, ASequenceThatMadeTooLittleProgressIsNotPreempted) {
  Fixture f(preemptSpec());
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  f.submit(a, 0);
  f.submit(a, 0);
  const auto running = f.take(0, 2);
  for (int i = 0; i < 100; ++i) f.sched.charge(running[0].handle, 1, kMs);
  f.submit(b, kMs);
  EXPECT_EQ(f.sched.preemptionVictim(0, kMs, runningOf(running, 7)), 0u) << "min progress is 8";
  EXPECT_EQ(f.sched.preemptionVictim(0, kMs, runningOf(running, 8)), running[1].handle);
}

TEST(SchedulerPreemption, TenantsThatHaveTheirShareOfSequencesDoNotTrade) {
  // a and b run two sequences each; b was served less, and waits for a
  // third: it has its share (2 of 4) already, so a keeps its sequences.
  Fixture f(preemptSpec());
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  std::vector<Dispatched> running;
  for (int i = 0; i < 2; ++i) {
    f.submit(a, 0);
    f.submit(b, 0);
  }
  running = f.take(0, 4);
  ASSERT_EQ(running.size(), 4u);
  for (const Dispatched& d : running) {
    for (int i = 0; i < (d.tenant == a ? 200 : 20); ++i) f.sched.charge(d.handle, 1, kMs);
  }
  f.submit(b, 2 * kMs);
  EXPECT_EQ(f.sched.preemptionVictim(0, 2 * kMs, runningOf(running, 50)), 0u);
  // A third tenant with nothing running is below its share (4/3): it gets
  // one of the most-served tenant's.
  const TenantId c = f.tenant("c");
  f.submit(c, 2 * kMs);
  std::vector<Done> done;
  const Handle v = f.sched.preemptionVictim(0, 2 * kMs, runningOf(running, 50));
  ASSERT_NE(v, 0u);
  EXPECT_EQ(std::find_if(running.begin(), running.end(),
                         [&](const Dispatched& d) { return d.handle == v; })
                ->tenant,
            a);
}

TEST(SchedulerPreemption, AHigherTiersRequestTakesTheLowestTiersPlace) {
  Fixture f(preemptSpec(Fairness::kDrr));
  const TenantId trial = f.sched.tenants().acquire("t", TierId{1});
  const TenantId paid = f.sched.tenants().acquire("p", TierId{0});
  f.submit(trial, 0);
  f.submit(trial, 0);
  const auto running = f.take(0, 2);
  f.submit(paid, kMs);
  // Whatever the service: a lower tier gives way to a higher one, newest first.
  EXPECT_EQ(f.sched.preemptionVictim(0, kMs, runningOf(running, 8)), running[1].handle);
  // ...but never the other way round.
  Fixture g(preemptSpec(Fairness::kDrr));
  const TenantId p2 = g.tenant("p", TierId{0}), t2 = g.tenant("t", TierId{1});
  EXPECT_EQ(victimForOneRunning(g, p2, t2, 1000), 0u);
}

TEST(SchedulerPreemption, TheRateOfPreemptionsIsCapped) {
  Fixture f(preemptSpec(Fairness::kRecent, /*max_per_s=*/2));
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  for (int i = 0; i < 6; ++i) f.submit(a, 0);
  const auto running = f.take(0, 6);
  for (const Dispatched& d : running) {
    for (int i = 0; i < 50; ++i) f.sched.charge(d.handle, 1, kMs);
  }
  for (int i = 0; i < 6; ++i) f.submit(b, kMs);
  TimeNs now = kNsPerSec;  // a full bucket: 2
  std::vector<Dispatched> left = running;
  std::size_t preempted = 0;
  for (int i = 0; i < 6; ++i) {
    const Handle v = f.sched.preemptionVictim(0, now, runningOf(left, 50));
    if (v == 0) break;
    EXPECT_TRUE(f.sched.preempt(v, now));
    left.erase(
        std::find_if(left.begin(), left.end(), [&](const Dispatched& d) { return d.handle == v; }));
    ++preempted;
  }
  EXPECT_EQ(preempted, 2u);
  now += kNsPerSec / 2;  // one more token in the bucket
  EXPECT_NE(f.sched.preemptionVictim(0, now, runningOf(left, 50)), 0u);
  EXPECT_EQ(f.stats(a).preempted, 2u);
}

TEST(SchedulerPreemption, APreemptedRequestResumesFirstWithItsTokensAndNoSecondPrompt) {
  Fixture f(preemptSpec());
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  const Handle first = f.submit(a, 0, 100, 200);
  const Handle second = f.submit(a, 0, 100, 200);
  const Handle third = f.submit(a, 0, 100, 200);
  const auto running = f.take(0, 2);
  ASSERT_EQ(handlesOf(running), (std::vector<Handle>{first, second}));
  EXPECT_EQ(running[1].resumed_tokens, 0u);
  for (int i = 0; i < 30; ++i) {
    f.sched.charge(first, 1, kMs);
    f.sched.charge(second, 1, kMs);
  }
  const TenantStats before = f.stats(a);
  f.submit(b, kMs);
  // a runs both sequences: the newer one (second) makes room for b.
  ASSERT_EQ(f.sched.preemptionVictim(0, kMs, runningOf(running, 30)), second);
  ASSERT_TRUE(f.sched.preempt(second, kMs));
  EXPECT_FALSE(f.sched.preempt(second, kMs)) << "not in flight any more";
  EXPECT_EQ(f.sched.queued(0), 3u);
  EXPECT_EQ(f.sched.inFlight(), 1u);
  // b goes first (served nothing), then a's preempted request before a's
  // third one: it keeps its place.
  auto next = f.take(2 * kMs, 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].tenant, b);
  f.sched.complete(next[0].handle, 0, 2 * kMs);
  next = f.take(3 * kMs, 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].handle, second);
  EXPECT_EQ(next[0].resumed_tokens, 30u);
  EXPECT_EQ(next[0].input_tokens, 100u);
  // The second dispatch charged no prompt: the tokens served count the
  // prompt once, at completion, plus each generated token once.
  for (int i = 0; i < 20; ++i) f.sched.charge(second, 1, 4 * kMs);
  ASSERT_TRUE(f.sched.complete(second, 50, 5 * kMs));
  const TenantStats after = f.stats(a);
  EXPECT_EQ(after.tokens_served - before.tokens_served, 20u + 100u);
  EXPECT_EQ(after.completed, 1u);
  EXPECT_EQ(after.preempted, 1u);
  (void)third;
}

// ---- settleInput: a prompt counted by the worker ----------------------------------

TEST(SchedulerSettleInput, ChargesTheDifferenceAndSettlesTheTokenLimitByIt) {
  SchedulerSpec spec = workerSpec();
  spec.tier_limits[1][0] = {{LimitUnit::kTokens, 100000, 60 * kNsPerSec}};
  Fixture f(spec);
  const TenantId a = f.tenant("a");
  const Handle h = f.submit(a, 0, 100, 100);  // reserves 200 tokens
  ASSERT_EQ(f.take(0, 1).size(), 1u);
  const std::int64_t before = f.deficit(a);
  // The worker counted 150 prompt tokens, not 100: 50 more are charged.
  ASSERT_TRUE(f.sched.settleInput(h, 150, kMs));
  EXPECT_EQ(f.deficit(a), before - 50);
  ASSERT_TRUE(f.sched.complete(h, 20, 2 * kMs));
  // The limit counts what was used: 150 prompt + 20 output.
  const auto usage = f.sched.limitUsage(a, 0, 3 * kMs);
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].used, 170u);
  EXPECT_EQ(f.stats(a).tokens_served, 170u);

  // Shorter than submitted: the tenant gets the difference back.
  const Handle g = f.submit(a, 4 * kMs, 100, 100);
  ASSERT_EQ(f.take(4 * kMs, 1).size(), 1u);
  const std::int64_t mid = f.deficit(a);
  ASSERT_TRUE(f.sched.settleInput(g, 40, 5 * kMs));
  EXPECT_EQ(f.deficit(a), mid + 60);
  ASSERT_TRUE(f.sched.complete(g, 10, 6 * kMs));
  EXPECT_EQ(f.sched.limitUsage(a, 0, 7 * kMs)[0].used, 170u + 50u);
  EXPECT_FALSE(f.sched.settleInput(g, 10, 8 * kMs)) << "no longer in flight";
}

// --- headroom ----------------------------------------------------------------

TEST(SchedulerHeadroom, OnlyTenantsWithNothingInFlightTakeItOneRequestEach) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a"), b = f.tenant("b"), c = f.tenant("c");
  for (int i = 0; i < 10; ++i) f.submit(a, 0);
  ASSERT_EQ(f.take(0, 3).size(), 3u);  // a runs 3
  f.submit(b, 1);
  f.submit(b, 1);
  f.submit(c, 2);
  // a has requests in flight: never in the headroom; b and c do not, in the
  // order they became so, one each.
  ASSERT_TRUE(f.sched.takeHeadroom(0, 3, 4, kRoomy, f.batch, f.done));
  std::vector<TenantId> got;
  for (const Dispatched& d : f.batch.requests) got.push_back(d.tenant);
  EXPECT_EQ(got, (std::vector<TenantId>{b, c}));
  EXPECT_FALSE(f.sched.takeHeadroom(0, 4, 4, kRoomy, f.batch, f.done));
  EXPECT_EQ(f.sched.view(b, 0)->queued, 1u);
}

TEST(SchedulerHeadroom, ATenantWhoseLastRequestEndsWithMoreQueuedIsANewcomerAgain) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  f.submit(b, 0);
  f.submit(b, 0);
  const std::vector<Dispatched> first = f.take(0, 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_FALSE(f.sched.takeHeadroom(0, 1, 4, kRoomy, f.batch, f.done));  // b runs one
  f.submit(a, 1);
  ASSERT_TRUE(f.sched.complete(first[0].handle, 10, 2));
  ASSERT_TRUE(f.sched.takeHeadroom(0, 3, 4, kRoomy, f.batch, f.done));
  ASSERT_EQ(f.batch.requests.size(), 2u);  // a (waiting since 1), then b (since 2)
  EXPECT_EQ(f.batch.requests[0].tenant, a);
  EXPECT_EQ(f.batch.requests[1].tenant, b);
}

TEST(SchedulerHeadroom, ATakenRequestIsChargedAsAnyDispatch) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  for (int i = 0; i < 4; ++i) f.submit(a, 0);
  ASSERT_EQ(f.take(0, 1).size(), 1u);
  f.submit(b, 1, 300, 100);
  f.submit(b, 1, 300, 100);
  const std::int64_t before = f.deficit(b);
  ASSERT_TRUE(f.sched.takeHeadroom(0, 2, 1, kRoomy, f.batch, f.done));
  EXPECT_EQ(f.deficit(b), before - 300);  // the prompt, charged out of turn
  EXPECT_EQ(f.stats(b).dispatched, 1u);
  // b keeps its place for what it still has queued: the fair order serves it.
  bool b_served = false;
  for (int round = 0; round < 8 && !b_served; ++round) {
    for (const Dispatched& d : f.take(3 + round, 1)) b_served = b_served || d.tenant == b;
  }
  EXPECT_TRUE(b_served);
}

TEST(SchedulerHeadroom, RespectsTheTokensAndExpiresWhatIsPastItsDeadline) {
  Fixture f(workerSpec());
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  f.submit(a, 0, 100, 100, /*deadline=*/5);
  f.submit(b, 0, 500, 500);
  ASSERT_FALSE(f.sched.takeHeadroom(0, 10, 4, 999, f.batch, f.done));  // a expired, b too big
  ASSERT_EQ(f.done.size(), 1u);
  EXPECT_EQ(f.done[0].status, Status::kDeadlineExceeded);
  ASSERT_TRUE(f.sched.takeHeadroom(0, 10, 4, 1000, f.batch, f.done));
  EXPECT_EQ(f.batch.requests[0].tenant, b);
}

}  // namespace
}  // namespace fairsched::core
