#include "gateway/rate_limit_headers.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace fairsched::gateway {

namespace {

constexpr TimeNs kSec = 1'000'000'000;

std::map<std::string, std::string> asMap(const std::vector<HttpHeader>& h) {
  std::map<std::string, std::string> m;
  for (const HttpHeader& x : h) m[x.name] = x.value;
  return m;
}

TenantLimits limits(std::uint64_t requests_per_min, std::uint64_t tokens_per_min) {
  TenantLimits l;
  l.requests = core::LimitSpec{core::LimitUnit::kRequests, requests_per_min, 60 * kSec};
  l.tokens = core::LimitSpec{core::LimitUnit::kTokens, tokens_per_min, 60 * kSec};
  return l;
}

}  // namespace

TEST(FormatReset, WholeMillisecondsRoundedUp) {
  EXPECT_EQ(formatReset(std::chrono::nanoseconds(0)), "0.000s");
  EXPECT_EQ(formatReset(std::chrono::nanoseconds(1)), "0.001s");
  EXPECT_EQ(formatReset(std::chrono::milliseconds(61250)), "61.250s");
}

TEST(RateLimitHeaders, RemainingCountsWhatWasSentAndRefunds) {
  RateLimitHeaders h;
  h.setLimits("acme", limits(3, 1000));
  auto m = asMap(h.headers("acme", 10 * kSec));
  EXPECT_EQ(m["x-ratelimit-limit-requests"], "3");
  EXPECT_EQ(m["x-ratelimit-remaining-requests"], "3");
  EXPECT_EQ(m["x-ratelimit-reset-requests"], "0.000s");
  const auto sent = h.add("acme", 300, 10 * kSec);
  m = asMap(h.headers("acme", 10 * kSec));
  EXPECT_EQ(m["x-ratelimit-remaining-requests"], "2");
  EXPECT_EQ(m["x-ratelimit-remaining-tokens"], "700");
  EXPECT_EQ(m["x-ratelimit-reset-requests"], "60.000s");
  h.refund("acme", sent, false, 200);  // used 100 of 300
  m = asMap(h.headers("acme", 10 * kSec));
  EXPECT_EQ(m["x-ratelimit-remaining-requests"], "2");
  EXPECT_EQ(m["x-ratelimit-remaining-tokens"], "900");
  h.refund("acme", h.add("acme", 50, 11 * kSec), true, 0);  // refused: all of it back
  m = asMap(h.headers("acme", 11 * kSec));
  EXPECT_EQ(m["x-ratelimit-remaining-requests"], "2");
  // A minute later the window is empty again.
  m = asMap(h.headers("acme", 75 * kSec));
  EXPECT_EQ(m["x-ratelimit-remaining-requests"], "3");
}

TEST(RateLimitHeaders, A429ShowsTheExhaustedUnitAndAtLeastRetryAfter) {
  RateLimitHeaders h;
  h.setLimits("acme", limits(1, 1000));
  h.add("acme", 10, 0);
  auto m = asMap(h.headers("acme", kSec, std::chrono::seconds(59), 10));
  EXPECT_EQ(m["x-ratelimit-remaining-requests"], "0");
  EXPECT_EQ(m["x-ratelimit-remaining-tokens"], "990");
  EXPECT_EQ(m["x-ratelimit-reset-requests"], "59.000s");
  EXPECT_EQ(m["x-ratelimit-reset-tokens"], "59.000s");  // the tokens window empties then too
}

TEST(RateLimitHeaders, NoLimitsNoHeaders) {
  RateLimitHeaders h;
  EXPECT_TRUE(h.headers("nobody", 0).empty());
  h.setLimits("acme", {});
  EXPECT_FALSE(h.hasLimits("acme"));
  EXPECT_TRUE(h.headers("acme", 0).empty());
}

TEST(EffectiveLimits, EndpointThenTierThenTenantShortestWindowWins) {
  auto parsed = config::parseConfig(
      "[[tiers]]\nname = \"paid\"\n[tiers.limits]\n"
      "[endpoints.chat]\nexecutor = \"worker\"\nlimits = [\"100 requests/minute\", \"5000 "
      "tokens/minute\"]\n"
      "[tenants.acme]\ntier = \"paid\"\n[tenants.acme.limits]\nchat = [\"2 requests/second\", "
      "\"unlimited tokens/minute\"]\n");
  ASSERT_TRUE(parsed.ok()) << parsed.error().toString();
  const auto& cfg = parsed.value();
  const TenantLimits acme = effectiveLimits(cfg, "chat", "acme", std::nullopt);
  ASSERT_TRUE(acme.requests);
  EXPECT_EQ(acme.requests->amount, 2u);
  EXPECT_FALSE(acme.tokens);
  const TenantLimits other = effectiveLimits(cfg, "chat", "other", std::nullopt);
  EXPECT_EQ(other.requests->amount, 100u);
  EXPECT_EQ(other.tokens->amount, 5000u);
  EXPECT_FALSE(effectiveLimits(cfg, "nope", "acme", std::nullopt).requests);
}

}  // namespace fairsched::gateway
