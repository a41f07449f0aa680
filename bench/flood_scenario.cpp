// `flood`: does a flood of submissions become another tenant's latency?
//
// A real fairschedd serves `chat` on the CPU executor (2 ms per batch of up to
// 16, one thread). Four steady client processes (tier paid, unlimited) send
// 250 requests/s each on a fixed schedule. In the flood runs, eight more
// client processes open four trial tenants each (60 requests/minute) and
// submit to chat in a tight loop for the same time, resubmitting at once on
// RING_FULL: all but 60 per tenant are rejected RATE_LIMITED.
//
// Runs, all in this one invocation: baseline (steady clients alone), flood
// (the daemon's defaults: [daemon] max_rejections_per_s = 5000 per
// connection), and — not with --quick — flood with the budget off
// (max_rejections_per_s = 0), the daemon as it was. Reported per run: the
// steady requests' round trip (p50, p99, max), how many were not OK or lost,
// the flood's submissions, rejections and RING_FULLs, the daemon's batches,
// the executor's busy fraction while work was due for it (the daemon's own
// measure: time serving batches over that plus time a slot sat free while a
// batch was due; daemon/server/slot_idle_meter.hpp) and how often a
// flooder's lanes were left unread (reject_throttled).
//
// Targets: steady p99 under the flood <= 3x its baseline p99, the executor
// busy >= 80% of the time work was due for it, nothing lost.
//
// JSON: {"scenario":"flood","flooders":8,"baseline":{..},"flood":{..},
//        "flood_unbounded":{..}|null,"steady_p99_ratio":..,"lost":..,"target":{..}}
// where each run is {"steady_p50_ms","steady_p99_ms","steady_max_ms","steady_requests",
// "steady_not_ok","executor_busy","executor_busy_s","executor_starved_s","batches","flood_submitted","flood_rejected",
// "flood_ring_full","reject_throttled","seconds"}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "bench/process_run.hpp"
#include "bench/scenario.hpp"
#include "bench/stats.hpp"

namespace fairsched::bench {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr int kSteady = 4;
constexpr int kSteadyPerS = 250;
constexpr int kFlooders = 8;
constexpr int kFloodTenants = 4;
constexpr double kPerBatchUs = 2000.0;
constexpr double kTargetRatio = 3.0;
constexpr double kTargetBusy = 0.8;
// [daemon] max_rejections_per_s, the default (daemon/config/config.hpp).
const std::uint64_t kDefaultBudget = config::DaemonConfig().max_rejections_per_s;

std::string configText(std::uint64_t max_rejections_per_s) {
  std::string t = "default_tier = \"trial\"\n[daemon]\nmax_rejections_per_s = " +
                  std::to_string(max_rejections_per_s) + "\n";
  t += "[[tiers]]\nname = \"paid\"\ndefault_queue_limit = 20000\n";
  t += "[[tiers]]\nname = \"trial\"\n[tiers.limits]\nchat = [\"60 requests/minute\"]\n";
  t += "[endpoints.chat]\nmax_batch_requests = 16\nmax_batch_tokens = 8192\nmax_wait_us = 1000\n"
       "max_output_tokens = 16\nexecutor = \"cpu\"\n[endpoints.chat.cpu]\nper_batch_us = " +
       std::to_string(kPerBatchUs) + "\nper_token_us = 0.0\nthreads = 1\nworkload = false\n";
  for (int i = 0; i < kSteady; ++i) {
    t += "[tenants.steady-" + std::to_string(i) + "]\ntier = \"paid\"\n";
  }
  return t;
}

struct RunResult {
  nlohmann::json json;
  double p99_ms = 0;
  std::uint64_t lost = 0;
};

std::variant<RunResult, std::string> runOnce(const std::string& dir, int flooders,
                                             std::uint64_t max_rejections_per_s,
                                             std::chrono::milliseconds duration) {
  auto parsed = config::parseConfig(configText(max_rejections_per_s), "<flood>");
  if (auto* err = parsed.errorOrNull()) return err->toString();
  config::Config cfg = parsed.value();
  prepareBenchConfig(cfg, dir);
  const std::vector<TenantPlan> plans = steadyPlans(kSteady, kSteadyPerS, duration, "chat");
  RunExtras extras;
  for (int f = 0; f < flooders; ++f) {
    extras.floods.push_back({"flood" + std::to_string(f), "chat", kFloodTenants, duration});
  }
  auto run = runProcesses(cfg, plans, dir, std::chrono::seconds(60), &extras);
  if (auto* err = std::get_if<std::string>(&run)) return *err;
  const SteadyTally steady = tallySteady(std::get<TenantRecords>(run));
  const std::vector<double>& rtt_ms = steady.rtt_ms;
  const std::uint64_t not_ok = steady.not_ok, lost = steady.lost, requests = steady.requests;
  FloodCounts flood;
  for (const FloodCounts& n : extras.flooded) {
    flood.submitted += n.submitted;
    flood.ok += n.ok;
    flood.rejected += n.rejected;
    flood.other += n.other;
    flood.ring_full += n.ring_full;
    flood.unanswered += n.unanswered;
  }
  const json& counters = extras.status.is_object() ? extras.status["counters"] : json();
  const std::uint64_t batches = counters.is_object() ? counters.value("batches", 0ull) : 0;
  const double seconds = static_cast<double>(duration.count()) / 1000.0;
  // The daemon's own measure (slot_idle_meter.hpp): the executor's time
  // serving batches over that and its time free while a batch was due.
  double busy_s = 0, starved_s = 0;
  if (extras.status.is_object() && extras.status["endpoints"].is_array() &&
      !extras.status["endpoints"].empty()) {
    const json& chat = extras.status["endpoints"][0];
    busy_s = chat.value("executor_busy_s", 0.0);
    starved_s = chat.value("executor_starved_s", 0.0);
  }
  RunResult out;
  out.p99_ms = percentileOfSorted(rtt_ms, 99);
  out.lost = lost + flood.unanswered;
  out.json = {
      {"steady_p50_ms", percentileOfSorted(rtt_ms, 50)},
      {"steady_p99_ms", out.p99_ms},
      {"steady_max_ms", rtt_ms.empty() ? 0.0 : rtt_ms.back()},
      {"steady_requests", requests},
      {"steady_not_ok", not_ok},
      {"lost", out.lost},
      {"executor_busy", busy_s + starved_s > 0 ? busy_s / (busy_s + starved_s) : 1.0},
      {"executor_busy_s", busy_s},
      {"executor_starved_s", starved_s},
      {"batches", batches},
      {"flood_submitted", flood.submitted},
      {"flood_rejected", flood.rejected},
      {"flood_admitted", flood.ok},
      {"flood_ring_full", flood.ring_full},
      {"reject_throttled", counters.is_object() ? counters.value("reject_throttled", 0ull) : 0},
      {"daemon_cpu_ms", static_cast<double>(extras.daemon_cpu_ns) / 1e6},
      // Daemon CPU per submission it handled (steady and flood, admitted or
      // rejected); with the flood, almost all are rejections.
      {"daemon_ns_per_submission", static_cast<double>(extras.daemon_cpu_ns) /
                                       static_cast<double>(std::max<std::uint64_t>(
                                           1, requests + flood.ok + flood.rejected + flood.other))},
      {"seconds", seconds}};
  return out;
}

std::string row(const char* name, const json& r) {
  char line[320];
  std::snprintf(line, sizeof line, "%-16s %9.2f %9.2f %9.2f %8llu %6.2f %12llu %12llu %10llu\n",
                name, r["steady_p50_ms"].get<double>(), r["steady_p99_ms"].get<double>(),
                r["steady_max_ms"].get<double>(),
                static_cast<unsigned long long>(r["steady_not_ok"].get<std::uint64_t>() +
                                                r["lost"].get<std::uint64_t>()),
                r["executor_busy"].get<double>(),
                static_cast<unsigned long long>(r["flood_rejected"].get<std::uint64_t>()),
                static_cast<unsigned long long>(r["flood_ring_full"].get<std::uint64_t>()),
                static_cast<unsigned long long>(r["reject_throttled"].get<std::uint64_t>()));
  return line;
}

}  // namespace

ScenarioResult runFlood(const ScenarioOptions& options) {
  TempDir tmp("fairsched-flood");
  if (tmp.path().empty()) return ScenarioError{"mkdtemp failed"};
  const auto duration = options.quick ? 3000ms : 12000ms;
  auto base = runOnce(tmp.path(), 0, kDefaultBudget, duration);
  if (auto* err = std::get_if<std::string>(&base)) return ScenarioError{"baseline: " + *err};
  auto flood = runOnce(tmp.path(), kFlooders, kDefaultBudget, duration);
  if (auto* err = std::get_if<std::string>(&flood)) return ScenarioError{"flood: " + *err};
  std::optional<RunResult> unbounded;
  if (!options.quick) {
    auto u = runOnce(tmp.path(), kFlooders, 0, duration);
    if (auto* err = std::get_if<std::string>(&u)) return ScenarioError{"unbounded: " + *err};
    unbounded = std::get<RunResult>(u);
  }
  const RunResult& b = std::get<RunResult>(base);
  const RunResult& f = std::get<RunResult>(flood);
  const double ratio = b.p99_ms > 0 ? f.p99_ms / b.p99_ms : 0.0;
  const std::uint64_t lost = b.lost + f.lost + (unbounded ? unbounded->lost : 0);
  const double busy = f.json["executor_busy"].get<double>();
  const bool met = ratio <= kTargetRatio && busy >= kTargetBusy && lost == 0;

  ScenarioReport report;
  report.json = {
      {"scenario", "flood"},
      {"flooders", kFlooders},
      {"baseline", b.json},
      {"flood", f.json},
      {"flood_unbounded", unbounded ? unbounded->json : json(nullptr)},
      {"steady_p99_ratio", ratio},
      {"lost", lost},
      {"target",
       {{"steady_p99_ratio_max", kTargetRatio}, {"executor_busy_min", kTargetBusy}, {"met", met}}}};
  std::string& t = report.table;
  char head[400];
  std::snprintf(head, sizeof head,
                "flood: a real fairschedd, chat on the CPU executor (%.0f us a batch of <= 16); "
                "%d steady clients x %d requests/s (paid), then %d flooding clients x %d trial "
                "tenants (60 requests/minute) in a tight loop, %.0f s each run.\n\n",
                kPerBatchUs, kSteady, kSteadyPerS, kFlooders, kFloodTenants,
                static_cast<double>(duration.count()) / 1000.0);
  t += head;
  t += "run              p50 (ms)  p99 (ms)  max (ms)  not ok  busy    rejected    ring_full  "
       "throttled\n";
  t += row("baseline", b.json);
  t += row("flood", f.json);
  if (unbounded) t += row("flood, no budget", unbounded->json);
  char tail[300];
  std::snprintf(tail, sizeof tail,
                "\nsteady p99 under the flood: %.2fx baseline (target <= %.0fx); executor busy "
                "%.0f%% of the time work was due for it (target >= %.0f%%): %s\n",
                ratio, kTargetRatio, 100 * busy, 100 * kTargetBusy, met ? "MET" : "MISS");
  t += tail;
  return report;
}

}  // namespace fairsched::bench
