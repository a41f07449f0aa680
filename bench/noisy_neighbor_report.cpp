#include "bench/noisy_neighbor_report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "bench/stats.hpp"

namespace fairsched::bench {
namespace {

constexpr double kRateBucketMs = 100.0;  // tokens/s series: one point per bucket

// Tokens served per second over time, each completed request's tokens spread
// evenly from its first token (or arrival) to its completion.
nlohmann::json tokenRate(const std::vector<RequestRecord>& records) {
  std::vector<double> buckets;
  for (const RequestRecord& r : records) {
    if (r.completion < 0 || r.status != Status::kOk) continue;
    const double from =
        static_cast<double>(r.first_token >= 0 ? r.first_token : r.arrival) / kNsPerMs;
    const double to = std::max(from, static_cast<double>(r.completion) / kNsPerMs);
    const auto last = static_cast<std::size_t>(to / kRateBucketMs);
    if (buckets.size() <= last) buckets.resize(last + 1, 0.0);
    const auto tokens = static_cast<double>(r.tokens);
    if (to == from) {
      buckets[last] += tokens;
      continue;
    }
    for (auto b = static_cast<std::size_t>(from / kRateBucketMs); b <= last; ++b) {
      const double lo = std::max(from, static_cast<double>(b) * kRateBucketMs);
      const double hi = std::min(to, static_cast<double>(b + 1) * kRateBucketMs);
      if (hi > lo) buckets[b] += tokens * (hi - lo) / (to - from);
    }
  }
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    out.push_back(
        {(static_cast<double>(b) + 0.5) * kRateBucketMs, buckets[b] * 1000.0 / kRateBucketMs});
  }
  return out;
}

nlohmann::json tenantJson(const std::vector<RequestRecord>& records, nlohmann::json& series,
                          nlohmann::json& ttft_series) {
  std::uint64_t completed = 0, rejected = 0, ended = 0, tokens = 0;
  std::vector<double> latencies, ttft;
  for (const RequestRecord& r : records) {
    if (r.completion < 0) continue;  // no completion ever came: lost
    ++ended;
    if (r.first_token >= 0) {
      ttft.push_back(static_cast<double>(r.first_token - r.arrival) / kNsPerMs);
      ttft_series.push_back({static_cast<double>(r.first_token) / kNsPerMs, ttft.back()});
    }
    if (r.status == Status::kOk) {
      ++completed;
      tokens += r.tokens;
      const double ms = static_cast<double>(r.completion - r.arrival) / kNsPerMs;
      latencies.push_back(ms);
      series.push_back({static_cast<double>(r.completion) / kNsPerMs, ms});
    } else {
      ++rejected;
    }
  }
  const std::uint64_t submitted = records.size();
  nlohmann::json out = {
      {"submitted", submitted},
      {"completed", completed},
      {"rejected", rejected},
      {"lost", submitted - ended},
      {"p50_ms", percentile(latencies, 50)},
      {"p99_ms", percentile(latencies, 99)},
      {"max_ms", latencies.empty() ? 0.0 : *std::max_element(latencies.begin(), latencies.end())},
      {"tokens_served", tokens}};
  if (!ttft.empty()) {  // a worker endpoint: time to first token beside end to end
    out["ttft_p50_ms"] = percentile(ttft, 50);
    out["ttft_p99_ms"] = percentile(ttft, 99);
  }
  return out;
}

}  // namespace

nlohmann::json noisyNeighborJson(const std::vector<NoisyRun>& runs, const std::string& mode,
                                 const std::string& tier, double weight) {
  nlohmann::json report{
      {"scenario", "noisy-neighbor"}, {"mode", mode}, {"runs", nlohmann::json::array()}};
  nlohmann::json series = nlohmann::json::object();
  nlohmann::json ttft_series = nlohmann::json::object();
  nlohmann::json rate_series = nlohmann::json::object();
  for (const NoisyRun& run : runs) {
    const std::string policy = run.policy == Policy::kFair ? "fair" : "fifo";
    nlohmann::json tenants = nlohmann::json::object();
    for (const auto& [name, records] : run.tenants) {
      const std::string key = policy + "/" + run.label + "/" + name;
      nlohmann::json& points = series[key];
      points = nlohmann::json::array();
      nlohmann::json firsts = nlohmann::json::array();
      tenants[name] = tenantJson(records, points, firsts);
      if (!firsts.empty()) ttft_series[key] = std::move(firsts);
      rate_series[key] = tokenRate(records);
      tenants[name]["tier"] = tier;
      tenants[name]["weight"] = weight;
    }
    report["runs"].push_back({{"policy", policy}, {"label", run.label}, {"tenants", tenants}});
  }
  report["series"] = series;
  report["ttft_series"] = ttft_series;
  report["tokens_per_s"] = rate_series;
  return report;
}

std::string noisyNeighborTable(const nlohmann::json& report, const std::string& title) {
  const auto& runs = report["runs"];
  const double b_fair = runs[0]["tenants"]["B"]["p99_ms"].get<double>();
  const double b_fifo = runs[1]["tenants"]["B"]["p99_ms"].get<double>();
  const double b_alone = runs[2]["tenants"]["B"]["p99_ms"].get<double>();
  std::ostringstream t;
  char line[256];
  t << title << "\n\n";
  const bool ttft = runs[0]["tenants"]["B"].contains("ttft_p50_ms");
  std::snprintf(line, sizeof line, "%-6s %-6s %-6s %9s %9s %9s %9s %10s %10s %10s%s\n", "policy",
                "run", "tenant", "submitted", "completed", "rejected", "lost", "p50_ms", "p99_ms",
                "max_ms", ttft ? "  ttft_p50_ms ttft_p99_ms" : "");
  t << line;
  for (const auto& r : runs) {
    for (const auto& [name, v] : r["tenants"].items()) {
      std::snprintf(
          line, sizeof line, "%-6s %-6s %-6s %9llu %9llu %9llu %9llu %10.2f %10.2f %10.2f\n",
          r["policy"].get<std::string>().c_str(), r["label"].get<std::string>().c_str(),
          name.c_str(), v["submitted"].get<unsigned long long>(),
          v["completed"].get<unsigned long long>(), v["rejected"].get<unsigned long long>(),
          v["lost"].get<unsigned long long>(), v["p50_ms"].get<double>(), v["p99_ms"].get<double>(),
          v["max_ms"].get<double>());
      t << line;
      if (ttft) {
        t.seekp(-1, std::ios_base::cur);  // before the newline
        std::snprintf(line, sizeof line, " %12.2f %11.2f\n", v.value("ttft_p50_ms", 0.0),
                      v.value("ttft_p99_ms", 0.0));
        t << line;
      }
    }
  }
  std::snprintf(line, sizeof line,
                "\nB p99: fair %.2f ms, alone %.2f ms (fair/alone %.2fx, target <= 2x); "
                "fifo %.2f ms (fifo/fair %.0fx, target >= 50x)\n",
                b_fair, b_alone, b_alone > 0 ? b_fair / b_alone : 0.0, b_fifo,
                b_fair > 0 ? b_fifo / b_fair : 0.0);
  t << line;
  return t.str();
}

std::optional<std::string> plotNoisyNeighbor(const nlohmann::json& report,
                                             const std::string& path) {
  static constexpr std::string_view kScript = R"PY(
series = report["series"]
ttft = report.get("ttft_series", {})
rates = report.get("tokens_per_s", {})
rows = ["latency"] + (["ttft"] if ttft else []) + (["rate"] if rates else [])
fig, grid = plt.subplots(len(rows), 2, figsize=(11, 3.6 * len(rows)), sharex="col", squeeze=False)
for col, policy in enumerate(["fifo", "fair"]):
    for row, kind in enumerate(rows):
        ax = grid[row][col]
        if kind == "rate":
            for tenant, color in [("A", "#888888"), ("B", "#d62728")]:
                pts = rates.get(policy + "/burst/" + tenant, [])
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, color=color, label="tenant " + tenant)
            ax.set_yscale("symlog", linthresh=1000)
            ax.set_ylabel("tokens/s served (100 ms buckets)")
            ax.set_xlabel("time (ms)")
            ax.grid(True, alpha=0.3)
            continue
        data = series if kind == "latency" else ttft
        for tenant, color, size in [("A", "#bbbbbb", 2), ("B", "#d62728", 40)]:
            pts = data.get(policy + "/burst/" + tenant, [])
            if pts:
                xs, ys = zip(*pts)
                ax.scatter(xs, ys, s=size, color=color, label="tenant " + tenant,
                           zorder=3 if tenant == "B" else 2)
        alone = data.get("fair/alone/B", [])
        if alone:
            xs, ys = zip(*alone)
            ax.scatter(xs, ys, s=40, marker="x", color="#1f77b4", label="B alone", zorder=4)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        if kind == "latency":
            ax.set_title("policy: " + policy)
            ax.set_ylabel("latency, arrival to completion (ms)")
        else:
            ax.set_ylabel("time to first token (ms)")
        ax.set_xlabel("completion time (ms)" if kind == "latency" else "first token (ms)")
grid[0][1].legend(loc="center right")
if rates:
    grid[len(rows) - 1][1].legend(loc="upper right")
fig.suptitle("noisy neighbor: A bursts 10,000 requests, B sends 5")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
)PY";
  return plotWithPython(kScript, report, path);
}

std::variant<std::vector<NoisyRun>, std::string> runNoisyPlans(
    const std::function<NoisyRunResult(Policy, const char*, bool)>& run_one) {
  struct Plan {
    Policy policy;
    const char* label;
    bool burst;
  };
  std::vector<NoisyRun> runs;
  for (const Plan plan : {Plan{Policy::kFair, "burst", true}, Plan{Policy::kFifo, "burst", true},
                          Plan{Policy::kFair, "alone", false}}) {
    NoisyRunResult run = run_one(plan.policy, plan.label, plan.burst);
    if (auto* err = std::get_if<std::string>(&run)) return *err;
    runs.push_back(std::move(std::get<NoisyRun>(run)));
  }
  return runs;
}

ScenarioReport noisyNeighborReport(const std::vector<NoisyRun>& runs, const std::string& mode,
                                   const std::string& tier, double weight,
                                   const std::string& heading) {
  ScenarioReport report;
  report.json = noisyNeighborJson(runs, mode, tier, weight);
  report.table = noisyNeighborTable(
      report.json, heading +
                       "A: burst of 10,000 requests; B: 5 requests spaced out during the burst; "
                       "same tier and weight");
  return report;
}

}  // namespace fairsched::bench
