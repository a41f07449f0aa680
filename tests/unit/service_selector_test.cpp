// Least-service-first selection (daemon/core/service_selector.hpp): the
// `recent` variant (exponential decay, no lift) and `vtc` (no decay, a
// returning flow lifted to the least backlogged counter).
#include "daemon/core/service_selector.hpp"

#include <gtest/gtest.h>

#include <array>

namespace fairsched::core {
namespace {

constexpr TimeNs kSec = kNsPerSec;

TEST(ServiceSelector, PicksTheLeastServedBackloggedFlow) {
  ServiceSelector s;
  for (ServiceSelector::FlowId f = 0; f < 3; ++f) s.setWeight(f, 1);
  s.charge(0, 300, 0);
  s.charge(1, 100, 0);
  s.charge(2, 200, 0);
  EXPECT_EQ(s.select(), ServiceSelector::kNone);
  for (ServiceSelector::FlowId f = 0; f < 3; ++f) s.enqueue(f, 0);
  EXPECT_EQ(s.select(), 1u);
  s.charge(1, 150, 0);  // 250: now flow 2 (200) is least served
  EXPECT_EQ(s.select(), 2u);
  s.remove(2);
  EXPECT_EQ(s.select(), 1u);
  s.charge(0, -100, 0);  // given back: 200 < 250
  EXPECT_EQ(s.select(), 0u);
  EXPECT_TRUE(s.backlogged(0));
  EXPECT_FALSE(s.backlogged(2));
}

TEST(ServiceSelector, TiesGoToTheFlowBackloggedFirst) {
  ServiceSelector s;
  for (ServiceSelector::FlowId f : {4u, 2u, 7u}) {
    s.setWeight(f, 1);
    s.enqueue(f, 0);
  }
  EXPECT_EQ(s.select(), 4u);
}

TEST(ServiceSelector, WeightsScaleTheServiceCompared) {
  // Serving whoever is least served per weight, one unit at a time, gives
  // each flow a share proportional to its weight.
  ServiceSelector s;
  const std::array<double, 3> weights{1, 2, 4};
  for (ServiceSelector::FlowId f = 0; f < 3; ++f) {
    s.setWeight(f, weights[f]);
    s.enqueue(f, 0);
  }
  std::array<int, 3> served{};
  for (int i = 0; i < 7000; ++i) {
    const auto f = s.select();
    ++served[f];
    s.charge(f, 1, 0);
  }
  EXPECT_NEAR(served[0], 1000, 2);
  EXPECT_NEAR(served[1], 2000, 2);
  EXPECT_NEAR(served[2], 4000, 2);
}

TEST(ServiceSelector, RecentServiceHalvesEveryHalfLife) {
  ServiceSelector s(10 * kSec);
  s.setWeight(0, 1);
  s.charge(0, 1000, 0);
  EXPECT_NEAR(s.service(0, 0), 1000, 1e-6);
  EXPECT_NEAR(s.service(0, 10 * kSec), 500, 1e-6);
  EXPECT_NEAR(s.service(0, 30 * kSec), 125, 1e-6);
  s.charge(0, 100, 30 * kSec);
  EXPECT_NEAR(s.service(0, 30 * kSec), 225, 1e-6);
}

TEST(ServiceSelector, RecentForgivesOldServiceButNotNewService) {
  // Flow 0 was served 1000 a minute ago; flow 1 was served 200 just now. A
  // counter without decay prefers flow 1; with a 10 s half-life flow 0's
  // service is worth 1000 / 64 now, so it goes first.
  ServiceSelector vtc(0, true), recent(10 * kSec);
  for (ServiceSelector* s : {&vtc, &recent}) {
    s->setWeight(0, 1);
    s->setWeight(1, 1);
    s->charge(0, 1000, 0);
    s->charge(1, 200, 60 * kSec);
    s->enqueue(1, 60 * kSec);
    s->enqueue(0, 60 * kSec);
  }
  EXPECT_EQ(vtc.select(), 1u);
  EXPECT_EQ(recent.select(), 0u);
}

TEST(ServiceSelector, VtcLiftsAReturningFlowToTheLeastBackloggedCounter) {
  ServiceSelector s(0, /*lift=*/true);
  for (ServiceSelector::FlowId f = 0; f < 3; ++f) s.setWeight(f, 1);
  s.enqueue(0, 0);
  s.enqueue(1, 0);
  s.charge(0, 5000, 0);
  s.charge(1, 3000, 0);
  // Flow 2 was idle all along: it is lifted to 3000, not left at 0 to
  // monopolise the endpoint until it caught up.
  s.enqueue(2, 0);
  EXPECT_NEAR(s.service(2, 0), 3000, 1e-9);
  // With nobody backlogged, the counter of the last flow that left.
  s.remove(0);
  s.remove(1);
  s.remove(2);
  s.forget(2);
  s.enqueue(2, 0);
  EXPECT_NEAR(s.service(2, 0), 3000, 1e-9);
}

TEST(ServiceSelector, RecentDoesNotLift) {
  ServiceSelector s(10 * kSec);
  s.setWeight(0, 1);
  s.setWeight(1, 1);
  s.enqueue(0, 0);
  s.charge(0, 5000, 0);
  s.enqueue(1, 0);
  EXPECT_EQ(s.service(1, 0), 0.0);
  EXPECT_EQ(s.select(), 1u);
}

TEST(ServiceSelector, OrderSurvivesTheRescaleOfLongRuns) {
  // 1000 half-lives: the inflated counters are rescaled several times on
  // the way; the order and the decayed values stay right.
  ServiceSelector s(kSec);
  s.setWeight(0, 1);
  s.setWeight(1, 1);
  s.enqueue(0, 0);
  s.enqueue(1, 0);
  for (TimeNs t = 0; t <= 1000 * kSec; t += kSec / 2) {
    s.charge(0, 2, t);
    s.charge(1, 1, t);
  }
  EXPECT_EQ(s.select(), 1u);
  const TimeNs end = 1000 * kSec;
  // A geometric series: the sum of x·2^(-k/2) over k >= 0 is x / (1 - 2^-0.5).
  EXPECT_NEAR(s.service(1, end), 1.0 / (1.0 - 0.7071067811865476), 1e-6);
  EXPECT_NEAR(s.service(0, end), 2.0 / (1.0 - 0.7071067811865476), 1e-6);
}

}  // namespace
}  // namespace fairsched::core
