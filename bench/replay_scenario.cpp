#include "bench/replay_scenario.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "bench/simulator.hpp"
#include "daemon/config/embedded_config.hpp"
#include "daemon/config/scheduler_setup.hpp"

namespace fairsched::bench {
namespace {

constexpr int kWindows = 100;    // served-tokens series: about this many windows
constexpr int kCdfPoints = 101;  // latency CDF: the 0th..100th percentiles

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(rank);
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

double seconds(TimeNs t) {
  return static_cast<double>(t) / kNsPerSec;
}

const char* policyName(Policy p) {
  return p == Policy::kFair ? "fair" : "fifo";
}

}  // namespace

std::variant<ReplayRun, std::string> replayTrace(const config::Config& cfg, Policy policy,
                                                 const std::vector<TraceRequest>& trace) {
  core::SchedulerSpec spec = config::buildSchedulerSpec(cfg);
  spec.policy = policy;
  std::vector<ExecutorModel> executors;
  for (const auto& ec : cfg.endpoints) {
    executors.push_back({ec.cpu.per_batch_us, ec.cpu.per_token_us, ec.cpu.threads});
  }
  auto endpointId = [&](const std::string& name) -> std::optional<EndpointId> {
    for (std::size_t e = 0; e < cfg.endpoints.size(); ++e) {
      if (cfg.endpoints[e].name == name) return static_cast<EndpointId>(e);
    }
    return std::nullopt;
  };

  std::vector<std::size_t> order(trace.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return trace[a].t < trace[b].t; });
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
    a.t = static_cast<TimeNs>(std::llround(r.t * kNsPerSec));
    a.tenant = r.tenant;
    a.endpoint = *e;
    a.input_tokens = r.input_tokens;
    a.output_tokens = r.output_tokens;
    a.max_output_tokens = r.output_tokens;
    a.priority = r.priority;
    if (r.deadline_ms)
      a.deadline = a.t + static_cast<TimeNs>(std::llround(*r.deadline_ms * kNsPerMs));
    arrivals.push_back(std::move(a));
  }

  ReplayRun run;
  run.policy = policy;
  const double default_weight = spec.tiers.at(spec.default_tier).default_weight;
  for (const TraceRequest& r : trace) run.weights.emplace(r.tenant, default_weight);
  for (const auto& t : spec.tenants) {
    if (auto it = run.weights.find(t.name); it != run.weights.end()) it->second = t.weight;
  }

  const std::vector<SimOutcome> outcomes = simulate(spec, executors, arrivals);
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
  }
  return run;
}

nlohmann::json replayJson(const ReplayRun& run, const CostWeights& cost) {
  struct Acc {
    std::uint64_t submitted = 0, completed = 0, rejected = 0, tokens = 0;
    std::map<std::string, std::uint64_t> statuses;
    std::vector<double> latencies;
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
    tenants[name] = {{"submitted", a.submitted},
                     {"completed", a.completed},
                     {"rejected", a.rejected},
                     {"rejected_by_status", a.statuses},
                     {"p50_ms", percentile(a.latencies, 50)},
                     {"p99_ms", percentile(a.latencies, 99)},
                     {"max_ms", a.latencies.empty() ? 0.0 : a.latencies.back()},
                     {"tokens_served", a.tokens},
                     {"weight", w != run.weights.end() ? w->second : 1.0}};
    nlohmann::json cdf = nlohmann::json::array();
    if (!a.latencies.empty()) {
      for (int p = 0; p < kCdfPoints; ++p) cdf.push_back(percentile(a.latencies, p));
    }
    series[name] = {{"tokens_per_window", a.windows}, {"latency_percentiles_ms", cdf}};
  }
  const ServiceDifference d = maxServiceDifference(run.events, run.weights, cost);
  return {{"scenario", "replay"},
          {"policy", policyName(run.policy)},
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
  std::snprintf(line, sizeof line, "%-16s %6s %9s %9s %9s %10s %10s %10s %13s %6s\n", "tenant",
                "weight", "submitted", "completed", "rejected", "p50_ms", "p99_ms", "max_ms",
                "tokens_served", "share");
  t << line;
  for (const auto& [name, v] : report["tenants"].items()) {
    const auto tokens = v["tokens_served"].get<std::uint64_t>();
    std::snprintf(line, sizeof line,
                  "%-16s %6.2f %9llu %9llu %9llu %10.2f %10.2f %10.2f %13llu %5.1f%%\n",
                  name.c_str(), v["weight"].get<double>(), v["submitted"].get<unsigned long long>(),
                  v["completed"].get<unsigned long long>(), v["rejected"].get<unsigned long long>(),
                  v["p50_ms"].get<double>(), v["p99_ms"].get<double>(), v["max_ms"].get<double>(),
                  static_cast<unsigned long long>(tokens),
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
  t << "\n";
  return t.str();
}

ScenarioResult runReplay(const ScenarioOptions& options) {
  if (options.trace_path.empty()) return ScenarioError{"--trace FILE.jsonl is required"};
  auto parsed =
      options.config_path.empty()
          ? config::parseConfig(config::kEmbeddedDefaultConfig, "<embedded config/fairsched.toml>")
          : config::loadConfigFile(options.config_path);
  if (auto* err = std::get_if<config::ConfigError>(&parsed)) return ScenarioError{err->toString()};
  const config::Config& cfg = std::get<config::Config>(parsed);
  auto cost = parseCostWeights(options.cost.empty() ? "input+output" : options.cost);
  if (auto* err = std::get_if<std::string>(&cost)) return ScenarioError{"--cost: " + *err};
  auto trace = loadTraceFile(options.trace_path);
  if (auto* err = std::get_if<TraceError>(&trace)) {
    return ScenarioError{options.trace_path + ": " + err->toString()};
  }
  Policy policy = cfg.daemon.policy;
  if (options.policy == "fair") policy = Policy::kFair;
  if (options.policy == "fifo") policy = Policy::kFifo;
  auto run = replayTrace(cfg, policy, std::get<std::vector<TraceRequest>>(trace));
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
  report.json = replayJson(r, std::get<CostWeights>(cost));
  report.table = replayTable(report.json);
  return report;
}

std::optional<std::string> plotReplay(const nlohmann::json& report, const std::string& path) {
  static constexpr std::string_view kScript = R"PY(
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

report = json.load(open(sys.argv[1]))
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
