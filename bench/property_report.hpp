// What the property scenarios (weighted, tiers, token-cost) report: runs of
// per-tenant summaries in the JSON shape of docs/benchmarks.md, the checks they
// make (target, value, PASS or MISS) and the table people read.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/noisy_neighbor_report.hpp"
#include "bench/process_run.hpp"
#include "bench/scenario.hpp"

namespace fairsched::bench {

struct TenantInfo {
  std::string tier;
  double weight = 1.0;
};

struct PropertyCheck {
  std::string name;    // e.g. "share of W4"
  std::string target;  // e.g. "57.14% +- 2% of it"
  double value = 0;
  std::string unit;  // printed after value
  bool pass = false;
};

// submitted, completed, rejected, lost, p50_ms, p99_ms, max_ms,
// tokens_served, tier, weight of one tenant's records.
nlohmann::json tenantSummary(const std::vector<RequestRecord>& records, const TenantInfo& info);

// {"policy":..,"label":..,"tenants":{..}} for one run.
nlohmann::json runJson(Policy policy, const std::string& label, const TenantRecords& records,
                       const std::map<std::string, TenantInfo>& info);

// Per tenant, [[completion_ms, cumulative tokens served], ...] (at most ~400
// points), for the plots; runJson puts it in each run as "series".
nlohmann::json servedSeries(const TenantRecords& records);

// weighted, tiers, token-cost: cumulative tokens served per tenant over time,
// one panel per run, the checks underneath.
std::optional<std::string> plotPropertyRuns(const nlohmann::json& report, const std::string& path);
// rate-limit: admitted cost in the sliding window vs the limit per tenant, and
// the retry waits beyond retry_after.
std::optional<std::string> plotRateLimit(const nlohmann::json& report, const std::string& path);

// Tokens served by requests of `records` completed OK at or before `until`.
std::uint64_t tokensServedUntil(const std::vector<RequestRecord>& records, TimeNs until);

// The earliest moment one of the tenants completed its last request: until
// then every tenant that submitted everything at the start was backlogged.
TimeNs firstDrained(const TenantRecords& records);

// {"scenario":name,"runs":runs,"checks":[{name,target,value,pass}]}
nlohmann::json propertyJson(const std::string& scenario, const nlohmann::json& runs,
                            const std::vector<PropertyCheck>& checks);

// Title, one row per run and tenant, then one PASS/MISS line per check.
std::string propertyTable(const nlohmann::json& report, const std::string& title);

// The report of a property scenario: propertyJson with the fields of
// `extra` added, and its propertyTable under `title`.
ScenarioReport propertyReport(const std::string& scenario, const nlohmann::json& runs,
                              const std::vector<PropertyCheck>& checks, const std::string& title,
                              const nlohmann::json& extra = nlohmann::json::object());

}  // namespace fairsched::bench
