// JsonScan (gateway/json_scan.hpp) against nlohmann/json, the parser it
// replaces on the gateway's hot path: the same texts accepted and refused,
// the same strings decoded, and the integers read as nlohmann types them.
#include "gateway/json_scan.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

namespace fairsched::gateway {
namespace {

bool scans(std::string_view text) {
  JsonScan s(text);
  return s.skip() && s.end();
}

bool accepted(std::string_view text) {
  return nlohmann::json::accept(text.begin(), text.end());
}

const std::vector<std::string>& samples() {
  static const std::vector<std::string> v = {
      R"({"model":"m","messages":[{"role":"user","content":"hi \"there\" \u00e9\ud83d\ude00"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true},"priority":-3,"temperature":0.5e-3})",
      R"({"id":"c","choices":[{"index":0,"text":"ab\n","finish_reason":null}],"usage":{"prompt_tokens":34,"completion_tokens":8}})",
      R"([1,-0,0.5,-1.25E+7,1e9,true,false,null,"",{},[],[[{}]]])",
      "  {\"a\" : [ 1 , 2 ] , \"b\" :\t{ \"c\" : \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\" } }\r\n",
      R"("\/\\\b\f\n\r\t\u0000")",
      "0",
      "-12",
  };
  return v;
}

TEST(JsonScan, AcceptsAndRefusesWhatNlohmannDoes) {
  const std::vector<std::string> bad = {
      "",
      "{",
      "}",
      "{\"a\"}",
      "{\"a\":}",
      "{\"a\":1,}",
      "[1,]",
      "[,1]",
      "{,}",
      "[1 2]",
      "{\"a\":1]",
      "[1}",
      "01",
      "-",
      "1.",
      ".5",
      "1e",
      "1e+",
      "+1",
      "tru",
      "truex",
      "nul",
      "[true false]",
      "\"\\x\"",
      "\"\\u12\"",
      "\"\\ud800\"",
      "\"\\udc00\"",
      "\"\\ud800\\u0041\"",
      "\"a",
      "\"\x01\"",
      "\"\xc0\xaf\"",
      "\"\xed\xa0\x80\"",
      "\"\xf4\x90\x80\x80\"",
      "\"\xe2\x82\"",
      "\"\x80\"",
      "\"\xff\"",
      "{} {}",
      "[] x",
      "{\"a\":1}}",
      "{1:2}",
      "NaN",
      "[Infinity]",
      "'a'",
  };
  for (const std::string& t : samples()) {
    EXPECT_TRUE(accepted(t)) << t;
    EXPECT_TRUE(scans(t)) << t;
  }
  for (const std::string& t : bad) {
    EXPECT_FALSE(accepted(t)) << t;
    EXPECT_FALSE(scans(t)) << t;
  }
}

// Random byte changes to valid texts: each result is accepted by both or by
// neither.
TEST(JsonScan, AgreesWithNlohmannOnMutatedTexts) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "{}[]\":,\\ 0123456789.-+eEtrufalsn\xc3\xa9\xed\xa0\x80\xf4\x01u";
  int accepted_mutants = 0;
  for (const std::string& base : samples()) {
    for (int round = 0; round < 3000; ++round) {
      std::string t = base;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits && !t.empty(); ++e) {
        const std::size_t at = rng() % t.size();
        switch (rng() % 3) {
          case 0:
            t[at] = alphabet[rng() % alphabet.size()];
            break;
          case 1:
            t.erase(at, 1);
            break;
          default:
            t.insert(at, 1, alphabet[rng() % alphabet.size()]);
            break;
        }
      }
      const bool want = accepted(t);
      accepted_mutants += want ? 1 : 0;
      ASSERT_EQ(scans(t), want) << t;
    }
  }
  EXPECT_GT(accepted_mutants, 100);  // the comparison covered both outcomes
}

TEST(JsonScan, DecodesStringsAsNlohmann) {
  for (const std::string raw : {"plain", "a\\\"b\\\\c\\/d", "\\b\\f\\n\\r\\t", "\\u00e9\\u20ac",
                                "\\ud83d\\ude00x", "\\u0000", "\xc3\xa9 stays"}) {
    const std::string quoted = "\"" + raw + "\"";
    JsonScan s(quoted);
    std::string_view got;
    ASSERT_TRUE(s.string(got)) << raw;
    EXPECT_EQ(JsonScan::decode(got), nlohmann::json::parse(quoted).get<std::string>()) << raw;
  }
  EXPECT_TRUE(JsonScan::keyIs("usage", "usage"));
  EXPECT_TRUE(JsonScan::keyIs("us\\u0061ge", "usage"));
  EXPECT_FALSE(JsonScan::keyIs("usages", "usage"));
  EXPECT_TRUE(JsonScan::keyIs("\\u0075sage", "usage"));  // an escape in the first place
  EXPECT_FALSE(JsonScan::keyIs("\\u0076sage", "usage"));
  EXPECT_FALSE(JsonScan::keyIs("xsage", "usage"));
  EXPECT_FALSE(JsonScan::keyIs("u", "usage"));
  EXPECT_TRUE(JsonScan::keyIs("", ""));
  EXPECT_FALSE(JsonScan::keyIs("", "usage"));
}

TEST(JsonScan, ReadsIntegersAsNlohmannTypesThem) {
  for (const std::string t : {"0", "7", "18446744073709551615", "18446744073709551616", "-1", "1.0",
                              "1e2", "9223372036854775807", "9223372036854775808",
                              "-9223372036854775808", "-9223372036854775809"}) {
    const nlohmann::json j = nlohmann::json::parse(t);
    const std::optional<std::uint64_t> u = JsonScan::unsignedValue(t);
    EXPECT_EQ(u.has_value(), j.is_number_unsigned()) << t;
    if (u) {
      EXPECT_EQ(*u, j.get<std::uint64_t>()) << t;
    }
    const std::optional<std::int64_t> i = JsonScan::integerValue(t);
    const bool fits_int64 =
        j.is_number_integer() && (!j.is_number_unsigned() || j.get<std::uint64_t>() <= INT64_MAX);
    EXPECT_EQ(i.has_value(), fits_int64) << t;
    if (i) {
      EXPECT_EQ(*i, j.get<std::int64_t>()) << t;
    }
  }
}

TEST(JsonScan, WalksMembersAndItemsAndStopsAtTheFirstError) {
  JsonScan s(R"({"a":[1,{"b":"c"}],"d":true})");
  ASSERT_TRUE(s.enterObject());
  std::string_view k;
  ASSERT_TRUE(s.nextMember(k));
  EXPECT_EQ(k, "a");
  ASSERT_EQ(s.peek(), JsonScan::Type::kArray);
  ASSERT_TRUE(s.enterArray());
  ASSERT_TRUE(s.nextItem());
  std::string_view n;
  ASSERT_TRUE(s.number(n));
  EXPECT_EQ(n, "1");
  ASSERT_TRUE(s.nextItem());
  ASSERT_TRUE(s.skip());
  EXPECT_FALSE(s.nextItem());
  ASSERT_TRUE(s.nextMember(k));
  EXPECT_EQ(k, "d");
  std::string_view lit;
  ASSERT_TRUE(s.literal(lit));
  EXPECT_EQ(lit, "true");
  EXPECT_FALSE(s.nextMember(k));
  EXPECT_TRUE(s.end());

  JsonScan broken(R"({"a" 1})");
  ASSERT_TRUE(broken.enterObject());
  EXPECT_FALSE(broken.nextMember(k));
  EXPECT_FALSE(broken.ok());
  EXPECT_EQ(broken.peek(), JsonScan::Type::kBad);
  EXPECT_FALSE(broken.skip());
}

TEST(JsonScan, RefusesNestingDeeperThanItsLimit) {
  const std::string ok =
      std::string(JsonScan::kMaxDepth, '[') + std::string(JsonScan::kMaxDepth, ']');
  EXPECT_TRUE(scans(ok));
  const std::string deep = "[" + ok + "]";
  EXPECT_TRUE(accepted(deep));  // nlohmann has no limit; this reader's stack is bounded
  EXPECT_FALSE(scans(deep));
}

}  // namespace
}  // namespace fairsched::gateway
