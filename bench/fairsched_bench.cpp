// fairsched-bench SCENARIO [--json FILE] [--plot FILE.png] [--config FILE]
//                          [--socket PATH] [--seed N] [--rounds N] [--quick]
//                          [--trace FILE.jsonl] [--policy P[,P..]|all] [--runs N] [--jitter-ms J]
//                          [--events FILE]
//                          [--cost EXPR]
// Parses arguments, looks the scenario up in the registry, runs it, prints its
// table and writes its JSON and plot. Exit status: 0 ok, 1 the scenario or an
// output failed, 2 usage (unknown scenario included).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>

#include "bench/core_scenario.hpp"
#include "bench/fleet_scenario.hpp"
#include "bench/noisy_neighbor_report.hpp"
#include "bench/noisy_neighbor_scenario.hpp"
#include "bench/property_report.hpp"
#include "bench/property_scenarios.hpp"
#include "bench/replay_scenario.hpp"
#include "bench/roundtrip_scenario.hpp"
#include "bench/scale_scenario.hpp"
#include "bench/scenario.hpp"
#include "bench/sim_noisy_neighbor.hpp"
#include "bench/stream_scenario.hpp"
#include "tests/support/seeded_rng.hpp"

namespace {

using fairsched::bench::ScenarioInfo;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Every scenario of docs/benchmarks.md, in its order; those not built yet have no
// run function and are refused with the list of the ones that are. A new
// scenario fills in its entry (or adds one) with its run and plot functions.
constexpr ScenarioInfo kScenarios[] = {
    {"noisy-neighbor", "a burst tenant against a light one, fifo vs fair (daemon + clients)",
     fairsched::bench::runNoisyNeighbor, fairsched::bench::plotNoisyNeighbor},
    {"weighted", "shares follow weights 1:2:4 (daemon + clients)", fairsched::bench::runWeighted,
     fairsched::bench::plotPropertyRuns},
    {"tiers", "strict tiers and min_share floors (daemon + clients)", fairsched::bench::runTiers,
     fairsched::bench::plotPropertyRuns},
    {"token-cost", "token vs request budgets (daemon + clients)", fairsched::bench::runTokenCost,
     fairsched::bench::plotPropertyRuns},
    {"rate-limit", "limits hold in every window, retry jitter and budget (daemon + clients)",
     fairsched::bench::runRateLimit, fairsched::bench::plotRateLimit},
    {"roundtrip", "submit->completion latency through shared memory vs a unix socket",
     fairsched::bench::runRoundtripScenario, fairsched::bench::plotRoundtrip},
    {"stream", "tokens through the worker path: throughput, emit->receipt latency vs raw shm",
     fairsched::bench::runStreamScenario, nullptr},
    {"scale", "daemon CPU per request and round trip at 1-64 processes x 10-10,000 tenants",
     fairsched::bench::runScaleScenario, nullptr},
    {"core", "scheduling decisions/s of the core vs a single priority queue",
     fairsched::bench::runCoreScenario, fairsched::bench::plotCoreScenario},
    {"replay", "a JSONL trace through the real core in virtual time", fairsched::bench::runReplay,
     fairsched::bench::plotReplay},
    {"sim-noisy-neighbor", "noisy-neighbor on the real core in virtual time (modelled executor)",
     fairsched::bench::runSimNoisyNeighbor, fairsched::bench::plotNoisyNeighbor},
    {"fleet", "limiter admissions/s: host, fleet (Redis) and naive",
     fairsched::bench::runFleetScenario, nullptr},
    {"flood", "steady clients' latency while 8 clients flood with rejected submissions",
     fairsched::bench::runFlood, nullptr},
    {"connect", "daemon CPU per connection, and steady clients' latency in a storm of them",
     fairsched::bench::runConnect, nullptr},
    {"gateway", "fairsched-gateway against its upstream called directly (a native one)",
     fairsched::bench::runGatewayScenario, nullptr},
};

const ScenarioInfo* findScenario(std::string_view name) {
  for (const ScenarioInfo& s : kScenarios) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string availableList() {
  std::string out;
  for (const ScenarioInfo& s : kScenarios) {
    if (!s.run) continue;
    out += "  ";
    out += s.name;
    out += std::string(20 - std::min<std::size_t>(19, s.name.size()), ' ');
    out += s.summary;
    out += '\n';
  }
  return out;
}

// Writes `text` to `path` ("-": stdout). Returns false with a message on stderr.
bool writeOutput(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text << std::flush;
    return true;
  }
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) {
    std::cerr << "fairsched-bench: cannot write " << path << "\n";
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fairsched-bench: benchmarks and property scenarios for fairsched",
               "fairsched-bench"};
  std::string scenario_name;
  std::string json_path;
  std::string plot_path;
  fairsched::bench::ScenarioOptions options;
  app.add_option("scenario", scenario_name, "scenario to run")->required();
  app.add_option("--json", json_path, "write the JSON report to FILE ('-' for stdout)");
  app.add_option("--plot", plot_path, "draw the result into FILE.png");
  app.add_option("--config", options.config_path, "daemon config for scenarios that start one");
  app.add_option("--socket", options.socket_path, "use the daemon at PATH instead of starting one");
  // FAIRSCHED_SEED, the tests' seed variable, sets the default; --seed wins.
  if (const auto env = fairsched::testing::seedFromEnv()) options.seed = *env;
  app.add_option("--seed", options.seed,
                 "seed of every random choice (default: $FAIRSCHED_SEED or 1)")
      ->capture_default_str();
  app.add_option("--rounds", options.rounds, "repetitions (0: the scenario's default)")
      ->check(CLI::Range(0, 1000));
  app.add_flag("--quick", options.quick, "smaller sizes, for smoke tests");
  app.add_option("--trace", options.trace_path, "replay: the JSONL trace to replay");
  app.add_option("--policy", options.policy,
                 "replay: fair, drr, vtc, fifo, floor (with --replicas also fair+prefix, "
                 "fifo+prefix, router), a comma-separated list, or all (default: the config's "
                 "policy)");
  app.add_option("--runs", options.runs, "replay: jittered copies of the trace (medians, ranges)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--real", options.real,
               "replay: through a real fairschedd, reference workers and client processes, in "
               "real time (with --replicas: N workers with prefix caches, beside the model)");
  app.add_option("--service-window-s", options.service_window_s,
                 "replay: window of the windowed service difference (the VTC paper's 60 s)")
      ->check(CLI::Range(0.001, 1e6));
  app.add_option("--jitter-ms", options.jitter_ms, "replay: move each arrival by up to ±J ms")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--events", options.events_path, "replay: write one JSON line per request");
  app.add_option("--cost", options.cost,
                 "replay: cost of a request for the service difference, e.g. input+2*output");
  app.add_option("--replicas", options.replicas,
                 "replay: worker endpoints as N engines with prefix caches; N > 1 compares "
                 "fair, fair+prefix, vtc, fifo, fifo+prefix and router")
      ->check(CLI::Range(1, 1024));
  app.add_option("--cache-blocks", options.cache_blocks,
                 "replay --replicas: each engine's prefix cache in blocks (default: the trace's "
                 "shared blocks / replicas)");
  app.add_option("--load-slack", options.load_slack,
                 "replay --replicas: prefix routing's load bound, (1 + slack) x the mean")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--locality-slack", options.locality_slack,
                 "replay --replicas: fair+prefix's fairness slack for locality across tenants, "
                 "in cost units per unit of weight (the endpoint's locality_slack)")
      ->check(CLI::Range(0.0, 1e12));
  app.add_option("--topology", options.topology,
                 "fleet: the Redis to run against, started by the run (the single plain server "
                 "is measured beside it as the baseline)")
      ->check(CLI::IsMember({"single", "cluster", "sentinel"}));
  app.add_flag("--tls", options.tls,
               "fleet: the topology over TLS (certificates made for the run)");
  app.footer("scenarios:\n" + availableList());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  const ScenarioInfo* info = findScenario(scenario_name);
  if (!info || !info->run) {
    std::cerr << "fairsched-bench: "
              << (info ? "scenario '" + scenario_name + "' is not built yet"
                       : "unknown scenario '" + scenario_name + "'")
              << "; available:\n"
              << availableList();
    return kExitUsage;
  }
  if (!plot_path.empty() && !info->plot) {
    std::cerr << "fairsched-bench: scenario '" << scenario_name << "' has no plot\n";
    return kExitUsage;
  }

  const fairsched::bench::ScenarioResult result = info->run(options);
  if (const auto* err = std::get_if<fairsched::bench::ScenarioError>(&result)) {
    std::cerr << "fairsched-bench: " << scenario_name << ": " << err->message << "\n";
    return kExitFailed;
  }
  const auto& report = std::get<fairsched::bench::ScenarioReport>(result);
  // With the JSON on stdout the table goes to stderr, so stdout stays parseable.
  (json_path == "-" ? std::cerr : std::cout) << report.table << std::flush;

  int rc = kExitOk;
  if (!json_path.empty() && !writeOutput(json_path, report.json.dump(2) + "\n")) rc = kExitFailed;
  if (!plot_path.empty()) {
    if (auto err = info->plot(report.json, plot_path)) {
      std::cerr << "fairsched-bench: plot: " << *err << "\n";
      rc = kExitFailed;
    } else if (json_path != "-") {
      std::cout << "plot written to " << plot_path << "\n";
    }
  }
  return rc;
}
