#include <chrono>
#include <cstdio>
#include <string>
#include <variant>

#include "bench/process_run.hpp"
#include "bench/property_report.hpp"
#include "bench/property_scenarios.hpp"

namespace fairsched::bench {
namespace {

using namespace std::chrono_literals;

// A: requests of kLargeInput + kLargeOutput = 32,000 tokens. The prompt stays
// within one shared-memory slot (8,192 tokens per slot, shm/layout.hpp); the
// rest of the 32k is output, which the tokens cost model charges up front.
constexpr int kLarge = 40;
constexpr std::uint32_t kLargeInput = 8000;
constexpr std::uint32_t kLargeOutput = 24000;
constexpr int kSmall = 6000;  // B: requests of kSmallInput + kSmallOutput tokens
constexpr std::uint32_t kSmallInput = 192;
constexpr std::uint32_t kSmallOutput = 64;
constexpr double kTargetShare = 0.45;

// `cost`: "tokens" or "requests". max_batch_tokens admits one 32k request
// (input + output) with room for small ones beside it.
std::string configText(const char* cost) {
  return paidTierToml() + chatEndpointToml(cost, 36864, 32768) +
         R"(
[tenants.A]
tier = "paid"
[tenants.B]
tier = "paid"
)";
}

}  // namespace

ScenarioResult runTokenCost(const ScenarioOptions& options) {
  TempDir tmp("fairsched-token-cost");
  if (tmp.path().empty()) return ScenarioError{"mkdtemp failed"};
  const int large = options.quick ? kLarge / 4 : kLarge;
  const int small = options.quick ? kSmall / 4 : kSmall;
  const std::map<std::string, TenantInfo> info = {{"A", {"paid", 1.0}}, {"B", {"paid", 1.0}}};
  const std::vector<TenantPlan> plans = {
      {"A", "chat", std::vector<PlannedRequest>(large, {0, kLargeInput, kLargeOutput})},
      {"B", "chat", std::vector<PlannedRequest>(small, {0, kSmallInput, kSmallOutput})}};

  nlohmann::json runs = nlohmann::json::array();
  std::vector<PropertyCheck> checks;
  for (const char* cost : {"tokens", "requests"}) {
    auto parsed = config::parseConfig(configText(cost), "<token-cost>");
    if (auto* err = parsed.errorOrNull()) return ScenarioError{err->toString()};
    config::Config cfg = parsed.value();
    prepareBenchConfig(cfg, tmp.path());
    auto run = runProcesses(cfg, plans, tmp.path(), 60s);
    if (auto* err = std::get_if<std::string>(&run)) return ScenarioError{*err};
    const TenantRecords& records = std::get<TenantRecords>(run);
    const TimeNs until = firstDrained(records) * 9 / 10;
    const std::uint64_t a = tokensServedUntil(records.at("A"), until);
    const std::uint64_t b = tokensServedUntil(records.at("B"), until);
    const double share = a + b ? static_cast<double>(b) / static_cast<double>(a + b) : 0.0;
    nlohmann::json r = runJson(Policy::kFair, std::string(cost) + "-budget", records, info);
    r["measured_until_ms"] = static_cast<double>(until) / kNsPerMs;
    r["b_token_share"] = share;
    runs.push_back(r);
    if (std::string(cost) == "tokens") {
      checks.push_back({"B's share of tokens (%) under token budgets, both backlogged", ">= 45%",
                        100 * share, "%", share >= kTargetShare});
    } else {
      checks.push_back({"B's share of tokens (%) under request budgets (contrast)",
                        "none: shows what token budgets prevent", 100 * share, "%", true});
    }
  }
  char title[320];
  std::snprintf(title, sizeof title,
                "token-cost: a real fairschedd and 2 client processes, same tier and weight.\n"
                "A submits %d requests of %u+%u tokens, B %d of %u+%u, all at once; once with "
                "cost = \"tokens\", once with cost = \"requests\".\n"
                "Shares are of tokens completed in the first 90%% of the time until one tenant "
                "drained.",
                large, kLargeInput, kLargeOutput, small, kSmallInput, kSmallOutput);
  return propertyReport("token-cost", runs, checks, title);
}

}  // namespace fairsched::bench
