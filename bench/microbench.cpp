// fairsched-microbench: Google Benchmark microbenchmarks of the scheduling
// core's and the gateway's hot paths. Every benchmark reports items/s (one
// item = one limiter check, one window update, one DRR decision, one
// push+pop pair, one submitted or scheduled request, one prompt routed by
// its prefix, one upstream stream event scanned); the scan also reports
// bytes/s. Inputs come from a fixed seed.
//
//   fairsched-microbench [--benchmark_filter=REGEX] [--benchmark_min_time=0.2]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <malloc.h>

#include "daemon/core/drr_scheduler.hpp"
#include "daemon/core/prefix_cache.hpp"
#include "daemon/core/rate_limiter.hpp"
#include "daemon/core/scheduler.hpp"
#include "daemon/core/sliding_window.hpp"
#include "daemon/core/tenant_queue.hpp"
#include "gateway/openai_json.hpp"

namespace {

using fairsched::CostModel;
using fairsched::kNever;
using fairsched::kNsPerMs;
using fairsched::kNsPerSec;
using fairsched::Policy;
using fairsched::Status;
using fairsched::TenantId;
using fairsched::TimeNs;
namespace core = fairsched::core;

constexpr std::uint64_t kSeed = 42;
constexpr std::size_t kTableSize = 4096;  // pre-drawn random values, cycled with a mask
constexpr std::size_t kTableMask = kTableSize - 1;
constexpr TimeNs kStart = kNsPerSec;
constexpr TimeNs kMinute = 60 * kNsPerSec;
constexpr TimeNs kDay = 86'400 * kNsPerSec;
constexpr std::uint64_t kFar = 1'000'000'000'000'000;  // an amount no benchmark reaches

std::vector<std::int64_t> randomTable(std::int64_t lo, std::int64_t hi, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> d(lo, hi);
  std::vector<std::int64_t> t(kTableSize);
  for (auto& v : t) v = d(rng);
  return t;
}

// ---- KeyLimiter::tryAdmit ---------------------------------------------------
// Args: number of limits (1: requests/minute; 3: + tokens/minute, requests/day),
// and the time step per check in ns.

std::vector<core::LimitSpec> limiterSpecs(bool reject) {
  // Reject path: the requests/minute limit is full after its first 100 checks.
  return {
      {core::LimitUnit::kRequests, reject ? 100 : kFar, kMinute},
      {core::LimitUnit::kTokens, kFar, kMinute},
      {core::LimitUnit::kRequests, kFar, kDay},
  };
}

void limiterBench(benchmark::State& state, bool reject) {
  const std::vector<core::LimitSpec> specs = limiterSpecs(reject);
  const auto limits = static_cast<std::size_t>(state.range(0));
  const TimeNs step = state.range(1);
  core::KeyLimiter limiter(std::span<const core::LimitSpec>(specs.data(), limits));
  const std::vector<std::int64_t> tokens = randomTable(32, 3072, kSeed);
  TimeNs now = kStart;
  std::uint64_t admitted = 0;
  std::size_t i = 0;
  for (auto _ : state) {
    now += step;
    const core::LimitDecision d =
        limiter.tryAdmit(static_cast<std::uint64_t>(tokens[i++ & kTableMask]), now);
    benchmark::DoNotOptimize(d);
    admitted += d.admitted ? 1 : 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted_fraction"] =
      static_cast<double>(admitted) /
      static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
}

void BM_LimiterAdmit(benchmark::State& state) {
  limiterBench(state, false);
}
void BM_LimiterReject(benchmark::State& state) {
  limiterBench(state, true);
}
BENCHMARK(BM_LimiterAdmit)->ArgNames({"limits", "step_ns"})->ArgsProduct({{1, 3}, {5, 1000}});
BENCHMARK(BM_LimiterReject)->ArgNames({"limits", "step_ns"})->ArgsProduct({{1, 3}, {5, 1000}});

// ---- SlidingWindow advance + add ---------------------------------------------
// Arg: time step per update in ns (1 ms: a bucket of a minute window rolls every 4,000 updates).

void BM_SlidingWindowAdvanceAdd(benchmark::State& state) {
  const TimeNs step = state.range(0);
  const TimeNs width = core::SlidingWindow::bucketWidth(kMinute);
  core::SlidingWindow w;
  TimeNs now = kStart;
  for (auto _ : state) {
    now += step;
    w.advance(now, kMinute, width);
    w.add(1, now, width);
    benchmark::DoNotOptimize(w.used());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SlidingWindowAdvanceAdd)->ArgName("step_ns")->Arg(5)->Arg(kNsPerMs);

// ---- DrrScheduler select + consume --------------------------------------------
// Every flow stays backlogged: after consume its new head has a random cost.
// Args: flows, and the costs against the quantum:
//   0: costs 32..512, quantum 512 — every flow can pay at each turn (O(1) lists only);
//   1: costs 32..3072, quantum 512 — like the `core` scenario (most flows wait
//      two or more rounds: the later-round heap);
//   2: costs 10..100x the quantum (quantum 16, costs 160..1600): a decision
//      must not spin through the rounds in which nobody can dispatch.
// rounds_per_decision shows how far the round counter jumps per decision.

void BM_DrrSelectConsume(benchmark::State& state) {
  const auto flows = static_cast<core::DrrScheduler::FlowId>(state.range(0));
  const std::int64_t mix = state.range(1);
  const std::int64_t quantum = mix == 2 ? 16 : 512;
  const std::vector<std::int64_t> costs = mix == 0 ? randomTable(32, 512, kSeed)
                                          : mix == 1
                                              ? randomTable(32, 3072, kSeed)
                                              : randomTable(10 * quantum, 100 * quantum, kSeed);
  core::DrrScheduler drr;
  std::vector<std::int64_t> head(flows);
  std::size_t i = 0;
  for (core::DrrScheduler::FlowId f = 0; f < flows; ++f) {
    drr.setQuantum(f, quantum);
    head[f] = costs[i++ & kTableMask];
    drr.enqueue(f, head[f]);
  }
  const std::int64_t first_round = drr.round();
  for (auto _ : state) {
    const core::DrrScheduler::FlowId f = drr.select();
    const std::int64_t next = costs[i++ & kTableMask];
    drr.consume(f, head[f], true, next);
    head[f] = next;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["rounds_per_decision"] =
      static_cast<double>(drr.round() - first_round) /
      static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
}
BENCHMARK(BM_DrrSelectConsume)
    ->ArgNames({"flows", "cost_mix"})
    ->ArgsProduct({{1, 100, 10'000}, {0, 1, 2}});

// ---- TenantQueue push + pop ----------------------------------------------------
// A queue kept at a depth of 64; each iteration pushes one entry and pops the
// head. Arg: 0 = arrival order (the FIFO fast path), 1 = random priorities
// (entries out of order go to the heap).

void BM_TenantQueuePushPop(benchmark::State& state) {
  const bool random_priority = state.range(0) != 0;
  const std::vector<std::int64_t> prio = randomTable(0, 3, kSeed);
  core::TenantQueue q;
  std::uint64_t seq = 0;
  auto entry = [&] {
    const std::int32_t p = random_priority ? static_cast<std::int32_t>(prio[seq & kTableMask]) : 0;
    const core::QueueEntry e{{p, kNever, seq}, seq + 1};
    ++seq;
    return e;
  };
  for (int k = 0; k < 64; ++k) q.push(entry());
  for (auto _ : state) {
    q.push(entry());
    benchmark::DoNotOptimize(q.top().handle);
    q.pop();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TenantQueuePushPop)->ArgName("random_priority")->Arg(0)->Arg(1);

// ---- Scheduler ------------------------------------------------------------------

core::SchedulerSpec benchSpec(Policy policy) {
  core::SchedulerSpec spec;
  spec.policy = policy;
  core::EndpointSpec ep;
  ep.name = "bench";
  ep.cost = CostModel::kTokens;
  ep.max_batch_requests = 32;
  ep.max_batch_tokens = 1u << 30;
  ep.max_wait = 0;
  spec.endpoints.push_back(ep);
  core::TierSpec tier;
  tier.name = "default";
  tier.default_queue_limit = UINT32_MAX;
  spec.tiers.push_back(tier);
  spec.tier_limits.push_back(core::LimitTable(1));
  return spec;
}

struct SchedulerFixture {
  explicit SchedulerFixture(Policy policy, std::size_t tenants) : sched(benchSpec(policy)) {
    ids.resize(tenants);
    for (std::size_t t = 0; t < tenants; ++t) {
      ids[t] = sched.tenants().acquire("org-" + std::to_string(t));
    }
    std::mt19937_64 rng(kSeed);
    std::uniform_int_distribution<std::size_t> pick(0, tenants - 1);
    std::uniform_int_distribution<std::uint32_t> input(16, 2048), output(16, 1024);
    requests.resize(kTableSize);
    for (auto& r : requests) {
      r.tenant = ids[pick(rng)];
      r.input_tokens = input(rng);
      r.max_output_tokens = output(rng);
    }
    batch.requests.reserve(32);
  }
  // Dispatches and completes everything queued.
  void drain(TimeNs now) {
    while (sched.nextBatch(0, now, batch, done, true)) {
      for (const auto& d : batch.requests) sched.complete(d.handle, d.max_output_tokens / 2, now);
    }
    done.clear();
  }

  core::Scheduler sched;
  std::vector<TenantId> ids;
  std::vector<core::Request> requests;
  core::Batch batch;
  std::vector<core::Done> done;
};

// submit() alone; the queue is drained (untimed) every kChunk submissions.
// Args: tenants, policy (0 fair, 1 fifo).
void BM_SchedulerSubmit(benchmark::State& state) {
  constexpr std::size_t kChunk = 4096;
  const Policy policy = state.range(1) == 0 ? Policy::kFair : Policy::kFifo;
  SchedulerFixture fx(policy, static_cast<std::size_t>(state.range(0)));
  TimeNs now = kStart;
  std::size_t i = 0;
  for (auto _ : state) {
    core::Request r = fx.requests[i & kTableMask];
    r.id = i;
    const core::Admission a = fx.sched.submit(r, now);
    if (a.status != Status::kOk) {
      state.SkipWithError("submit rejected a request");
      break;
    }
    if (++i % kChunk == 0) {
      state.PauseTiming();
      now += kNsPerMs;
      fx.drain(now);
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SchedulerSubmit)
    ->ArgNames({"tenants", "fifo"})
    ->ArgsProduct({{1, 100, 10'000}, {0, 1}});

// Steady state with a backlog of about 1,024 queued requests: each iteration
// submits 32 requests, forms one batch of 32 and completes it. Items = requests.
// Args: tenants, policy (0 fair, 1 fifo).
void BM_SchedulerCycle(benchmark::State& state) {
  constexpr std::size_t kBacklog = 1024;
  constexpr std::size_t kBatch = 32;
  const Policy policy = state.range(1) == 0 ? Policy::kFair : Policy::kFifo;
  SchedulerFixture fx(policy, static_cast<std::size_t>(state.range(0)));
  TimeNs now = kStart;
  std::size_t i = 0;
  for (; i < kBacklog; ++i) fx.sched.submit(fx.requests[i & kTableMask], now);
  for (auto _ : state) {
    now += 1000;
    for (std::size_t k = 0; k < kBatch; ++k, ++i) {
      core::Request r = fx.requests[i & kTableMask];
      r.id = i;
      fx.sched.submit(r, now);
    }
    if (!fx.sched.nextBatch(0, now, fx.batch, fx.done)) {
      state.SkipWithError("no batch formed");
      break;
    }
    for (const auto& d : fx.batch.requests)
      fx.sched.complete(d.handle, d.max_output_tokens / 2, now);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kBatch));
}
BENCHMARK(BM_SchedulerCycle)
    ->ArgNames({"tenants", "fifo"})
    ->ArgsProduct({{1, 100, 10'000}, {0, 1}});

// What one worker's remembered prefix cache costs (prefix routing): one item
// = one prompt of `blocks` blocks looked up (matched) and inserted into a
// BlockLru of 65,536 blocks that is full; half the prompts share their
// first half with an earlier one. Reports the heap it holds per block
// (mallinfo2, the cache full, against the heap before it existed).
void BM_BlockLruRouteOne(benchmark::State& state) {
  const auto blocks = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t kCapacity = 65536;
  std::mt19937_64 rng(kSeed);
  std::vector<std::vector<std::uint64_t>> chains(kTableSize);
  for (std::size_t i = 0; i < kTableSize; ++i) {
    chains[i].resize(blocks);
    for (std::size_t b = 0; b < blocks; ++b) chains[i][b] = rng();
    if (i > 0 && i % 2 == 1) {  // shares its first half with the one before
      std::copy_n(chains[i - 1].begin(), blocks / 2, chains[i].begin());
    }
  }
  const std::size_t before = mallinfo2().uordblks;
  core::BlockLru lru(kCapacity);
  for (std::size_t i = 0; lru.size() < kCapacity; ++i) {
    std::vector<std::uint64_t> fill(blocks);
    for (auto& h : fill) h = rng();
    lru.insert(fill);
  }
  const double per_block =
      static_cast<double>(mallinfo2().uordblks - before) / static_cast<double>(lru.size());
  std::size_t i = 0, matched = 0;
  for (auto _ : state) {
    const std::vector<std::uint64_t>& chain = chains[i++ & kTableMask];
    matched += lru.matched(chain);
    lru.insert(chain);
  }
  benchmark::DoNotOptimize(matched);
  state.counters["heap_bytes_per_block"] = per_block;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_BlockLruRouteOne)->ArgName("blocks")->Arg(16)->Arg(256);

// One event of an upstream's SSE stream scanned for what the gateway
// charges (its text, its usage), as the relay does for each event.
void BM_ScanStreamEvent(benchmark::State& state) {
  std::string event =
      R"({"id":"cmpl-1","object":"text_completion.chunk","model":"m","choices":[{"index":0,)"
      R"("text":"t0 ","finish_reason":null}]})";
  const std::size_t digit = event.find("t0") + 1;
  std::uint64_t texts = 0;
  std::uint64_t i = 0;
  for (auto _ : state) {
    event[digit] = static_cast<char>('0' + (i++ % 10));
    texts += fairsched::gateway::parseStreamChunk(event).has_text ? 1 : 0;
  }
  benchmark::DoNotOptimize(texts);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * event.size()));
}
BENCHMARK(BM_ScanStreamEvent);

}  // namespace

BENCHMARK_MAIN();
