// Deficit round robin: order, weights, the stated fairness bound, no spinning
// when costs dwarf the quantum, idle credit reset and kept debt.
#include "daemon/core/drr_scheduler.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace fairsched::core {
namespace {

using FlowId = DrrScheduler::FlowId;

// Flows with explicit queues of request costs, driving a DrrScheduler the way
// the Scheduler does.
struct Harness {
  DrrScheduler drr;
  std::vector<std::deque<std::int64_t>> queues;

  explicit Harness(std::vector<std::int64_t> quanta) : queues(quanta.size()) {
    for (FlowId f = 0; f < quanta.size(); ++f) drr.setQuantum(f, quanta[f]);
  }
  void push(FlowId f, std::int64_t cost) {
    queues[f].push_back(cost);
    if (queues[f].size() == 1) drr.enqueue(f, cost);
  }
  // One decision: the flow served, or kNone.
  FlowId step(std::int64_t* cost_out = nullptr) {
    const FlowId f = drr.select();
    if (f == DrrScheduler::kNone) return f;
    EXPECT_GE(drr.deficit(f), queues[f].front());
    const std::int64_t cost = queues[f].front();
    queues[f].pop_front();
    drr.consume(f, cost, !queues[f].empty(), queues[f].empty() ? 0 : queues[f].front());
    if (cost_out) *cost_out = cost;
    return f;
  }
};

TEST(DrrScheduler, NothingBackloggedSelectsNone) {
  DrrScheduler drr;
  EXPECT_EQ(drr.select(), DrrScheduler::kNone);
  EXPECT_FALSE(drr.anyBacklogged());
}

TEST(DrrScheduler, SingleFlowIsServedUntilEmpty) {
  Harness h({10});
  for (int i = 0; i < 5; ++i) h.push(0, 7);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(h.step(), 0u);
  EXPECT_EQ(h.step(), DrrScheduler::kNone);
  EXPECT_FALSE(h.drr.anyBacklogged());
}

TEST(DrrScheduler, UnitCostsWithUnitQuantumAlternate) {
  Harness h({1, 1, 1});
  for (FlowId f = 0; f < 3; ++f) {
    for (int i = 0; i < 4; ++i) h.push(f, 1);
  }
  std::vector<FlowId> order;
  for (int i = 0; i < 12; ++i) order.push_back(h.step());
  EXPECT_EQ(order, (std::vector<FlowId>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
}

TEST(DrrScheduler, QuantumLetsAFlowServeSeveralInItsTurn) {
  Harness h({3, 3});
  for (int i = 0; i < 6; ++i) {
    h.push(0, 1);
    h.push(1, 1);
  }
  std::vector<FlowId> order;
  for (int i = 0; i < 12; ++i) order.push_back(h.step());
  EXPECT_EQ(order, (std::vector<FlowId>{0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1}));
}

TEST(DrrScheduler, CostsFarAboveTheQuantumSkipRoundsInsteadOfSpinning) {
  Harness h({1, 1});
  const std::int64_t big = 1'000'000'000'000;  // a million million rounds of quantum
  h.push(0, big);
  h.push(1, big);
  h.push(0, big);
  EXPECT_EQ(h.step(), 0u);
  EXPECT_GE(h.drr.round(), big - 1);  // the counter jumped
  EXPECT_EQ(h.step(), 1u);
  EXPECT_EQ(h.step(), 0u);
  EXPECT_EQ(h.step(), DrrScheduler::kNone);
}

TEST(DrrScheduler, MixedCostsShareByCostNotByCount) {
  // Flow 0 sends requests 8x larger than flow 1: with equal quanta it gets
  // about one request per eight of flow 1.
  Harness h({8, 8});
  for (int i = 0; i < 100; ++i) h.push(0, 8);
  for (int i = 0; i < 800; ++i) h.push(1, 1);
  std::int64_t served[2] = {0, 0};
  for (int i = 0; i < 450; ++i) {
    std::int64_t c = 0;
    const FlowId f = h.step(&c);
    served[f] += c;
  }
  EXPECT_NEAR(static_cast<double>(served[0]) / static_cast<double>(served[1]), 1.0, 0.05);
}

TEST(DrrScheduler, IdleFlowCreditResets) {
  Harness h({100});
  h.push(0, 10);
  EXPECT_EQ(h.step(), 0u);  // deficit 100 - 10 = 90 left, then the flow empties
  EXPECT_EQ(h.drr.deficit(0), 0);
}

TEST(DrrScheduler, DebtSurvivesIdleness) {
  Harness h({10, 10});
  h.push(0, 10);
  EXPECT_EQ(h.step(), 0u);
  h.drr.adjust(0, -35);  // the request turned out 35 more expensive
  EXPECT_EQ(h.drr.deficit(0), -35);
  // Flow 0 now needs four more quanta before it can send a cost-10 request;
  // flow 1 meanwhile sends one per round.
  for (int i = 0; i < 6; ++i) h.push(1, 10);
  h.push(0, 10);
  std::vector<FlowId> order;
  for (int i = 0; i < 7; ++i) order.push_back(h.step());
  const auto pos = std::find(order.begin(), order.end(), 0u) - order.begin();
  EXPECT_GE(pos, 3);
}

TEST(DrrScheduler, FlowReturningInTheSameRoundWaitsForTheNextRound) {
  Harness h({1, 1, 1});
  h.push(0, 1);
  h.push(1, 1);
  h.push(1, 1);
  h.push(2, 1);
  h.push(2, 1);
  EXPECT_EQ(h.step(), 0u);  // flow 0 empties after its turn
  h.push(0, 1);             // and comes straight back
  std::vector<FlowId> order;
  for (int i = 0; i < 5; ++i) order.push_back(h.step());
  EXPECT_EQ(order, (std::vector<FlowId>{1, 2, 0, 1, 2}));
}

TEST(DrrScheduler, CheaperNewHeadIsServedSooner) {
  Harness h({1, 1});
  h.push(1, 1);
  h.push(1, 1);
  h.push(1, 1);
  h.push(0, 1000);  // flow 0 waits ~1000 rounds
  EXPECT_EQ(h.step(), 1u);
  h.queues[0].front() = 1;  // a more urgent, cheaper request became its head
  h.drr.headChanged(0, 1);
  EXPECT_EQ(h.step(), 0u);
}

TEST(DrrScheduler, RemovedFlowIsNotSelected) {
  Harness h({1, 1});
  h.push(0, 5);
  h.push(1, 1);
  h.drr.remove(0);
  h.queues[0].clear();
  EXPECT_EQ(h.step(), 1u);
  EXPECT_EQ(h.step(), DrrScheduler::kNone);
  EXPECT_EQ(h.drr.backloggedCount(), 0u);
}

TEST(DrrScheduler, ForgottenFlowStartsClean) {
  Harness h({10});
  h.push(0, 10);
  h.step();
  h.drr.adjust(0, -1000);
  h.drr.forget(0);
  EXPECT_EQ(h.drr.deficit(0), 0);
}

TEST(DrrScheduler, WeightedSharesConvergeToWeights) {
  const std::int64_t q = 512;
  Harness h({q * 1, q * 2, q * 4});
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<std::int64_t> cost(1, 2048);
  for (FlowId f = 0; f < 3; ++f) {
    for (int i = 0; i < 4; ++i) h.push(f, cost(rng));
  }
  std::int64_t served[3] = {0, 0, 0};
  for (int i = 0; i < 200'000; ++i) {
    std::int64_t c = 0;
    const FlowId f = h.step(&c);
    served[f] += c;
    h.push(f, cost(rng));  // stay backlogged
  }
  const double total = static_cast<double>(served[0] + served[1] + served[2]);
  EXPECT_NEAR(served[0] / total, 1.0 / 7, 0.02 / 7);
  EXPECT_NEAR(served[1] / total, 2.0 / 7, 0.02 * 2 / 7);
  EXPECT_NEAR(served[2] / total, 4.0 / 7, 0.02 * 4 / 7);
}

// The bound stated in drr_scheduler.hpp, for every interval of a random run
// with every flow continuously backlogged.
RC_GTEST_PROP(DrrSchedulerProperty, ServiceDifferenceStaysWithinTheStatedBound, ()) {
  // RapidCheck picks the seed (and prints it on failure); the run itself is
  // long enough to matter regardless of RapidCheck's size parameter.
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  const auto n = static_cast<std::size_t>(uniform(2, 6));
  const std::int64_t q = uniform(1, 2000);
  const std::int64_t max_cost = uniform(1, 20000);
  std::vector<std::int64_t> weights, quanta;
  for (std::size_t i = 0; i < n; ++i) {
    weights.push_back(uniform(1, 5));
    quanta.push_back(q * weights.back());
  }
  Harness h(quanta);
  std::uniform_int_distribution<std::int64_t> cost(1, max_cost);
  for (FlowId f = 0; f < n; ++f) {
    for (int i = 0; i < 3; ++i) h.push(f, cost(rng));
  }
  const auto steps = static_cast<int>(uniform(500, 3000));
  // served[f] / weight[f] after each decision.
  std::vector<double> norm(n, 0.0);
  std::vector<std::vector<double>> history(n);
  for (int s = 0; s < steps; ++s) {
    std::int64_t c = 0;
    const FlowId f = h.step(&c);
    RC_ASSERT(f != DrrScheduler::kNone);
    norm[f] += static_cast<double>(c) / static_cast<double>(weights[f]);
    h.push(f, cost(rng));
    for (std::size_t i = 0; i < n; ++i) history[i].push_back(norm[i]);
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      const double bound = 2.0 * static_cast<double>(q) +
                           static_cast<double>(max_cost) / static_cast<double>(weights[i]) +
                           static_cast<double>(max_cost) / static_cast<double>(weights[j]);
      // max over intervals (a, b] of |D(b) - D(a)| = max D - min D, D(0) = 0.
      double lo = 0.0, hi = 0.0;
      for (std::size_t k = 0; k < history[i].size(); ++k) {
        const double d = history[i][k] - history[j][k];
        lo = std::min(lo, d);
        hi = std::max(hi, d);
      }
      RC_ASSERT(hi - lo <= bound + 1e-6);
    }
  }
}

}  // namespace
}  // namespace fairsched::core
