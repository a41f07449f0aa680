#include "gateway/openai_json.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

}  // namespace fairsched::gateway
