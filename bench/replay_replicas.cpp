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
#include <cstdarg>
#include <cstdio>
#include <map>
#include <unordered_set>

#include "bench/process_run.hpp"
#include "bench/replay_scenario.hpp"
#include "bench/stats.hpp"
#include "shm/layout.hpp"

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
  if (run.outcomes.empty()) {  // --real: the engines' own counts, in tokens
    f.cached_tokens = run.engines.cached_tokens;
    f.prefill_tokens = run.engines.prompt_tokens - run.engines.cached_tokens;
    queried = run.engines.prompt_tokens;
    hit = run.engines.cached_tokens;
    f.preemptions = run.engines.preempted;  // the clients do not see them
  }
  f.hit_rate = queried == 0 ? 0.0 : static_cast<double>(hit) / static_cast<double>(queried);
  std::map<std::string, double> demand;
  TimeNs first = kNever, last = 0;
  for (const RequestEvent& e : run.events) {
    demand[e.tenant] += static_cast<double>(e.input_tokens) + e.output_tokens;
    first = std::min(first, e.arrival);
    last = std::max(last, e.completion);
    if (!run.outcomes.empty()) f.preemptions += e.preemptions;
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

// Each tenant's mean latency (arrival to completion) and median time to
// first token, ms, of its completed requests.
struct TenantTimes {
  double latency_ms = 0, ttft_ms = 0;
};
std::map<std::string, TenantTimes> timesByTenant(const ReplayRun& run) {
  std::map<std::string, std::vector<double>> lat, ttft;
  for (const RequestEvent& e : run.events) {
    if (e.status != Status::kOk) continue;
    lat[e.tenant].push_back(static_cast<double>(e.completion - e.arrival) / kNsPerMs);
    if (e.first_token >= 0) {
      ttft[e.tenant].push_back(static_cast<double>(e.first_token - e.arrival) / kNsPerMs);
    }
  }
  std::map<std::string, TenantTimes> out;
  for (auto& [t, v] : lat) {
    double sum = 0;
    for (const double x : v) sum += x;
    std::vector<double>& f = ttft[t];
    std::sort(f.begin(), f.end());
    out[t] = {sum / static_cast<double>(v.size()), percentileOfSorted(f, 50)};
  }
  return out;
}

// How a real run agrees with the model, tenant by tenant: a tenant agrees
// when its mean latency and its median time to first token are each within
// 50 % of the model's plus `slack_ms` (real engine steps overshoot their
// sleep and every process shares the host's cores: real times run longer).
json agreementOf(const ReplayRun& model, const ReplayRun& real, double slack_ms, int* within,
                 int* tenants) {
  const auto m = timesByTenant(model);
  const auto r = timesByTenant(real);
  json per = json::object();
  *within = 0;
  *tenants = 0;
  for (const auto& [t, mm] : m) {
    auto it = r.find(t);
    if (it == r.end()) continue;
    const TenantTimes& rr = it->second;
    const bool ok = std::abs(rr.latency_ms - mm.latency_ms) <= 0.5 * mm.latency_ms + slack_ms &&
                    std::abs(rr.ttft_ms - mm.ttft_ms) <= 0.5 * mm.ttft_ms + slack_ms;
    ++*tenants;
    if (ok) ++*within;
    per[t] = {{"model_latency_ms", mm.latency_ms},
              {"real_latency_ms", rr.latency_ms},
              {"model_ttft_p50_ms", mm.ttft_ms},
              {"real_ttft_p50_ms", rr.ttft_ms},
              {"agrees", ok}};
  }
  return per;
}

// printf into a string (a line of a table).
__attribute__((format(printf, 1, 2))) std::string formatted(const char* format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  return line;
}

std::string figuresRow(const std::string& name, const PolicyFigures& f) {
  return formatted("%-12s %9.1f %12llu %7.3f %10.3f %10.3f %12.0f %12.0f %8llu\n", name.c_str(),
                   f.makespan_s, static_cast<unsigned long long>(f.prefill_tokens), f.hit_rate,
                   f.light_ttft_p50_s, f.light_ttft_p99_s, f.service_diff, f.windowed_service_diff,
                   static_cast<unsigned long long>(f.preemptions));
}

json aimsJson(const std::vector<Aim>& aims) {
  json out = json::array();
  for (const Aim& a : aims) {
    out.push_back({{"aim", a.what},
                   {"value", a.value},
                   {a.at_most ? "at_most" : "at_least", a.target},
                   {"met", a.met()}});
  }
  return out;
}

// The policies' rows under `intro` and the table's head, the aims below.
std::string policyTable(const std::string& intro, const std::string& rows,
                        const std::vector<Aim>& aims) {
  std::string out = intro +
                    "policy        total (s)      prefill  hit rate  light TTFT  light TTFT       "
                    "service      windowed  preempt\n"
                    "                            tokens              p50 (s)     p99 (s)    "
                    "difference    (max, VTC)\n" +
                    rows;
  if (!aims.empty()) out += "\n";
  for (const Aim& a : aims) {
    out += formatted("%-58s %6.3f (%s %.2f): %s\n", a.what.c_str(), a.value,
                     a.at_most ? "aim <=" : "aim >=", a.target, a.met() ? "MET" : "MISS");
  }
  return out;
}

// A submission slot holds this many prompt tokens with room for the
// parameters (shm::Geometry::prompt_tokens_per_slot words in all).
constexpr std::uint32_t kSlotPromptTokens = shm::Geometry{}.prompt_tokens_per_slot - 64;

// The trace as clients can submit it through their rings: each prompt cut
// to kSlotPromptTokens (its shared segments first). How many were cut.
std::size_t capPrompts(std::vector<TraceRequest>& trace) {
  std::size_t cut = 0;
  for (TraceRequest& r : trace) {
    if (r.input_tokens <= kSlotPromptTokens) continue;
    ++cut;
    r.input_tokens = kSlotPromptTokens;
    std::uint32_t left = kSlotPromptTokens;
    for (PrefixSegment& seg : r.prefix) {
      seg.tokens = std::min(seg.tokens, left);
      left -= seg.tokens;
    }
    std::erase_if(r.prefix, [](const PrefixSegment& seg) { return seg.tokens == 0; });
  }
  return cut;
}

}  // namespace

ScenarioResult runReplicaComparison(const config::Config& cfg,
                                    const std::vector<TraceRequest>& given,
                                    const std::vector<ReplayPolicy>& policies,
                                    const ScenarioOptions& options) {
  // --real: the model replays the prompts the clients can submit, as they do.
  std::vector<TraceRequest> trace = given;
  const std::size_t cut = options.real ? capPrompts(trace) : 0;
  Locality loc;
  loc.replicas = options.replicas;
  loc.load_slack = options.load_slack;
  loc.locality_slack = options.locality_slack;
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

  std::map<std::string, PolicyFigures> by, real_by;
  json per_policy = json::object(), real_policies = json::object(), agreement = json::object();
  std::string rows, real_rows;
  // --real: agreement's slack, a few of the slowest engine steps.
  double slack_ms = 25;
  for (const config::EndpointConfig& ec : cfg.endpoints) {
    slack_ms = std::max(
        slack_ms,
        4 * (ec.engine.step_us + ec.engine.prefill_token_us * ec.engine.chunked_prefill_tokens) /
            1000.0);
  }
  for (const ReplayPolicy p : policies) {
    if (p == ReplayPolicy::kFloor || p == ReplayPolicy::kDrr) continue;  // no locality form
    auto run = replayTrace(cfg, p, trace, 0, options.seed, &loc);
    if (auto* err = std::get_if<std::string>(&run)) return ScenarioError{*err};
    const PolicyFigures f = figuresOf(std::get<ReplayRun>(run), window);
    by[toString(p)] = f;
    per_policy[toString(p)] = toJson(f);
    rows += figuresRow(toString(p), f);
    if (!options.real || p == ReplayPolicy::kRouter) continue;  // the router has no daemon form
    TempDir dir("fairsched-replicas");
    if (dir.path().empty()) return ScenarioError{"cannot create a temporary directory"};
    auto real = replayReal(cfg, p, trace, dir.path(), &loc);
    if (auto* err = std::get_if<std::string>(&real)) return ScenarioError{*err};
    const PolicyFigures rf = figuresOf(std::get<ReplayRun>(real), window);
    real_by[toString(p)] = rf;
    real_policies[toString(p)] = toJson(rf);
    real_rows += figuresRow(toString(p), rf);
    int within = 0, tenants = 0;
    json per = agreementOf(std::get<ReplayRun>(run), std::get<ReplayRun>(real), slack_ms, &within,
                           &tenants);
    agreement[toString(p)] = {{"tenants", tenants}, {"agree", within}, {"per_tenant", per}};
    real_rows +=
        formatted("%-12s %d of %d tenants agree with the model\n", toString(p), within, tenants);
  }
  const std::vector<Aim> aims = aimsOf(by);
  ScenarioReport report;
  report.json = {{"scenario", "replay-replicas"},
                 {"replicas", loc.replicas},
                 {"cache_blocks", loc.cache_blocks},
                 {"shared_blocks", shared.size()},
                 {"block_tokens", loc.block_tokens},
                 {"load_slack", loc.load_slack},
                 {"locality_slack", loc.locality_slack},
                 {"window_s", options.service_window_s},
                 {"requests", trace.size()},
                 {"prompts_cut", cut},
                 {"policies", per_policy},
                 {"aims", aimsJson(aims)}};
  std::string intro = formatted(
      "replay on %u engines, each caching %llu blocks of %u tokens (the trace shares %zu "
      "distinct blocks); %zu requests; prefix placement within (1 + %.2f) x the mean load\n\n",
      loc.replicas, static_cast<unsigned long long>(loc.cache_blocks), loc.block_tokens,
      shared.size(), trace.size(), loc.load_slack);
  if (cut != 0) {
    intro += formatted(
        "(%zu prompts cut to %u tokens, what a client's submission slot holds, in the model "
        "too)\n\n",
        cut, kSlotPromptTokens);
  }
  report.table = policyTable(intro, rows, aims);
  if (options.real) {
    // Real processes: the same policies but the router's (hit rate: tokens
    // the engines found cached ÷ prompt tokens they took; preemptions: as
    // the engines counted them).
    const std::vector<Aim> real_aims = aimsOf(real_by);
    report.json["real"] = {{"policies", real_policies},
                           {"agreement", agreement},
                           {"agreement_slack_ms", slack_ms},
                           {"aims", aimsJson(real_aims)}};
    report.table += policyTable(
        formatted("\nthrough real processes (a fairschedd, %u reference workers with their "
                  "prefix caches, a client process per tenant; a tenant agrees when its mean "
                  "latency and TTFT p50 are within 50 %% + %.0f ms of the model's):\n\n",
                  loc.replicas, slack_ms),
        real_rows, real_aims);
  }
  return report;
}

}  // namespace fairsched::bench
