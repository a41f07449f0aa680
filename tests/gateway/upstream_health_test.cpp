#include "gateway/upstream_health.hpp"

#include <gtest/gtest.h>

namespace fairsched::gateway {
namespace {

constexpr TimeNs kSec = 1'000'000'000;
using State = UpstreamHealth::State;

UpstreamHealth::Policy policy(bool checks) {
  UpstreamHealth::Policy p;
  p.eject_after = 3;
  p.backoff_min = 1 * kSec;
  p.backoff_max = 4 * kSec;
  p.checks = checks;
  return p;
}

TEST(UpstreamHealth, FailuresInARowEjectAndASuccessInBetweenForgivesThem) {
  UpstreamHealth h(policy(false));
  h.callFailed(0, false, "timeout");
  h.callFailed(0, false, "timeout");
  h.callOk();
  h.callFailed(0, false, "timeout");
  h.callFailed(0, false, "timeout");
  EXPECT_TRUE(h.usable(0));
  h.callFailed(0, false, "timeout");
  EXPECT_FALSE(h.usable(0));
  EXPECT_EQ(h.state(0), State::kEjected);
  EXPECT_EQ(h.ejectedUntil(), 1 * kSec);
  EXPECT_EQ(h.why(), "timeout");
}

TEST(UpstreamHealth, ARefusedConnectionEjectsAtOnce) {
  UpstreamHealth h(policy(false));
  h.callFailed(5 * kSec, true, "connection refused");
  EXPECT_EQ(h.state(5 * kSec), State::kEjected);
  EXPECT_EQ(h.ejections(), 1u);
}

TEST(UpstreamHealth, WithoutChecksProbationFollowsAndEachRelapseDoublesTheBackoff) {
  UpstreamHealth h(policy(false));
  h.callFailed(0, true, "refused");
  EXPECT_EQ(h.state(kSec - 1), State::kEjected);
  EXPECT_EQ(h.state(kSec), State::kProbation);
  EXPECT_TRUE(h.usable(kSec));
  h.callFailed(kSec, false, "refused");  // one failure on probation: out again, twice as long
  EXPECT_EQ(h.ejectedUntil(), 3 * kSec);
  h.callFailed(3 * kSec, false, "refused");
  EXPECT_EQ(h.ejectedUntil(), 7 * kSec);
  h.callFailed(7 * kSec, false, "refused");
  EXPECT_EQ(h.ejectedUntil(), 11 * kSec);  // capped at backoff_max
  h.callOk();
  EXPECT_EQ(h.state(11 * kSec), State::kHealthy);
  EXPECT_EQ(h.why(), "");
  h.callFailed(20 * kSec, true, "refused");  // recovered: the backoff starts over
  EXPECT_EQ(h.ejectedUntil(), 21 * kSec);
}

TEST(UpstreamHealth, WithChecksOnlyAPassingCheckAfterTheBackoffEndsAnEjection) {
  UpstreamHealth h(policy(true));
  h.checked(false, 0, "HTTP 503");
  EXPECT_EQ(h.state(0), State::kEjected);
  h.checked(true, kSec / 2, "");  // too early: the backoff is not over
  EXPECT_EQ(h.state(kSec / 2), State::kEjected);
  EXPECT_EQ(h.state(kSec), State::kAwaitingCheck);
  EXPECT_FALSE(h.usable(kSec));
  h.callOk();  // a call that started earlier does not end it
  EXPECT_FALSE(h.usable(kSec));
  h.checked(true, kSec, "");
  EXPECT_EQ(h.state(kSec), State::kHealthy);
}

TEST(UpstreamHealth, AFailedCheckWhileAwaitingOneBacksOffLonger) {
  UpstreamHealth h(policy(true));
  h.checked(false, 0, "refused");
  h.checked(false, kSec, "refused");
  EXPECT_EQ(h.ejectedUntil(), 3 * kSec);
  EXPECT_EQ(h.ejections(), 2u);
}

TEST(UpstreamHealth, CallsThatFailWhileEjectedDoNotExtendIt) {
  UpstreamHealth h(policy(false));
  h.callFailed(0, true, "refused");
  h.callFailed(kSec / 2, true, "refused");
  EXPECT_EQ(h.ejectedUntil(), kSec);
  EXPECT_EQ(h.ejections(), 1u);
}

}  // namespace
}  // namespace fairsched::gateway
