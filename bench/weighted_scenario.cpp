#include <chrono>
#include <cmath>
#include <variant>

#include "bench/process_run.hpp"
#include "bench/property_report.hpp"
#include "bench/property_scenarios.hpp"

namespace fairsched::bench {
namespace {

using namespace std::chrono_literals;

constexpr int kPerTenant = 6000;
constexpr int kQuickPerTenant = 1500;
constexpr std::uint32_t kInput = 256;
constexpr std::uint32_t kOutput = 128;
constexpr double kTolerance = 0.02;  // relative to the weight share

std::string configText() {
  return paidTierToml() + chatEndpointToml("tokens", 4096, 4096) +
         R"(
[tenants.W1]
tier = "paid"
weight = 1.0
[tenants.W2]
tier = "paid"
weight = 2.0
[tenants.W4]
tier = "paid"
weight = 4.0
)";
}

}  // namespace

ScenarioResult runWeighted(const ScenarioOptions& options) {
  TempDir tmp("fairsched-weighted");
  if (tmp.path().empty()) return ScenarioError{"mkdtemp failed"};
  auto parsed = config::parseConfig(configText(), "<weighted>");
  if (auto* err = parsed.errorOrNull()) return ScenarioError{err->toString()};
  config::Config cfg = parsed.value();
  prepareBenchConfig(cfg, tmp.path());

  const int n = options.quick ? kQuickPerTenant : kPerTenant;
  const std::map<std::string, TenantInfo> info = {
      {"W1", {"paid", 1.0}}, {"W2", {"paid", 2.0}}, {"W4", {"paid", 4.0}}};
  std::vector<TenantPlan> plans;
  for (const auto& [name, i] : info) {
    plans.push_back({name, "chat", std::vector<PlannedRequest>(n, {0, kInput, kOutput})});
  }
  auto run = runProcesses(cfg, plans, tmp.path(), 60s);
  if (auto* err = std::get_if<std::string>(&run)) return ScenarioError{*err};
  const TenantRecords& records = std::get<TenantRecords>(run);

  // Every tenant is backlogged until the first one drains; shares are
  // measured over the first 90% of that time.
  const TimeNs until = firstDrained(records) * 9 / 10;
  std::uint64_t total = 0;
  std::map<std::string, std::uint64_t> served;
  for (const auto& [name, r] : records) total += served[name] = tokensServedUntil(r, until);
  std::vector<PropertyCheck> checks;
  for (const auto& [name, i] : info) {
    const double target = i.weight / 7.0;
    const double share = total ? static_cast<double>(served[name]) / total : 0.0;
    char t[96];
    std::snprintf(t, sizeof t, "%.2f%% +- %.2f%%", 100 * target, 100 * target * kTolerance);
    checks.push_back({"share of tokens of " + name + " (%) while all backlogged", t, 100 * share,
                      "%", std::abs(share - target) <= target * kTolerance});
  }
  nlohmann::json runs =
      nlohmann::json::array({runJson(Policy::kFair, "backlogged", records, info)});
  char title[256];
  std::snprintf(title, sizeof title,
                "weighted: a real fairschedd and 3 client processes; W1, W2, W4 (weights 1:2:4) "
                "each submit %d requests of %u+%u tokens at once.\n"
                "Shares are of tokens completed in the first %.0f ms (90%% of the time until the "
                "first tenant drained).",
                n, kInput, kOutput, static_cast<double>(until) / kNsPerMs);
  return propertyReport("weighted", runs, checks, title,
                        {{"measured_until_ms", static_cast<double>(until) / kNsPerMs}});
}

}  // namespace fairsched::bench
