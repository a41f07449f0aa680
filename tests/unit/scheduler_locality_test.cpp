// Locality within fairness (Scheduler::take with a LocalityProbe,
// daemon/core/scheduler_locality.cpp): behind the fair choice in its own
// tenant, the request whose prefix the worker holds goes first, a head
// passed over at most kMaxPassedOver times; across tenants only within
// locality_slack of the least served; ties, deadlines and other priorities
// keep the fair order. Simulated time throughout.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "daemon/core/scheduler.hpp"
#include "tests/support/scheduler_fixture.hpp"
#include "tests/support/seeded_rng.hpp"

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

// The cross-tenant bound against a brute-force oracle: random tenants,
// prompts, chains and probes; before every take() the oracle computes each
// tenant's service from what it was dispatched (prompts, charged at
// dispatch; no decay within the test's time) and checks that the request
// taken belongs to a tenant within the slack of the least served
// backlogged one, and that it is its tenant's head or one of the next
// kLocalityScan; and that no head is passed over more than kMaxPassedOver
// times.
TEST(SchedulerLocality, EveryChoiceIsWithinTheSlackOfTheLeastServedByABruteForceOracle) {
  const std::uint64_t seed = testing::testSeed();
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 40; ++round) {
    const double slack = static_cast<double>(rng() % 4) * 300.0;
    Fixture f(Fairness::kRecent, slack);
    const int tenants = 2 + static_cast<int>(rng() % 4);
    std::vector<TenantId> ids;
    for (int t = 0; t < tenants; ++t) ids.push_back(f.tenant("t" + std::to_string(t)));
    std::map<std::uint64_t, std::pair<int, std::uint32_t>> info;  // id -> tenant, prompt
    std::map<int, std::vector<std::uint64_t>> queued;             // per tenant, in order
    std::map<int, double> served;                                 // prompt tokens dispatched
    std::map<std::uint64_t, int> head_passed;                     // times the head was skipped
    auto submitOne = [&] {
      const int t = static_cast<int>(rng() % tenants);
      Request r = f.request(ids[t], 1 + static_cast<std::uint32_t>(rng() % 400), 1);
      const Admission a = f.sched.submit(r, 0);
      ASSERT_EQ(a.status, Status::kOk);
      f.sched.setPrefix(a.handle, {rng() % 6 + 1});
      info[r.id] = {t, r.input_tokens};
      queued[t].push_back(r.id);
    };
    for (int i = 0; i < 30; ++i) submitOne();
    for (int step = 0; step < 60; ++step) {
      if (rng() % 3 == 0) submitOne();
      std::set<std::uint64_t> held;
      for (std::uint64_t k = 1; k <= 6; ++k) {
        if (rng() % 2) held.insert(k);
      }
      const Holds probe(held);
      double least = 1e300;
      for (const auto& [t, q] : queued) {
        if (!q.empty()) least = std::min(least, served[t]);
      }
      if (least == 1e300) break;
      ASSERT_TRUE(f.sched.take(0, 0, 1, kRoomy, f.batch, f.done, &probe));
      const std::uint64_t id = f.batch.requests[0].id;
      const auto [t, prompt] = info.at(id);
      // Service per unit of quantum in the selector; tokens per weight here.
      EXPECT_LE(served[t], least + slack + 1e-6) << "seed " << seed << " round " << round;
      auto& q = queued[t];
      const auto at = std::find(q.begin(), q.end(), id);
      ASSERT_NE(at, q.end());
      const auto place = static_cast<std::size_t>(at - q.begin());
      EXPECT_LE(place, Scheduler::kLocalityScan) << "seed " << seed;
      // The head may be passed over at most kMaxPassedOver times as head (a
      // request behind it is passed whenever the head is, so each waits at
      // most that many dispatches per request ahead of it).
      if (place > 0) {
        EXPECT_LE(++head_passed[q[0]], Scheduler::kMaxPassedOver) << "seed " << seed;
      }
      q.erase(at);
      served[t] += prompt;
    }
  }
}

}  // namespace
}  // namespace fairsched::core
