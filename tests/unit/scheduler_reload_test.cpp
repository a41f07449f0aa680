// Scheduler::reconfigure — a configuration reload between two decisions:
// nothing queued or in flight is lost, new settings take effect, limit
// windows carry over, and changes the core cannot make are refused with the
// state untouched.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/scheduler.hpp"
#include "tests/support/scheduler_fixture.hpp"

namespace fairsched::core {
namespace {

constexpr TimeNs kMs = kNsPerMs;
constexpr TimeNs kMinute = 60 * kNsPerSec;

SchedulerSpec spec(Policy policy = Policy::kFair) {
  EndpointSpec e;
  e.name = "chat";
  e.quantum = 200;
  e.max_batch_requests = 4;
  e.max_batch_tokens = 4096;
  e.max_wait = 2 * kMs;
  e.max_output_tokens = 2048;
  return testing::twoTierSpec(e, policy);
}

TenantSpec listed(const std::string& name, TierId tier, double weight) {
  TenantSpec t;
  t.name = name;
  t.tier = tier;
  t.weight = weight;
  t.queue_limit = 1000;
  return t;
}

struct Harness : testing::SchedulerFixture {
  using SchedulerFixture::SchedulerFixture;

  Admission submit(TenantId t, TimeNs now, std::uint32_t in = 100, std::uint32_t out = 100) {
    return sched.submit(request(t, in, out), now);
  }
  // Dispatch `batches` forced batches and complete them; served requests per tenant.
  std::map<TenantId, int> serve(int batches, TimeNs now) {
    std::map<TenantId, int> served;
    for (int i = 0; i < batches; ++i) {
      if (!sched.nextBatch(0, now, batch, done, true)) break;
      for (const Dispatched& d : batch.requests) {
        EXPECT_TRUE(sched.complete(d.handle, d.max_output_tokens, now));
        served[d.tenant]++;
      }
    }
    return served;
  }
};

TEST(SchedulerReload, NewWeightsTakeEffectAndNothingQueuedIsLost) {
  SchedulerSpec s = spec();
  s.tenants = {listed("a", 0, 1.0), listed("b", 0, 1.0)};
  Harness h(s);
  const TenantId a = h.sched.tenants().acquire("a");
  const TenantId b = h.sched.tenants().acquire("b");
  for (int i = 0; i < 400; ++i) {
    ASSERT_EQ(h.submit(a, 0).status, Status::kOk);
    ASSERT_EQ(h.submit(b, 0).status, Status::kOk);
  }
  auto before = h.serve(20, 0);  // 80 requests
  EXPECT_NEAR(before[a], before[b], 2);

  s = spec();
  s.tenants = {listed("a", 0, 3.0), listed("b", 0, 1.0)};
  ASSERT_EQ(h.sched.reconfigure(s), std::nullopt);
  EXPECT_EQ(h.sched.queued(0), 800u - 80u);
  auto after = h.serve(40, 0);  // 160 requests at 3:1
  EXPECT_NEAR(static_cast<double>(after[a]) / after[b], 3.0, 0.2);
  auto rest = h.serve(1000, 0);
  EXPECT_EQ(before[a] + after[a] + rest[a], 400);
  EXPECT_EQ(before[b] + after[b] + rest[b], 400);
  EXPECT_TRUE(h.done.empty());
}

TEST(SchedulerReload, InFlightRequestsCompleteAcrossAReload) {
  Harness h(spec());
  const TenantId a = h.sched.tenants().acquire("a");
  for (int i = 0; i < 8; ++i) ASSERT_EQ(h.submit(a, 0).status, Status::kOk);
  ASSERT_TRUE(h.sched.nextBatch(0, 0, h.batch, h.done, true));
  const std::vector<Dispatched> running = h.batch.requests;
  ASSERT_EQ(running.size(), 4u);
  ASSERT_EQ(h.sched.reconfigure(spec()), std::nullopt);
  for (const Dispatched& d : running) EXPECT_TRUE(h.sched.complete(d.handle, 10, 0));
  EXPECT_EQ(h.sched.inFlight(), 0u);
  EXPECT_EQ(h.serve(10, 0)[a], 4);
  EXPECT_EQ(h.sched.view(a, 0)->stats.completed, 8u);
}

TEST(SchedulerReload, ATenantWhoseTierIsGoneMovesToTheDefaultTierWithItsQueue) {
  SchedulerSpec s = spec();
  Harness h(s);
  const TenantId t = h.sched.tenants().acquire("x", TierId{0});  // paid, by hint
  for (int i = 0; i < 6; ++i) ASSERT_EQ(h.submit(t, 0).status, Status::kOk);
  SchedulerSpec next = spec();
  next.tiers = {{"gold", 0.0, 1.0, 50, 0}, {"trial", 0.0, 2.0, 70, 0}};
  next.tier_limits.assign(2, LimitTable(1));
  next.default_tier = 1;
  ASSERT_EQ(h.sched.reconfigure(next), std::nullopt);
  EXPECT_EQ(h.sched.tenants()[t].tier, 1);
  EXPECT_EQ(h.sched.tenants()[t].queue_limit, 70u);
  EXPECT_DOUBLE_EQ(h.sched.tenants()[t].weight, 2.0);
  EXPECT_EQ(h.serve(10, 0)[t], 6);
}

TEST(SchedulerReload, TiersAreMatchedByNameNotPosition) {
  Harness h(spec());
  const TenantId t = h.sched.tenants().acquire("x", TierId{1});  // trial
  ASSERT_EQ(h.submit(t, 0).status, Status::kOk);
  SchedulerSpec next = spec();
  std::swap(next.tiers[0], next.tiers[1]);  // trial is now the higher tier
  next.default_tier = 0;
  ASSERT_EQ(h.sched.reconfigure(next), std::nullopt);
  EXPECT_EQ(h.sched.tenants()[t].tier, 0);
  EXPECT_EQ(h.serve(1, 0)[t], 1);
}

TEST(SchedulerReload, LimitWindowsCarryOverWhenUnitAndWindowStay) {
  SchedulerSpec s = spec();
  s.tier_limits[1][0] = {LimitSpec{LimitUnit::kRequests, 2, kMinute}};
  Harness h(s);
  const TenantId t = h.sched.tenants().acquire("x");
  ASSERT_EQ(h.submit(t, 0).status, Status::kOk);
  ASSERT_EQ(h.submit(t, 0).status, Status::kOk);
  ASSERT_EQ(h.submit(t, 0).status, Status::kRateLimited);

  SchedulerSpec raised = spec();
  raised.tier_limits[1][0] = {LimitSpec{LimitUnit::kRequests, 3, kMinute}};
  ASSERT_EQ(h.sched.reconfigure(raised), std::nullopt);
  EXPECT_EQ(h.submit(t, kMs).status, Status::kOk);  // the third of 3, not a fresh window
  EXPECT_EQ(h.submit(t, kMs).status, Status::kRateLimited);

  SchedulerSpec other_window = spec();
  other_window.tier_limits[1][0] = {LimitSpec{LimitUnit::kRequests, 3, 2 * kMinute}};
  ASSERT_EQ(h.sched.reconfigure(other_window), std::nullopt);
  EXPECT_EQ(h.submit(t, 2 * kMs).status, Status::kOk);  // a new limit starts empty

  ASSERT_EQ(h.sched.reconfigure(spec()), std::nullopt);  // limits removed
  for (int i = 0; i < 10; ++i) EXPECT_EQ(h.submit(t, 3 * kMs).status, Status::kOk);
}

TEST(SchedulerReload, ATenantNoLongerListedTakesItsTierDefaultsOrIsForgotten) {
  SchedulerSpec s = spec();
  s.tenants = {listed("held", 0, 5.0), listed("idle", 0, 5.0)};
  Harness h(s);
  const TenantId held = h.sched.tenants().acquire("held");
  ASSERT_EQ(h.submit(held, 0).status, Status::kOk);
  ASSERT_TRUE(h.sched.tenants().find("idle").has_value());

  ASSERT_EQ(h.sched.reconfigure(spec()), std::nullopt);
  EXPECT_FALSE(h.sched.tenants().find("idle").has_value());
  ASSERT_TRUE(h.sched.tenants().find("held").has_value());
  EXPECT_FALSE(h.sched.tenants()[held].listed);
  EXPECT_DOUBLE_EQ(h.sched.tenants()[held].weight, 1.0);
  EXPECT_EQ(h.serve(1, 0)[held], 1);

  // Listed again: the same id takes the listed settings.
  s = spec();
  s.tenants = {listed("held", 1, 4.0)};
  ASSERT_EQ(h.sched.reconfigure(s), std::nullopt);
  EXPECT_TRUE(h.sched.tenants()[held].listed);
  EXPECT_EQ(h.sched.tenants()[held].tier, 1);
}

TEST(SchedulerReload, InFlightRequestsOfAChangedCostModelGetNoAdaptiveCorrection) {
  SchedulerSpec s = spec();
  s.endpoints[0].cost = CostModel::kRequests;
  s.endpoints[0].quantum = 1;
  s.endpoints[0].max_batch_requests = 1;
  Harness h(s);
  const TenantId a = h.sched.tenants().acquire("a");
  const TenantId b = h.sched.tenants().acquire("b");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(h.submit(a, 0, 1000, 100).status, Status::kOk);
  ASSERT_TRUE(h.sched.nextBatch(0, 0, h.batch, h.done, true));
  const Dispatched running = h.batch.requests.at(0);  // charged 1: one request
  SchedulerSpec adaptive = spec();
  adaptive.endpoints[0].cost = CostModel::kAdaptive;
  adaptive.endpoints[0].quantum = 1100;
  adaptive.endpoints[0].max_batch_requests = 1;
  ASSERT_EQ(h.sched.reconfigure(adaptive), std::nullopt);
  ASSERT_TRUE(h.sched.complete(running.handle, 100, 0));  // 1,100 tokens actual
  for (int i = 0; i < 3; ++i) ASSERT_EQ(h.submit(b, 0, 1000, 100).status, Status::kOk);
  // Corrected as if the 1 charged were tokens, a (still backlogged) would
  // owe 1,099 and sit out a round while b went twice.
  auto served = h.serve(4, 0);
  EXPECT_EQ(served[a], 2);
  EXPECT_EQ(served[b], 2);
}

TEST(SchedulerReload, RefusedChangesLeaveEverythingAsItWas) {
  SchedulerSpec s = spec();
  s.tenants = {listed("a", 0, 2.0)};
  Harness h(s);
  const TenantId a = h.sched.tenants().acquire("a");
  ASSERT_EQ(h.submit(a, 0).status, Status::kOk);

  SchedulerSpec fifo = spec(Policy::kFifo);
  EXPECT_EQ(h.sched.reconfigure(fifo).value_or(""), "the scheduling policy cannot change");
  SchedulerSpec renamed = spec();
  renamed.endpoints[0].name = "talk";
  EXPECT_NE(h.sched.reconfigure(renamed).value_or("").find("endpoints cannot change"),
            std::string::npos);
  SchedulerSpec smaller = spec();
  smaller.endpoints[0].max_batch_tokens = 1024;
  EXPECT_EQ(h.sched.reconfigure(smaller).value_or(""),
            "endpoints.chat.max_batch_tokens cannot shrink (4096 -> 1024): queued requests must "
            "still fit a batch");
  SchedulerSpec threads = spec();
  threads.endpoints[0].parallelism = 4;
  EXPECT_TRUE(h.sched.reconfigure(threads).has_value());

  EXPECT_TRUE(h.sched.tenants()[a].listed);
  EXPECT_DOUBLE_EQ(h.sched.tenants()[a].weight, 2.0);
  EXPECT_EQ(h.sched.spec().endpoints[0].max_batch_tokens, 4096u);
  EXPECT_EQ(h.serve(1, 0)[a], 1);
}

// Random submissions, batches, completions, cancellations and reloads (with
// tiers, weights and limits changing): every admitted request ends exactly
// once, as a dispatch-then-complete or a cancellation.
TEST(SchedulerReload, StressEveryRequestEndsExactlyOnceUnderRandomReloads) {
  for (const Policy policy : {Policy::kFair, Policy::kFifo}) {
    std::mt19937 rng(42);
    auto randomSpec = [&] {
      SchedulerSpec s = spec(policy);
      if (rng() % 2) std::swap(s.tiers[0], s.tiers[1]);
      if (rng() % 3 == 0) s.tiers.push_back({"extra", 0.2, 1.0, 1000, 0});
      s.tier_limits.assign(s.tiers.size(), LimitTable(1));
      s.tier_limits[0][0] = {LimitSpec{LimitUnit::kRequests, 50 + rng() % 200, kMinute}};
      s.default_tier = static_cast<TierId>(rng() % s.tiers.size());
      s.endpoints[0].quantum = 1 + static_cast<std::int64_t>(rng() % 1000);
      s.endpoints[0].max_batch_requests = 1 + rng() % 8;
      for (const char* name : {"t0", "t1", "t2"}) {
        if (rng() % 2) {
          s.tenants.push_back(
              listed(name, static_cast<TierId>(rng() % s.tiers.size()), 1.0 + rng() % 4));
        }
      }
      return s;
    };
    Harness h(randomSpec());
    std::vector<TenantId> ids;
    for (const char* name : {"t0", "t1", "t2", "t3"})
      ids.push_back(h.sched.tenants().acquire(name));
    std::set<std::uint64_t> open;  // admitted, not yet ended
    std::vector<Dispatched> running;
    std::vector<Handle> queued;
    std::uint64_t admitted = 0, ended = 0;
    TimeNs now = 0;
    for (int step = 0; step < 20000; ++step) {
      now += kMs;
      const unsigned op = rng() % 100;
      if (op < 50) {
        const std::uint64_t id = h.next_id;
        const Admission adm = h.submit(ids[rng() % ids.size()], now, 1 + rng() % 200, rng() % 200);
        if (adm.status == Status::kOk) {
          open.insert(id);
          queued.push_back(adm.handle);
          ++admitted;
        }
      } else if (op < 75) {
        if (h.sched.nextBatch(0, now, h.batch, h.done, rng() % 2)) {
          for (const Dispatched& d : h.batch.requests) running.push_back(d);
        }
      } else if (op < 92) {
        if (!running.empty()) {
          const std::size_t i = rng() % running.size();
          ASSERT_TRUE(h.sched.complete(running[i].handle, 1, now));
          ASSERT_EQ(open.erase(running[i].id), 1u);
          ++ended;
          running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        }
      } else if (op < 96) {
        if (!queued.empty()) {
          h.sched.cancel(queued[rng() % queued.size()], Status::kCancelled, h.done);
        }
      } else {
        ASSERT_EQ(h.sched.reconfigure(randomSpec()), std::nullopt);
      }
      for (const Done& d : h.done) {
        ASSERT_EQ(open.erase(d.id), 1u) << "request " << d.id << " ended twice";
        ++ended;
      }
      h.done.clear();
    }
    // Drain: everything left must still come out.
    for (const Dispatched& d : running) {
      ASSERT_TRUE(h.sched.complete(d.handle, 1, now));
      ASSERT_EQ(open.erase(d.id), 1u);
      ++ended;
    }
    for (int i = 0; i < 100000 && h.sched.queued(0) > 0; ++i) {
      if (h.sched.nextBatch(0, now, h.batch, h.done, true)) {
        for (const Dispatched& d : h.batch.requests) {
          ASSERT_TRUE(h.sched.complete(d.handle, 1, now));
          ASSERT_EQ(open.erase(d.id), 1u);
          ++ended;
        }
      }
    }
    for (const Done& d : h.done) {
      ASSERT_EQ(open.erase(d.id), 1u);
      ++ended;
    }
    EXPECT_TRUE(open.empty()) << open.size() << " requests never ended";
    EXPECT_EQ(admitted, ended);
    EXPECT_GT(admitted, 1000u);
  }
}

}  // namespace
}  // namespace fairsched::core
