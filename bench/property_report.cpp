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
          {"tenants", tenants}};
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

std::string chatEndpointToml(const char* cost, std::uint32_t max_batch_tokens,
                             std::uint32_t max_output_tokens) {
  return std::string("[endpoints.chat]\nkind = \"streaming\"\ncost = \"") + cost +
         "\"\nmax_batch_requests = 32\nmax_batch_tokens = " + std::to_string(max_batch_tokens) +
         "\nmax_wait_us = 2000\nmax_output_tokens = " + std::to_string(max_output_tokens) +
         "\nlatency_target_ms = 0\nexecutor = \"cpu\"\n"
         "[endpoints.chat.cpu]\nper_batch_us = 200.0\nper_token_us = 0.5\nthreads = 1\n";
}

}  // namespace fairsched::bench
