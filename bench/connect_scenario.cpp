// `connect`: what a connection costs the daemon, and whether a storm of
// short-lived clients becomes another tenant's latency.
//
// sequential: a real fairschedd (busy_poll_us = 0, so its CPU time is its
// work and not its spinning; max_connects_per_s = 0, so the loop runs at the
// pace of the set-ups, not of their budget) and one client that connects and closes
// kSequential times in a row; the daemon's CPU time over the loop divided by
// the connections.
//
// baseline and storm: chat on the CPU executor (2 ms a batch of up to 16, one
// thread), four steady client processes at 250 requests/s each, as in
// `flood`. In the storm run a process forks a short-lived client 150 times a
// second; each connects, opens a tenant, submits a request and is SIGKILLed
// at a random point up to 10 ms after its fork (mid-connect, mid-Hello,
// mid-request or after).
//
// Targets: daemon CPU per connect + close <= 0.2 ms; steady p99 during the
// storm <= 3x its baseline; nothing lost.
//
// JSON: {"scenario":"connect","sequential":{"connects","connects_per_s",
// "daemon_cpu_ms_per_connect"},"baseline":{..},"storm":{..},"steady_p99_ratio":..,
// "lost":..,"target":{..}} where baseline and storm are {"steady_p50_ms",
// "steady_p99_ms","steady_max_ms","steady_requests","steady_not_ok","lost",
// "connects_per_s","storm_forked","storm_connected","daemon_cpu_ms","seconds"}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "bench/process_run.hpp"
#include "bench/scenario.hpp"
#include "bench/stats.hpp"
#include "daemon/ctl/admin_client.hpp"
#include "fairsched/client.hpp"
#include "tests/support/forked_daemon.hpp"

namespace fairsched::bench {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kSteady = 4;
constexpr int kSteadyPerS = 250;
constexpr int kStormPerS = 150;
constexpr double kPerBatchUs = 2000.0;
constexpr double kTargetCpuMs = 0.2;
constexpr double kTargetRatio = 3.0;

std::string configText(const std::string& daemon_extra) {
  std::string t = "default_tier = \"paid\"\n[daemon]\n" + daemon_extra;
  t += "[[tiers]]\nname = \"paid\"\ndefault_queue_limit = 20000\n";
  t += "[endpoints.chat]\nmax_batch_requests = 16\nmax_batch_tokens = 8192\nmax_wait_us = 1000\n"
       "max_output_tokens = 16\nexecutor = \"cpu\"\n[endpoints.chat.cpu]\nper_batch_us = " +
       std::to_string(kPerBatchUs) + "\nper_token_us = 0.0\nthreads = 1\nworkload = false\n";
  return t;
}

std::variant<json, std::string> runSequential(const std::string& dir, int connects) {
  // No set-up budget: what is measured is a set-up's cost, not the budget's pace.
  auto parsed =
      config::parseConfig(configText("busy_poll_us = 0\nmax_connects_per_s = 0\n"), "<connect>");
  if (auto* err = parsed.errorOrNull()) return err->toString();
  config::Config cfg = parsed.value();
  prepareBenchConfig(cfg, dir);
  auto started = daemon::ForkedDaemon::start(cfg);
  if (!started) return started.error().message;
  daemon::ForkedDaemon& d = started.value();
  ClientOptions opts;
  opts.socket_path = d.socket();
  opts.client_name = "bench-connect";
  {  // one connection first: the daemon's own first-time costs are not a connection's
    auto warm = Client::connect(opts);
    if (!warm) return "connect: " + warm.error().toString();
  }
  const auto cpu0 = cpuTimeNs(d.pid());
  const auto t0 = Clock::now();
  for (int i = 0; i < connects; ++i) {
    auto c = Client::connect(opts);
    if (!c) return "connect " + std::to_string(i) + ": " + c.error().toString();
  }  // each closes as it goes out of scope
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // The daemon's teardown of the last one may still be running: wait until
  // it counts no client (bounded), then read its CPU time.
  for (int i = 0; i < 2000; ++i) {
    auto status = daemon::adminCommand(d.socket(), shm::AdminCommand::kStatus);
    if (status && status->status == shm::ControlStatus::kOk) {
      const json j = json::parse(status->json, nullptr, false);
      if (j.is_object() && j.value("clients", 1ull) <= 1) break;  // the status query's own
    }
    std::this_thread::sleep_for(1ms);
  }
  const auto cpu1 = cpuTimeNs(d.pid());
  if (d.terminate() != 0) return std::string("the daemon did not stop cleanly");
  if (!cpu0 || !cpu1) return std::string("cannot read the daemon's CPU time");
  return json{{"connects", connects},
              {"connects_per_s", connects / seconds},
              {"daemon_cpu_ms_per_connect",
               static_cast<double>(*cpu1 - *cpu0) / 1e6 / static_cast<double>(connects)}};
}

struct RunResult {
  nlohmann::json json;
  double p99_ms = 0;
  std::uint64_t lost = 0;
};

std::variant<RunResult, std::string> runSteady(const std::string& dir, bool storm,
                                               std::chrono::milliseconds duration) {
  auto parsed = config::parseConfig(configText(""), "<connect>");
  if (auto* err = parsed.errorOrNull()) return err->toString();
  config::Config cfg = parsed.value();
  prepareBenchConfig(cfg, dir);
  const std::vector<TenantPlan> plans = steadyPlans(kSteady, kSteadyPerS, duration, "chat");
  RunExtras extras;
  if (storm) extras.storms.push_back({"storm", "chat", kStormPerS, 10ms, duration});
  auto run = runProcesses(cfg, plans, dir, std::chrono::seconds(60), &extras);
  if (auto* err = std::get_if<std::string>(&run)) return *err;
  const SteadyTally steady = tallySteady(std::get<TenantRecords>(run));
  const std::vector<double>& rtt_ms = steady.rtt_ms;
  StormCounts sc;
  for (const StormCounts& n : extras.stormed) {
    sc.forked += n.forked;
    sc.connected += n.connected;
  }
  const double seconds = static_cast<double>(duration.count()) / 1000.0;
  RunResult out;
  out.p99_ms = percentileOfSorted(rtt_ms, 99);
  out.lost = steady.lost;
  out.json = {{"steady_p50_ms", percentileOfSorted(rtt_ms, 50)},
              {"steady_p99_ms", out.p99_ms},
              {"steady_max_ms", rtt_ms.empty() ? 0.0 : rtt_ms.back()},
              {"steady_requests", steady.requests},
              {"steady_not_ok", steady.not_ok},
              {"lost", steady.lost},
              {"connects_per_s", static_cast<double>(sc.connected) / seconds},
              {"storm_forked", sc.forked},
              {"storm_connected", sc.connected},
              {"daemon_cpu_ms", static_cast<double>(extras.daemon_cpu_ns) / 1e6},
              {"seconds", seconds}};
  return out;
}

std::string row(const char* name, const json& r) {
  char line[320];
  std::snprintf(line, sizeof line, "%-10s %9.2f %9.2f %9.2f %8llu %11.0f %10.0f\n", name,
                r["steady_p50_ms"].get<double>(), r["steady_p99_ms"].get<double>(),
                r["steady_max_ms"].get<double>(),
                static_cast<unsigned long long>(r["steady_not_ok"].get<std::uint64_t>() +
                                                r["lost"].get<std::uint64_t>()),
                r["connects_per_s"].get<double>(), r["daemon_cpu_ms"].get<double>());
  return line;
}

}  // namespace

ScenarioResult runConnect(const ScenarioOptions& options) {
  TempDir tmp("fairsched-connect");
  if (tmp.path().empty()) return ScenarioError{"mkdtemp failed"};
  auto seq = runSequential(tmp.path(), options.quick ? 100 : 500);
  if (auto* err = std::get_if<std::string>(&seq)) return ScenarioError{"sequential: " + *err};
  const auto duration = options.quick ? 3000ms : 12000ms;
  auto base = runSteady(tmp.path(), false, duration);
  if (auto* err = std::get_if<std::string>(&base)) return ScenarioError{"baseline: " + *err};
  auto storm = runSteady(tmp.path(), true, duration);
  if (auto* err = std::get_if<std::string>(&storm)) return ScenarioError{"storm: " + *err};
  const json& s = std::get<json>(seq);
  const RunResult& b = std::get<RunResult>(base);
  const RunResult& f = std::get<RunResult>(storm);
  const double cpu_ms = s["daemon_cpu_ms_per_connect"].get<double>();
  const double ratio = b.p99_ms > 0 ? f.p99_ms / b.p99_ms : 0.0;
  const std::uint64_t lost = b.lost + f.lost;
  const bool cpu_met = cpu_ms <= kTargetCpuMs;
  const bool ratio_met = ratio <= kTargetRatio;

  ScenarioReport report;
  report.json = {{"scenario", "connect"},
                 {"sequential", s},
                 {"baseline", b.json},
                 {"storm", f.json},
                 {"steady_p99_ratio", ratio},
                 {"lost", lost},
                 {"target",
                  {{"daemon_cpu_ms_per_connect_max", kTargetCpuMs},
                   {"steady_p99_ratio_max", kTargetRatio},
                   {"met", cpu_met && ratio_met && lost == 0}}}};
  std::string& t = report.table;
  char head[600];
  std::snprintf(
      head, sizeof head,
      "connect: %d connects + closes in a row (busy_poll_us = 0, no set-up budget): %.0f a "
      "second, "
      "%.3f ms of daemon CPU each (target <= %.1f ms): %s\n\n"
      "%d steady clients x %d requests/s, chat on the CPU executor (%.0f us a batch); "
      "storm: a short-lived client forked %d times a second, SIGKILLed within 10 ms; "
      "%.0f s each run.\n\n",
      s["connects"].get<int>(), s["connects_per_s"].get<double>(), cpu_ms, kTargetCpuMs,
      cpu_met ? "MET" : "MISS", kSteady, kSteadyPerS, kPerBatchUs, kStormPerS,
      static_cast<double>(duration.count()) / 1000.0);
  t += head;
  t += "run         p50 (ms)  p99 (ms)  max (ms)  not ok  connects/s  daemon ms\n";
  t += row("baseline", b.json);
  t += row("storm", f.json);
  char tail[300];
  std::snprintf(tail, sizeof tail,
                "\nsteady p99 during the storm: %.2fx baseline (target <= %.0fx): %s; lost: %llu\n",
                ratio, kTargetRatio, ratio_met ? "MET" : "MISS",
                static_cast<unsigned long long>(lost));
  t += tail;
  return report;
}

}  // namespace fairsched::bench
