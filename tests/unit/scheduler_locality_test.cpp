// Locality within fairness (Scheduler::take with a LocalityProbe,
// daemon/core/scheduler_locality.cpp): behind the fair choice in its own
// tenant, the request whose prefix the worker holds goes first, a head
// passed over at most kMaxPassedOver times; across tenants only within
// locality_slack of the least served; ties, deadlines and other priorities
// keep the fair order. Simulated time throughout.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "daemon/core/scheduler.hpp"
#include "tests/support/scheduler_fixture.hpp"

namespace fairsched::core {
namespace {

constexpr std::uint64_t kRoomy = std::uint64_t{1} << 40;
constexpr std::int64_t kQuantum = 256;

SchedulerSpec spec(Fairness fairness, double slack) {
  EndpointSpec e;
  e.name = "generate";
  e.cost = CostModel::kTokens;
  e.quantum = kQuantum;
  e.max_batch_requests = 4;
  e.max_batch_tokens = 1 << 16;
  e.per_token = true;
  e.fairness = fairness;
  e.half_life = 3600 * kNsPerSec;
  e.locality_slack = slack;
  return testing::twoTierSpec(e);
}

// A worker holding the chains whose first hash is in `held`, wholly.
class Holds final : public Scheduler::LocalityProbe {
 public:
  explicit Holds(std::set<std::uint64_t> held) : held_(std::move(held)) {}
  std::size_t matched(std::span<const std::uint64_t> chain) const override {
    return !chain.empty() && held_.count(chain[0]) ? chain.size() : 0;
  }

 private:
  std::set<std::uint64_t> held_;
};

struct Fixture : testing::SchedulerFixture {
  explicit Fixture(Fairness fairness = Fairness::kRecent, double slack = 0)
      : SchedulerFixture(spec(fairness, slack)) {}
  // A request of `t` whose prompt's chain is {key, key + 1, key + 2}.
  std::uint64_t submit(TenantId t, std::uint64_t key, std::int32_t priority = 0) {
    Request r = request(t);
    r.priority = priority;
    const Admission a = sched.submit(r, 0);
    EXPECT_EQ(a.status, Status::kOk);
    if (key != 0) sched.setPrefix(a.handle, {key, key + 1, key + 2});
    return r.id;
  }
  std::uint64_t takeOne(const Scheduler::LocalityProbe* probe) {
    EXPECT_TRUE(sched.take(0, 0, 1, kRoomy, batch, done, probe));
    return batch.requests.empty() ? 0 : batch.requests[0].id;
  }
};

TEST(SchedulerLocality, BehindTheFairChoiceTheRequestWhosePrefixTheWorkerHoldsGoesFirst) {
  Fixture f;
  const TenantId a = f.tenant("a");
  const std::uint64_t x = f.submit(a, 100), y = f.submit(a, 200);
  const Holds holds_y({200});
  EXPECT_EQ(f.takeOne(&holds_y), y);
  EXPECT_EQ(f.sched.prefixOf(f.batch.requests[0].handle).size(), 3u) << "kept while in flight";
  EXPECT_EQ(f.takeOne(nullptr), x) << "the head, still queued, comes next";
  EXPECT_EQ(f.sched.queued(0), 0u);
}

TEST(SchedulerLocality, WithoutAProbeOrAMatchTheChoiceIsTheFairOne) {
  Fixture f;
  const TenantId a = f.tenant("a");
  const std::uint64_t x = f.submit(a, 100);
  f.submit(a, 200);
  EXPECT_EQ(f.takeOne(nullptr), x);
  Fixture g;
  const TenantId b = g.tenant("b");
  const std::uint64_t first = g.submit(b, 100);
  g.submit(b, 200);
  const Holds none({});
  EXPECT_EQ(g.takeOne(&none), first);
}

TEST(SchedulerLocality, TiesKeepTheFairChoice) {
  Fixture f;
  const TenantId a = f.tenant("a");
  const std::uint64_t x = f.submit(a, 100);
  f.submit(a, 200);
  const Holds both({100, 200});
  EXPECT_EQ(f.takeOne(&both), x);
}

TEST(SchedulerLocality, AHeadIsPassedOverAtMostMaxPassedOverTimes) {
  Fixture f;
  const TenantId a = f.tenant("a");
  const std::uint64_t head = f.submit(a, 100);
  for (int i = 0; i < 10; ++i) f.submit(a, 200);
  const Holds holds({200});
  for (std::uint8_t i = 0; i < Scheduler::kMaxPassedOver; ++i) EXPECT_NE(f.takeOne(&holds), head);
  EXPECT_EQ(f.takeOne(&holds), head) << "passed over enough: taken whatever the cache";
}

TEST(SchedulerLocality, AnotherPriorityIsNotTakenAhead) {
  Fixture f;
  const TenantId a = f.tenant("a");
  const std::uint64_t high = f.submit(a, 100, 1);
  f.submit(a, 200, 0);
  const Holds holds({200});
  EXPECT_EQ(f.takeOne(&holds), high);
}

TEST(SchedulerLocality, RequestsWithoutAPrefixNeverMatch) {
  Fixture f;
  const TenantId a = f.tenant("a");
  const std::uint64_t x = f.submit(a, 100);
  f.submit(a, 0);  // no chain given
  const Holds all({100, 200, 0});
  EXPECT_EQ(f.takeOne(&all), x);
}

TEST(SchedulerLocality, AcrossTenantsOnlyWithinTheSlack) {
  // Both backlogged with no service yet: the fair choice is a (backlogged
  // first); b's head is held. With a slack, b goes; without, a.
  for (const double slack : {0.0, 1000.0}) {
    Fixture f(Fairness::kRecent, slack);
    const TenantId a = f.tenant("a"), b = f.tenant("b");
    const std::uint64_t xa = f.submit(a, 100);
    const std::uint64_t xb = f.submit(b, 200);
    const Holds holds({200});
    EXPECT_EQ(f.takeOne(&holds), slack > 0 ? xb : xa) << "slack " << slack;
  }
  // b was charged its first request's prompt (100 tokens; output is
  // charged as generated): beyond a slack of 50, a goes.
  Fixture f(Fairness::kRecent, 50);
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  f.submit(b, 300);
  EXPECT_EQ(f.takeOne(nullptr), 1u);  // b's first: charged its prompt, 100 tokens
  const std::uint64_t xa = f.submit(a, 100);
  f.submit(b, 200);
  const Holds holds({200});
  EXPECT_EQ(f.takeOne(&holds), xa) << "b is 100 ahead of a: more than the slack";
}

TEST(SchedulerLocality, DrrKeepsItsTurnAcrossTenantsButNotWithinOne) {
  Fixture f(Fairness::kDrr, 1e9);
  const TenantId a = f.tenant("a"), b = f.tenant("b");
  const std::uint64_t xa = f.submit(a, 100);
  const std::uint64_t ya = f.submit(a, 300);
  f.submit(b, 200);
  const Holds holds({200, 300});
  EXPECT_EQ(f.takeOne(&holds), ya) << "a's turn: its own held request";
  EXPECT_NE(xa, ya);
}

}  // namespace
}  // namespace fairsched::core
