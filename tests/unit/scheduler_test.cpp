// The scheduling core end to end in simulated time: admission, batch
// formation, deadlines, cancellation, limits with refunds, the backlog
// throttle, tiers, the adaptive cost model, idle-state collection, and the
// exactly-one-ending accounting.
#include "daemon/core/scheduler.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/support/scheduler_fixture.hpp"

namespace fairsched::core {
namespace {

constexpr TimeNs kMs = kNsPerMs;
constexpr TimeNs kSec = kNsPerSec;
constexpr TimeNs kMinute = 60 * kSec;

SchedulerSpec baseSpec(Policy policy = Policy::kFair, CostModel cost = CostModel::kTokens) {
  EndpointSpec e;
  e.name = "chat";
  e.cost = cost;
  e.quantum = cost == CostModel::kRequests ? 1 : 256;
  e.max_batch_requests = 4;
  e.max_batch_tokens = 4096;
  e.max_wait = 2 * kMs;
  e.max_output_tokens = 2048;
  SchedulerSpec s = testing::twoTierSpec(e, policy);
  s.idle_timeout = 10 * kSec;
  return s;
}

struct Fixture : testing::SchedulerFixture {
  using SchedulerFixture::SchedulerFixture;

  Admission submit(TenantId t, TimeNs now, std::uint32_t in = 100, std::uint32_t out = 100,
                   std::int32_t prio = 0, TimeNs deadline = kNever, std::uint64_t owner = 0) {
    Request r = request(t, in, out);
    r.priority = prio;
    r.deadline = deadline;
    r.owner = owner;
    return sched.submit(r, now);
  }
  // Form a batch (forced) and complete every request in it with `out` tokens.
  std::vector<Dispatched> runBatch(TimeNs now, std::uint32_t out = 0, bool force = true) {
    sched.nextBatch(0, now, batch, done, force);
    std::vector<Dispatched> taken = batch.requests;
    for (const auto& d : taken) {
      EXPECT_TRUE(sched.complete(d.handle, out == 0 ? d.max_output_tokens : out, now));
    }
    return taken;
  }
};

TEST(Scheduler, UnknownTenantOrEndpointIsInvalid) {
  Fixture f(baseSpec());
  Request r;
  r.tenant = 12345;
  r.input_tokens = 1;
  EXPECT_EQ(f.sched.submit(r, 0).status, Status::kInvalid);
  r.tenant = f.tenant("a");
  r.endpoint = 7;
  EXPECT_EQ(f.sched.submit(r, 0).status, Status::kInvalid);
}

TEST(Scheduler, RequestsThatCanNeverRunAreInvalid) {
  Fixture f(baseSpec());
  const TenantId a = f.tenant("a");
  EXPECT_EQ(f.submit(a, 0, 0, 0).status, Status::kInvalid);      // nothing to do
  EXPECT_EQ(f.submit(a, 0, 4000, 97).status, Status::kInvalid);  // larger than any batch
  EXPECT_EQ(f.submit(a, 0, 10, 2049).status, Status::kInvalid);  // above max_output_tokens
  EXPECT_EQ(f.submit(a, 0, 4000, 96).status, Status::kOk);       // exactly a batch
  EXPECT_EQ(f.sched.view(a, 0)->stats.rejected_invalid, 3u);
}

TEST(Scheduler, PastDeadlineAtSubmitIsDeadlineExceeded) {
  Fixture f(baseSpec());
  const TenantId a = f.tenant("a");
  EXPECT_EQ(f.submit(a, 100, 10, 10, 0, 100).status, Status::kDeadlineExceeded);
  EXPECT_EQ(f.sched.queued(0), 0u);
}

TEST(Scheduler, PartialBatchWaitsForMaxWait) {
  Fixture f(baseSpec());
  const TenantId a = f.tenant("a");
  ASSERT_EQ(f.submit(a, 1000).status, Status::kOk);
  EXPECT_EQ(f.sched.batchDueAt(0), 1000 + 2 * kMs);
  EXPECT_FALSE(f.sched.nextBatch(0, 1000 + 2 * kMs - 1, f.batch, f.done));
  EXPECT_TRUE(f.sched.nextBatch(0, 1000 + 2 * kMs, f.batch, f.done));
  EXPECT_EQ(f.batch.requests.size(), 1u);
  EXPECT_EQ(f.sched.batchDueAt(0), kNever);
}

TEST(Scheduler, FullBatchIsDueAtOnce) {
  Fixture f(baseSpec());
  const TenantId a = f.tenant("a");
  for (int i = 0; i < 4; ++i) ASSERT_EQ(f.submit(a, 0).status, Status::kOk);
  EXPECT_TRUE(f.sched.nextBatch(0, 0, f.batch, f.done));
  EXPECT_EQ(f.batch.requests.size(), 4u);
  EXPECT_EQ(f.batch.tokens, 800u);
}

TEST(Scheduler, BatchClosesWhenTheFairChoiceDoesNotFitAndThatTenantGoesFirstNext) {
  Fixture f(baseSpec());
  const TenantId a = f.tenant("a");
  const TenantId b = f.tenant("b");
  ASSERT_EQ(f.submit(a, 0, 1000, 1000).status, Status::kOk);  // 2000 tokens
  ASSERT_EQ(f.submit(b, 0, 1000, 1000).status, Status::kOk);
  ASSERT_EQ(f.submit(a, 0, 1500, 1000).status, Status::kOk);  // 2500: does not fit after 2 x 2000
  auto first = f.runBatch(0);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].tenant, a);
  EXPECT_EQ(first[1].tenant, b);
  auto second = f.runBatch(0);
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(second[0].tenant, a);
  EXPECT_EQ(second[0].input_tokens, 1500u);
}

TEST(Scheduler, SmallTenantIsNotStuckBehindABurst) {
  for (Policy policy : {Policy::kFair, Policy::kFifo}) {
    Fixture f(baseSpec(policy));
    const TenantId a = f.tenant("a");
    const TenantId b = f.tenant("b");
    for (int i = 0; i < 400; ++i) ASSERT_EQ(f.submit(a, 0).status, Status::kOk);
    ASSERT_EQ(f.submit(b, 1).status, Status::kOk);
    int batches = 0;
    bool b_served = false;
    while (!b_served && batches < 1000) {
      for (const auto& d : f.runBatch(2)) b_served = b_served || d.tenant == b;
      ++batches;
    }
    if (policy == Policy::kFair) {
      EXPECT_EQ(batches, 1) << "fair: b is served in the first batch";
    } else {
      EXPECT_EQ(batches, 101) << "fifo: b waits behind all 400 of a";
    }
  }
}

TEST(Scheduler, PriorityThenDeadlineThenArrivalWithinATenant) {
  Fixture f(baseSpec());
  const TenantId a = f.tenant("a");
  const auto low = f.submit(a, 0, 10, 10, 0);
  const auto late = f.submit(a, 0, 10, 10, 5, 10 * kSec);
  const auto early = f.submit(a, 0, 10, 10, 5, 5 * kSec);
  const auto high = f.submit(a, 0, 10, 10, 9);
  auto batch = f.runBatch(0);
  ASSERT_EQ(batch.size(), 4u);
  EXPECT_EQ(batch[0].handle, high.handle);
  EXPECT_EQ(batch[1].handle, early.handle);
  EXPECT_EQ(batch[2].handle, late.handle);
  EXPECT_EQ(batch[3].handle, low.handle);
}

TEST(Scheduler, QueueBoundGivesQueueFull) {
  SchedulerSpec spec = baseSpec();
  spec.tiers[1].default_queue_limit = 3;
  Fixture f(std::move(spec));
  const TenantId a = f.tenant("a");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(f.submit(a, 0).status, Status::kOk);
  EXPECT_EQ(f.submit(a, 0).status, Status::kQueueFull);
  f.runBatch(0);
  EXPECT_EQ(f.submit(a, 0).status, Status::kOk);
}

TEST(Scheduler, ExpiredRequestsAreCompletedAndNeverDispatched) {
  Fixture f(baseSpec());
  const TenantId a = f.tenant("a");
  const auto soon = f.submit(a, 0, 10, 10, 0, 5 * kMs);
  const auto later = f.submit(a, 0, 10, 10, 0, 50 * kMs);
  const auto never = f.submit(a, 0, 10, 10);
  ASSERT_EQ(soon.status, Status::kOk);
  EXPECT_EQ(f.sched.nextDeadline(), 5 * kMs);
  f.sched.expireDeadlines(6 * kMs, f.done);
  ASSERT_EQ(f.done.size(), 1u);
  EXPECT_EQ(f.done[0].status, Status::kDeadlineExceeded);
  EXPECT_EQ(f.sched.nextDeadline(), 50 * kMs);
  // Not swept yet, but found past its deadline when its turn comes.
  auto batch = f.runBatch(60 * kMs);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].handle, never.handle);
  ASSERT_EQ(f.done.size(), 2u);
  EXPECT_EQ(f.done[1].status, Status::kDeadlineExceeded);
  EXPECT_EQ(f.sched.view(a, 0)->stats.expired, 2u);
  EXPECT_EQ(f.sched.nextDeadline(), kNever);
  (void)later;
}

TEST(Scheduler, CancelOwnerWithdrawsQueuedButNotInFlight) {
  Fixture f(baseSpec());
  const TenantId a = f.tenant("a");
  const TenantId b = f.tenant("b");
  f.submit(a, 0, 10, 10, 0, kNever, 7);
  f.sched.nextBatch(0, 0, f.batch, f.done, true);  // a's first is in flight
  ASSERT_EQ(f.batch.requests.size(), 1u);
  const Handle in_flight = f.batch.requests[0].handle;
  for (int i = 0; i < 3; ++i) f.submit(a, 0, 10, 10, 0, kNever, 7);
  f.submit(b, 0, 10, 10, 0, kNever, 8);
  EXPECT_EQ(f.sched.cancelOwner(7, Status::kCancelled, f.done), 3u);
  EXPECT_EQ(f.done.size(), 3u);
  EXPECT_EQ(f.sched.queued(0), 1u);
  EXPECT_TRUE(f.sched.complete(in_flight, 5, 1));
  EXPECT_FALSE(f.sched.complete(in_flight, 5, 1)) << "a handle completes once";
  auto batch = f.runBatch(1);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].tenant, b);
}

TEST(Scheduler, CancelledHeadLetsTheTenantsNextRequestThrough) {
  Fixture f(baseSpec());
  const TenantId a = f.tenant("a");
  const auto first = f.submit(a, 0, 10, 10);
  const auto second = f.submit(a, 0, 20, 20);
  EXPECT_TRUE(f.sched.cancel(first.handle, Status::kCancelled, f.done));
  EXPECT_FALSE(f.sched.cancel(first.handle, Status::kCancelled, f.done));
  auto batch = f.runBatch(0);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].handle, second.handle);
}

TEST(Scheduler, RateLimitRejectsWithExactRetryAfterAndRefundsUnusedTokens) {
  SchedulerSpec spec = baseSpec();
  spec.tier_limits[1][0] = {{LimitUnit::kRequests, 3, kMinute},
                            {LimitUnit::kTokens, 1000, kMinute}};
  Fixture f(std::move(spec));
  const TenantId a = f.tenant("a");
  ASSERT_EQ(f.submit(a, 0, 100, 400).status, Status::kOk);  // reserves 500
  const Admission over = f.submit(a, 1, 100, 500);          // 600 more would exceed 1000
  ASSERT_EQ(over.status, Status::kRateLimited);
  EXPECT_EQ(over.retry_after, kMinute - 1);
  f.runBatch(2, 100);  // used 200 of 500: 300 come back
  EXPECT_EQ(f.submit(a, 3, 100, 500).status, Status::kOk);
  EXPECT_EQ(f.submit(a, 4, 1, 1).status, Status::kOk);
  const Admission third = f.submit(a, 5, 1, 1);  // the request limit (3/minute) now binds
  EXPECT_EQ(third.status, Status::kRateLimited);
  EXPECT_EQ(f.sched.view(a, 0)->stats.rejected_rate_limited, 2u);
  auto usage = f.sched.limitUsage(a, 0, 6);
  ASSERT_EQ(usage.size(), 2u);
  EXPECT_EQ(usage[0].used, 3u);
}

TEST(Scheduler, RequestLargerThanATokenLimitIsInvalid) {
  SchedulerSpec spec = baseSpec();
  spec.tier_limits[1][0] = {{LimitUnit::kTokens, 100, kMinute}};
  Fixture f(std::move(spec));
  EXPECT_EQ(f.submit(f.tenant("a"), 0, 100, 1).status, Status::kInvalid);
}

TEST(Scheduler, BacklogThrottleRejectsWhatCannotMeetTheTarget) {
  for (Policy policy : {Policy::kFair, Policy::kFifo}) {
    SchedulerSpec spec = baseSpec(policy);
    spec.endpoints[0].latency_target = 100 * kMs;
    spec.tiers[1].default_queue_limit = 100000;
    Fixture f(std::move(spec));
    const TenantId a = f.tenant("a");
    const TenantId b = f.tenant("b");
    EXPECT_EQ(f.submit(a, 0).status, Status::kOk) << "nothing measured: no rejection";
    f.sched.batchServed(0, 10'000, kSec);  // 10,000 tokens per second
    // 100 ms at 10k tokens/s = 1,000 tokens of work ahead: a's queue fills up to it.
    int admitted = 1;
    while (f.submit(a, 0).status == Status::kOk) ++admitted;
    EXPECT_EQ(admitted, 6) << "200 tokens each: 5 ahead = 1000 tokens still within target";
    // b's first request: under fair it waits only for its share; under fifo for everything.
    const Status b_status = f.submit(b, 0).status;
    if (policy == Policy::kFair) {
      EXPECT_EQ(b_status, Status::kOk);
    } else {
      EXPECT_EQ(b_status, Status::kOverloaded);
    }
  }
}

TEST(Scheduler, TiersAreStrictWithoutMinShare) {
  Fixture f(baseSpec());
  const TenantId paid = f.tenant("p", 0);
  const TenantId trial = f.tenant("t", 1);
  for (int i = 0; i < 40; ++i) {
    f.submit(paid, 0, 10, 10);
    f.submit(trial, 0, 10, 10);
  }
  for (int b = 0; b < 10; ++b) {
    for (const auto& d : f.runBatch(0)) EXPECT_EQ(d.tenant, paid);
  }
  for (const auto& d : f.runBatch(0)) EXPECT_EQ(d.tenant, trial);
}

TEST(Scheduler, ATiersBatchCapClosesTheBatchBeforeItsNextRequest) {
  SchedulerSpec spec = baseSpec();
  spec.endpoints[0].max_batch_requests = 16;
  spec.tiers[1].max_batch_tokens = 1000;  // trial: two requests of 400, or 400 after paid's 400
  Fixture f(std::move(spec));
  const TenantId paid = f.tenant("p", 0);
  const TenantId trial = f.tenant("t", 1);
  for (int i = 0; i < 6; ++i) f.submit(trial, 0, 300, 100);
  EXPECT_EQ(f.runBatch(0).size(), 2u);
  f.submit(paid, 0, 300, 100);
  f.submit(paid, 0, 300, 100);
  const auto mixed = f.runBatch(0);  // paid is not capped; trial joins only while under 1000
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_EQ(mixed[0].tenant, paid);
  EXPECT_EQ(mixed[1].tenant, paid);
  f.submit(paid, 0, 300, 100);
  const auto one_each = f.runBatch(0);
  ASSERT_EQ(one_each.size(), 2u);
  EXPECT_EQ(one_each[1].tenant, trial);
  f.submit(trial, 0, 1500, 100);  // larger than the cap: runs, alone
  for (int b = 0; b < 3; ++b) f.runBatch(0);
  EXPECT_EQ(f.sched.queued(0), 0u);
}

TEST(Scheduler, MinShareKeepsALowerTierServed) {
  SchedulerSpec spec = baseSpec();
  spec.tiers[1].min_share = 0.25;
  spec.tiers[0].default_queue_limit = spec.tiers[1].default_queue_limit = 100000;
  Fixture f(std::move(spec));
  const TenantId paid = f.tenant("p", 0);
  const TenantId trial = f.tenant("t", 1);
  for (int i = 0; i < 4000; ++i) {
    f.submit(paid, 0, 10, 10);
    f.submit(trial, 0, 10, 10);
  }
  std::uint64_t served[2] = {0, 0};
  for (int b = 0; b < 500; ++b) {
    for (const auto& d : f.runBatch(0)) served[d.tenant == trial ? 1 : 0]++;
  }
  const double share = static_cast<double>(served[1]) / static_cast<double>(served[0] + served[1]);
  EXPECT_GE(share, 0.249);
  EXPECT_LE(share, 0.26);
}

TEST(Scheduler, WeightsSplitServedTokens) {
  SchedulerSpec spec = baseSpec();
  spec.tenants.push_back({"w1", 1, 1.0, 100000, std::nullopt});
  spec.tenants.push_back({"w2", 1, 2.0, 100000, std::nullopt});
  spec.tenants.push_back({"w4", 1, 4.0, 100000, std::nullopt});
  Fixture f(std::move(spec));
  const TenantId ids[3] = {f.tenant("w1"), f.tenant("w2"), f.tenant("w4")};
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> len(10, 500);
  for (int i = 0; i < 3000; ++i) {
    for (TenantId t : ids) f.submit(t, 0, len(rng), len(rng));
  }
  std::map<TenantId, double> served;
  for (int b = 0; b < 700; ++b) {
    for (const auto& d : f.runBatch(0)) served[d.tenant] += d.input_tokens + d.max_output_tokens;
  }
  const double total = served[ids[0]] + served[ids[1]] + served[ids[2]];
  EXPECT_NEAR(served[ids[0]] / total, 1.0 / 7, 0.02 / 7);
  EXPECT_NEAR(served[ids[1]] / total, 2.0 / 7, 0.02 * 2 / 7);
  EXPECT_NEAR(served[ids[2]] / total, 4.0 / 7, 0.02 * 4 / 7);
}

// Tenant x's real outputs are 4x its prompt, y's equal its prompt; both ask
// for the same max output. Served tokens = input + actual output.
double servedRatio(CostModel cost) {
  SchedulerSpec spec = baseSpec(Policy::kFair, cost);
  spec.tiers[1].default_queue_limit = 100000;
  Fixture f(std::move(spec));
  const TenantId x = f.tenant("x");
  const TenantId y = f.tenant("y");
  for (int i = 0; i < 3000; ++i) {
    f.submit(x, 0, 100, 1000);
    f.submit(y, 0, 100, 1000);
  }
  double served[2] = {0, 0};
  for (int b = 0; b < 600; ++b) {
    f.sched.nextBatch(0, 0, f.batch, f.done, true);
    for (const auto& d : f.batch.requests) {
      const std::uint32_t out = d.tenant == x ? 400 : 100;
      f.sched.complete(d.handle, out, 0);
      if (b >= 100) served[d.tenant == x ? 0 : 1] += d.input_tokens + out;  // after warm-up
    }
  }
  return served[0] / served[1];
}

TEST(Scheduler, AdaptiveCostConvergesWhenOutputsAreFourTimesThePrompt) {
  EXPECT_NEAR(servedRatio(CostModel::kAdaptive), 1.0, 0.05);
  // Charging the reservation (tokens) treats both alike, so x gets 2.5x the real service.
  EXPECT_GT(servedRatio(CostModel::kTokens), 2.0);
}

TEST(Scheduler, IdleTenantStateIsKeptUntilItsLimitWindowsEmpty) {
  SchedulerSpec spec = baseSpec();
  spec.tier_limits[1][0] = {{LimitUnit::kRequests, 2, kMinute}};
  Fixture f(std::move(spec));
  const TenantId a = f.tenant("org-1");
  ASSERT_EQ(f.submit(a, 0).status, Status::kOk);
  f.sched.tenants().release(a);  // only the scheduler's own state holds it now
  ASSERT_EQ(f.submit(a, 0).status, Status::kOk);
  f.runBatch(1);
  // Idle past idle_timeout (10 s) but inside the minute: nothing is forgotten.
  EXPECT_EQ(f.sched.collectIdle(20 * kSec, 100), 0u);
  ASSERT_TRUE(f.sched.tenants().find("org-1").has_value());
  EXPECT_EQ(f.submit(a, 20 * kSec).status, Status::kRateLimited);
  // Once the window is empty the state and the unlisted tenant are dropped.
  EXPECT_EQ(f.sched.collectIdle(kMinute + 2, 100), 1u);
  EXPECT_FALSE(f.sched.tenants().find("org-1").has_value());
  EXPECT_EQ(f.sched.activeTenantStates(), 0u);
}

// A FleetGate whose accounts share one budget per (tenant, endpoint) and log
// what they are asked.
class FakeGate : public FleetGate {
 public:
  struct Budget {
    std::uint64_t left = 0;
    std::uint64_t refunded = 0;
  };
  class Account : public FleetAccount {
   public:
    explicit Account(Budget& b) : b_(b) {}
    FleetDecision take(std::uint64_t cost, TimeNs) override {
      if (cost > b_.left) return {false, 3 * kMs};
      b_.left -= cost;
      return {true, 0};
    }
    void refund(std::uint64_t cost, TimeNs) override {
      b_.refunded += cost;
      b_.left += cost;
    }

   private:
    Budget& b_;
  };
  std::unique_ptr<FleetAccount> open(std::string_view tenant, std::string_view endpoint,
                                     const LimitSpec& spec) override {
    opened.push_back(std::string(tenant) + "/" + std::string(endpoint));
    Budget& b =
        budgets[opened.back() + (spec.unit == LimitUnit::kTokens ? ":tokens" : ":requests")];
    if (b.left == 0 && b.refunded == 0) b.left = spec.unit == LimitUnit::kTokens ? 500 : 2;
    return std::make_unique<Account>(b);
  }
  std::vector<std::string> opened;
  std::map<std::string, Budget> budgets;
};

TEST(Scheduler, FleetScopedLimitsAreCountedThroughTheGate) {
  SchedulerSpec spec = baseSpec();
  spec.tier_limits[1][0] = {{LimitUnit::kRequests, 100, kMinute, LimitScope::kFleet},
                            {LimitUnit::kTokens, 100'000, kMinute, LimitScope::kFleet}};
  FakeGate gate;
  Fixture f(std::move(spec));
  f.sched.setFleetGate(&gate);
  const TenantId a = f.tenant("acme");
  ASSERT_EQ(f.submit(a, 0, 100, 100).status, Status::kOk);
  ASSERT_EQ(gate.opened.size(), 2u);
  EXPECT_EQ(gate.opened[0], "acme/chat");
  ASSERT_EQ(f.submit(a, 1, 100, 100).status, Status::kOk);
  const Admission third = f.submit(a, 2, 10, 10);  // the gate's 2 requests are spent
  EXPECT_EQ(third.status, Status::kRateLimited);
  EXPECT_EQ(third.retry_after, 3 * kMs);
  f.runBatch(3, 40);  // 2 × 60 unused output tokens come back through the gate
  EXPECT_EQ(gate.budgets["acme/chat:tokens"].refunded, 120u);
  EXPECT_EQ(gate.budgets["acme/chat:tokens"].left, 500u - 400u + 120u);
  // Fleet-scoped limits do not keep an idle tenant's state alive.
  EXPECT_EQ(f.sched.collectIdle(20 * kSec, 100), 1u);
}

TEST(Scheduler, ListedTenantOverridesItsTier) {
  SchedulerSpec spec = baseSpec();
  LimitTable own(1);
  own[0] = {{LimitUnit::kRequests, 1, kMinute}};
  spec.tenants.push_back({"acme", 0, 3.0, 2, own});
  Fixture f(std::move(spec));
  const TenantId acme = f.tenant("acme", 1);  // the hint is ignored for a listed tenant
  EXPECT_EQ(f.sched.tenants()[acme].tier, 0);
  EXPECT_EQ(f.sched.tenants()[acme].weight, 3.0);
  EXPECT_EQ(f.submit(acme, 0).status, Status::kOk);
  EXPECT_EQ(f.submit(acme, 0).status, Status::kRateLimited);
}

// Every submitted request ends exactly once — rejected at submit, withdrawn
// (cancelled/expired), or dispatched then completed — whatever the mix of
// operations.
RC_GTEST_PROP(SchedulerProperty, EveryRequestEndsExactlyOnce, ()) {
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  SchedulerSpec spec = baseSpec(uniform(0, 1) ? Policy::kFair : Policy::kFifo,
                                static_cast<CostModel>(uniform(0, 2)));
  spec.tiers[1].min_share = 0.2;
  spec.tiers[1].default_queue_limit = 50;
  spec.endpoints[0].latency_target = uniform(0, 1) ? 50 * kMs : 0;
  spec.tier_limits[1][0] = {{LimitUnit::kRequests, 200, kSec}};
  spec.idle_timeout = kSec;
  Fixture f(std::move(spec));
  std::vector<TenantId> tenants;
  for (int i = 0; i < 6; ++i) tenants.push_back(f.tenant("t" + std::to_string(i), i % 2));
  for (TenantId t : tenants) f.sched.tenants().release(t);  // let the scheduler own them

  std::map<std::uint64_t, int> endings;  // request id -> times it ended
  std::map<Handle, std::uint64_t> queued_or_running;
  std::vector<Dispatched> running;
  TimeNs now = 0;
  const auto steps = uniform(200, 2000);
  for (std::int64_t i = 0; i < steps; ++i) {
    now += uniform(0, 3 * kMs);
    switch (uniform(0, 9)) {
      case 0:
      case 1:
      case 2:
      case 3: {
        const std::uint64_t id = f.next_id;
        TenantId t = f.sched.tenants().acquire("t" + std::to_string(uniform(0, 5)));
        const TimeNs deadline = uniform(0, 3) == 0 ? now + uniform(0, 20 * kMs) : kNever;
        const Admission a = f.submit(t, now, static_cast<std::uint32_t>(uniform(0, 300)),
                                     static_cast<std::uint32_t>(uniform(0, 300)),
                                     static_cast<std::int32_t>(uniform(0, 2)), deadline,
                                     static_cast<std::uint64_t>(uniform(0, 2)));
        f.sched.tenants().release(t);
        endings[id] += 0;
        if (a.status == Status::kOk)
          queued_or_running[a.handle] = id;
        else
          endings[id]++;
        break;
      }
      case 4:
      case 5: {
        f.sched.nextBatch(0, now, f.batch, f.done, uniform(0, 1) == 1);
        RC_ASSERT(f.batch.requests.size() <= 4u);
        RC_ASSERT(f.batch.tokens <= 4096u);
        for (const auto& d : f.batch.requests) running.push_back(d);
        break;
      }
      case 6:
      case 7: {
        for (const auto& d : running) {
          RC_ASSERT(f.sched.complete(d.handle, static_cast<std::uint32_t>(uniform(0, 400)), now));
          endings[queued_or_running.at(d.handle)]++;
          queued_or_running.erase(d.handle);
        }
        if (!running.empty()) f.sched.batchServed(0, 1000, uniform(1, 5) * kMs);
        running.clear();
        break;
      }
      case 8:
        f.sched.cancelOwner(static_cast<std::uint64_t>(uniform(0, 2)), Status::kCancelled, f.done);
        break;
      case 9:
        f.sched.expireDeadlines(now, f.done);
        f.sched.collectIdle(now, 4);
        break;
    }
    for (const Done& d : f.done) endings[d.id]++;
    for (const Done& d : f.done) {
      for (auto it = queued_or_running.begin(); it != queued_or_running.end(); ++it) {
        if (it->second == d.id) {
          queued_or_running.erase(it);
          break;
        }
      }
    }
    f.done.clear();
  }
  // Drain: finish what runs, then cancel the rest.
  for (const auto& d : running) {
    RC_ASSERT(f.sched.complete(d.handle, 1, now));
    endings[queued_or_running.at(d.handle)]++;
  }
  f.sched.cancelAll(Status::kShuttingDown, f.done);
  for (const Done& d : f.done) endings[d.id]++;
  for (const auto& [id, n] : endings) RC_ASSERT(n == 1);
  RC_ASSERT(f.sched.queued(0) == 0u);
  RC_ASSERT(f.sched.inFlight() == 0u);
}

}  // namespace
}  // namespace fairsched::core
