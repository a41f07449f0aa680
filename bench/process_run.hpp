// One run of a real fairschedd (forked, tests/support/forked_daemon.hpp) with one
// client process per tenant (libfairsched). Each client follows its plan of
// requests from a common start instant and records what it saw; the records
// come back to the parent through a file per tenant. Used by every scenario
// that proves a property with real processes (noisy-neighbor, weighted,
// tiers, token-cost).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/noisy_neighbor_report.hpp"
#include "daemon/config/config.hpp"
#include "tests/support/temp_dir.hpp"

namespace fairsched::bench {

struct PlannedRequest {
  TimeNs offset = 0;  // after the run's start
  std::uint32_t input_tokens = 0;
  std::uint32_t max_output_tokens = 0;
};

struct TenantPlan {
  std::string tenant;
  std::string endpoint;
  std::vector<PlannedRequest> requests;
  bool stream = false;  // set by runProcesses for a worker endpoint: records first tokens
};

// A temporary directory removed with everything in it when this goes away.
using testing::TempDir;  // tests/support/temp_dir.hpp

// A daemon on `socket` serving one endpoint, "echo", on a CPU executor that
// does nothing (zero modelled time and no reference workload: what is
// measured is the daemon's own path), to this uid for any tenant; tier
// "bench" (the default), tenant "bench" listed with room for 100,000 queued.
// `daemon_extra`: more lines of [daemon]. Or why the text did not parse.
fairsched::Result<config::Config, std::string> echoDaemonConfig(
    const std::string& socket, const std::string& daemon_extra = "");

// Points the daemon's socket into `dir`, quiets its log and lets this uid
// submit for every tenant and endpoint and serve every worker endpoint.
void prepareBenchConfig(config::Config& cfg, const std::string& dir);

using TenantRecords = std::map<std::string, std::vector<RequestRecord>>;

// A client process that floods: it opens `tenants` tenants "PREFIX-k" and,
// from the common start for `duration`, submits one-token requests to them
// in turn as fast as it can, resubmitting at once on RING_FULL; then it
// collects every answer. What it counted comes back in FloodCounts.
struct FloodPlan {
  std::string prefix;
  std::string endpoint;
  int tenants = 1;
  std::chrono::milliseconds duration{0};
};
struct FloodCounts {
  std::uint64_t submitted = 0;  // accepted by submit()
  std::uint64_t ok = 0;
  std::uint64_t rejected = 0;   // RATE_LIMITED, QUEUE_FULL, OVERLOADED
  std::uint64_t other = 0;      // any other status
  std::uint64_t ring_full = 0;  // submit() calls that found the rings full
  std::uint64_t unanswered = 0;
};
// A process that storms the daemon with short-lived clients: from the
// common start for `duration` it forks a child every 1/`per_s` s (at most);
// each child connects, opens tenant "PREFIX-n", submits one request and
// waits, and is SIGKILLed at a random point 0-`max_life` after its fork —
// during its connect, its Hello, its tenant or its request, or after. What
// it counted comes back in StormCounts.
struct StormPlan {
  std::string prefix;
  std::string endpoint;
  int per_s = 150;
  std::chrono::milliseconds max_life{10};
  std::chrono::milliseconds duration{0};
};
struct StormCounts {
  std::uint64_t forked = 0;     // children started
  std::uint64_t connected = 0;  // children whose connect succeeded before they were killed
};

// `clients` steady clients "steady-0".. on `endpoint`, each sending
// `per_s` requests a second (4 prompt tokens, 4 output) for `duration`,
// evenly spread, client i a 1/clients of a period after client i - 1: the
// latency probe of the flood and connect scenarios.
std::vector<TenantPlan> steadyPlans(int clients, int per_s, std::chrono::milliseconds duration,
                                    const std::string& endpoint);
// The steady requests' outcomes: round trips of those that ended OK (ms,
// sorted), how many ended otherwise, how many never ended.
struct SteadyTally {
  std::vector<double> rtt_ms;
  std::uint64_t requests = 0, not_ok = 0, lost = 0;
};
SteadyTally tallySteady(const TenantRecords& records);

// CPU time of process `pid`, all its threads, in ns (/proc/PID/task/*/schedstat,
// or /proc/PID/stat in clock ticks where schedstat is missing).
std::optional<std::uint64_t> cpuTimeNs(pid_t pid);

// What runProcesses can hand back beyond the records.
struct RunExtras {
  std::uint32_t workers_per_endpoint = 1;  // in: reference workers per worker endpoint
  // in: the prompts of a tenant's requests, in its plan's order, where given
  // (otherwise, and for an empty one, input_tokens filler tokens).
  std::map<std::string, std::vector<std::vector<std::uint32_t>>> prompts;
  std::vector<FloodPlan> floods;     // in: flooding clients besides the plans
  std::vector<FloodCounts> flooded;  // out: one per flood plan
  std::vector<StormPlan> storms;     // in: connect-and-die storms besides the plans
  std::vector<StormCounts> stormed;  // out: one per storm plan
  nlohmann::json status;             // out: `fairschedctl status --json` at the end
  std::uint64_t daemon_cpu_ns = 0;   // out: the daemon's CPU time, start to end
  // out: what each reference worker's engine counted (reference::EngineStats),
  // in start order, endpoint by endpoint.
  struct Engine {
    std::string endpoint;
    std::uint64_t prompt_tokens = 0;  // of the prompts it took (again after a preemption)
    std::uint64_t cached_tokens = 0;  // of those, found in its prefix cache
    std::uint64_t preempted = 0;
  };
  std::vector<Engine> engines;
};

// Starts the daemon with `cfg` and, for each endpoint with executor =
// "worker", one reference worker (worker/reference_engine.hpp; extras:
// workers_per_endpoint) modelling its [endpoints.NAME.engine], its prefix
// cache included; forks one client per plan (streaming, with first
// tokens recorded, on worker endpoints), waits for all of them (each gives
// up `timeout` after the start) and stops the workers and the daemon.
// Records per tenant, in plan order; or why the run failed.
std::variant<TenantRecords, std::string> runProcesses(const config::Config& cfg,
                                                      const std::vector<TenantPlan>& plans,
                                                      const std::string& dir,
                                                      std::chrono::seconds timeout,
                                                      RunExtras* extras = nullptr);

}  // namespace fairsched::bench
