#include "gateway/auto_capacity.hpp"

#include <gtest/gtest.h>

#include <string>

namespace fairsched::gateway {
namespace {

// What vLLM's /metrics says (abridged, as v0.10 writes it).
constexpr std::string_view kVllm =
    R"(# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.41
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.63
vllm:num_requests_running_total_is_not_this 99
)";

TEST(EngineMetrics, VllmCountsAreSummedOverLabelSetsAndTheFullestCacheIsTaken) {
  std::string why;
  const auto load = parseEngineMetrics(kVllm, why);
  ASSERT_TRUE(load) << why;
  EXPECT_EQ(load->engine, "vllm");
  EXPECT_DOUBLE_EQ(load->running, 12.0);
  EXPECT_DOUBLE_EQ(load->waiting, 2.0);
  ASSERT_TRUE(load->kv_usage);
  EXPECT_DOUBLE_EQ(*load->kv_usage, 0.63);
}

TEST(EngineMetrics, SglangAndVllmsOlderCacheName) {
  std::string why;
  const auto sg = parseEngineMetrics(
      "sglang:num_running_reqs{model_name=\"a\"} 3\nsglang:num_queue_reqs{model_name=\"a\"} 1\n"
      "sglang:token_usage{model_name=\"a\"} 0.5\n",
      why);
  ASSERT_TRUE(sg) << why;
  EXPECT_EQ(sg->engine, "sglang");
  EXPECT_DOUBLE_EQ(sg->running, 3.0);
  EXPECT_DOUBLE_EQ(sg->waiting, 1.0);
  EXPECT_DOUBLE_EQ(sg->kv_usage.value_or(-1), 0.5);
  const auto old = parseEngineMetrics(
      "vllm:num_requests_running 1\r\nvllm:num_requests_waiting 0\r\n"
      "vllm:gpu_cache_usage_perc 0.25 1712345678000\r\n",
      why);
  ASSERT_TRUE(old) << why;
  EXPECT_DOUBLE_EQ(old->kv_usage.value_or(-1), 0.25);
}

TEST(EngineMetrics, LabelsWithBracesInQuotesAndBadValuesAreHandled) {
  std::string why;
  const auto load = parseEngineMetrics(
      "vllm:num_requests_running{model_name=\"x}\\\"y\"} 4\n"
      "vllm:num_requests_running{model_name=\"z\"} NaN\n"
      "vllm:num_requests_running{model_name=\"w\"} 1e400\n"
      "vllm:num_requests_running{broken 3\n"
      "vllm:num_requests_waiting 0x10\n"
      "vllm:num_requests_waiting 6\n",
      why);
  ASSERT_TRUE(load) << why;
  EXPECT_DOUBLE_EQ(load->running, 4.0);
  EXPECT_DOUBLE_EQ(load->waiting, 6.0);
  EXPECT_FALSE(load->kv_usage);
}

TEST(EngineMetrics, APageWithoutTheCountsIsAnErrorThatSaysWhichWereLookedFor) {
  std::string why;
  EXPECT_FALSE(parseEngineMetrics("<html>not found</html>\n", why));
  EXPECT_NE(why.find("vllm:num_requests_waiting"), std::string::npos);
  why.clear();
  EXPECT_FALSE(parseEngineMetrics("vllm:num_requests_running 3\n", why));  // waiting missing
  EXPECT_FALSE(why.empty());
}

AutoCapacity::Policy policy(std::uint32_t min, std::uint32_t max) {
  AutoCapacity::Policy p;
  p.min = min;
  p.max = max;
  return p;
}

EngineLoad load(double running, double waiting, std::optional<double> kv = std::nullopt) {
  EngineLoad l;
  l.running = running;
  l.waiting = waiting;
  l.kv_usage = kv;
  return l;
}

// An engine that runs at most `slots` at once, fed by the gateway alone.
EngineLoad engine(std::uint32_t slots, std::uint32_t sent) {
  return load(std::min(slots, sent), sent > slots ? sent - slots : 0);
}

TEST(AutoCapacity, AnOvershootStillDrainingDoesNotCutTwice) {
  AutoCapacity c(policy(1, 64));
  c.observe(load(4, 0), 4);
  EXPECT_EQ(c.limit(), 8u);
  c.observe(load(3, 5), 8);  // the engine runs 3
  EXPECT_EQ(c.limit(), 3u);
  c.observe(load(3, 2), 5);  // what was sent under 8 still waits
  EXPECT_EQ(c.limit(), 3u);
}

TEST(AutoCapacity, SlowStartDoublesThenTheEnginesQueueSetsTheLimitAndItHoversThere) {
  AutoCapacity c(policy(1, 256));
  EXPECT_EQ(c.limit(), 4u);
  const std::uint32_t slots = 20;
  std::uint32_t most_waiting = 0;
  for (int scrape = 0; scrape < 40; ++scrape) {
    const std::uint32_t sent = c.limit();  // a flood: every allowed sequence is in use
    const EngineLoad l = engine(slots, sent);
    if (scrape >= 10) most_waiting = std::max(most_waiting, static_cast<std::uint32_t>(l.waiting));
    c.observe(l, sent);
    if (scrape >= 10) {
      EXPECT_GE(c.limit(), slots) << "scrape " << scrape;  // the engine stays busy
      EXPECT_LE(c.limit(), slots + 1) << "scrape " << scrape;
    }
  }
  EXPECT_FALSE(c.slowStart());
  EXPECT_LE(most_waiting, 1u);  // its own queue stays near empty
}

TEST(AutoCapacity, NoGrowthWhileTheLimitIsNotInUseOrTheCacheIsFull) {
  AutoCapacity c(policy(1, 64));
  c.observe(load(2, 0), 2);  // 2 of 4 in use: nothing learned
  EXPECT_EQ(c.limit(), 4u);
  c.observe(load(4, 0, 0.95), 4);  // in use, but the KV cache is full
  EXPECT_EQ(c.limit(), 4u);
  c.observe(load(4, 0, 0.5), 4);
  EXPECT_EQ(c.limit(), 8u);
}

TEST(AutoCapacity, AFullEngineWithOneOfOursOnItsWayDoesNotLookLikeRoom) {
  AutoCapacity c(policy(1, 64));
  // All 4 of ours are open, the engine runs 3 and queues none: the fourth
  // is on its way to it (or ending). Growing now would send 4 more to wait.
  c.observe(load(3, 0), 4);
  EXPECT_EQ(c.limit(), 4u);
  EXPECT_TRUE(c.slowStart());
  c.observe(load(4, 0), 4);  // it runs them all: room to probe
  EXPECT_EQ(c.limit(), 8u);
}

TEST(AutoCapacity, StaysWithinItsBoundsAndFollowsAReload) {
  AutoCapacity c(policy(2, 6));
  c.observe(load(4, 0), 4);
  EXPECT_EQ(c.limit(), 6u);  // doubled, capped at max
  c.observe(load(6, 0), 6);
  EXPECT_EQ(c.limit(), 6u);
  c.observe(load(4, 3), 6);  // the engine takes 4 at once
  EXPECT_EQ(c.limit(), 4u);
  c.observe(load(5, 1), 4);  // more than the limit runs: no growth, no cut
  EXPECT_EQ(c.limit(), 4u);
  c.observe(load(1, 50), 4);  // another client floods the engine
  EXPECT_EQ(c.limit(), 2u);   // down to min, not below
  c.setPolicy(policy(3, 4));
  EXPECT_EQ(c.limit(), 3u);
  c.observe(load(3, 0), 3);
  EXPECT_EQ(c.limit(), 4u);  // after the first queue: one at a time
  c.setPolicy(policy(1, 2));
  EXPECT_EQ(c.limit(), 2u);
}

}  // namespace
}  // namespace fairsched::gateway
