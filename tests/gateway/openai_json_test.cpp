#include "gateway/openai_json.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "fairsched/prefix_hash.hpp"
#include "tests/support/seeded_rng.hpp"

namespace fairsched::gateway {

namespace {

GenerateRequest ok(Route r, const std::string& body, std::uint32_t def = 16,
                   std::uint32_t cap = 4096) {
  auto v = parseGenerateRequest(r, body, def, cap);
  EXPECT_TRUE(std::holds_alternative<GenerateRequest>(v)) << std::get<BodyError>(v).message;
  return std::holds_alternative<GenerateRequest>(v) ? std::get<GenerateRequest>(v)
                                                    : GenerateRequest{};
}

BodyError bad(Route r, const std::string& body) {
  auto v = parseGenerateRequest(r, body, 16, 4096);
  EXPECT_TRUE(std::holds_alternative<BodyError>(v)) << body;
  return std::holds_alternative<BodyError>(v) ? std::get<BodyError>(v) : BodyError{};
}

}  // namespace

TEST(ParseGenerateRequest, EstimatesPromptTokensAsBytesOverFour) {
  EXPECT_EQ(ok(Route::kCompletions, R"({"prompt":"12345678"})").prompt_tokens, 2u);
  EXPECT_EQ(ok(Route::kCompletions, R"({"prompt":"123456789"})").prompt_tokens, 3u);
  EXPECT_EQ(ok(Route::kCompletions, R"({"prompt":""})").prompt_tokens, 1u);
  // Chat: content bytes / 4 plus 4 per message; content parts count their text.
  EXPECT_EQ(ok(Route::kChatCompletions,
               R"({"messages":[{"role":"system","content":"12345678"},
                   {"role":"user","content":[{"type":"text","text":"1234"}]}]})")
                .prompt_tokens,
            2u + 1u + 8u);
}

TEST(ParseGenerateRequest, SetsMaxTokensAndAsksForUsageWhenStreaming) {
  const GenerateRequest r = ok(Route::kChatCompletions,
                               R"({"model":"m","messages":[{"role":"user","content":"x"}],
                                   "stream":true})",
                               7);
  EXPECT_TRUE(r.stream);
  EXPECT_FALSE(r.caller_wants_usage);
  EXPECT_EQ(r.max_tokens, 7u);
  const auto up = nlohmann::json::parse(r.upstream_body);
  EXPECT_EQ(up["max_tokens"], 7);
  EXPECT_EQ(up["stream_options"]["include_usage"], true);
  EXPECT_EQ(up["model"], "m");
  const GenerateRequest c = ok(Route::kChatCompletions,
                               R"({"messages":[{"role":"user","content":"x"}],
                                   "max_completion_tokens":9,"stream":true,
                                   "stream_options":{"include_usage":true}})");
  EXPECT_EQ(c.max_tokens, 9u);
  EXPECT_TRUE(c.caller_wants_usage);
}

TEST(ParseGenerateRequest, RefusesWhatCannotBeScheduled) {
  EXPECT_EQ(bad(Route::kCompletions, "{nope").message, "the request body is not valid JSON");
  EXPECT_EQ(bad(Route::kCompletions, "[]").message, "the request body must be a JSON object");
  EXPECT_EQ(bad(Route::kCompletions, R"({"prompt":1})").param, "prompt");
  EXPECT_EQ(bad(Route::kChatCompletions, R"({"messages":[]})").param, "messages");
  EXPECT_EQ(bad(Route::kCompletions, R"({"prompt":"x","max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(bad(Route::kCompletions, R"({"prompt":"x","max_tokens":5000})").param, "max_tokens");
  EXPECT_EQ(bad(Route::kCompletions, R"({"prompt":"x","n":2})").param, "n");
  EXPECT_EQ(bad(Route::kCompletions, R"({"prompt":"x","stream":"yes"})").param, "stream");
}

TEST(ParseGenerateRequest, TheCallersPriorityIsKeptApartAndTheEngineGetsTheGatewaysWhenSet) {
  using P = UpstreamConfig::EnginePriority;
  const GenerateRequest r = ok(Route::kCompletions, R"({"prompt":"x","priority":-50})");
  ASSERT_TRUE(r.caller_priority);
  EXPECT_EQ(*r.caller_priority, -50);
  EXPECT_FALSE(nlohmann::json::parse(r.upstream_body).contains("priority"));
  const auto priorityIn = [](const std::string& body) {
    const auto j = nlohmann::json::parse(body);
    return j.contains("priority") ? j["priority"].get<std::int64_t>() : -999;
  };
  // Off: the caller's passes through; set: the caller's is replaced.
  EXPECT_EQ(priorityIn(bodyForEngine(r.upstream_body, P::kOff, 3, r.caller_priority)), -50);
  EXPECT_EQ(priorityIn(bodyForEngine(r.upstream_body, P::kLowerFirst, 3, r.caller_priority)), 3);
  EXPECT_EQ(priorityIn(bodyForEngine(r.upstream_body, P::kHigherFirst, 3, r.caller_priority)), -3);
  EXPECT_EQ(priorityIn(bodyForEngine(r.upstream_body, P::kLowerFirst, 0, std::nullopt)), 0);
  const GenerateRequest none = ok(Route::kCompletions, R"({"prompt":"x","priority":null})");
  EXPECT_FALSE(none.caller_priority);
  EXPECT_EQ(bodyForEngine(none.upstream_body, P::kOff, 7, std::nullopt), none.upstream_body);
  EXPECT_EQ(bodyForEngine("{}", P::kLowerFirst, 2, std::nullopt), R"({"priority":2})");
  EXPECT_EQ(bad(Route::kCompletions, R"({"prompt":"x","priority":"high"})").param, "priority");
  EXPECT_EQ(bad(Route::kCompletions, R"({"prompt":"x","priority":1.5})").param, "priority");
}

TEST(ParseGenerateRequest, EmbeddingsReserveTheirInputAloneAndAreNeverStreamed) {
  const GenerateRequest one = ok(Route::kEmbeddings, R"({"model":"e","input":"12345678"})");
  EXPECT_EQ(one.prompt_tokens, 2u);
  EXPECT_EQ(one.max_tokens, 0u);
  EXPECT_FALSE(one.stream);
  EXPECT_EQ(ok(Route::kEmbeddings, R"({"input":["1234","12345",""]})").prompt_tokens, 4u);
  EXPECT_EQ(ok(Route::kEmbeddings, R"({"input":[5,6,7]})").prompt_tokens, 3u);
  EXPECT_EQ(ok(Route::kEmbeddings, R"({"input":[[5,6],[7]]})").prompt_tokens, 3u);
  // The body goes on as it came (no max_tokens added).
  EXPECT_FALSE(nlohmann::json::parse(one.upstream_body).contains("max_tokens"));
  EXPECT_EQ(bad(Route::kEmbeddings, R"({"model":"e"})").param, "input");
  EXPECT_EQ(bad(Route::kEmbeddings, R"({"input":[]})").param, "input");
  EXPECT_EQ(bad(Route::kEmbeddings, R"({"input":[[5],"x",{}]})").param, "input");
  EXPECT_EQ(bad(Route::kEmbeddings, R"({"input":[-1]})").param, "input");
  EXPECT_EQ(bad(Route::kEmbeddings, R"({"input":"x","stream":true})").param, "stream");
}

TEST(ParseStreamChunk, TextUsageAndErrors) {
  EXPECT_TRUE(parseStreamChunk(R"({"choices":[{"text":"a"}]})").has_text);
  EXPECT_FALSE(parseStreamChunk(R"({"choices":[{"text":""}]})").has_text);
  EXPECT_TRUE(parseStreamChunk(R"({"choices":[{"delta":{"content":"a"}}]})").has_text);
  EXPECT_FALSE(parseStreamChunk(R"({"choices":[{"delta":{"role":"assistant"}}]})").has_text);
  const StreamChunk u =
      parseStreamChunk(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}})");
  EXPECT_TRUE(u.usage_only);
  EXPECT_EQ(u.usage->completion_tokens, 5u);
  EXPECT_TRUE(parseStreamChunk(R"({"error":{"message":"x"}})").is_error);
  EXPECT_FALSE(parseStreamChunk("not json").valid);
}

TEST(ParseStreamChunk, EachPathAndNothingElse) {
  // Text only where a choice carries it, not in keys of the same name elsewhere.
  EXPECT_FALSE(parseStreamChunk(R"({"text":"a","choices":[{"x":{"text":"a"}}]})").has_text);
  EXPECT_FALSE(parseStreamChunk(R"({"choices":{"0":{"text":"a"}}})").has_text);
  EXPECT_TRUE(parseStreamChunk(R"({"choices":[{"index":1},{"text":"b"}]})").has_text);
  EXPECT_TRUE(parseStreamChunk(R"({"choices":[{"delta":{"reasoning_content":"r"}}]})").has_text);
  EXPECT_TRUE(
      parseStreamChunk(R"({"choices":[{"delta":{"tool_calls":[{"function":{"arguments":""}}]}}]})")
          .has_text);
  EXPECT_FALSE(parseStreamChunk(R"({"choices":[{"delta":{"tool_calls":[]}}]})").has_text);
  EXPECT_FALSE(parseStreamChunk(R"({"choices":[{"delta":{"content":{"content":"x"}}}]})").has_text);
  EXPECT_FALSE(parseStreamChunk(R"({"choices":[{"delta":{"content":null}}]})").has_text);
  // Braces and quotes inside strings are text, not structure.
  EXPECT_TRUE(parseStreamChunk(R"({"choices":[{"text":"}\"],{\"usage\":{"}]})").has_text);
  EXPECT_FALSE(parseStreamChunk(R"({"choices":[{"text":"}\"],{\"usage\":{"}]})").usage);
  // Usage: an object at the root, its counts unsigned integers.
  EXPECT_FALSE(parseStreamChunk(R"({"choices":[],"usage":null})").usage);
  EXPECT_FALSE(parseStreamChunk(R"({"x":{"usage":{"completion_tokens":3}}})").usage);
  const StreamChunk neg =
      parseStreamChunk(R"({"usage":{"prompt_tokens":-1,"completion_tokens":2.5}})");
  ASSERT_TRUE(neg.usage);
  EXPECT_EQ(neg.usage->prompt_tokens, 0u);
  EXPECT_EQ(neg.usage->completion_tokens, 0u);
  EXPECT_TRUE(neg.usage_only);
  EXPECT_FALSE(parseStreamChunk(R"({"choices":[1],"usage":{}})").usage_only);
  // Not a chunk: an array, a bare value, trailing bytes, cut short.
  EXPECT_FALSE(parseStreamChunk(R"([{"choices":[{"text":"a"}]}])").valid);
  EXPECT_FALSE(parseStreamChunk("\"text\"").valid);
  EXPECT_FALSE(parseStreamChunk(R"({"choices":[{"text":"a"}]} x)").has_text);
  EXPECT_FALSE(parseStreamChunk(R"({"choices":[{"text":"a"})").valid);
  EXPECT_TRUE(parseStreamChunk("{}").valid);
}

namespace {

// What a chunk says, read from a whole document: the reference the
// streaming reader must agree with.
StreamChunk byDocument(const nlohmann::json& j) {
  StreamChunk c;
  if (!j.is_object()) return c;
  c.valid = true;
  c.is_error = j.contains("error");
  const auto nonEmpty = [](const nlohmann::json& o, const char* k) {
    auto it = o.find(k);
    return it != o.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
  };
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    Usage us;
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_unsigned()) {
      us.prompt_tokens = static_cast<std::uint32_t>(p->get<std::uint64_t>());
    }
    if (auto p = u->find("completion_tokens"); p != u->end() && p->is_number_unsigned()) {
      us.completion_tokens = static_cast<std::uint32_t>(p->get<std::uint64_t>());
    }
    c.usage = us;
  }
  auto ch = j.find("choices");
  const bool none = ch == j.end() || !ch->is_array() || ch->empty();
  c.usage_only = none && c.usage.has_value();
  if (none) return c;
  for (const auto& x : *ch) {
    if (!x.is_object()) continue;
    if (nonEmpty(x, "text")) c.has_text = true;
    if (auto d = x.find("delta"); d != x.end() && d->is_object()) {
      if (nonEmpty(*d, "content") || nonEmpty(*d, "reasoning_content")) c.has_text = true;
      if (auto t = d->find("tool_calls"); t != d->end() && t->is_array() && !t->empty()) {
        c.has_text = true;
      }
    }
  }
  return c;
}

// A random JSON value over the keys a chunk's reader looks for (each
// object's keys distinct), `depth` levels at most.
nlohmann::json randomValue(std::mt19937_64& rng, int depth) {
  static const char* const kKeys[] = {"choices",
                                      "usage",
                                      "error",
                                      "text",
                                      "delta",
                                      "content",
                                      "reasoning_content",
                                      "tool_calls",
                                      "prompt_tokens",
                                      "completion_tokens",
                                      "role",
                                      "x"};
  const int kind = static_cast<int>(rng() % (depth > 0 ? 9 : 6));
  switch (kind) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<std::int64_t>(rng() % 2000) - 1000;
    case 3:
      return static_cast<double>(rng() % 100) / 8.0;
    case 4:
      return std::string(rng() % 3, 'a');
    case 5:
      return std::string("}\"{[") + std::to_string(rng() % 10);
    case 6:
    case 7: {
      nlohmann::json o = nlohmann::json::object();
      const int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) o[kKeys[rng() % std::size(kKeys)]] = randomValue(rng, depth - 1);
      return o;
    }
    default: {
      nlohmann::json a = nlohmann::json::array();
      const int n = static_cast<int>(rng() % 3);
      for (int i = 0; i < n; ++i) a.push_back(randomValue(rng, depth - 1));
      return a;
    }
  }
}

}  // namespace

TEST(ParseStreamChunk, AgreesWithTheWholeDocumentOnRandomChunks) {
  std::mt19937_64 rng(fairsched::testing::testSeed());
  for (int i = 0; i < 20000; ++i) {
    nlohmann::json j = nlohmann::json::object();
    const int n = static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) {
      static const char* const kRoot[] = {"choices", "usage", "error", "text", "x"};
      j[kRoot[rng() % std::size(kRoot)]] = randomValue(rng, 5);
    }
    if (rng() % 2 == 0) {  // the shapes engines send, their values at random
      nlohmann::json choice = nlohmann::json::object();
      nlohmann::json delta = nlohmann::json::object();
      for (const char* k : {"content", "reasoning_content", "tool_calls"}) {
        if (rng() % 2 == 0) delta[k] = randomValue(rng, 2);
      }
      if (rng() % 2 == 0) choice["text"] = randomValue(rng, 2);
      choice["delta"] = rng() % 4 == 0 ? randomValue(rng, 2) : delta;
      j["choices"] = nlohmann::json::array({randomValue(rng, 2), choice});
      if (rng() % 2 == 0) j["choices"].erase(0);
    }
    const std::string text = j.dump();
    const StreamChunk want = byDocument(nlohmann::json::parse(text));  // as a reader sees it
    const StreamChunk got = parseStreamChunk(text);
    ASSERT_EQ(got.valid, want.valid) << text;
    ASSERT_EQ(got.has_text, want.has_text) << text;
    ASSERT_EQ(got.usage_only, want.usage_only) << text;
    ASSERT_EQ(got.is_error, want.is_error) << text;
    ASSERT_EQ(got.usage.has_value(), want.usage.has_value()) << text;
    if (want.usage) {
      ASSERT_EQ(got.usage->prompt_tokens, want.usage->prompt_tokens) << text;
      ASSERT_EQ(got.usage->completion_tokens, want.usage->completion_tokens) << text;
    }
    // A whole response's usage is read the same way.
    const std::optional<Usage> whole = parseResponseUsage(text);
    ASSERT_EQ(whole.has_value(), want.usage.has_value()) << text;
    if (want.usage) {
      ASSERT_EQ(whole->prompt_tokens, want.usage->prompt_tokens) << text;
      ASSERT_EQ(whole->completion_tokens, want.usage->completion_tokens) << text;
    }
  }
}

// The body the upstream gets is the caller's with exactly the gateway's
// edits (priority out, the max_tokens key set, include_usage asked for when
// streamed), whatever else and in whatever order the caller sent.
TEST(ParseGenerateRequest, TheUpstreamBodyIsTheCallersWithOnlyTheGatewaysEditsOnRandomBodies) {
  using nlohmann::json;
  std::mt19937_64 rng(fairsched::testing::testSeed());
  const auto maybe = [&](json good) { return rng() % 5 == 0 ? randomValue(rng, 2) : good; };
  int accepted = 0;
  for (int i = 0; i < 5000; ++i) {
    const bool chat = rng() % 2 == 0;
    json j = json::object();
    if (chat) {
      json msgs = json::array();
      for (int m = 0, n = 1 + static_cast<int>(rng() % 3); m < n; ++m) {
        json content = rng() % 2 == 0 ? json(std::string(rng() % 40, 'c') + "\u00e9\"\\\n")
                                      : json::array({{{"type", "text"}, {"text", "part"}}});
        msgs.push_back({{"role", m == 0 ? "system" : "user"}, {"content", content}});
      }
      j["messages"] = maybe(msgs);
    } else {
      j["prompt"] = maybe(std::string(rng() % 90, 'p'));
    }
    const char* const kOptional[] = {"model",          "stream",      "priority",
                                     "max_tokens",     "n",           "max_completion_tokens",
                                     "stream_options", "temperature", "x"};
    for (const char* k : kOptional) {
      if (rng() % 2 != 0) continue;
      const std::string key = k;
      if (key == "model") j[key] = maybe("m");
      if (key == "stream") j[key] = maybe(rng() % 2 == 0);
      if (key == "priority") j[key] = maybe(static_cast<std::int64_t>(rng() % 200) - 100);
      if (key == "max_tokens" || key == "max_completion_tokens") {
        j[key] = maybe(1 + static_cast<std::int64_t>(rng() % 5000));
      }
      if (key == "n") j[key] = maybe(1);
      if (key == "stream_options") {
        j[key] = maybe({{"include_usage", rng() % 2 == 0}, {"continuous", true}});
      }
      if (key == "temperature" || key == "x") j[key] = randomValue(rng, 3);
    }
    const std::string text = j.dump();
    const Route route = chat ? Route::kChatCompletions : Route::kCompletions;
    auto v = parseGenerateRequest(route, text, 16, 4096);
    if (const auto* e = std::get_if<BodyError>(&v)) {
      // Refused: for a field it names, present and of the wrong shape.
      ASSERT_TRUE(j.contains(e->param)) << text << " -> " << e->message;
      continue;
    }
    ++accepted;
    const GenerateRequest& r = std::get<GenerateRequest>(v);
    json want = j;
    want.erase("priority");
    std::string key = "max_tokens";
    if (chat && j.contains("max_completion_tokens") && !j["max_completion_tokens"].is_null()) {
      key = "max_completion_tokens";
    }
    if (j.contains(key) && !j[key].is_null()) {
      ASSERT_EQ(r.max_tokens, j[key].get<std::uint32_t>()) << text;
    }
    want[key] = r.max_tokens;
    ASSERT_EQ(r.stream, j.contains("stream") && j["stream"] == true) << text;
    if (r.stream) {
      ASSERT_EQ(r.caller_wants_usage,
                j.contains("stream_options") && j["stream_options"].is_object() &&
                    j["stream_options"].value("include_usage", json(false)) == true)
          << text;
      want["stream_options"]["include_usage"] = true;
    }
    ASSERT_EQ(r.model, j.contains("model") ? j["model"].get<std::string>() : "") << text;
    ASSERT_EQ(r.caller_priority.has_value(), j.contains("priority") && !j["priority"].is_null());
    if (r.caller_priority) {
      ASSERT_EQ(*r.caller_priority, j["priority"].get<std::int64_t>());
    }
    ASSERT_EQ(json::parse(r.upstream_body), want) << text << "\n" << r.upstream_body;
  }
  EXPECT_GT(accepted, 1000);
}

TEST(ErrorJson, IsOpenAiShapedAndEscapes) {
  const auto j =
      nlohmann::json::parse(errorJson("a \"quote\"\n", "invalid_request_error", "", "x"));
  EXPECT_EQ(j["error"]["message"], "a \"quote\"\n");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "x");
  // Bytes that are not UTF-8 never make it throw.
  EXPECT_NO_THROW(errorJson("\xff\xfe", "t", "", ""));
}

// The prefix identity the gateway sends for routing = "prefix": requests
// that share a system prompt share their leading hashes, whatever follows.
TEST(ParseGenerateRequest, ChatRequestsSharingASystemPromptShareTheirLeadingPrefixHashes) {
  const std::string system(400, 's');
  auto chat = [&](const std::string& user) {
    nlohmann::json j = {
        {"messages",
         {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}}}};
    return ok(Route::kChatCompletions, j.dump());
  };
  const GenerateRequest a = chat(std::string(80, 'a')), b = chat(std::string(80, 'b'));
  // role + 0x1f + 400 bytes + 0x1e = 408 bytes: 6 whole blocks of 64 are the system's.
  ASSERT_EQ(a.prefix.size(), 7u);  // + "user" 0x1f, 80 bytes, 0x1e: 494 bytes
  ASSERT_EQ(b.prefix.size(), 7u);
  EXPECT_TRUE(std::equal(a.prefix.begin(), a.prefix.begin() + 6, b.prefix.begin()));
  EXPECT_NE(a.prefix.back(), b.prefix.back());
  // The role is part of it: the same text as a user message is another prefix.
  nlohmann::json as_user = {{"messages", {{{"role", "user"}, {"content", system}}}}};
  EXPECT_NE(ok(Route::kChatCompletions, as_user.dump()).prefix.front(), a.prefix.front());
  // Content parts hash as their text run together.
  nlohmann::json parts = {{"messages",
                           {{{"role", "system"},
                             {"content",
                              {{{"type", "text"}, {"text", system.substr(0, 100)}},
                               {{"type", "text"}, {"text", system.substr(100)}}}}},
                            {{"role", "user"}, {"content", std::string(80, 'b')}}}}};
  EXPECT_EQ(ok(Route::kChatCompletions, parts.dump()).prefix, b.prefix);
}

TEST(ParseGenerateRequest, ACompletionsPromptIsHashedAsTextOrAsItsTokenIds) {
  const std::string text(200, 'x');
  const GenerateRequest t = ok(Route::kCompletions, nlohmann::json{{"prompt", text}}.dump());
  EXPECT_EQ(t.prefix.size(), 3u);  // 200 bytes: three whole blocks of 64
  TextPrefixHasher h(64, 1024);
  h.feed(text);
  EXPECT_EQ(t.prefix, h.hashes());
  std::vector<std::uint32_t> ids(40);
  for (std::uint32_t i = 0; i < ids.size(); ++i) ids[i] = 7 * i;
  const GenerateRequest byIds = ok(Route::kCompletions, nlohmann::json{{"prompt", ids}}.dump());
  EXPECT_EQ(byIds.prefix, prefixBlockHashes(ids, 16));
  const GenerateRequest nested = ok(Route::kCompletions, nlohmann::json{{"prompt", {ids}}}.dump());
  EXPECT_EQ(nested.prefix, byIds.prefix);
  // Off, bounded, and nothing for a prompt shorter than a block.
  PrefixOptions off;
  off.block_bytes = 0;
  auto v = parseGenerateRequest(Route::kCompletions, nlohmann::json{{"prompt", text}}.dump(), 16,
                                4096, off);
  ASSERT_TRUE(std::holds_alternative<GenerateRequest>(v));
  EXPECT_TRUE(std::get<GenerateRequest>(v).prefix.empty());
  PrefixOptions two;
  two.max_blocks = 2;
  v = parseGenerateRequest(Route::kCompletions, nlohmann::json{{"prompt", text}}.dump(), 16, 4096,
                           two);
  ASSERT_TRUE(std::holds_alternative<GenerateRequest>(v));
  EXPECT_EQ(std::get<GenerateRequest>(v).prefix,
            std::vector<std::uint64_t>(t.prefix.begin(), t.prefix.begin() + 2));
  EXPECT_TRUE(ok(Route::kCompletions, R"({"prompt":"short"})").prefix.empty());
}

// Fed in any pieces, the same bytes make the same chain.
TEST(TextPrefixHasher, PiecesDoNotMatter) {
  std::mt19937 rng(static_cast<std::mt19937::result_type>(fairsched::testing::testSeed()));
  std::string text(1000, ' ');
  for (char& c : text) c = static_cast<char>('a' + rng() % 26);
  TextPrefixHasher whole(64, 1024);
  whole.feed(text);
  EXPECT_EQ(whole.hashes().size(), 15u);
  for (int round = 0; round < 20; ++round) {
    TextPrefixHasher pieces(64, 1024);
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t n = std::min<std::size_t>(rng() % 150, text.size() - at);
      pieces.feed(std::string_view(text).substr(at, n));
      at += n;
    }
    EXPECT_EQ(pieces.hashes(), whole.hashes());
  }
}

}  // namespace fairsched::gateway
