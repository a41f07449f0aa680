#include "bench/replay_scenario.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "bench/process_run.hpp"
#include "bench/simulator.hpp"
#include "bench/stats.hpp"
#include "daemon/config/embedded_config.hpp"
#include "daemon/config/scheduler_setup.hpp"

namespace fairsched::bench {
namespace {

constexpr int kWindows = 100;    // served-tokens series: about this many windows
constexpr int kCdfPoints = 101;  // latency CDF: the 0th..100th percentiles

double seconds(TimeNs t) {
  return static_cast<double>(t) / kNsPerSec;
}

std::vector<double> ttftsOf(const std::vector<const RequestEvent*>& events) {
  std::vector<double> v;
  for (const RequestEvent* e : events) {
    if (e->first_token >= 0)
      v.push_back(static_cast<double>(e->first_token - e->arrival) / kNsPerMs);
  }
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

const char* toString(ReplayPolicy p) {
  switch (p) {
    case ReplayPolicy::kFair:
      return "fair";
    case ReplayPolicy::kDrr:
      return "drr";
    case ReplayPolicy::kVtc:
      return "vtc";
    case ReplayPolicy::kFifo:
      return "fifo";
    case ReplayPolicy::kFloor:
      return "floor";
    case ReplayPolicy::kFairPrefix:
      return "fair+prefix";
    case ReplayPolicy::kFifoPrefix:
      return "fifo+prefix";
    case ReplayPolicy::kRouter:
      return "router";
  }
  return "?";
}

std::optional<ReplayPolicy> parseReplayPolicy(std::string_view name) {
  for (ReplayPolicy p : {ReplayPolicy::kFair, ReplayPolicy::kDrr, ReplayPolicy::kVtc,
                         ReplayPolicy::kFifo, ReplayPolicy::kFloor, ReplayPolicy::kFairPrefix,
                         ReplayPolicy::kFifoPrefix, ReplayPolicy::kRouter}) {
    if (name == toString(p)) return p;
  }
  return std::nullopt;
}

std::variant<ReplayRun, std::string> replayTrace(const config::Config& cfg, ReplayPolicy policy,
                                                 const std::vector<TraceRequest>& trace,
                                                 TimeNs jitter, std::uint64_t seed,
                                                 const Locality* locality) {
  core::SchedulerSpec spec = config::buildSchedulerSpec(cfg);
  const bool fifo = policy == ReplayPolicy::kFifo || policy == ReplayPolicy::kFifoPrefix ||
                    policy == ReplayPolicy::kRouter;
  spec.policy = fifo ? Policy::kFifo : Policy::kFair;
  for (core::EndpointSpec& es : spec.endpoints) {
    if (policy == ReplayPolicy::kDrr || policy == ReplayPolicy::kVtc) {
      es.fairness = policy == ReplayPolicy::kVtc ? core::Fairness::kVtc : core::Fairness::kDrr;
      es.preemption.enabled = false;
    }
  }
  std::vector<ExecutorModel> executors = executorModels(cfg);
  if (locality != nullptr && policy == ReplayPolicy::kFairPrefix) {
    for (core::EndpointSpec& es : spec.endpoints) es.locality_slack = locality->locality_slack;
  }
  if (locality != nullptr) {
    for (ExecutorModel& m : executors) {
      m.replicas = locality->replicas;
      m.cache_blocks = locality->cache_blocks;
      m.block_tokens = locality->block_tokens;
      m.load_slack = locality->load_slack;
      m.placement = policy == ReplayPolicy::kFairPrefix || policy == ReplayPolicy::kFifoPrefix
                        ? Placement::kPrefix
                    : policy == ReplayPolicy::kRouter ? Placement::kRouter
                    : locality->replicas > 1          ? Placement::kRoomiest
                                                      : Placement::kPull;
    }
  }
  auto endpointId = [&](const std::string& name) -> std::optional<EndpointId> {
    for (std::size_t e = 0; e < cfg.endpoints.size(); ++e) {
      if (cfg.endpoints[e].name == name) return static_cast<EndpointId>(e);
    }
    return std::nullopt;
  };

  std::vector<TimeNs> at(trace.size());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TimeNs> shift(-jitter, jitter);
  for (std::size_t i = 0; i < trace.size(); ++i) {
    at[i] = static_cast<TimeNs>(std::llround(trace[i].t * kNsPerSec));
    if (jitter > 0) at[i] = std::max<TimeNs>(0, at[i] + shift(rng));
  }
  std::vector<std::size_t> order(trace.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return at[a] < at[b]; });
  std::vector<SimArrival> arrivals;
  arrivals.reserve(trace.size());
  for (const std::size_t i : order) {
    const TraceRequest& r = trace[i];
    const auto e = endpointId(r.endpoint);
    if (!e) {
      return "line " + std::to_string(r.line) + ": endpoint: '" + r.endpoint +
             "' is not an endpoint of the config";
    }
    SimArrival a;
    a.t = at[i];
    a.tenant = r.tenant;
    a.endpoint = *e;
    a.input_tokens = r.input_tokens;
    a.output_tokens = r.output_tokens;
    a.max_output_tokens = r.max_output_tokens.value_or(r.output_tokens);
    a.priority = r.priority;
    if (r.deadline_ms)
      a.deadline = a.t + static_cast<TimeNs>(std::llround(*r.deadline_ms * kNsPerMs));
    if (locality != nullptr) {
      a.blocks = promptChain(r, i, locality->block_tokens, locality->max_blocks);
    }
    arrivals.push_back(std::move(a));
  }

  ReplayRun run;
  run.policy = policy;
  const double default_weight = spec.tiers.at(spec.default_tier).default_weight;
  for (const TraceRequest& r : trace) run.weights.emplace(r.tenant, default_weight);
  for (const auto& t : spec.tenants) {
    if (auto it = run.weights.find(t.name); it != run.weights.end()) it->second = t.weight;
  }

  run.outcomes = policy == ReplayPolicy::kFloor ? simulateFloor(executors, arrivals)
                                                : simulate(spec, executors, arrivals);
  const std::vector<SimOutcome>& outcomes = run.outcomes;
  run.events.resize(trace.size());
  for (std::size_t k = 0; k < order.size(); ++k) {
    const TraceRequest& r = trace[order[k]];
    const SimOutcome& o = outcomes[k];
    RequestEvent& ev = run.events[order[k]];
    ev.tenant = r.tenant;
    ev.arrival = o.arrival;
    ev.dispatch = o.dispatch;
    ev.completion = o.completion;
    ev.input_tokens = r.input_tokens;
    ev.output_tokens = r.output_tokens;
    ev.status = o.status;
    ev.first_token = o.first_token;
    ev.preemptions = o.preemptions;
  }
  return run;
}

std::variant<ReplayRun, std::string> replayReal(config::Config cfg, ReplayPolicy policy,
                                                const std::vector<TraceRequest>& trace,
                                                const std::string& dir, const Locality* locality) {
  if (policy == ReplayPolicy::kFloor) return std::string("the floor has no daemon to run");
  if (policy == ReplayPolicy::kRouter) {
    return std::string("the router has no daemon form: it is modelled in virtual time only");
  }
  const bool by_prefix = policy == ReplayPolicy::kFairPrefix || policy == ReplayPolicy::kFifoPrefix;
  if (by_prefix && locality == nullptr) {
    return std::string(toString(policy)) + " needs replicas with prefix caches (--replicas)";
  }
  cfg.daemon.policy = policy == ReplayPolicy::kFifo || policy == ReplayPolicy::kFifoPrefix
                          ? Policy::kFifo
                          : Policy::kFair;
  std::uint32_t longest = 0;
  for (const TraceRequest& r : trace) longest = std::max(longest, r.input_tokens);
  for (config::EndpointConfig& ec : cfg.endpoints) {
    if (policy == ReplayPolicy::kDrr || policy == ReplayPolicy::kVtc) {
      ec.fairness = policy == ReplayPolicy::kVtc ? core::Fairness::kVtc : core::Fairness::kDrr;
      ec.worker.preemption = false;
    }
    if (locality == nullptr || ec.executor != config::ExecutorKind::kWorker) continue;
    // As replayTrace models it: every engine with its prefix cache (and
    // KV events, so the daemon knows exactly what each holds), the
    // daemon placing by prefix for the +prefix policies.
    ec.worker.routing = by_prefix ? core::Routing::kPrefix : core::Routing::kRoomiest;
    ec.worker.prefix_block_tokens = locality->block_tokens;
    ec.worker.max_prefix_blocks = static_cast<std::uint32_t>(locality->max_blocks);
    ec.worker.load_slack = locality->load_slack;
    ec.worker.locality_slack = policy == ReplayPolicy::kFairPrefix ? locality->locality_slack : 0;
    ec.worker.cache_blocks = locality->cache_blocks;
    ec.worker.max_prompt_tokens = std::max(ec.worker.max_prompt_tokens, longest);
    ec.engine.prefix_cache_blocks = locality->cache_blocks;
    ec.engine.kv_events = true;
  }
  prepareBenchConfig(cfg, dir);
  // One plan per tenant, its requests in arrival order; where each went.
  std::map<std::string, TenantPlan> plans;
  RunExtras extras;
  std::vector<std::pair<std::string, std::size_t>> where(trace.size());
  std::vector<std::size_t> order(trace.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return trace[a].t < trace[b].t; });
  double end_s = 0;
  for (const std::size_t i : order) {
    const TraceRequest& r = trace[i];
    if (cfg.findEndpoint(r.endpoint) == nullptr) {
      return "line " + std::to_string(r.line) + ": endpoint: '" + r.endpoint +
             "' is not an endpoint of the config";
    }
    TenantPlan& plan = plans[r.tenant];
    plan.tenant = r.tenant;
    plan.endpoint = r.endpoint;
    where[i] = {r.tenant, plan.requests.size()};
    plan.requests.push_back(
        {static_cast<TimeNs>(std::llround(r.t * kNsPerSec)), r.input_tokens, r.output_tokens});
    if (locality != nullptr) extras.prompts[r.tenant].push_back(promptTokens(r, i));
    end_s = std::max(end_s, r.t);
  }
  std::vector<TenantPlan> list;
  for (auto& [name, plan] : plans) list.push_back(std::move(plan));
  extras.workers_per_endpoint = locality != nullptr ? locality->replicas : 1;
  auto records = runProcesses(cfg, list, dir,
                              std::chrono::seconds(static_cast<std::int64_t>(end_s) + 60), &extras);
  if (auto* err = std::get_if<std::string>(&records)) return *err;
  const TenantRecords& got = std::get<TenantRecords>(records);

  ReplayRun run;
  run.policy = policy;
  for (const RunExtras::Engine& e : extras.engines) {
    run.engines.prompt_tokens += e.prompt_tokens;
    run.engines.cached_tokens += e.cached_tokens;
    run.engines.preempted += e.preempted;
  }
  const core::SchedulerSpec spec = config::buildSchedulerSpec(cfg);
  const double default_weight = spec.tiers.at(spec.default_tier).default_weight;
  for (const TraceRequest& r : trace) run.weights.emplace(r.tenant, default_weight);
  for (const auto& t : spec.tenants) {
    if (auto it = run.weights.find(t.name); it != run.weights.end()) it->second = t.weight;
  }
  run.events.resize(trace.size());
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const RequestRecord& rec = got.at(where[i].first).at(where[i].second);
    RequestEvent& ev = run.events[i];
    ev.tenant = trace[i].tenant;
    ev.arrival = rec.arrival;
    ev.completion = rec.completion < 0 ? rec.arrival : rec.completion;
    ev.first_token = rec.first_token;
    ev.dispatch = rec.first_token >= 0 ? rec.first_token : ev.completion;
    ev.input_tokens = trace[i].input_tokens;
    ev.output_tokens = trace[i].output_tokens;
    ev.status = rec.completion < 0 ? Status::kExecutorFailed : rec.status;
  }
  return run;
}

ReplaySummary summarize(const ReplayRun& run, const CostWeights& cost, TimeNs window) {
  ReplaySummary s;
  s.windowed_difference = windowedServiceDifference(run.events, run.weights, window).mean;
  s.windowed_waiting =
      windowedServiceDifference(run.events, run.weights, window, {0, 1, 2}, Activity::kWaiting)
          .mean;
  s.max_service_difference = maxServiceDifference(run.events, run.weights, cost).value;
  std::map<std::string, double> demand;
  double total = 0;
  TimeNs first = kNever, last = 0;
  std::vector<const RequestEvent*> all;
  for (const RequestEvent& e : run.events) {
    const double d = static_cast<double>(e.input_tokens) + e.output_tokens;
    demand[e.tenant] += d;
    total += d;
    first = std::min(first, e.arrival);
    last = std::max(last, e.completion);
    s.preemptions += e.preemptions;
    all.push_back(&e);
  }
  const double light_below = demand.empty() ? 0 : 0.5 * total / static_cast<double>(demand.size());
  std::vector<const RequestEvent*> light;
  for (const RequestEvent& e : run.events) {
    if (demand[e.tenant] < light_below) light.push_back(&e);
  }
  s.ttft_p50_ms = percentileOfSorted(ttftsOf(all), 50);
  s.light_ttft_p50_ms = percentileOfSorted(ttftsOf(light), 50);
  s.makespan_s = first == kNever ? 0 : seconds(last - first);
  return s;
}

nlohmann::json replayJson(const ReplayRun& run, const CostWeights& cost, TimeNs window) {
  struct Acc {
    std::uint64_t submitted = 0, completed = 0, rejected = 0, tokens = 0;
    std::map<std::string, std::uint64_t> statuses;
    std::vector<double> latencies;
    std::vector<const RequestEvent*> events;
    std::uint64_t preemptions = 0;
    std::vector<std::uint64_t> windows;
  };
  TimeNs end = 0;
  for (const RequestEvent& e : run.events) end = std::max(end, e.completion);
  const double window_s = std::max(1.0, std::ceil(seconds(end) / kWindows));
  const std::size_t windows = static_cast<std::size_t>(std::floor(seconds(end) / window_s)) + 1;

  std::map<std::string, Acc> acc;
  for (const RequestEvent& e : run.events) {
    Acc& a = acc[e.tenant];
    if (a.windows.empty()) a.windows.assign(windows, 0);
    ++a.submitted;
    a.events.push_back(&e);
    a.preemptions += e.preemptions;
    if (e.status == Status::kOk) {
      ++a.completed;
      a.tokens += std::uint64_t{e.input_tokens} + e.output_tokens;
      a.latencies.push_back(static_cast<double>(e.completion - e.arrival) / kNsPerMs);
      a.windows[static_cast<std::size_t>(seconds(e.completion) / window_s)] +=
          std::uint64_t{e.input_tokens} + e.output_tokens;
    } else {
      ++a.rejected;
      ++a.statuses[std::string(toString(e.status))];
    }
  }
  nlohmann::json tenants = nlohmann::json::object();
  nlohmann::json series = nlohmann::json::object();
  for (auto& [name, a] : acc) {
    std::sort(a.latencies.begin(), a.latencies.end());
    auto w = run.weights.find(name);
    const std::vector<double> ttft = ttftsOf(a.events);
    tenants[name] = {{"submitted", a.submitted},
                     {"completed", a.completed},
                     {"rejected", a.rejected},
                     {"rejected_by_status", a.statuses},
                     {"p50_ms", percentileOfSorted(a.latencies, 50)},
                     {"p99_ms", percentileOfSorted(a.latencies, 99)},
                     {"max_ms", a.latencies.empty() ? 0.0 : a.latencies.back()},
                     {"tokens_served", a.tokens},
                     {"weight", w != run.weights.end() ? w->second : 1.0},
                     {"ttft_p50_ms", ttft.empty() ? nlohmann::json(nullptr)
                                                  : nlohmann::json(percentileOfSorted(ttft, 50))},
                     {"ttft_p99_ms", ttft.empty() ? nlohmann::json(nullptr)
                                                  : nlohmann::json(percentileOfSorted(ttft, 99))},
                     {"preemptions", a.preemptions}};
    nlohmann::json cdf = nlohmann::json::array();
    if (!a.latencies.empty()) {
      for (int p = 0; p < kCdfPoints; ++p) cdf.push_back(percentileOfSorted(a.latencies, p));
    }
    series[name] = {{"tokens_per_window", a.windows}, {"latency_percentiles_ms", cdf}};
  }
  const ServiceDifference d = maxServiceDifference(run.events, run.weights, cost);
  const WindowedDifference wd = windowedServiceDifference(run.events, run.weights, window);
  const ReplaySummary sum = summarize(run, cost, window);
  return {{"scenario", "replay"},
          {"policy", toString(run.policy)},
          {"cost", cost.toString()},
          {"requests", run.events.size()},
          {"virtual_duration_s", seconds(end)},
          {"tenants", tenants},
          {"max_service_difference", d.value},
          {"max_service_difference_at",
           {{"tenants", d.tenant_a.empty() ? nlohmann::json::array()
                                           : nlohmann::json::array({d.tenant_a, d.tenant_b})},
            {"window_start_s", seconds(d.window_start)},
            {"window_end_s", seconds(d.window_end)}}},
          {"windowed_service_difference",
           {{"window_s", seconds(window)},
            {"cost", "input+2*output"},
            {"mean", wd.mean},
            {"max", wd.max},
            {"windows", wd.windows}}},
          {"light_ttft_p50_ms", sum.light_ttft_p50_ms},
          {"makespan_s", sum.makespan_s},
          {"preemptions", sum.preemptions},
          {"window_s", window_s},
          {"series", series}};
}

std::string replayEventsJsonl(const ReplayRun& run) {
  std::string out;
  for (const RequestEvent& e : run.events) {
    nlohmann::json j = {{"tenant", e.tenant},
                        {"arrival", seconds(e.arrival)},
                        {"dispatch", e.dispatch >= 0 ? nlohmann::json(seconds(e.dispatch))
                                                     : nlohmann::json(nullptr)},
                        {"completion", seconds(e.completion)},
                        {"input_tokens", e.input_tokens},
                        {"output_tokens", e.output_tokens},
                        {"first_token", e.first_token >= 0 ? nlohmann::json(seconds(e.first_token))
                                                           : nlohmann::json(nullptr)},
                        {"preemptions", e.preemptions},
                        {"status", std::string(toString(e.status))}};
    out += j.dump();
    out += '\n';
  }
  return out;
}

std::string replayTable(const nlohmann::json& report) {
  std::ostringstream t;
  char line[256];
  std::uint64_t total_tokens = 0;
  for (const auto& [name, v] : report["tenants"].items())
    total_tokens += v["tokens_served"].get<std::uint64_t>();
  std::snprintf(line, sizeof line,
                "replay (virtual time, real scheduling core, executor modelled from the config)\n"
                "policy %s, %llu requests over %.1f s of virtual time\n\n",
                report["policy"].get<std::string>().c_str(),
                report["requests"].get<unsigned long long>(),
                report["virtual_duration_s"].get<double>());
  t << line;
  std::snprintf(line, sizeof line, "%-16s %6s %9s %9s %9s %10s %10s %10s %10s %13s %6s\n", "tenant",
                "weight", "submitted", "completed", "rejected", "p50_ms", "p99_ms", "max_ms",
                "ttft50_ms", "tokens_served", "share");
  t << line;
  for (const auto& [name, v] : report["tenants"].items()) {
    const auto tokens = v["tokens_served"].get<std::uint64_t>();
    const double ttft = v["ttft_p50_ms"].is_null() ? -1.0 : v["ttft_p50_ms"].get<double>();
    std::snprintf(line, sizeof line,
                  "%-16s %6.2f %9llu %9llu %9llu %10.2f %10.2f %10.2f %10.2f %13llu %5.1f%%\n",
                  name.c_str(), v["weight"].get<double>(), v["submitted"].get<unsigned long long>(),
                  v["completed"].get<unsigned long long>(), v["rejected"].get<unsigned long long>(),
                  v["p50_ms"].get<double>(), v["p99_ms"].get<double>(), v["max_ms"].get<double>(),
                  ttft, static_cast<unsigned long long>(tokens),
                  total_tokens ? 100.0 * static_cast<double>(tokens) / total_tokens : 0.0);
    t << line;
    for (const auto& [status, n] : v["rejected_by_status"].items()) {
      t << "    " << status << ": " << n.get<std::uint64_t>() << "\n";
    }
  }
  const auto& at = report["max_service_difference_at"];
  std::snprintf(line, sizeof line, "\nmax service difference (cost %s, per unit of weight): %.0f",
                report["cost"].get<std::string>().c_str(),
                report["max_service_difference"].get<double>());
  t << line;
  if (!at["tenants"].empty()) {
    std::snprintf(line, sizeof line, "  (%s vs %s, both backlogged %.3f-%.3f s)",
                  at["tenants"][0].get<std::string>().c_str(),
                  at["tenants"][1].get<std::string>().c_str(), at["window_start_s"].get<double>(),
                  at["window_end_s"].get<double>());
    t << line;
  }
  const auto& wd = report["windowed_service_difference"];
  std::snprintf(line, sizeof line,
                "\nwindowed service difference (%.0f s windows, input+2*output): mean %.0f, max "
                "%.0f\nlight tenants' TTFT p50 %.1f ms, makespan %.1f s, %llu preemptions\n",
                wd["window_s"].get<double>(), wd["mean"].get<double>(), wd["max"].get<double>(),
                report["light_ttft_p50_ms"].get<double>(), report["makespan_s"].get<double>(),
                report["preemptions"].get<unsigned long long>());
  t << line;
  return t.str();
}

namespace {

struct Spread {
  double median = 0, min = 0, max = 0;
};

Spread spreadOf(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = percentileOfSorted(v, 50);
  s.min = v.front();
  s.max = v.back();
  return s;
}

nlohmann::json toJson(const Spread& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

double ratio(double a, double b) {
  return b > 0 ? a / b : 0.0;
}

// Every policy on the same N jittered copies of the trace (copy r has seed
// seed + r, whatever the policy).
// replayReal in a temporary directory of its own.
std::variant<ReplayRun, std::string> replayOnProcesses(const config::Config& cfg, ReplayPolicy p,
                                                       const std::vector<TraceRequest>& trace) {
  TempDir dir("fairsched-replay");
  if (dir.path().empty()) return std::string("cannot create a temporary directory");
  return replayReal(cfg, p, trace, dir.path());
}

ScenarioResult compareReplays(const config::Config& cfg, const std::vector<ReplayPolicy>& policies,
                              const std::vector<TraceRequest>& trace, const CostWeights& cost,
                              int runs, TimeNs jitter, std::uint64_t seed, bool real,
                              TimeNs window) {
  struct Figures {
    std::vector<double> windowed, waiting, max_diff, light_ttft, ttft, makespan, preemptions;
  };
  std::map<ReplayPolicy, Figures> figures;
  for (const ReplayPolicy p : policies) {
    Figures& f = figures[p];
    for (int r = 0; r < runs; ++r) {
      auto run = real ? replayOnProcesses(cfg, p, trace)
                      : replayTrace(cfg, p, trace, jitter, seed + static_cast<std::uint64_t>(r));
      if (auto* err = std::get_if<std::string>(&run)) return ScenarioError{*err};
      const ReplaySummary s = summarize(std::get<ReplayRun>(run), cost, window);
      f.windowed.push_back(s.windowed_difference);
      f.waiting.push_back(s.windowed_waiting);
      f.max_diff.push_back(s.max_service_difference);
      f.light_ttft.push_back(s.light_ttft_p50_ms);
      f.ttft.push_back(s.ttft_p50_ms);
      f.makespan.push_back(s.makespan_s);
      f.preemptions.push_back(static_cast<double>(s.preemptions));
    }
  }
  auto median = [&](ReplayPolicy p, std::vector<double> Figures::*field) -> double {
    const auto it = figures.find(p);
    return it == figures.end() ? 0.0 : spreadOf(it->second.*field).median;
  };
  nlohmann::json out = {{"scenario", "replay-compare"},
                        {"runs", runs},
                        {"jitter_ms", static_cast<double>(jitter) / kNsPerMs},
                        {"seed", seed},
                        {"cost", cost.toString()},
                        {"requests", trace.size()}};
  std::ostringstream t;
  char line[640];
  std::snprintf(line, sizeof line,
                "replay comparison: %zu requests, %d run(s), arrivals jittered by up to %.0f ms; "
                "medians [min-max]\n"
                "windowed = service difference over %.0f s windows (input+2*output, VTC paper) "
                "among tenants with a request in the system; waiting = the same among tenants "
                "with a request waiting\nmax_diff = max_service_difference (two tenants both "
                "backlogged); light = tenants with under half an equal share of the demand\n\n",
                trace.size(), runs, static_cast<double>(jitter) / kNsPerMs, seconds(window));
  t << line;
  std::snprintf(line, sizeof line, "%-6s %24s %6s %6s %6s %9s %6s %6s %9s %6s %20s %10s %6s %7s\n",
                "policy", "windowed", "/fifo", "/vtc", "/floor", "waiting", "/fifo", "/vtc",
                "max_diff", "/vtc", "light_ttft_p50_ms", "makespan_s", "/fifo", "preempt");
  t << line;
  // The median of `field` under `p` over that under `base`, as JSON and text.
  auto versus = [&](ReplayPolicy p, std::vector<double> Figures::*field, ReplayPolicy base) {
    return figures.count(base) ? ratio(median(p, field), median(base, field)) : 0.0;
  };
  auto cell = [&](ReplayPolicy p, std::vector<double> Figures::*field, ReplayPolicy base) {
    if (figures.count(base) == 0) return std::string("-");
    char c[16];
    std::snprintf(c, sizeof c, "%.2f", versus(p, field, base));
    return std::string(c);
  };
  struct Named {
    const char* name;
    std::vector<double> Figures::*field;
  };
  constexpr Named kFigures[] = {{"windowed_service_difference", &Figures::windowed},
                                {"windowed_service_difference_waiting", &Figures::waiting},
                                {"max_service_difference", &Figures::max_diff},
                                {"light_ttft_p50_ms", &Figures::light_ttft},
                                {"ttft_p50_ms", &Figures::ttft},
                                {"makespan_s", &Figures::makespan},
                                {"preemptions", &Figures::preemptions}};
  nlohmann::json per = nlohmann::json::object();
  for (const ReplayPolicy p : policies) {
    const Figures& f = figures[p];
    nlohmann::json j = nlohmann::json::object();
    nlohmann::json ratios = nlohmann::json::object();
    for (const Named& n : kFigures) {
      j[n.name] = toJson(spreadOf(f.*n.field));
      for (const ReplayPolicy base :
           {ReplayPolicy::kFifo, ReplayPolicy::kVtc, ReplayPolicy::kFloor}) {
        if (figures.count(base) == 0 || n.field == &Figures::preemptions) continue;
        ratios[std::string(n.name) + "_vs_" + toString(base)] = versus(p, n.field, base);
      }
    }
    j["ratios"] = ratios;
    per[toString(p)] = j;
    const Spread w = spreadOf(f.windowed), lt = spreadOf(f.light_ttft);
    char windowed[64], light[64];
    std::snprintf(windowed, sizeof windowed, "%.0f [%.0f-%.0f]", w.median, w.min, w.max);
    std::snprintf(light, sizeof light, "%.1f [%.1f-%.1f]", lt.median, lt.min, lt.max);
    std::snprintf(
        line, sizeof line, "%-6s %24s %6s %6s %6s %9.0f %6s %6s %9.0f %6s %20s %10.1f %6s %7.0f\n",
        toString(p), windowed, cell(p, &Figures::windowed, ReplayPolicy::kFifo).c_str(),
        cell(p, &Figures::windowed, ReplayPolicy::kVtc).c_str(),
        cell(p, &Figures::windowed, ReplayPolicy::kFloor).c_str(), median(p, &Figures::waiting),
        cell(p, &Figures::waiting, ReplayPolicy::kFifo).c_str(),
        cell(p, &Figures::waiting, ReplayPolicy::kVtc).c_str(), median(p, &Figures::max_diff),
        cell(p, &Figures::max_diff, ReplayPolicy::kVtc).c_str(), light,
        median(p, &Figures::makespan), cell(p, &Figures::makespan, ReplayPolicy::kFifo).c_str(),
        median(p, &Figures::preemptions));
    t << line;
  }
  out["policies"] = per;
  ScenarioReport report;
  report.json = std::move(out);
  report.table = t.str();
  return report;
}

}  // namespace

ScenarioResult runReplay(const ScenarioOptions& options) {
  if (options.trace_path.empty()) return ScenarioError{"--trace FILE.jsonl is required"};
  auto parsed =
      options.config_path.empty()
          ? config::parseConfig(config::kEmbeddedDefaultConfig, "<embedded config/fairsched.toml>")
          : config::loadConfigFile(options.config_path);
  if (auto* err = parsed.errorOrNull()) return ScenarioError{err->toString()};
  const config::Config& cfg = parsed.value();
  auto cost = parseCostWeights(options.cost.empty() ? "input+output" : options.cost);
  if (auto* err = std::get_if<std::string>(&cost)) return ScenarioError{"--cost: " + *err};
  auto trace = loadTraceFile(options.trace_path);
  if (auto* err = std::get_if<TraceError>(&trace)) {
    return ScenarioError{options.trace_path + ": " + err->toString()};
  }
  std::vector<ReplayPolicy> policies;
  std::string list = options.policy.empty()
                         ? (cfg.daemon.policy == Policy::kFifo ? "fifo" : "fair")
                         : (options.policy == "all" ? "fair,drr,vtc,fifo,floor" : options.policy);
  if (options.replicas > 1 && (options.policy.empty() || options.policy == "all")) {
    list = std::string(kReplicaPolicies);
  }
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const auto p = parseReplayPolicy(std::string_view(list).substr(at, comma - at));
    if (!p) {
      return ScenarioError{"--policy: '" + list +
                           "': each of fair, drr, vtc, fifo, floor, fair+prefix, fifo+prefix, "
                           "router"};
    }
    policies.push_back(*p);
    at = comma + 1;
  }
  const auto& requests = std::get<std::vector<TraceRequest>>(trace);
  if (options.replicas > 1) {
    if (options.runs > 1 || !options.events_path.empty()) {
      return ScenarioError{
          "--replicas compares policies on one run (in virtual time, and with --real through "
          "real processes too): no --runs or --events"};
    }
    return runReplicaComparison(cfg, requests, policies, options);
  }
  const TimeNs window = static_cast<TimeNs>(std::llround(options.service_window_s * kNsPerSec));
  const TimeNs jitter = static_cast<TimeNs>(std::llround(options.jitter_ms * kNsPerMs));
  if (policies.size() > 1 || options.runs > 1) {
    if (!options.events_path.empty()) return ScenarioError{"--events takes one policy and one run"};
    if (options.real && (options.runs > 1 || jitter > 0)) {
      return ScenarioError{"--real replays the trace once, as it is: no --runs or --jitter-ms"};
    }
    return compareReplays(cfg, policies, requests, std::get<CostWeights>(cost),
                          std::max(1, options.runs), jitter, options.seed, options.real, window);
  }
  auto run = options.real ? replayOnProcesses(cfg, policies.front(), requests)
                          : replayTrace(cfg, policies.front(), requests, jitter, options.seed);
  if (auto* err = std::get_if<std::string>(&run))
    return ScenarioError{options.trace_path + ": " + *err};
  const ReplayRun& r = std::get<ReplayRun>(run);
  if (!options.events_path.empty()) {
    std::ofstream out(options.events_path);
    out << replayEventsJsonl(r);
    out.close();
    if (!out) return ScenarioError{"cannot write " + options.events_path};
  }
  ScenarioReport report;
  report.json = replayJson(r, std::get<CostWeights>(cost), window);
  report.table = replayTable(report.json);
  return report;
}

std::optional<std::string> plotReplay(const nlohmann::json& report, const std::string& path) {
  if (report.value("scenario", "") != "replay") return std::string("a comparison has no plot");
  static constexpr std::string_view kScript = R"PY(
series = report["series"]
window = report["window_s"]
fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
for name, s in sorted(series.items()):
    toks = s["tokens_per_window"]
    axes[0].plot([i * window for i in range(len(toks))], [t / window for t in toks], label=name)
    lat = s["latency_percentiles_ms"]
    if lat:
        axes[1].plot(lat, [i / (len(lat) - 1) for i in range(len(lat))], label=name)
axes[0].set_xlabel("virtual time (s)")
axes[0].set_ylabel("tokens served per second")
axes[0].set_title("served tokens per %g s window" % window)
axes[0].grid(True, alpha=0.3)
axes[1].set_xscale("log")
axes[1].set_xlabel("latency, arrival to completion (ms)")
axes[1].set_ylabel("fraction of completed requests")
axes[1].set_title("latency CDF")
axes[1].grid(True, which="both", alpha=0.3)
axes[1].legend(loc="lower right")
fig.suptitle("replay, policy %s: max service difference %.0f (cost %s)"
             % (report["policy"], report["max_service_difference"], report["cost"]))
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
)PY";
  return plotWithPython(kScript, report, path);
}

}  // namespace fairsched::bench
