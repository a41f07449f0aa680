#include "bench/sim_noisy_neighbor.hpp"

#include "bench/noisy_neighbor_report.hpp"

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
  if (auto* err = parsed.errorOrNull()) return err->toString();
  const config::Config& cfg = parsed.value();
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
  s.executors = executorModels(cfg);
  for (std::size_t e = 0; e < cfg.endpoints.size(); ++e) {
    if (&cfg.endpoints[e] == chat) s.endpoint = static_cast<EndpointId>(e);
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

}  // namespace

ScenarioResult runSimNoisyNeighbor(const ScenarioOptions& options) {
  auto loaded = loadSetup(options);
  if (auto* err = std::get_if<std::string>(&loaded)) return ScenarioError{*err};
  Setup& setup = std::get<Setup>(loaded);
  const core::TenantSpec* a_spec = nullptr;
  for (const auto& t : setup.spec.tenants) {
    if (t.name == "A") a_spec = &t;
  }
  const std::string tier = setup.spec.tiers[a_spec->tier].name;
  const double weight = a_spec->weight;

  auto runs = runNoisyPlans([&](Policy policy, const char* label, bool burst) -> NoisyRunResult {
    setup.spec.policy = policy;
    const auto arrivals = makeArrivals(setup, options.seed, burst);
    const auto outcomes = simulate(setup.spec, setup.executors, arrivals);
    NoisyRun run{policy, label, {}};
    for (std::size_t i = 0; i < arrivals.size(); ++i) {
      const SimOutcome& o = outcomes[i];
      RequestRecord r;
      r.arrival = o.arrival;
      r.completion = o.completion >= o.arrival ? o.completion : -1;
      r.status = o.status;
      r.tokens = arrivals[i].input_tokens + arrivals[i].output_tokens;
      run.tenants[arrivals[i].tenant].push_back(r);
    }
    return run;
  });
  return noisyNeighborReport(
      std::get<std::vector<NoisyRun>>(runs), "virtual-time", tier, weight,
      "noisy-neighbor (virtual time, real scheduling core, executor modelled from the config)\n");
}

}  // namespace fairsched::bench
