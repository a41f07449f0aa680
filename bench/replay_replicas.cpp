// `fairsched-bench replay --replicas N`: locality within fairness.
//
// The trace's worker endpoint becomes N engines, each with a prefix cache
// (LRU, `--cache-blocks` blocks; by default the trace's distinct shared
// blocks ÷ N, so each engine can hold about 1/N of what is shared), and
// each policy replays the same trace in virtual time:
//   fair         the config's fair order, each choice to the roomiest engine
//   fair+prefix  the same order, each choice to the engine holding most of
//                its prefix within (1 + load_slack) × the mean load
//   vtc          the Virtual Token Counter, roomiest engine
//   fifo         first come first served, roomiest engine
//   fifo+prefix  first come first served, placed by prefix as fair+prefix
//   router       routed on arrival by prefix (same bound) to one engine's own
//                first-come-first-served queue: a prefix-aware router in
//                front of engines, as SGLang's router or llm-d's scorer
// Reported per policy: the total time (first arrival to last completion),
// prompt tokens prefilled (recomputes included), the cache hit rate (blocks
// found cached ÷ blocks looked up at dispatch), light tenants' time to first
// token (tenants whose demand is below the median tenant's), the service
// difference (input + 2 × output per weight: the largest difference between
// two tenants over any interval both were backlogged, bench/
// service_difference.hpp — the quantity fair queueing bounds), the VTC
// paper's windowed form of it (max over windows of --service-window-s,
// tenants with a request waiting in the window) and preemptions.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_set>

#include "bench/replay_scenario.hpp"
#include "bench/stats.hpp"

namespace fairsched::bench {
namespace {

using json = nlohmann::json;

struct PolicyFigures {
  double makespan_s = 0;
  std::uint64_t prefill_tokens = 0;
  std::uint64_t cached_tokens = 0;
  double hit_rate = 0;
  double light_ttft_p50_s = 0;
  double light_ttft_p99_s = 0;
  double service_diff = 0;           // over every interval two tenants were both backlogged
  double windowed_service_diff = 0;  // the VTC paper's, windows of --service-window-s
  std::uint64_t completed = 0;
  std::uint64_t preemptions = 0;
};

PolicyFigures figuresOf(const ReplayRun& run, TimeNs window) {
  PolicyFigures f;
  std::uint64_t queried = 0, hit = 0;
  for (const SimOutcome& o : run.outcomes) {
    f.prefill_tokens += o.prefilled_tokens;
    f.cached_tokens += o.cached_tokens;
    queried += o.blocks_queried;
    hit += o.blocks_hit;
  }
  f.hit_rate = queried == 0 ? 0.0 : static_cast<double>(hit) / static_cast<double>(queried);
  std::map<std::string, double> demand;
  TimeNs first = kNever, last = 0;
  for (const RequestEvent& e : run.events) {
    demand[e.tenant] += static_cast<double>(e.input_tokens) + e.output_tokens;
    first = std::min(first, e.arrival);
    last = std::max(last, e.completion);
    f.preemptions += e.preemptions;
    if (e.status == Status::kOk) ++f.completed;
  }
  f.makespan_s = first == kNever ? 0.0 : static_cast<double>(last - first) / kNsPerSec;
  std::vector<double> demands;
  for (const auto& [tenant, d] : demand) demands.push_back(d);
  std::sort(demands.begin(), demands.end());
  const double median = demands.empty() ? 0.0 : demands[demands.size() / 2];
  std::vector<double> ttft;
  for (const RequestEvent& e : run.events) {
    if (demand[e.tenant] < median && e.first_token >= 0) {
      ttft.push_back(static_cast<double>(e.first_token - e.arrival) / kNsPerSec);
    }
  }
  std::sort(ttft.begin(), ttft.end());
  f.light_ttft_p50_s = percentileOfSorted(ttft, 50);
  f.light_ttft_p99_s = percentileOfSorted(ttft, 99);
  f.service_diff = maxServiceDifference(run.events, run.weights, {0, 1, 2}).value;
  f.windowed_service_diff =
      windowedServiceDifference(run.events, run.weights, window, {0, 1, 2}, Activity::kWaiting).max;
  return f;
}

json toJson(const PolicyFigures& f) {
  return {{"makespan_s", f.makespan_s},
          {"prefill_tokens", f.prefill_tokens},
          {"cached_tokens", f.cached_tokens},
          {"hit_rate", f.hit_rate},
          {"light_ttft_p50_s", f.light_ttft_p50_s},
          {"light_ttft_p99_s", f.light_ttft_p99_s},
          {"service_diff", f.service_diff},
          {"windowed_service_diff", f.windowed_service_diff},
          {"completed", f.completed},
          {"preemptions", f.preemptions}};
}

struct Aim {
  std::string what;
  double value = 0;
  double target = 0;
  bool at_most = true;
  bool met() const { return at_most ? value <= target + 1e-12 : value >= target - 1e-12; }
};

// a / b; equal zeros are a ratio of 1.
double ratio(double a, double b) {
  if (b == 0) return a == 0 ? 1.0 : HUGE_VAL;
  return a / b;
}

// The aims of docs/benchmarks.md, for the policies that ran.
std::vector<Aim> aimsOf(const std::map<std::string, PolicyFigures>& by) {
  std::vector<Aim> aims;
  auto has = [&](const char* p) { return by.count(p) != 0; };
  if (!has("fair+prefix")) return aims;
  const PolicyFigures& fp = by.at("fair+prefix");
  if (has("fair")) {
    const PolicyFigures& f = by.at("fair");
    aims.push_back({"total time, fair+prefix / fair", ratio(fp.makespan_s, f.makespan_s), 0.67});
    aims.push_back(
        {"service difference, fair+prefix / fair", ratio(fp.service_diff, f.service_diff), 1.25});
    aims.push_back({"light TTFT p50, fair+prefix / fair",
                    ratio(fp.light_ttft_p50_s, f.light_ttft_p50_s), 1.0});
  }
  double best_makespan = 0, best_hit = 0;
  for (const char* b : {"fifo+prefix", "router"}) {
    if (!has(b)) continue;
    const PolicyFigures& x = by.at(b);
    best_makespan = best_makespan == 0 ? x.makespan_s : std::min(best_makespan, x.makespan_s);
    best_hit = std::max(best_hit, x.hit_rate);
    aims.push_back({std::string("service difference, fair+prefix / ") + b,
                    ratio(fp.service_diff, x.service_diff), 0.5});
  }
  if (best_makespan > 0) {
    aims.push_back({"total time, fair+prefix / the better locality baseline",
                    ratio(fp.makespan_s, best_makespan), 1.05});
    aims.push_back({"hit rate, fair+prefix / the better locality baseline's",
                    ratio(fp.hit_rate, best_hit), 0.9, false});
  }
  return aims;
}

}  // namespace

ScenarioResult runReplicaComparison(const config::Config& cfg,
                                    const std::vector<TraceRequest>& trace,
                                    const std::vector<ReplayPolicy>& policies,
                                    const ScenarioOptions& options) {
  Locality loc;
  loc.replicas = options.replicas;
  loc.load_slack = options.load_slack;
  std::unordered_set<std::uint64_t> shared;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    std::size_t n = 0;
    const std::vector<std::uint64_t> chain =
        promptChain(trace[i], i, loc.block_tokens, loc.max_blocks, &n);
    shared.insert(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(n));
  }
  loc.cache_blocks = options.cache_blocks != 0 ? options.cache_blocks
                                               : (shared.size() + loc.replicas - 1) / loc.replicas;
  const TimeNs window = static_cast<TimeNs>(std::llround(options.service_window_s * kNsPerSec));

  std::map<std::string, PolicyFigures> by;
  json per_policy = json::object();
  std::string rows;
  for (const ReplayPolicy p : policies) {
    if (p == ReplayPolicy::kFloor || p == ReplayPolicy::kDrr) continue;  // no locality form
    auto run = replayTrace(cfg, p, trace, 0, options.seed, &loc);
    if (auto* err = std::get_if<std::string>(&run)) return ScenarioError{*err};
    const PolicyFigures f = figuresOf(std::get<ReplayRun>(run), window);
    by[toString(p)] = f;
    per_policy[toString(p)] = toJson(f);
    char line[300];
    std::snprintf(line, sizeof line, "%-12s %9.1f %12llu %7.3f %10.3f %10.3f %12.0f %12.0f %8llu\n",
                  toString(p), f.makespan_s, static_cast<unsigned long long>(f.prefill_tokens),
                  f.hit_rate, f.light_ttft_p50_s, f.light_ttft_p99_s, f.service_diff,
                  f.windowed_service_diff, static_cast<unsigned long long>(f.preemptions));
    rows += line;
  }
  const std::vector<Aim> aims = aimsOf(by);
  json aims_json = json::array();
  for (const Aim& a : aims) {
    aims_json.push_back({{"aim", a.what},
                         {"value", a.value},
                         {a.at_most ? "at_most" : "at_least", a.target},
                         {"met", a.met()}});
  }
  ScenarioReport report;
  report.json = {{"scenario", "replay-replicas"},
                 {"replicas", loc.replicas},
                 {"cache_blocks", loc.cache_blocks},
                 {"shared_blocks", shared.size()},
                 {"block_tokens", loc.block_tokens},
                 {"load_slack", loc.load_slack},
                 {"window_s", options.service_window_s},
                 {"requests", trace.size()},
                 {"policies", per_policy},
                 {"aims", aims_json}};
  char head[400];
  std::snprintf(head, sizeof head,
                "replay on %u engines, each caching %llu blocks of %u tokens (the trace shares "
                "%zu distinct blocks); %zu requests; prefix placement within (1 + %.2f) x the "
                "mean load\n\n",
                loc.replicas, static_cast<unsigned long long>(loc.cache_blocks), loc.block_tokens,
                shared.size(), trace.size(), loc.load_slack);
  report.table = head;
  report.table +=
      "policy        total (s)      prefill  hit rate  light TTFT  light TTFT       service  "
      "    windowed  preempt\n"
      "                            tokens              p50 (s)     p99 (s)    difference  "
      "  (max, VTC)\n";
  report.table += rows;
  if (!aims.empty()) report.table += "\n";
  for (const Aim& a : aims) {
    char line[300];
    std::snprintf(line, sizeof line, "%-58s %6.3f (%s %.2f): %s\n", a.what.c_str(), a.value,
                  a.at_most ? "aim <=" : "aim >=", a.target, a.met() ? "MET" : "MISS");
    report.table += line;
  }
  return report;
}

}  // namespace fairsched::bench
