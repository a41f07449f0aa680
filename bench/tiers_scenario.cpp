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

constexpr std::uint32_t kInput = 256;
constexpr std::uint32_t kOutput = 128;
constexpr int kPaidSteady = 3000;      // P's requests, one every kPaidGap
constexpr TimeNs kPaidGap = kNsPerMs;  // ~40% of the executor (see the config)
constexpr int kTrialBacklog = 20000;   // T: all at once
constexpr int kPaidBacklog = 15000;    // P in the min_share run: all at once
constexpr double kMinShare = 0.2;
constexpr double kP99Factor = 1.5;
constexpr std::uint32_t kBatchTokens = 4096;  // the endpoint's max_batch_tokens

std::string configText() {
  return std::string(R"(
default_tier = "trial"
[[tiers]]
name = "paid"
min_share = 0.0
default_weight = 1.0
default_queue_limit = 20000
[[tiers]]
name = "trial"
min_share = 0.2
default_weight = 1.0
default_queue_limit = 20000
# A paid request never waits behind more than 3 trial requests (1152 tokens,
# ~0.8 ms of modelled service) of a running batch.
max_batch_tokens = 1152

)") + chatEndpointToml("tokens", kBatchTokens, 4096) +
         R"(
[tenants.P]
tier = "paid"
[tenants.T]
tier = "trial"
)";
}

std::vector<PlannedRequest> steady(int n, TimeNs gap) {
  std::vector<PlannedRequest> out;
  for (int i = 0; i < n; ++i) out.push_back({gap * i, kInput, kOutput});
  return out;
}

}  // namespace

ScenarioResult runTiers(const ScenarioOptions& options) {
  TempDir tmp("fairsched-tiers");
  if (tmp.path().empty()) return ScenarioError{"mkdtemp failed"};
  auto parsed = config::parseConfig(configText(), "<tiers>");
  if (auto* err = parsed.errorOrNull()) return ScenarioError{err->toString()};
  config::Config cfg = parsed.value();
  prepareBenchConfig(cfg, tmp.path());
  const int scale = options.quick ? 4 : 1;
  const std::map<std::string, TenantInfo> info = {{"P", {"paid", 1.0}}, {"T", {"trial", 1.0}}};
  const std::vector<PlannedRequest> paid_steady = steady(kPaidSteady / scale, kPaidGap);
  const std::vector<PlannedRequest> trial_backlog(kTrialBacklog / scale, {0, kInput, kOutput});
  const std::vector<PlannedRequest> paid_backlog(kPaidBacklog / scale, {0, kInput, kOutput});

  struct Plan {
    const char* label;
    std::vector<TenantPlan> tenants;
  };
  const std::vector<Plan> plans = {
      {"overload", {{"P", "chat", paid_steady}, {"T", "chat", trial_backlog}}},
      {"paid-alone", {{"P", "chat", paid_steady}}},
      {"both-backlog", {{"P", "chat", paid_backlog}, {"T", "chat", trial_backlog}}}};
  nlohmann::json runs = nlohmann::json::array();
  std::vector<TenantRecords> results;
  for (const Plan& p : plans) {
    auto run = runProcesses(cfg, p.tenants, tmp.path(), 60s);
    if (auto* err = std::get_if<std::string>(&run)) return ScenarioError{*err};
    results.push_back(std::move(std::get<TenantRecords>(run)));
    runs.push_back(runJson(Policy::kFair, p.label, results.back(), info));
  }
  std::vector<PropertyCheck> checks;
  const double p99_over = runs[0]["tenants"]["P"]["p99_ms"].get<double>();
  const double p99_alone = runs[1]["tenants"]["P"]["p99_ms"].get<double>();
  const double ratio = p99_alone > 0 ? p99_over / p99_alone : 0.0;
  checks.push_back(
      {"paid p99 under overload / paid p99 alone", "<= 1.5x", ratio, "x", ratio <= kP99Factor});

  // While P sends its steady load, T is backlogged throughout: it should get
  // what P leaves.
  TimeNs paid_end = 0;
  for (const RequestRecord& r : results[0].at("P")) paid_end = std::max(paid_end, r.completion);
  const std::uint64_t p_tokens = tokensServedUntil(results[0].at("P"), paid_end);
  const std::uint64_t t_tokens = tokensServedUntil(results[0].at("T"), paid_end);
  const double t_left =
      p_tokens + t_tokens ? static_cast<double>(t_tokens) / static_cast<double>(p_tokens + t_tokens)
                          : 0.0;
  checks.push_back({"trial share of tokens (%) while paid sends its steady load",
                    "> 0: served with what is left", 100 * t_left, "%", t_tokens > 0});

  const TimeNs until = firstDrained(results[2]) * 9 / 10;
  const std::uint64_t pb = tokensServedUntil(results[2].at("P"), until);
  const std::uint64_t tb = tokensServedUntil(results[2].at("T"), until);
  const double t_share = pb + tb ? static_cast<double>(tb) / static_cast<double>(pb + tb) : 0.0;
  // The window ends at a completion time, which can cut one batch in two:
  // allow that batch's tokens (0.03% of the window's) as slack.
  const double slack =
      pb + tb ? static_cast<double>(kBatchTokens) / static_cast<double>(pb + tb) : 0.0;
  char target[96];
  std::snprintf(target, sizeof target, ">= %.0f%% (min_share %.2f, less one batch at the edge)",
                100 * kMinShare, kMinShare);
  checks.push_back({"trial share of tokens (%) with both tiers backlogged", target, 100 * t_share,
                    "%", t_share >= kMinShare - slack});

  char title[400];
  std::snprintf(title, sizeof title,
                "tiers: a real fairschedd and client processes; tier paid (P) above tier trial "
                "(T, min_share %.2f); requests of %u+%u tokens.\n"
                "overload: P sends %zu requests 1 ms apart while T submits %zu at once; "
                "paid-alone: P's load only;\n"
                "both-backlog: P submits %zu and T %zu at once (shares over the first 90%% of the "
                "time until one drained).",
                kMinShare, kInput, kOutput, paid_steady.size(), trial_backlog.size(),
                paid_backlog.size(), trial_backlog.size());
  return propertyReport("tiers", runs, checks, title);
}

}  // namespace fairsched::bench
