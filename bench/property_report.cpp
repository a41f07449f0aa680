#include "bench/property_report.hpp"

#include "bench/property_scenarios.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "bench/stats.hpp"

namespace fairsched::bench {
nlohmann::json tenantSummary(const std::vector<RequestRecord>& records, const TenantInfo& info) {
  std::uint64_t completed = 0, rejected = 0, ended = 0, tokens = 0;
  std::vector<double> latencies;
  for (const RequestRecord& r : records) {
    if (r.completion < 0) continue;
    ++ended;
    if (r.status == Status::kOk) {
      ++completed;
      tokens += r.tokens;
      latencies.push_back(static_cast<double>(r.completion - r.arrival) / kNsPerMs);
    } else {
      ++rejected;
    }
  }
  return {
      {"submitted", records.size()},
      {"completed", completed},
      {"rejected", rejected},
      {"lost", records.size() - ended},
      {"p50_ms", percentile(latencies, 50)},
      {"p99_ms", percentile(latencies, 99)},
      {"max_ms", latencies.empty() ? 0.0 : *std::max_element(latencies.begin(), latencies.end())},
      {"tokens_served", tokens},
      {"tier", info.tier},
      {"weight", info.weight}};
}

nlohmann::json runJson(Policy policy, const std::string& label, const TenantRecords& records,
                       const std::map<std::string, TenantInfo>& info) {
  nlohmann::json tenants = nlohmann::json::object();
  for (const auto& [name, r] : records) {
    auto it = info.find(name);
    tenants[name] = tenantSummary(r, it != info.end() ? it->second : TenantInfo{});
  }
  return {{"policy", policy == Policy::kFair ? "fair" : "fifo"},
          {"label", label},
          {"tenants", tenants},
          {"series", servedSeries(records)}};
}

nlohmann::json servedSeries(const TenantRecords& records) {
  constexpr std::size_t kMaxPoints = 400;
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, recs] : records) {
    std::vector<std::pair<TimeNs, std::uint64_t>> done;
    for (const RequestRecord& r : recs) {
      if (r.status == Status::kOk && r.completion >= 0) done.push_back({r.completion, r.tokens});
    }
    std::sort(done.begin(), done.end());
    nlohmann::json pts = nlohmann::json::array();
    pts.push_back({0.0, 0});
    std::uint64_t sum = 0;
    const std::size_t step = std::max<std::size_t>(1, done.size() / kMaxPoints);
    for (std::size_t i = 0; i < done.size(); ++i) {
      sum += done[i].second;
      if (i % step == 0 || i + 1 == done.size())
        pts.push_back({static_cast<double>(done[i].first) / kNsPerMs, sum});
    }
    out[name] = std::move(pts);
  }
  return out;
}

std::optional<std::string> plotPropertyRuns(const nlohmann::json& report, const std::string& path) {
  static constexpr std::string_view kScript = R"PY(
runs = [r for r in report["runs"] if r.get("series")]
fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 4.2), squeeze=False)
for ax, run in zip(axes[0], runs):
    for tenant in sorted(run["series"]):
        pts = run["series"][tenant]
        if len(pts) < 2:
            continue
        xs, ys = zip(*pts)
        t = run["tenants"].get(tenant, {})
        label = "%s (tier %s, weight %g)" % (tenant, t.get("tier", "?"), t.get("weight", 1))
        ax.plot([x / 1000.0 for x in xs], [y / 1e6 for y in ys], label=label, lw=1.8, drawstyle="steps-post")
    ax.set_title("%s: %s" % (run["policy"], run["label"]))
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("tokens served, cumulative (millions)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
lines = ["%s %s: %.4g (target %s)" % ("PASS" if c["pass"] else "MISS", c["name"], c["value"], c["target"])
         for c in report.get("checks", [])]
fig.suptitle(report["scenario"] + ": tokens served per tenant over time", fontsize=12)
fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, va="bottom", family="monospace")
fig.tight_layout(rect=(0, 0.04 + 0.025 * len(lines), 1, 0.95))
fig.savefig(sys.argv[2], dpi=110)
)PY";
  return plotWithPython(kScript, report, path);
}

std::optional<std::string> plotRateLimit(const nlohmann::json& report, const std::string& path) {
  static constexpr std::string_view kScript = R"PY(
import bisect
limits = report["limits"]
tenants = sorted(limits)
fig, axes = plt.subplots(1, len(tenants) + 1, figsize=(4.6 * (len(tenants) + 1), 4.2))
for ax, tenant in zip(axes, tenants):
    lim = limits[tenant]
    w = lim["window_s"] * 1000.0
    pts = report["series"].get(tenant, [])
    ts = [p[0] for p in pts]
    cs = [p[1] for p in pts]
    # cost admitted in the window (t - W, t] at every admission
    xs, ys = [], []
    for i, t in enumerate(ts):
        lo = bisect.bisect_right(ts, t - w)
        xs.append(t / 1000.0)
        ys.append(sum(cs[lo:i + 1]))
    ax.step(xs, ys, where="post", color="#1f77b4", label="admitted in the last %g s" % lim["window_s"])
    ax.axhline(lim["amount"], color="#d62728", ls="--", label="limit " + lim["limit"])
    ax.set_title("tenant %s: %s" % (tenant, lim["limit"]))
    ax.set_xlabel("admission (submit of the OK attempt), s")
    ax.set_ylabel(lim["unit"] + " in the sliding window")
    ax.set_ylim(0, lim["amount"] * 1.3)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
ax = axes[-1]
for tenant, color in zip(tenants, ["#1f77b4", "#ff7f0e", "#2ca02c"]):
    j = report["retry"][tenant]["wait_minus_retry_after_ms"]
    cap = report["retry"][tenant]["jitter_cap_ms"]
    qs = [j["min"], j["p10"], j["p50"], j["p90"], j["max"]]
    ax.plot([q / cap for q in qs], [0, 10, 50, 90, 100], "o-", color=color,
            label="%s (cap %g ms, %d waits)" % (tenant, cap, report["retry"][tenant]["sleeps"]))
ax.plot([0, 1], [0, 100], ":", color="gray", label="uniform")
ax.set_xlabel("(wait - retry_after) / jitter cap")
ax.set_ylabel("percentile")
ax.set_title("retry waits beyond retry_after")
ax.grid(True, alpha=0.3)
ax.legend(loc="upper left", fontsize=8)
fig.suptitle("rate-limit: admitted cost never above the limit in any window; jittered retries", fontsize=12)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
)PY";
  return plotWithPython(kScript, report, path);
}

std::uint64_t tokensServedUntil(const std::vector<RequestRecord>& records, TimeNs until) {
  std::uint64_t tokens = 0;
  for (const RequestRecord& r : records) {
    if (r.status == Status::kOk && r.completion >= 0 && r.completion <= until) tokens += r.tokens;
  }
  return tokens;
}

TimeNs firstDrained(const TenantRecords& records) {
  TimeNs first = kNever;
  for (const auto& [name, r] : records) {
    TimeNs last = 0;
    for (const RequestRecord& x : r) last = std::max(last, x.completion);
    first = std::min(first, last);
  }
  return first == kNever ? 0 : first;
}

nlohmann::json propertyJson(const std::string& scenario, const nlohmann::json& runs,
                            const std::vector<PropertyCheck>& checks) {
  nlohmann::json c = nlohmann::json::array();
  for (const PropertyCheck& k : checks) {
    c.push_back({{"name", k.name}, {"target", k.target}, {"value", k.value}, {"pass", k.pass}});
  }
  return {{"scenario", scenario}, {"runs", runs}, {"checks", c}};
}

std::string propertyTable(const nlohmann::json& report, const std::string& title) {
  std::ostringstream t;
  char line[320];
  t << title << "\n\n";
  std::snprintf(line, sizeof line, "%-6s %-12s %-8s %-6s %6s %9s %9s %8s %6s %9s %9s %13s\n",
                "policy", "run", "tenant", "tier", "weight", "submitted", "completed", "rejected",
                "lost", "p50_ms", "p99_ms", "tokens_served");
  t << line;
  for (const auto& r : report["runs"]) {
    for (const auto& [name, v] : r["tenants"].items()) {
      std::snprintf(line, sizeof line,
                    "%-6s %-12s %-8s %-6s %6.2f %9llu %9llu %8llu %6llu %9.2f %9.2f %13llu\n",
                    r["policy"].get<std::string>().c_str(), r["label"].get<std::string>().c_str(),
                    name.c_str(), v["tier"].get<std::string>().c_str(), v["weight"].get<double>(),
                    v["submitted"].get<unsigned long long>(),
                    v["completed"].get<unsigned long long>(),
                    v["rejected"].get<unsigned long long>(), v["lost"].get<unsigned long long>(),
                    v["p50_ms"].get<double>(), v["p99_ms"].get<double>(),
                    v["tokens_served"].get<unsigned long long>());
      t << line;
    }
  }
  t << "\n";
  for (const auto& c : report["checks"]) {
    std::snprintf(line, sizeof line, "%-4s %s: %.4g (target %s)\n",
                  c["pass"].get<bool>() ? "PASS" : "MISS", c["name"].get<std::string>().c_str(),
                  c["value"].get<double>(), c["target"].get<std::string>().c_str());
    t << line;
  }
  return t.str();
}

ScenarioReport propertyReport(const std::string& scenario, const nlohmann::json& runs,
                              const std::vector<PropertyCheck>& checks, const std::string& title,
                              const nlohmann::json& extra) {
  ScenarioReport report;
  report.json = propertyJson(scenario, runs, checks);
  for (const auto& [key, value] : extra.items()) report.json[key] = value;
  report.table = propertyTable(report.json, title);
  return report;
}

std::string paidTierToml() {
  return R"(
default_tier = "paid"
[[tiers]]
name = "paid"
min_share = 0.0
default_weight = 1.0
default_queue_limit = 20000

)";
}

std::string chatEndpointToml(const char* cost, std::uint32_t max_batch_tokens,
                             std::uint32_t max_output_tokens) {
  return std::string("[endpoints.chat]\nkind = \"streaming\"\ncost = \"") + cost +
         "\"\nmax_batch_requests = 32\nmax_batch_tokens = " + std::to_string(max_batch_tokens) +
         "\nmax_wait_us = 2000\nmax_output_tokens = " + std::to_string(max_output_tokens) +
         "\nlatency_target_ms = 0\nexecutor = \"cpu\"\n"
         "[endpoints.chat.cpu]\nper_batch_us = 200.0\nper_token_us = 0.5\nthreads = 1\n";
}

}  // namespace fairsched::bench
