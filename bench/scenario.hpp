// What every fairsched-bench scenario shares: the options it is run with, the
// report it hands back (a JSON document for machines, a table for people) and
// its entry in the registry that fairsched_bench.cpp dispatches on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

namespace fairsched::bench {

struct ScenarioOptions {
  std::string config_path;  // --config; empty: the scenario's built-in setup
  std::string socket_path;  // --socket; empty: the scenario starts its own daemon
  std::uint64_t seed = 1;   // --seed; every random choice derives from it
  int rounds = 0;           // --rounds; 0: the scenario's default
  bool quick = false;       // --quick: smaller sizes, for smoke tests
  // replay only
  std::string trace_path;  // --trace FILE.jsonl
  std::string
      policy;    // --policy fair|drr|vtc|fifo|floor, a comma list, or all; empty: the config's
  int runs = 1;  // --runs N: jittered copies of the trace (several: a comparison)
  double jitter_ms = 0;            // --jitter-ms J: each arrival moved by up to ±J ms
  bool real = false;               // --real: through a forked daemon, reference workers and clients
  double service_window_s = 60;    // --service-window-s: of the windowed service difference
  std::string events_path;         // --events FILE: one JSON line per request
  std::string cost;                // --cost EXPR, e.g. "input+2*output"; empty: input+output
  std::uint32_t replicas = 1;      // --replicas N: worker endpoints as N engines with prefix caches
  std::uint64_t cache_blocks = 0;  // --cache-blocks: each engine's; 0: shared blocks / replicas
  double load_slack = 0.25;        // --load-slack: the affinity bound's slack
  double locality_slack = 4096;    // --locality-slack: fair+prefix's slack across tenants
  // fleet only
  std::string topology = "single";  // --topology single|cluster|sentinel
  bool tls = false;                 // --tls: the topology over TLS
};

struct ScenarioReport {
  nlohmann::json json;  // exactly the shape docs/benchmarks.md gives for the scenario
  std::string table;    // human-readable summary, printed as is
};

struct ScenarioError {
  std::string message;  // printed after "fairsched-bench: <scenario>: "
};

using ScenarioResult = std::variant<ScenarioReport, ScenarioError>;
using ScenarioFn = ScenarioResult (*)(const ScenarioOptions&);
// Draws `report` into a PNG at `path`; nullopt on success, else why not.
using PlotFn = std::optional<std::string> (*)(const nlohmann::json& report,
                                              const std::string& path);

struct ScenarioInfo {
  std::string_view name;
  std::string_view summary;
  ScenarioFn run = nullptr;  // null: named in docs/benchmarks.md but not built yet
  PlotFn plot = nullptr;     // null: the scenario has no plot
};

// Runs /usr/bin/python3 (or $FAIRSCHED_PYTHON) on `script` with two
// arguments: a file holding `data` as JSON, and `png_path`. The script
// starts with json, sys, matplotlib (Agg) and matplotlib.pyplot as plt
// imported, and `report` loaded from the file. nullopt on
// success, else the reason (python or matplotlib missing, script failed).
std::optional<std::string> plotWithPython(std::string_view script, const nlohmann::json& data,
                                          const std::string& png_path);

}  // namespace fairsched::bench
