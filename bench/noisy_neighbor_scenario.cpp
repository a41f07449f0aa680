#include "bench/noisy_neighbor_scenario.hpp"

#include <chrono>
#include <random>
#include <variant>

#include "bench/noisy_neighbor_report.hpp"
#include "bench/process_run.hpp"
#include "daemon/config/config.hpp"
#include "daemon/config/embedded_config.hpp"

namespace fairsched::bench {
namespace {

using namespace std::chrono_literals;

constexpr int kBurst = 10'000;
constexpr int kLight = 5;
constexpr auto kRunTimeout = 60s;

struct Setup {
  config::Config cfg;
  std::string endpoint;
  std::vector<PlannedRequest> burst;  // A
  std::vector<PlannedRequest> light;  // B
};

std::variant<Setup, std::string> makeSetup(const ScenarioOptions& options, const std::string& dir) {
  auto parsed =
      options.config_path.empty()
          ? config::parseConfig(config::kEmbeddedDefaultConfig, "<embedded config/fairsched.toml>")
          : config::loadConfigFile(options.config_path);
  if (auto* err = parsed.errorOrNull()) return err->toString();
  Setup s;
  s.cfg = parsed.value();
  const config::TenantConfig* a = s.cfg.findTenant("A");
  const config::TenantConfig* b = s.cfg.findTenant("B");
  if (!a || !b) return std::string("the config must list tenants A and B");
  if (a->tier != b->tier) return std::string("tenants A and B must share a tier");
  prepareBenchConfig(s.cfg, dir);
  const config::EndpointConfig* ep = s.cfg.findEndpoint("chat");
  if (!ep) ep = &s.cfg.endpoints.front();
  s.endpoint = ep->name;

  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<std::uint32_t> input(64, 512), output(16, 256);
  auto request = [&](TimeNs offset) {
    PlannedRequest r;
    r.offset = offset;
    r.input_tokens = std::min(input(rng), ep->max_batch_tokens / 2);
    r.max_output_tokens = std::min(output(rng), ep->max_output_tokens);
    return r;
  };
  for (int i = 0; i < kBurst; ++i) s.burst.push_back(request(0));
  // B's requests spread over the time the burst takes to drain.
  const double burst_us =
      kBurst *
      (ep->cpu.per_token_us * (288 + 136) + ep->cpu.per_batch_us / ep->max_batch_requests) /
      std::max<std::uint32_t>(1, ep->cpu.threads);
  const TimeNs spacing = static_cast<TimeNs>(burst_us * kNsPerUs / (kLight + 1));
  for (int i = 1; i <= kLight; ++i) s.light.push_back(request(spacing * i));
  return s;
}

std::variant<NoisyRun, std::string> runOnce(Setup& setup, Policy policy, const char* label,
                                            bool burst, const std::string& dir) {
  setup.cfg.daemon.policy = policy;
  std::vector<TenantPlan> plans;
  if (burst) plans.push_back({"A", setup.endpoint, setup.burst});
  plans.push_back({"B", setup.endpoint, setup.light});
  auto records = runProcesses(setup.cfg, plans, dir, kRunTimeout);
  if (auto* err = std::get_if<std::string>(&records)) return *err;
  return NoisyRun{policy, label, std::move(std::get<TenantRecords>(records))};
}

}  // namespace

ScenarioResult runNoisyNeighbor(const ScenarioOptions& options) {
  TempDir tmp("fairsched-noisy");
  if (tmp.path().empty()) return ScenarioError{"mkdtemp failed"};
  const std::string& dir = tmp.path();
  auto made = makeSetup(options, dir);
  if (auto* err = std::get_if<std::string>(&made)) return ScenarioError{*err};
  Setup& setup = std::get<Setup>(made);
  const config::TenantConfig* a = setup.cfg.findTenant("A");
  const config::TierConfig* tier = setup.cfg.findTier(a->tier);
  const double weight = a->weight.value_or(tier->default_weight);

  auto runs = runNoisyPlans([&](Policy policy, const char* label, bool burst) {
    return runOnce(setup, policy, label, burst, dir);
  });
  if (auto* err = std::get_if<std::string>(&runs)) return ScenarioError{*err};
  const config::EndpointConfig* ep = setup.cfg.findEndpoint(setup.endpoint);
  const bool workers = ep != nullptr && ep->executor == config::ExecutorKind::kWorker;
  return noisyNeighborReport(
      std::get<std::vector<NoisyRun>>(runs), "processes", tier->name, weight,
      std::string("noisy-neighbor: a real fairschedd and client processes through libfairsched ") +
          (workers ? "(executor: a reference worker, continuous batching from the config's "
                     "engine model; tokens streamed)\n"
                   : "(executor: the config's cpu model)\n"));
}

}  // namespace fairsched::bench
