#include "bench/sim_noisy_neighbor.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>
#include <variant>

#include "bench/simulator.hpp"
#include "daemon/config/config.hpp"
#include "daemon/config/embedded_config.hpp"
#include "daemon/config/scheduler_setup.hpp"

namespace fairsched::bench {
namespace {

constexpr int kBurst = 10'000;
constexpr int kLight = 5;

struct Setup {
  core::SchedulerSpec spec;
  std::vector<ExecutorModel> executors;
  EndpointId endpoint = 0;
};

std::variant<Setup, std::string> loadSetup(const ScenarioOptions& options) {
  config::ConfigResult parsed =
      options.config_path.empty()
          ? config::parseConfig(config::kEmbeddedDefaultConfig, "<embedded config/fairsched.toml>")
          : config::loadConfigFile(options.config_path);
  if (auto* err = std::get_if<config::ConfigError>(&parsed)) return err->toString();
  const config::Config& cfg = std::get<config::Config>(parsed);
  for (const char* name : {"A", "B"}) {
    if (!cfg.findTenant(name)) return std::string("the config must list tenants A and B");
  }
  if (cfg.findTenant("A")->tier != cfg.findTenant("B")->tier) {
    return std::string("tenants A and B must share a tier");
  }
  Setup s;
  s.spec = config::buildSchedulerSpec(cfg);
  const config::EndpointConfig* chat = cfg.findEndpoint("chat");
  if (!chat) chat = &cfg.endpoints.front();
  for (std::size_t e = 0; e < cfg.endpoints.size(); ++e) {
    const auto& ec = cfg.endpoints[e];
    s.executors.push_back({ec.cpu.per_batch_us, ec.cpu.per_token_us, ec.cpu.threads});
    if (&ec == chat) s.endpoint = static_cast<EndpointId>(e);
  }
  return s;
}

// A's burst arrives within the first 10 ms; B's requests are spaced over the
// time the burst takes to drain.
std::vector<SimArrival> makeArrivals(const Setup& s, std::uint64_t seed, bool with_burst) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint32_t> input(64, 512), output(16, 256);
  const auto& ep = s.spec.endpoints[s.endpoint];
  const auto& model = s.executors[s.endpoint];
  const double burst_us =
      kBurst * (model.per_token_us * (288 + 136) + model.per_batch_us / ep.max_batch_requests);
  const TimeNs spacing = static_cast<TimeNs>(burst_us * kNsPerUs / (kLight + 1));
  std::vector<SimArrival> arrivals;
  auto add = [&](TimeNs t, const char* tenant) {
    SimArrival a;
    a.t = t;
    a.tenant = tenant;
    a.endpoint = s.endpoint;
    a.input_tokens = std::min(input(rng), ep.max_batch_tokens / 2);
    a.output_tokens = std::min(output(rng), ep.max_output_tokens);
    a.max_output_tokens = a.output_tokens;
    arrivals.push_back(a);
  };
  if (with_burst) {
    for (int i = 0; i < kBurst; ++i) add(static_cast<TimeNs>(i) * kNsPerMs / 1000, "A");
  }
  for (int i = 1; i <= kLight; ++i) add(spacing * i, "B");
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [](const SimArrival& a, const SimArrival& b) { return a.t < b.t; });
  return arrivals;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(rank);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

nlohmann::json tenantReport(const std::vector<SimArrival>& arrivals,
                            const std::vector<SimOutcome>& outcomes, const std::string& tenant,
                            nlohmann::json& series) {
  std::uint64_t submitted = 0, completed = 0, rejected = 0, ended = 0, tokens = 0;
  std::vector<double> latencies;
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    if (arrivals[i].tenant != tenant) continue;
    ++submitted;
    const SimOutcome& o = outcomes[i];
    if (o.completion < o.arrival) continue;  // never ended: lost
    ++ended;
    if (o.status == Status::kOk) {
      ++completed;
      tokens += arrivals[i].input_tokens + arrivals[i].output_tokens;
      const double ms = static_cast<double>(o.completion - o.arrival) / kNsPerMs;
      latencies.push_back(ms);
      series.push_back({static_cast<double>(o.completion) / kNsPerMs, ms});
    } else {
      ++rejected;
    }
  }
  return {{"submitted", submitted},
          {"completed", completed},
          {"rejected", rejected},
          {"lost", submitted - ended},
          {"p50_ms", percentile(latencies, 50)},
          {"p99_ms", percentile(latencies, 99)},
          {"max_ms", latencies.empty() ? 0.0 : *std::max_element(latencies.begin(), latencies.end())},
          {"tokens_served", tokens},
          {"tier", "paid"},
          {"weight", 1.0}};
}

}  // namespace

ScenarioResult runSimNoisyNeighbor(const ScenarioOptions& options) {
  auto loaded = loadSetup(options);
  if (auto* err = std::get_if<std::string>(&loaded)) return ScenarioError{*err};
  Setup& setup = std::get<Setup>(loaded);
  const std::string tier_name = setup.spec.tiers[setup.spec.tenants.front().tier].name;

  nlohmann::json report{{"scenario", "noisy-neighbor"}, {"mode", "virtual-time"}, {"runs", nlohmann::json::array()}};
  nlohmann::json plot_series = nlohmann::json::object();
  struct Run {
    Policy policy;
    const char* label;
    bool burst;
  };
  for (const Run run : {Run{Policy::kFair, "burst", true}, Run{Policy::kFifo, "burst", true},
                        Run{Policy::kFair, "alone", false}}) {
    setup.spec.policy = run.policy;
    const auto arrivals = makeArrivals(setup, options.seed, run.burst);
    const auto outcomes = simulate(setup.spec, setup.executors, arrivals);
    const std::string policy = run.policy == Policy::kFair ? "fair" : "fifo";
    nlohmann::json tenants = nlohmann::json::object();
    for (const char* t : {"A", "B"}) {
      if (!run.burst && std::string(t) == "A") continue;
      nlohmann::json& series = plot_series[policy + "/" + run.label + "/" + t];
      series = nlohmann::json::array();
      tenants[t] = tenantReport(arrivals, outcomes, t, series);
      tenants[t]["tier"] = tier_name;
    }
    report["runs"].push_back({{"policy", policy}, {"label", run.label}, {"tenants", tenants}});
  }
  report["series"] = plot_series;

  const auto& runs = report["runs"];
  const double b_fair = runs[0]["tenants"]["B"]["p99_ms"].get<double>();
  const double b_fifo = runs[1]["tenants"]["B"]["p99_ms"].get<double>();
  const double b_alone = runs[2]["tenants"]["B"]["p99_ms"].get<double>();
  std::ostringstream t;
  char line[256];
  t << "noisy-neighbor (virtual time, real scheduling core, executor modelled from the config)\n";
  t << "A: burst of 10,000 requests; B: 5 requests spaced out during the burst; same tier, weight 1\n\n";
  std::snprintf(line, sizeof line, "%-6s %-6s %-6s %9s %9s %9s %9s %10s %10s %10s\n", "policy",
                "run", "tenant", "submitted", "completed", "rejected", "lost", "p50_ms", "p99_ms",
                "max_ms");
  t << line;
  for (const auto& r : runs) {
    for (const auto& [name, v] : r["tenants"].items()) {
      std::snprintf(line, sizeof line, "%-6s %-6s %-6s %9llu %9llu %9llu %9llu %10.2f %10.2f %10.2f\n",
                    r["policy"].get<std::string>().c_str(), r["label"].get<std::string>().c_str(),
                    name.c_str(), v["submitted"].get<unsigned long long>(),
                    v["completed"].get<unsigned long long>(), v["rejected"].get<unsigned long long>(),
                    v["lost"].get<unsigned long long>(), v["p50_ms"].get<double>(),
                    v["p99_ms"].get<double>(), v["max_ms"].get<double>());
      t << line;
    }
  }
  std::snprintf(line, sizeof line,
                "\nB p99: fair %.2f ms, alone %.2f ms (fair/alone %.2fx, target <= 2x); "
                "fifo %.2f ms (fifo/fair %.0fx, target >= 50x)\n",
                b_fair, b_alone, b_alone > 0 ? b_fair / b_alone : 0.0, b_fifo,
                b_fair > 0 ? b_fifo / b_fair : 0.0);
  t << line;
  return ScenarioReport{report, t.str()};
}

std::optional<std::string> plotNoisyNeighbor(const nlohmann::json& report, const std::string& path) {
  static constexpr std::string_view kScript = R"PY(
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

report = json.load(open(sys.argv[1]))
series = report["series"]
fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
for ax, policy in zip(axes, ["fifo", "fair"]):
    for tenant, color, size in [("A", "#bbbbbb", 2), ("B", "#d62728", 40)]:
        pts = series.get(policy + "/burst/" + tenant, [])
        if pts:
            xs, ys = zip(*pts)
            ax.scatter(xs, ys, s=size, color=color, label="tenant " + tenant, zorder=3 if tenant == "B" else 2)
    alone = series.get("fair/alone/B", [])
    if alone:
        xs, ys = zip(*alone)
        ax.scatter(xs, ys, s=40, marker="x", color="#1f77b4", label="B alone", zorder=4)
    ax.set_title("policy: " + policy)
    ax.set_xlabel("completion time (ms)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
axes[0].set_ylabel("latency, arrival to completion (ms)")
axes[1].legend(loc="center right")
fig.suptitle("noisy neighbor: A bursts 10,000 requests, B sends 5")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
)PY";
  return plotWithPython(kScript, report, path);
}

}  // namespace fairsched::bench
