#include "daemon/core/limit_spec.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <limits>
#include <string>

namespace fairsched::core {
namespace {

constexpr TimeNs kMinute = 60 * kNsPerSec;
constexpr TimeNs kHour = 60 * kMinute;
constexpr TimeNs kDay = 24 * kHour;

LimitSpec parsed(std::string_view text) {
  auto r = parseLimitSpec(text);
  if (auto* e = r.errorOrNull()) {
    ADD_FAILURE() << "'" << text << "' did not parse: " << e->message;
    return {};
  }
  return r.value();
}

std::string errorOf(std::string_view text) {
  auto r = parseLimitSpec(text);
  if (auto* e = r.errorOrNull()) return e->message;
  return "<parsed: " + toString(r.value()) + ">";
}

TEST(LimitSpec, ParsesRequestsPerMinute) {
  EXPECT_EQ(parsed("600 requests/minute"), (LimitSpec{LimitUnit::kRequests, 600, kMinute}));
}

TEST(LimitSpec, ParsesTokensWithMegaSuffix) {
  EXPECT_EQ(parsed("2M tokens/minute"), (LimitSpec{LimitUnit::kTokens, 2'000'000, kMinute}));
}

TEST(LimitSpec, SuffixesMultiplyByPowersOfTen) {
  EXPECT_EQ(parsed("3k requests/second").amount, 3'000u);
  EXPECT_EQ(parsed("4M requests/second").amount, 4'000'000u);
  EXPECT_EQ(parsed("5G tokens/second").amount, 5'000'000'000u);
}

TEST(LimitSpec, UnderscoresSeparateDigits) {
  EXPECT_EQ(parsed("1_000_000 tokens/day").amount, 1'000'000u);
  EXPECT_EQ(parsed("1_5k tokens/day").amount, 15'000u);
}

TEST(LimitSpec, SingularAndPluralWordsAreTheSame) {
  EXPECT_EQ(parsed("1 request/minute"), parsed("1 requests/minutes"));
  EXPECT_EQ(parsed("1 token/hour"), parsed("1 tokens/hours"));
}

TEST(LimitSpec, NamedWindows) {
  EXPECT_EQ(parsed("1 request/second").window_ns, kNsPerSec);
  EXPECT_EQ(parsed("1 request/minute").window_ns, kMinute);
  EXPECT_EQ(parsed("1 request/hour").window_ns, kHour);
  EXPECT_EQ(parsed("1 request/day").window_ns, kDay);
  EXPECT_EQ(parsed("1 request/days").window_ns, kDay);
}

TEST(LimitSpec, MonthIsThirtyDays) {
  EXPECT_EQ(parsed("1 request/month").window_ns, 30 * kDay);
  EXPECT_EQ(parsed("1 request/months").window_ns, 30 * kDay);
}

TEST(LimitSpec, CountedWindows) {
  EXPECT_EQ(parsed("1 request/90s").window_ns, 90 * kNsPerSec);
  EXPECT_EQ(parsed("1 request/15m").window_ns, 15 * kMinute);
  EXPECT_EQ(parsed("1 request/12h").window_ns, 12 * kHour);
  EXPECT_EQ(parsed("1 request/7d").window_ns, 7 * kDay);
}

TEST(LimitSpec, WhiteSpaceAroundTokensIsFree) {
  const LimitSpec want{LimitUnit::kRequests, 600, kMinute};
  EXPECT_EQ(parsed("  600   requests / minute  "), want);
  EXPECT_EQ(parsed("600requests/minute"), want);
  EXPECT_EQ(parsed("\t600 requests/\tminute\n"), want);
}

TEST(LimitSpec, MaxUint64AmountParses) {
  EXPECT_EQ(parsed("18446744073709551615 tokens/day").amount,
            std::numeric_limits<std::uint64_t>::max());
}

TEST(LimitSpec, UnknownWindowNamesTheWord) {
  EXPECT_EQ(errorOf("600 requests/minite"), "unknown unit 'minite'");
}

TEST(LimitSpec, UnknownCostUnitNamesTheWord) {
  EXPECT_EQ(errorOf("600 x/minute"), "unknown unit 'x'");
  EXPECT_EQ(errorOf("600 Requests/minute"), "unknown unit 'Requests'");
}

TEST(LimitSpec, MillisecondWindowIsUnknown) {
  EXPECT_EQ(errorOf("1 request/10ms"), "unknown unit '10ms'");
}

TEST(LimitSpec, WindowStartingWithAPunctuationMarkIsUnknown) {
  EXPECT_EQ(errorOf("1 request/-1m"), "unknown unit '-1m'");
}

TEST(LimitSpec, ZeroAmountIsRejected) {
  EXPECT_EQ(errorOf("0 requests/minute"), "amount must be positive");
  EXPECT_EQ(errorOf("0k requests/minute"), "amount must be positive");
  EXPECT_EQ(errorOf("0_0 requests/minute"), "amount must be positive");
}

TEST(LimitSpec, ZeroWindowIsRejected) {
  EXPECT_EQ(errorOf("1 request/0s"), "window must be longer than zero");
}

TEST(LimitSpec, MissingSlashIsRejected) {
  EXPECT_EQ(errorOf("600 requests minute"), "missing '/' between the unit and the window");
  EXPECT_EQ(errorOf("600 requests"), "missing '/' between the unit and the window");
}

TEST(LimitSpec, MissingWindowIsRejected) {
  EXPECT_EQ(errorOf("600 requests/"), "missing window after '/'");
  EXPECT_EQ(errorOf("600 requests/  "), "missing window after '/'");
}

TEST(LimitSpec, MissingUnitIsRejected) {
  EXPECT_EQ(errorOf("600"), "expected a unit (requests or tokens) after the amount");
  EXPECT_EQ(errorOf("600 /minute"), "expected a unit (requests or tokens) after the amount");
}

TEST(LimitSpec, EmptyTextIsRejected) {
  EXPECT_EQ(errorOf(""), "empty limit; expected '<amount> <unit>/<window>'");
  EXPECT_EQ(errorOf("   "), "empty limit; expected '<amount> <unit>/<window>'");
}

TEST(LimitSpec, MissingAmountIsRejected) {
  EXPECT_EQ(errorOf("requests/minute"), "expected an amount, got 'requests'");
  EXPECT_EQ(errorOf("-5 requests/minute"), "expected an amount, got '-5'");
}

TEST(LimitSpec, MisplacedUnderscoresAreRejected) {
  EXPECT_EQ(errorOf("_1 requests/minute"), "invalid amount '_1'");
  EXPECT_EQ(errorOf("1_ requests/minute"), "invalid amount '1_'");
  EXPECT_EQ(errorOf("1__0 requests/minute"), "invalid amount '1__0'");
}

TEST(LimitSpec, FractionalAmountIsRejected) {
  EXPECT_EQ(errorOf("1.5M tokens/minute"), "invalid amount '1.5M': use a whole number");
}

TEST(LimitSpec, AmountOverflowIsRejected) {
  EXPECT_EQ(errorOf("18446744073709551616 tokens/day"),
            "amount '18446744073709551616' is too large");
  EXPECT_EQ(errorOf("18446744073709552k tokens/day"), "amount '18446744073709552k' is too large");
  EXPECT_EQ(errorOf("99999999999999999999999G tokens/day"),
            "amount '99999999999999999999999G' is too large");
}

TEST(LimitSpec, WindowOverflowIsRejected) {
  // 106752 days is past the 292-year range of TimeNs.
  EXPECT_EQ(errorOf("1 request/106752d"), "window '106752d' is too long");
  EXPECT_EQ(errorOf("1 request/99999999999999999999999s"),
            "window '99999999999999999999999s' is too long");
  EXPECT_EQ(parsed("1 request/106751d").window_ns, 106751 * kDay);
}

TEST(LimitSpec, TrailingTextIsRejected) {
  EXPECT_EQ(errorOf("600 requests/minute extra"), "unexpected 'extra' after the window");
  EXPECT_EQ(errorOf("600 requests/minute!"), "unexpected '!' after the window");
}

TEST(LimitSpec, UnlimitedIsNotALimitSpec) {
  EXPECT_EQ(errorOf("unlimited"), "expected an amount, got 'unlimited'");
}

TEST(LimitSpec, ToStringIsCanonical) {
  EXPECT_EQ(toString(parsed("600 requests / minutes")), "600 requests/minute");
  EXPECT_EQ(toString(parsed("2_000k tokens/minute")), "2M tokens/minute");
  EXPECT_EQ(toString(parsed("3G tokens/day")), "3G tokens/day");
  EXPECT_EQ(toString(parsed("1 request/second")), "1 request/second");
  EXPECT_EQ(toString(parsed("1 token/hour")), "1 token/hour");
  EXPECT_EQ(toString(parsed("1500 tokens/30d")), "1500 tokens/month");
  EXPECT_EQ(toString(parsed("5 requests/7d")), "5 requests/7d");
  EXPECT_EQ(toString(parsed("5 requests/48h")), "5 requests/2d");
  EXPECT_EQ(toString(parsed("5 requests/90m")), "5 requests/90m");
  EXPECT_EQ(toString(parsed("5 requests/90s")), "5 requests/90s");
}

TEST(LimitSpec, ToStringOfASubSecondWindowSpellsOutNanoseconds) {
  EXPECT_EQ(toString(LimitSpec{LimitUnit::kRequests, 5, 1500}), "5 requests/1500ns");
}

TEST(LimitSpec, SameSlotComparesUnitAndWindowOnly) {
  EXPECT_TRUE(parsed("1 requests/minute").sameSlot(parsed("500 requests/60s")));
  EXPECT_FALSE(parsed("1 requests/minute").sameSlot(parsed("1 tokens/minute")));
  EXPECT_FALSE(parsed("1 requests/minute").sameSlot(parsed("1 requests/hour")));
}

RC_GTEST_PROP(LimitSpecProperty, ToStringParsesBackToTheSameSpec,
              (std::uint64_t amountSeed, std::uint32_t windowSeconds, bool tokens)) {
  LimitSpec spec;
  spec.unit = tokens ? LimitUnit::kTokens : LimitUnit::kRequests;
  spec.amount = amountSeed == 0 ? 1 : amountSeed;
  spec.window_ns = static_cast<TimeNs>(windowSeconds == 0 ? 1 : windowSeconds) * kNsPerSec;
  auto back = parseLimitSpec(toString(spec));
  RC_ASSERT(back.ok());
  RC_ASSERT(back.value() == spec);
}

RC_GTEST_PROP(LimitSpecProperty, ArbitraryTextNeverYieldsAZeroAmountOrWindow, (std::string text)) {
  auto r = parseLimitSpec(text);
  if (auto* spec = r.valueOrNull()) {
    RC_ASSERT(spec->amount > 0u);
    RC_ASSERT(spec->window_ns > 0);
  } else {
    RC_ASSERT(!r.error().message.empty());
  }
}

}  // namespace
}  // namespace fairsched::core
