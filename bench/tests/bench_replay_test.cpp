// Trace parsing, the service-difference metric and replay through the real
// scheduling core in virtual time (bench/replay_scenario.hpp).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <variant>

#include "bench/replay_scenario.hpp"
#include "bench/service_difference.hpp"
#include "bench/trace.hpp"
#include "daemon/config/config.hpp"
#include "tests/support/temp_dir.hpp"

namespace fairsched::bench {
namespace {

constexpr const char* kConfig = R"(
default_tier = "paid"
[[tiers]]
name = "paid"
min_share = 0.0
default_weight = 1.0
default_queue_limit = 1000

[endpoints.chat]
kind = "streaming"
cost = "tokens"
max_batch_requests = 4
max_batch_tokens = 1024
max_wait_us = 0
max_output_tokens = 1024
latency_target_ms = 0
executor = "cpu"
[endpoints.chat.cpu]
per_batch_us = 100.0
per_token_us = 1.0
threads = 1

[tenants.heavy]
tier = "paid"
queue_limit = 1000
[tenants.light]
tier = "paid"
[[clients]]
name = "root"
uids = [0]
tenants = ["*"]
endpoints = ["*"]
)";

config::Config testConfig() {
  auto parsed = config::parseConfig(kConfig, "<test>");
  if (auto* err = parsed.errorOrNull()) {
    ADD_FAILURE() << err->toString();
    return {};
  }
  return parsed.value();
}

std::vector<TraceRequest> parseOk(const std::string& text) {
  std::istringstream in(text);
  auto r = parseTrace(in);
  if (auto* err = std::get_if<TraceError>(&r)) {
    ADD_FAILURE() << err->toString();
    return {};
  }
  return std::get<std::vector<TraceRequest>>(r);
}

std::string parseError(const std::string& text) {
  std::istringstream in(text);
  auto r = parseTrace(in);
  auto* err = std::get_if<TraceError>(&r);
  return err ? err->toString() : "no error";
}

// 40 requests of `heavy` at t = 0, then one of `light` 0.1 ms later.
std::string burstTrace() {
  std::string t;
  for (int i = 0; i < 40; ++i) {
    t += R"({"t":0,"tenant":"heavy","endpoint":"chat","input_tokens":100,"output_tokens":100})";
    t += "\n";
  }
  t += R"({"t":0.0001,"tenant":"light","endpoint":"chat","input_tokens":100,"output_tokens":100})";
  t += "\n";
  return t;
}

ReplayRun replayOk(const std::vector<TraceRequest>& trace, Policy policy) {
  auto r = replayTrace(testConfig(), policy, trace);
  if (auto* err = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << *err;
    return {};
  }
  return std::get<ReplayRun>(r);
}

TEST(TraceParse, ReadsRequiredAndOptionalFields) {
  const auto trace = parseOk(
      "{\"t\":1.5,\"tenant\":\"a\",\"endpoint\":\"chat\",\"input_tokens\":10,"
      "\"output_tokens\":20,\"priority\":-3,\"deadline_ms\":250,\"extra\":true}\n"
      "\n"
      "{\"t\":2,\"tenant\":\"b\",\"endpoint\":\"embed\",\"input_tokens\":0,\"output_tokens\":0}\n");
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_DOUBLE_EQ(trace[0].t, 1.5);
  EXPECT_EQ(trace[0].tenant, "a");
  EXPECT_EQ(trace[0].input_tokens, 10u);
  EXPECT_EQ(trace[0].output_tokens, 20u);
  EXPECT_EQ(trace[0].priority, -3);
  ASSERT_TRUE(trace[0].deadline_ms.has_value());
  EXPECT_DOUBLE_EQ(*trace[0].deadline_ms, 250);
  EXPECT_EQ(trace[1].line, 3u);
  EXPECT_EQ(trace[1].priority, 0);
  EXPECT_FALSE(trace[1].deadline_ms.has_value());
}

TEST(TraceParse, EmptyTraceHasNoRequests) {
  EXPECT_TRUE(parseOk("").empty());
}

TEST(TraceParse, ErrorsNameTheLineAndField) {
  const std::string ok =
      "{\"t\":0,\"tenant\":\"a\",\"endpoint\":\"chat\",\"input_tokens\":1,\"output_tokens\":1}\n";
  EXPECT_EQ(
      parseError(ok + "{\"t\":0,\"tenant\":\"a\",\"endpoint\":\"chat\",\"output_tokens\":1}\n"),
      "line 2: input_tokens: missing");
  EXPECT_EQ(parseError(ok + ok +
                       "{\"t\":0,\"tenant\":\"a\",\"endpoint\":\"chat\",\"input_tokens\":-1,"
                       "\"output_tokens\":1}\n"),
            "line 3: input_tokens: must be a non-negative integer");
  EXPECT_EQ(parseError("{\"t\":\"x\",\"tenant\":\"a\",\"endpoint\":\"c\",\"input_tokens\":1,"
                       "\"output_tokens\":1}\n"),
            "line 1: t: must be a non-negative number of seconds");
  EXPECT_EQ(parseError("{\"t\":0,\"tenant\":\"\",\"endpoint\":\"c\",\"input_tokens\":1,"
                       "\"output_tokens\":1}\n"),
            "line 1: tenant: must be a non-empty string");
  EXPECT_EQ(parseError("{\"t\":0,\"tenant\":\"a\",\"endpoint\":\"c\",\"input_tokens\":1,"
                       "\"output_tokens\":4294967296}\n"),
            "line 1: output_tokens: out of range");
  EXPECT_EQ(parseError("{\"t\":0,\"tenant\":\"a\",\"endpoint\":\"c\",\"input_tokens\":1,"
                       "\"output_tokens\":1,\"priority\":1.5}\n"),
            "line 1: priority: must be a 32-bit integer");
  EXPECT_EQ(parseError("{\"t\":0,\"tenant\":\"a\",\"endpoint\":\"c\",\"input_tokens\":1,"
                       "\"output_tokens\":1,\"deadline_ms\":-1}\n"),
            "line 1: deadline_ms: must be a non-negative number");
  EXPECT_EQ(parseError(ok + "{\"t\":0,\n"), "line 2: not valid JSON");
  EXPECT_EQ(parseError("[1,2]\n"), "line 1: not a JSON object");
}

TEST(CostWeights, ParsesSumsOfTerms) {
  auto w = std::get<CostWeights>(parseCostWeights("input+2*output"));
  EXPECT_EQ(w.per_input, 1);
  EXPECT_EQ(w.per_output, 2);
  EXPECT_EQ(w.per_request, 0);
  EXPECT_EQ(w.toString(), "input+2*output");
  w = std::get<CostWeights>(parseCostWeights("1"));
  EXPECT_EQ(w.per_request, 1);
  EXPECT_EQ(w.of(1000, 1000), 1);
  EXPECT_TRUE(std::holds_alternative<std::string>(parseCostWeights("tokens")));
  EXPECT_TRUE(std::holds_alternative<std::string>(parseCostWeights("x*input")));
  EXPECT_TRUE(std::holds_alternative<std::string>(parseCostWeights("")));
  EXPECT_TRUE(std::holds_alternative<std::string>(parseCostWeights("0*input")));
}

RequestEvent event(const char* tenant, double arrival, double dispatch, std::uint32_t tokens) {
  RequestEvent e;
  e.tenant = tenant;
  e.arrival = static_cast<TimeNs>(arrival * kNsPerSec);
  e.dispatch = static_cast<TimeNs>(dispatch * kNsPerSec);
  e.completion = e.dispatch + 1;
  e.input_tokens = tokens;
  return e;
}

TEST(ServiceDifference, LargestSwingWhileBothBacklogged) {
  // A dispatches 100 at 1, 2, 3 s; B waits from 0 s and gets 100 at 4 s.
  const std::vector<RequestEvent> events = {event("A", 0, 1, 100), event("A", 0, 2, 100),
                                            event("A", 0, 3, 100), event("B", 0, 4, 100),
                                            event("A", 0, 5, 50)};
  const auto d = maxServiceDifference(events, {}, CostWeights{});
  EXPECT_DOUBLE_EQ(d.value, 300);
  EXPECT_EQ(d.tenant_a, "A");
  EXPECT_EQ(d.tenant_b, "B");
  EXPECT_EQ(d.window_end, 4 * kNsPerSec);
}

TEST(ServiceDifference, WeightsNormaliseService) {
  const std::vector<RequestEvent> events = {event("A", 0, 1, 200), event("B", 0, 1, 100),
                                            event("A", 0, 2, 200), event("B", 0, 2, 100)};
  EXPECT_DOUBLE_EQ(maxServiceDifference(events, {{"A", 2.0}, {"B", 1.0}}, CostWeights{}).value, 0);
  EXPECT_DOUBLE_EQ(maxServiceDifference(events, {}, CostWeights{}).value, 200);
}

TEST(ServiceDifference, ZeroWhenNeverBackloggedTogether) {
  const std::vector<RequestEvent> events = {event("A", 0, 1, 100), event("B", 2, 3, 100)};
  EXPECT_DOUBLE_EQ(maxServiceDifference(events, {}, CostWeights{}).value, 0);
  EXPECT_DOUBLE_EQ(maxServiceDifference({}, {}, CostWeights{}).value, 0);
}

TEST(Replay, EventsFollowTraceOrderAndAllComplete) {
  const auto trace = parseOk(burstTrace());
  for (Policy policy : {Policy::kFair, Policy::kFifo}) {
    const ReplayRun run = replayOk(trace, policy);
    ASSERT_EQ(run.events.size(), trace.size());
    for (std::size_t i = 0; i < trace.size(); ++i) {
      const RequestEvent& e = run.events[i];
      EXPECT_EQ(e.tenant, trace[i].tenant) << i;
      EXPECT_EQ(e.status, Status::kOk) << i;
      EXPECT_EQ(e.arrival, static_cast<TimeNs>(trace[i].t * kNsPerSec)) << i;
      EXPECT_GE(e.dispatch, e.arrival) << i;
      EXPECT_GT(e.completion, e.dispatch) << i;
    }
    // heavy's requests are served in arrival order
    for (std::size_t i = 1; i < 40; ++i) {
      EXPECT_LE(run.events[i - 1].dispatch, run.events[i].dispatch) << i;
    }
  }
}

TEST(Replay, FairServesTheLightTenantBeforeFifoDoes) {
  const auto trace = parseOk(burstTrace());
  const ReplayRun fair = replayOk(trace, Policy::kFair);
  const ReplayRun fifo = replayOk(trace, Policy::kFifo);
  const RequestEvent& light_fair = fair.events.back();
  const RequestEvent& light_fifo = fifo.events.back();
  // fifo: behind every one of heavy's requests
  for (std::size_t i = 0; i < 40; ++i) EXPECT_LE(fifo.events[i].dispatch, light_fifo.dispatch);
  // fair: in one of the next two batches, long before fifo gets to it
  const TimeNs fair_latency = light_fair.completion - light_fair.arrival;
  const TimeNs fifo_latency = light_fifo.completion - light_fifo.arrival;
  EXPECT_LT(fair_latency * 4, fifo_latency);
  std::size_t heavy_before = 0;
  for (std::size_t i = 0; i < 40; ++i)
    heavy_before += fair.events[i].dispatch < light_fair.dispatch;
  EXPECT_LE(heavy_before, 8u);
  EXPECT_LT(maxServiceDifference(fair.events, fair.weights, CostWeights{}).value,
            maxServiceDifference(fifo.events, fifo.weights, CostWeights{}).value);
}

TEST(Replay, DeadlinePassedRequestIsNeverDispatched) {
  std::string text = burstTrace();
  text +=
      R"({"t":0.0002,"tenant":"light","endpoint":"chat","input_tokens":100,"output_tokens":100,"deadline_ms":0.5})";
  text += "\n";
  const ReplayRun run = replayOk(parseOk(text), Policy::kFifo);
  const RequestEvent& late = run.events.back();
  EXPECT_EQ(late.status, Status::kDeadlineExceeded);
  EXPECT_EQ(late.dispatch, -1);
  EXPECT_GE(late.completion, late.arrival);
}

TEST(Replay, UnknownEndpointNamesTheLine) {
  const auto trace = parseOk(
      "{\"t\":0,\"tenant\":\"a\",\"endpoint\":\"chat\",\"input_tokens\":1,\"output_tokens\":1}\n"
      "{\"t\":0,\"tenant\":\"a\",\"endpoint\":\"nope\",\"input_tokens\":1,\"output_tokens\":1}\n");
  auto r = replayTrace(testConfig(), Policy::kFair, trace);
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  EXPECT_EQ(std::get<std::string>(r), "line 2: endpoint: 'nope' is not an endpoint of the config");
}

// ---- worker endpoints: the continuous-batching engine model -------------------------

// One worker endpoint: 2 sequences, steps of 1 ms + 10 us per prompt token
// + 100 us per decoding sequence, prefill chunks of 64 tokens.
std::string workerConfig(const std::string& fairness, bool preemption) {
  return R"(
default_tier = "paid"
[[tiers]]
name = "paid"
default_queue_limit = 1000
[endpoints.gen]
executor = "worker"
max_batch_tokens = 100000
fairness = ")" +
         fairness + R"("
half_life_s = 5.0
[endpoints.gen.worker]
preemption = )" +
         (preemption ? "true" : "false") + R"(
min_progress_tokens = 4
max_preemptions_per_s = 100.0
[endpoints.gen.engine]
max_sequences = 2
kv_tokens = 100000
step_us = 1000.0
prefill_token_us = 10.0
decode_token_us = 100.0
chunked_prefill_tokens = 64
[[clients]]
name = "root"
uids = [0]
tenants = ["*"]
endpoints = ["*"]
workers = ["gen"]
)";
}

ReplayRun replayWorker(const std::string& trace, ReplayPolicy policy,
                       const std::string& fairness = "recent", bool preemption = true) {
  auto parsed = config::parseConfig(workerConfig(fairness, preemption), "<worker test>");
  if (auto* err = parsed.errorOrNull()) {
    ADD_FAILURE() << err->toString();
    return {};
  }
  auto r = replayTrace(parsed.value(), policy, parseOk(trace));
  if (auto* err = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << *err;
    return {};
  }
  return std::get<ReplayRun>(r);
}

std::string request(double t, const std::string& tenant, int in, int out) {
  return R"({"t":)" + std::to_string(t) + R"(,"tenant":")" + tenant +
         R"(","endpoint":"gen","input_tokens":)" + std::to_string(in) + R"(,"output_tokens":)" +
         std::to_string(out) + "}\n";
}

TEST(ReplayEngine, ALoneRequestStepsAsTheReferenceWorkerDoes) {
  // 100 prompt tokens: two prefill steps (64, then 36 + the first token),
  // then one token per step of one decoding sequence.
  const ReplayRun run = replayWorker(request(0, "a", 100, 5), ReplayPolicy::kFair);
  ASSERT_EQ(run.events.size(), 1u);
  const RequestEvent& e = run.events[0];
  EXPECT_EQ(e.status, Status::kOk);
  EXPECT_EQ(e.dispatch, 0);
  const TimeNs first = (1000 + 640) * kNsPerUs + (1000 + 360 + 100) * kNsPerUs;
  EXPECT_EQ(e.first_token, first);
  EXPECT_EQ(e.completion, first + 4 * 1100 * kNsPerUs);
  // The floor is exactly that: nothing else runs.
  const ReplayRun floor = replayWorker(request(0, "a", 100, 5), ReplayPolicy::kFloor);
  EXPECT_EQ(floor.events[0].first_token, e.first_token);
  EXPECT_EQ(floor.events[0].completion, e.completion);
}

TEST(ReplayEngine, BatchesContinuouslyUpToItsSequences) {
  // Three requests at once on two sequences: two start together, the third
  // starts the step after the first one finishes, not after both.
  std::string trace = request(0, "a", 10, 3) + request(0, "b", 10, 20) + request(0, "c", 10, 3);
  const ReplayRun run = replayWorker(trace, ReplayPolicy::kDrr, "drr", false);
  ASSERT_EQ(run.events.size(), 3u);
  EXPECT_EQ(run.events[0].dispatch, 0);
  EXPECT_EQ(run.events[1].dispatch, 0);
  EXPECT_EQ(run.events[2].dispatch, run.events[0].completion);
  EXPECT_LT(run.events[2].completion, run.events[1].completion);
  for (const RequestEvent& e : run.events) {
    EXPECT_EQ(e.status, Status::kOk);
    EXPECT_GT(e.first_token, e.dispatch);
    EXPECT_EQ(e.preemptions, 0u);
  }
}

TEST(ReplayEngine, PreemptionLetsALightTenantInWithoutLosingAnyWork) {
  // heavy fills both sequences with 400-token generations; light arrives
  // 50 ms later. Without preemption it waits for one of them to finish;
  // with it, heavy's newest sequence gives way and resumes afterwards.
  std::string trace =
      request(0, "heavy", 10, 400) + request(0, "heavy", 10, 400) + request(0.05, "light", 10, 5);
  const ReplayRun plain = replayWorker(trace, ReplayPolicy::kFair, "recent", false);
  const ReplayRun preempt = replayWorker(trace, ReplayPolicy::kFair, "recent", true);
  const TimeNs plain_ttft = plain.events[2].first_token - plain.events[2].arrival;
  const TimeNs preempt_ttft = preempt.events[2].first_token - preempt.events[2].arrival;
  EXPECT_GT(plain_ttft, 300 * kNsPerMs) << "waits for a 400-token generation";
  EXPECT_LT(preempt_ttft, 5 * kNsPerMs) << "one or two steps";
  std::uint32_t preemptions = 0;
  for (const RequestEvent& e : preempt.events) {
    EXPECT_EQ(e.status, Status::kOk);
    preemptions += e.preemptions;
  }
  EXPECT_EQ(preemptions, 1u);
  EXPECT_EQ(preempt.events[1].preemptions, 1u) << "the newest of the most-served tenant";
  // The preempted request recomputes its prefix and still ends: later than
  // it would have, by the light request's run and the recomputation.
  EXPECT_GT(preempt.events[1].completion, plain.events[1].completion);
}

TEST(ReplayEngine, VtcAndFifoAndFloorRunTheSameTrace) {
  std::string trace;
  for (int i = 0; i < 30; ++i) trace += request(0.001 * i, "heavy", 50, 60);
  for (int i = 0; i < 5; ++i) trace += request(0.02 + 0.01 * i, "light", 20, 5);
  for (const ReplayPolicy p : {ReplayPolicy::kFair, ReplayPolicy::kDrr, ReplayPolicy::kVtc,
                               ReplayPolicy::kFifo, ReplayPolicy::kFloor}) {
    const ReplayRun run = replayWorker(trace, p);
    ASSERT_EQ(run.events.size(), 35u) << toString(p);
    for (const RequestEvent& e : run.events) {
      EXPECT_EQ(e.status, Status::kOk) << toString(p);
      EXPECT_GE(e.first_token, e.arrival) << toString(p);
      EXPECT_GE(e.completion, e.first_token) << toString(p);
    }
  }
  // light's first tokens: fifo serves it after every heavy request; the
  // fair policies long before.
  auto light_ttft = [&](ReplayPolicy p) {
    const ReplayRun run = replayWorker(trace, p);
    TimeNs worst = 0;
    for (const RequestEvent& e : run.events) {
      if (e.tenant == "light") worst = std::max(worst, e.first_token - e.arrival);
    }
    return worst;
  };
  const TimeNs fifo = light_ttft(ReplayPolicy::kFifo);
  EXPECT_LT(light_ttft(ReplayPolicy::kVtc) * 5, fifo);
  EXPECT_LT(light_ttft(ReplayPolicy::kFair) * 5, fifo);
  EXPECT_LE(light_ttft(ReplayPolicy::kFloor), light_ttft(ReplayPolicy::kFair));
}

TEST(ReplayEngine, JitterMovesArrivalsWithinItsBoundAndDependsOnTheSeed) {
  std::string text;
  for (int i = 0; i < 50; ++i) text += request(1.0 + 0.1 * i, "a", 10, 2);
  auto parsed = config::parseConfig(workerConfig("drr", false), "<worker test>");
  const config::Config& cfg = parsed.value();
  const auto trace = parseOk(text);
  const TimeNs j = 50 * kNsPerMs;
  const ReplayRun a = std::get<ReplayRun>(replayTrace(cfg, ReplayPolicy::kFifo, trace, j, 1));
  const ReplayRun b = std::get<ReplayRun>(replayTrace(cfg, ReplayPolicy::kFifo, trace, j, 2));
  const ReplayRun a2 = std::get<ReplayRun>(replayTrace(cfg, ReplayPolicy::kFifo, trace, j, 1));
  std::size_t moved = 0, differ = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const TimeNs exact = static_cast<TimeNs>(std::llround(trace[i].t * kNsPerSec));
    EXPECT_LE(std::llabs(a.events[i].arrival - exact), j);
    moved += a.events[i].arrival != exact;
    differ += a.events[i].arrival != b.events[i].arrival;
    EXPECT_EQ(a.events[i].arrival, a2.events[i].arrival);
  }
  EXPECT_GT(moved, 40u);
  EXPECT_GT(differ, 40u);
}

TEST(WindowedServiceDifference, SpreadsServiceOverEachRunAndComparesActiveTenants) {
  // Window 10 s. a: 100 input + 50 output = 200 service over [0, 20] s:
  // 100 per window. b: 10 + 0 over [5, 5]: 10 in window 0. c arrives in
  // window 1 and is never served.
  std::vector<RequestEvent> ev(3);
  ev[0] = {"a", 0, 0, 20 * kNsPerSec, 100, 50, Status::kOk};
  ev[1] = {"b", 5 * kNsPerSec, 5 * kNsPerSec, 5 * kNsPerSec, 10, 0, Status::kOk};
  ev[2] = {"c", 12 * kNsPerSec, -1, 15 * kNsPerSec, 10, 0, Status::kRateLimited};
  const WindowedDifference d = windowedServiceDifference(ev, {}, 10 * kNsPerSec);
  // window 0: a 100, b 10 -> 90; window 1: a 100, c 0 -> 100; window 2
  // (t = 20 s, a's last instant): a alone -> not counted.
  EXPECT_EQ(d.windows, 2u);
  EXPECT_DOUBLE_EQ(d.max, 100);
  EXPECT_DOUBLE_EQ(d.mean, 95);
  // Weights divide the service: a of weight 2 gets 50 per window.
  const WindowedDifference w = windowedServiceDifference(ev, {{"a", 2.0}}, 10 * kNsPerSec);
  EXPECT_DOUBLE_EQ(w.max, 50);
}

// ---- the engine model against real processes ---------------------------------------

// Per tenant: mean time to first token and mean latency, in ms.
std::map<std::string, std::pair<double, double>> meansByTenant(const ReplayRun& run) {
  std::map<std::string, std::pair<double, double>> sum;
  std::map<std::string, int> n;
  for (const RequestEvent& e : run.events) {
    EXPECT_EQ(e.status, Status::kOk) << e.tenant;
    EXPECT_GE(e.first_token, e.arrival) << e.tenant;
    sum[e.tenant].first += static_cast<double>(e.first_token - e.arrival) / kNsPerMs;
    sum[e.tenant].second += static_cast<double>(e.completion - e.arrival) / kNsPerMs;
    ++n[e.tenant];
  }
  for (auto& [t, v] : sum) {
    v.first /= n[t];
    v.second /= n[t];
  }
  return sum;
}

TEST(ReplayEngine, TheModelAndRealProcessesAgreePerTenant) {
  // heavy: 24 requests of 40 tokens at once; light: 8 of 8 tokens, one
  // every 60 ms. A 4-sequence engine of 4 ms steps: heavy alone keeps it
  // busy for about a second. The same config drives the virtual-time model
  // and a real fairschedd + reference worker + one client process per
  // tenant.
  std::string text;
  for (int i = 0; i < 24; ++i) text += request(0.0, "heavy", 16, 40);
  for (int i = 0; i < 8; ++i) text += request(0.03 + 0.06 * i, "light", 16, 8);
  std::string toml = workerConfig("recent", false);
  const std::string engine_old = "step_us = 1000.0";
  toml.replace(toml.find(engine_old), engine_old.size(), "step_us = 4000.0");
  const std::string seqs_old = "max_sequences = 2";
  toml.replace(toml.find(seqs_old), seqs_old.size(), "max_sequences = 4");
  auto parsed = config::parseConfig(toml, "<agreement>");
  ASSERT_TRUE(parsed.ok());
  const config::Config& cfg = parsed.value();
  const auto trace = parseOk(text);

  auto model = replayTrace(cfg, ReplayPolicy::kFair, trace);
  ASSERT_TRUE(std::holds_alternative<ReplayRun>(model));
  testing::TempDir dir("fairsched-agreement");
  auto real = replayReal(cfg, ReplayPolicy::kFair, trace, dir.path());
  ASSERT_TRUE(std::holds_alternative<ReplayRun>(real)) << std::get<std::string>(real);
  const auto m = meansByTenant(std::get<ReplayRun>(model));
  const auto r = meansByTenant(std::get<ReplayRun>(real));
  // Tolerance: real steps overshoot their sleep and the processes share two
  // cores with the daemon, so real times run longer; each mean within 50 %
  // of the model plus 25 ms (a few steps) — far tighter than the tenfold gap
  // between the tenants.
  for (const char* t : {"heavy", "light"}) {
    SCOPED_TRACE(t);
    const auto& mm = m.at(t);
    const auto& rr = r.at(t);
    EXPECT_NEAR(rr.first, mm.first, 0.5 * mm.first + 25) << "TTFT ms";
    EXPECT_NEAR(rr.second, mm.second, 0.5 * mm.second + 25) << "latency ms";
  }
  // And both say the same thing: light's requests are served far sooner.
  EXPECT_LT(m.at("light").second * 3, m.at("heavy").second);
  EXPECT_LT(r.at("light").second * 3, r.at("heavy").second);
}

}  // namespace
}  // namespace fairsched::bench

// --- prefixes, replicas and locality (replay --replicas) ---------------------------

namespace fairsched::bench {
namespace {

TEST(TracePrefix, SegmentsAreParsedAndCheckedAgainstThePrompt) {
  const auto ok =
      parseOk(R"({"t":0,"tenant":"a","endpoint":"gen","input_tokens":100,"output_tokens":1,)"
              R"("prefix":[{"id":"sys","tokens":64},{"id":"doc","tokens":36}]})");
  ASSERT_EQ(ok.size(), 1u);
  ASSERT_EQ(ok[0].prefix.size(), 2u);
  EXPECT_EQ(ok[0].prefix[1].id, "doc");
  EXPECT_EQ(ok[0].prefix[1].tokens, 36u);
  const std::string head = R"({"t":0,"tenant":"a","endpoint":"gen","input_tokens":10,)"
                           R"("output_tokens":1,"prefix":)";
  EXPECT_EQ(parseError(head + R"([{"id":"sys","tokens":11}]})"),
            "line 1: prefix: its segments hold more tokens than input_tokens");
  EXPECT_EQ(parseError(head + R"("sys"})"), "line 1: prefix: must be an array of segments");
  EXPECT_EQ(parseError(head + R"([{"tokens":1}]})"), "line 1: prefix.id: missing");
  EXPECT_EQ(parseError(head + R"([{"id":"s","tokens":-1}]})"),
            "line 1: prefix.tokens: must be a non-negative integer");
}

TEST(TracePrefix, ASegmentHashesTheSameWhereverItAppearsAndTheRestIsTheRequestsOwn) {
  const auto reqs = parseOk(
      R"({"t":0,"tenant":"a","endpoint":"gen","input_tokens":100,"output_tokens":1,"prefix":[{"id":"sys","tokens":64}]})"
      "\n"
      R"({"t":1,"tenant":"b","endpoint":"gen","input_tokens":100,"output_tokens":1,"prefix":[{"id":"sys","tokens":64}]})"
      "\n"
      R"({"t":2,"tenant":"c","endpoint":"gen","input_tokens":100,"output_tokens":1})");
  std::size_t shared = 0;
  const auto c0 = promptChain(reqs[0], 0, 16, 1024, &shared);
  const auto c1 = promptChain(reqs[1], 1, 16, 1024);
  const auto c2 = promptChain(reqs[2], 2, 16, 1024);
  ASSERT_EQ(c0.size(), 6u);  // 100 tokens: six whole blocks
  EXPECT_EQ(shared, 4u);     // 64 shared tokens: four of them
  for (std::size_t k = 0; k < 4; ++k) EXPECT_EQ(c0[k], c1[k]) << k;
  for (std::size_t k = 4; k < 6; ++k) EXPECT_NE(c0[k], c1[k]) << k;
  EXPECT_NE(c0[0], c2[0]);
  EXPECT_EQ(promptChain(reqs[0], 0, 16, 2).size(), 2u) << "bounded";
}

// Two tenants, each with its own 320-token prefix, alternating every
// `gap_s`.
std::string twoPrefixTrace(int each, double gap_s = 0.05) {
  std::string t;
  for (int i = 0; i < 2 * each; ++i) {
    const std::string tenant = i % 2 == 0 ? "a" : "b";
    t += R"({"t":)" + std::to_string(gap_s * i) + R"(,"tenant":")" + tenant +
         R"(","endpoint":"gen","input_tokens":352,"output_tokens":2,"prefix":[{"id":"sys-)" +
         tenant + R"(","tokens":320}]})" + "\n";
  }
  return t;
}

ReplayRun replayReplicas(const std::string& trace, ReplayPolicy policy, std::uint32_t replicas,
                         std::uint64_t cache_blocks) {
  auto parsed = config::parseConfig(workerConfig("recent", false), "<worker test>");
  if (auto* err = parsed.errorOrNull()) {
    ADD_FAILURE() << err->toString();
    return {};
  }
  Locality loc;
  loc.replicas = replicas;
  loc.cache_blocks = cache_blocks;
  auto r = replayTrace(parsed.value(), policy, parseOk(trace), 0, 0, &loc);
  if (auto* err = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << *err;
    return {};
  }
  return std::get<ReplayRun>(r);
}

std::uint64_t prefilledOf(const ReplayRun& run) {
  std::uint64_t n = 0;
  for (const SimOutcome& o : run.outcomes) n += o.prefilled_tokens;
  return n;
}

TEST(ReplayReplicas, AnIdleEngineHoldingThePrefixTakesItAndItsPrefillIsSkipped) {
  // One request at a time, a cache for both prefixes: every request after
  // each tenant's first finds its 20 shared blocks (its own two are new).
  const ReplayRun run = replayReplicas(twoPrefixTrace(10), ReplayPolicy::kFairPrefix, 2, 1000);
  ASSERT_EQ(run.outcomes.size(), 20u);
  for (std::size_t i = 0; i < run.outcomes.size(); ++i) {
    const SimOutcome& o = run.outcomes[i];
    EXPECT_EQ(o.status, Status::kOk);
    EXPECT_EQ(o.blocks_queried, 22u);
    EXPECT_EQ(o.blocks_hit, i < 2 ? 0u : 20u) << i;
  }
  EXPECT_EQ(prefilledOf(run), 2u * 352 + 18u * 32) << "each prefix prefilled once";
}

TEST(ReplayReplicas, CachesForOnePrefixEachArePartitionedByPrefixPlacementNotByRoomiest) {
  // Each engine's cache holds one prefix (30 blocks for 22 a chain), the
  // two tenants alternate faster than a request runs: the roomiest engine
  // takes whichever comes and the caches thrash; prefix placement (and the
  // core's choice for the one engine with room) keeps each tenant where its
  // prefix is.
  const std::string trace = twoPrefixTrace(20, 0.004);
  const ReplayRun prefix = replayReplicas(trace, ReplayPolicy::kFairPrefix, 2, 30);
  const ReplayRun roomiest = replayReplicas(trace, ReplayPolicy::kFair, 2, 30);
  std::map<std::string, std::set<std::uint32_t>> replicas_of;
  std::uint64_t hits = 0, roomiest_hits = 0;
  for (std::size_t i = 0; i < prefix.outcomes.size(); ++i) {
    EXPECT_EQ(prefix.outcomes[i].status, Status::kOk);
    EXPECT_EQ(roomiest.outcomes[i].status, Status::kOk);
    replicas_of[prefix.events[i].tenant].insert(prefix.outcomes[i].replica);
    hits += prefix.outcomes[i].blocks_hit;
    roomiest_hits += roomiest.outcomes[i].blocks_hit;
  }
  EXPECT_GT(hits, roomiest_hits);
  EXPECT_LT(prefilledOf(prefix), prefilledOf(roomiest));
  EXPECT_EQ(hits, 38u * 20) << "all but each tenant's first request hit";
  EXPECT_EQ(replicas_of["a"].size(), 1u);
  EXPECT_EQ(replicas_of["b"].size(), 1u);
}

TEST(ReplayReplicas, ThroughRealProcessesPrefixPlacementKeepsEachPrefixCachedAsTheModelSays) {
  // The trace of the test above through a real fairschedd, two reference
  // workers with 30-block caches reporting KV events, and a client process
  // per tenant sending each prompt's tokens: the daemon places by prefix as
  // the model does, the engines skip the cached prefill, and each tenant's
  // times agree with the model's.
  auto parsed = config::parseConfig(workerConfig("recent", false), "<real replicas>");
  ASSERT_TRUE(parsed.ok());
  const auto trace = parseOk(twoPrefixTrace(20, 0.004));
  Locality loc;
  loc.replicas = 2;
  loc.cache_blocks = 30;
  std::map<ReplayPolicy, ReplayRun> real;
  for (const ReplayPolicy p : {ReplayPolicy::kFairPrefix, ReplayPolicy::kFair}) {
    SCOPED_TRACE(toString(p));
    testing::TempDir dir("fairsched-real-replicas");
    auto r = replayReal(parsed.value(), p, trace, dir.path(), &loc);
    ASSERT_TRUE(std::holds_alternative<ReplayRun>(r)) << std::get<std::string>(r);
    real[p] = std::get<ReplayRun>(std::move(r));
    EXPECT_GE(real[p].engines.prompt_tokens, 40u * 352) << "every prompt reached an engine";
  }
  const auto model = replayReplicas(twoPrefixTrace(20, 0.004), ReplayPolicy::kFairPrefix, 2, 30);
  std::uint64_t model_cached = 0;
  for (const SimOutcome& o : model.outcomes) model_cached += o.cached_tokens;
  const std::uint64_t prefix_cached = real[ReplayPolicy::kFairPrefix].engines.cached_tokens;
  const std::uint64_t roomiest_cached = real[ReplayPolicy::kFair].engines.cached_tokens;
  // The model: all but each tenant's first request find their 320 tokens.
  EXPECT_EQ(model_cached, 38u * 320);
  EXPECT_GE(prefix_cached, model_cached * 3 / 4) << "the real engines hit as the model's do";
  EXPECT_GT(prefix_cached, roomiest_cached) << "prefix placement beats the roomiest";
  const auto m = meansByTenant(model);
  const auto r = meansByTenant(real[ReplayPolicy::kFairPrefix]);
  for (const char* t : {"a", "b"}) {
    SCOPED_TRACE(t);
    EXPECT_NEAR(r.at(t).first, m.at(t).first, 0.5 * m.at(t).first + 25) << "TTFT ms";
    EXPECT_NEAR(r.at(t).second, m.at(t).second, 0.5 * m.at(t).second + 25) << "latency ms";
  }
  std::printf("cached tokens: model %llu, real prefix %llu, real roomiest %llu\n",
              static_cast<unsigned long long>(model_cached),
              static_cast<unsigned long long>(prefix_cached),
              static_cast<unsigned long long>(roomiest_cached));
}

TEST(ReplayReplicas, NoCacheMeansNoHitAndEveryPolicyCompletesEverything) {
  const std::string trace = twoPrefixTrace(6);
  for (const ReplayPolicy p :
       {ReplayPolicy::kFair, ReplayPolicy::kFairPrefix, ReplayPolicy::kVtc, ReplayPolicy::kFifo,
        ReplayPolicy::kFifoPrefix, ReplayPolicy::kRouter}) {
    const ReplayRun run = replayReplicas(trace, p, 3, 0);
    ASSERT_EQ(run.outcomes.size(), 12u) << toString(p);
    for (const SimOutcome& o : run.outcomes) {
      EXPECT_EQ(o.status, Status::kOk) << toString(p);
      EXPECT_EQ(o.blocks_hit, 0u) << toString(p);
      EXPECT_EQ(o.prefilled_tokens, 352u) << toString(p);
    }
  }
}

TEST(ReplayReplicas, TheRouterKeepsAPrefixOnOneEngineWithinTheLoadBound) {
  // 24 requests of one prefix at once on 3 engines of 2 sequences: the
  // router may not pile them on the holder beyond (1 + 0.25) x the mean.
  std::string trace;
  for (int i = 0; i < 24; ++i) {
    trace += R"({"t":0,"tenant":"a","endpoint":"gen","input_tokens":352,"output_tokens":2,)"
             R"("prefix":[{"id":"sys","tokens":320}]})"
             "\n";
  }
  const ReplayRun run = replayReplicas(trace, ReplayPolicy::kRouter, 3, 1000);
  std::map<std::uint32_t, int> per_replica;
  for (const SimOutcome& o : run.outcomes) {
    EXPECT_EQ(o.status, Status::kOk);
    ++per_replica[o.replica];
  }
  ASSERT_EQ(per_replica.size(), 3u) << "the bound spreads them";
  for (const auto& [r, n] : per_replica) EXPECT_LE(n, 10) << "replica " << r;
}

}  // namespace
}  // namespace fairsched::bench
