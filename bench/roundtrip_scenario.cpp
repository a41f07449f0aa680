#include "bench/roundtrip_scenario.hpp"

#include "bench/process_run.hpp"
#include "bench/raw_pingpong.hpp"
#include "bench/stats.hpp"
#include "tests/support/process_group.hpp"

#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "fairsched/client.hpp"
#include "tests/support/forked_daemon.hpp"

namespace fairsched::bench {

using testing::ProcessGroup;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Percentiles {
  double p50_us = 0, p99_us = 0, max_us = 0;
};

Percentiles percentiles(std::vector<double> ns) {
  Percentiles p;
  if (ns.empty()) return p;
  std::sort(ns.begin(), ns.end());
  p.p50_us = percentileOfSorted(ns, 50) / 1000.0;
  p.p99_us = percentileOfSorted(ns, 99) / 1000.0;
  p.max_us = ns.back() / 1000.0;
  return p;
}

// The 0th..100th percentiles in microseconds, for the plot's CDF.
nlohmann::json cdf(std::vector<double> ns) {
  nlohmann::json out = nlohmann::json::array();
  if (ns.empty()) return out;
  std::sort(ns.begin(), ns.end());
  for (int q = 0; q <= 100; ++q) out.push_back(percentileOfSorted(ns, q) / 1000.0);
  return out;
}

nlohmann::json toJson(const Percentiles& p) {
  return {{"p50_us", p.p50_us}, {"p99_us", p.p99_us}, {"max_us", p.max_us}};
}

// Unix-socket echo between two processes: the baseline.
std::vector<double> socketEcho(int iterations) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return {};
  ProcessGroup group;
  const pid_t child = group.spawn([&] {
    pinTo(1);
    close(sv[0]);
    char buf[64];
    for (;;) {
      const ssize_t n = recv(sv[1], buf, sizeof buf, 0);
      if (n <= 0 || send(sv[1], buf, static_cast<std::size_t>(n), 0) != n) return 0;
    }
  });
  close(sv[1]);
  char msg[56] = {1};
  std::vector<double> rtt;
  rtt.reserve(static_cast<std::size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = Clock::now();
    if (send(sv[0], msg, sizeof msg, 0) != static_cast<ssize_t>(sizeof msg)) break;
    if (recv(sv[0], msg, sizeof msg, 0) <= 0) break;
    rtt.push_back(static_cast<double>((Clock::now() - t0).count()));
  }
  close(sv[0]);  // the child sees the end and exits
  group.wait(child, ProcessGroup::in(10s));
  return rtt;
}

SubmitRequest request(Tenant t, std::span<const std::uint32_t> prompt) {
  SubmitRequest r;
  r.tenant = t;
  r.endpoint = "echo";
  r.prompt = prompt;
  r.max_output_tokens = 1;
  return r;
}

// What one daemon (on one event loop) measured.
struct DaemonRun {
  std::vector<double> shm_rtt, sleep_rtt;
  double submissions_per_s = 0;
  double opens_per_s = 0, closes_per_s = 0;  // kTenantBatch tenants on one connection
  int exit_status = -1;
};

constexpr std::size_t kTenantBatch = 10'000;

// Starts a daemon on `loop`, measures busy-polling and sleeping round trips
// and one thread's submission rate, and stops it.
std::variant<DaemonRun, ScenarioError> measureDaemon(config::EventLoopKind loop, int iterations,
                                                     int sleeping_iterations,
                                                     std::uint64_t throughput_requests) {
  const TempDir tmp("fairsched-roundtrip");
  if (tmp.path().empty()) return ScenarioError{"mkdtemp failed"};
  auto cfg = echoDaemonConfig(tmp.path() + "/fairsched.sock");
  if (auto* err = cfg.errorOrNull()) return ScenarioError{*err};
  cfg.value().daemon.event_loop = loop;
  pinTo(1);  // the daemon inherits this CPU
  auto started = daemon::ForkedDaemon::start(cfg.value());
  pinTo(0);
  if (!started) return ScenarioError{started.error().message};
  daemon::ForkedDaemon& d = started.value();

  ClientOptions copts;
  copts.socket_path = d.socket();
  copts.client_name = "roundtrip";
  auto client = Client::connect(copts);
  if (!client) return ScenarioError{"connect: " + client.error().toString()};
  auto tenant = client->openTenant("bench");
  if (!tenant) return ScenarioError{"open tenant: " + tenant.error().toString()};
  const std::vector<std::uint32_t> prompt{1, 2, 3, 4};
  std::vector<Completion> done;
  DaemonRun run;

  // 1. Busy-polling round trips.
  run.shm_rtt.reserve(static_cast<std::size_t>(iterations));
  for (int i = -iterations / 10; i < iterations; ++i) {
    const auto t0 = Clock::now();
    if (!client->submit(request(*tenant, prompt))) return ScenarioError{"submit failed"};
    done.clear();
    while (client->poll(done) == 0) {
    }
    if (done[0].status != Status::kOk) return ScenarioError{"a round trip did not complete OK"};
    if (i >= 0) run.shm_rtt.push_back(static_cast<double>((Clock::now() - t0).count()));
  }

  // 2. Both sides asleep between requests: two eventfd wake-ups per trip.
  for (int i = 0; i < sleeping_iterations; ++i) {
    std::this_thread::sleep_for(1ms);  // long enough for the daemon to go to sleep
    const auto t0 = Clock::now();
    if (!client->submit(request(*tenant, prompt))) return ScenarioError{"submit failed"};
    done.clear();
    while (done.empty()) {
      (void)client->wait(1s);
      client->poll(done);
    }
    run.sleep_rtt.push_back(static_cast<double>((Clock::now() - t0).count()));
  }

  // 3. One client thread submitting as fast as the ring takes it.
  std::uint64_t sent = 0, received = 0;
  const auto t0 = Clock::now();
  while (received < throughput_requests) {
    while (sent < throughput_requests && client->submit(request(*tenant, prompt))) ++sent;
    done.clear();
    received += client->poll(done);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  run.submissions_per_s = static_cast<double>(throughput_requests) / seconds;

  // 4. Opening and closing tenants: kTenantBatch on this one connection.
  std::vector<std::string> names(kTenantBatch);
  std::vector<std::string_view> views(kTenantBatch);
  for (std::size_t i = 0; i < kTenantBatch; ++i) {
    names[i] = "t-" + std::to_string(i);
    views[i] = names[i];
  }
  const auto o0 = Clock::now();
  std::vector<Result<Tenant>> opened = client->openTenants(views);
  const auto o1 = Clock::now();
  for (const Result<Tenant>& t : opened) {
    if (!t) return ScenarioError{"open tenants: " + t.error().toString()};
  }
  std::vector<Tenant> handles;
  for (const Result<Tenant>& t : opened) handles.push_back(*t);
  for (const Result<void>& r : client->closeTenants(handles)) {
    if (!r) return ScenarioError{"close tenants: " + r.error().toString()};
  }
  const auto o2 = Clock::now();
  run.opens_per_s = kTenantBatch / std::chrono::duration<double>(o1 - o0).count();
  run.closes_per_s = kTenantBatch / std::chrono::duration<double>(o2 - o1).count();
  run.exit_status = d.terminate();
  return run;
}

}  // namespace

ScenarioResult runRoundtripScenario(const ScenarioOptions& options) {
  const int iterations = options.quick ? 2'000 : 50'000;
  const int sleeping_iterations = options.quick ? 200 : 2'000;
  const std::uint64_t throughput_requests = options.quick ? 200'000 : 2'000'000;

  auto uring_run = measureDaemon(config::EventLoopKind::kIoUring, iterations, sleeping_iterations,
                                 throughput_requests);
  if (auto* err = std::get_if<ScenarioError>(&uring_run)) return *err;
  auto epoll_run = measureDaemon(config::EventLoopKind::kEpoll, iterations, sleeping_iterations,
                                 throughput_requests);
  if (auto* err = std::get_if<ScenarioError>(&epoll_run)) return *err;
  const DaemonRun& ur = std::get<DaemonRun>(uring_run);
  const DaemonRun& ep = std::get<DaemonRun>(epoll_run);
  const std::vector<double>& shm_rtt = ur.shm_rtt;
  const std::vector<double>& sleep_rtt = ur.sleep_rtt;
  const double per_s = ur.submissions_per_s;

  const int daemon_status = ur.exit_status != 0 ? ur.exit_status : ep.exit_status;
  // The baselines, on the same two CPUs as the client (0) and the daemon (1):
  // a unix socket, and the physical limit, a bare shared-memory ping-pong.
  const std::vector<double> uds_rtt = socketEcho(iterations);
  const std::vector<double> raw_rtt = rawPingPong(iterations, 0, 1);

  const Percentiles shm = percentiles(shm_rtt), sleeping = percentiles(sleep_rtt),
                    uds = percentiles(uds_rtt), raw = percentiles(raw_rtt),
                    ep_shm = percentiles(ep.shm_rtt), ep_sleeping = percentiles(ep.sleep_rtt);
  const double vs_raw_p50 = raw.p50_us > 0 ? shm.p50_us / raw.p50_us : 0.0;
  const double vs_raw_p99 = raw.p99_us > 0 ? shm.p99_us / raw.p99_us : 0.0;
  ScenarioReport report;
  report.json = {{"scenario", "roundtrip"},
                 {"shm", toJson(shm)},
                 {"uds", toJson(uds)},
                 {"raw", toJson(raw)},
                 {"vs_raw", {{"p50", vs_raw_p50}, {"p99", vs_raw_p99}}},
                 {"shm_sleeping", toJson(sleeping)},
                 {"ingest", {{"submissions_per_s", per_s}, {"requests", throughput_requests}}},
                 {"tenants",
                  {{"count", kTenantBatch},
                   {"open_per_s", ur.opens_per_s},
                   {"close_per_s", ur.closes_per_s},
                   {"target_open_per_s", 100'000}}},
                 {"epoll",
                  {{"shm", toJson(ep_shm)},
                   {"shm_sleeping", toJson(ep_sleeping)},
                   {"ingest", {{"submissions_per_s", ep.submissions_per_s}}}}},
                 {"speedup_p50", shm.p50_us > 0 ? uds.p50_us / shm.p50_us : 0.0},
                 {"daemon_exit_status", daemon_status},
                 {"cdf_us",
                  {{"shm", cdf(shm_rtt)},
                   {"shm_sleeping", cdf(sleep_rtt)},
                   {"uds", cdf(uds_rtt)},
                   {"raw", cdf(raw_rtt)}}}};
  char buf[2048];
  std::snprintf(
      buf, sizeof buf,
      "roundtrip: submit -> completion through fairschedd (zero-time executor), %d trips\n\n"
      "%-44s %10s %10s %10s\n"
      "%-44s %10.2f %10.2f %10.2f\n"
      "%-44s %10.2f %10.2f %10.2f\n"
      "%-44s %10.2f %10.2f %10.2f\n"
      "%-44s %10.2f %10.2f %10.2f\n"
      "%-44s %10.2f %10.2f %10.2f\n"
      "%-44s %10.2f %10.2f %10.2f\n\n"
      "daemon path vs raw ping-pong (same run): p50 %.2fx (target <= 2.5x), p99 %.2fx "
      "(target <= 5x)\n"
      "shared memory vs socket at p50: %.1fx faster\n"
      "one client thread: %.2f M submissions/s through the daemon (io_uring), %.2f M (epoll) "
      "(target >= 5 M)\n"
      "tenants on one connection: %zu opened at %.0f/s (one pipelined batch; target >= 100000/s), "
      "closed at %.0f/s\n",
      iterations, "path", "p50 us", "p99 us", "max us", "shared memory, busy-polling (io_uring)",
      shm.p50_us, shm.p99_us, shm.max_us, "shared memory, busy-polling (epoll)", ep_shm.p50_us,
      ep_shm.p99_us, ep_shm.max_us, "shared memory, both sides asleep (io_uring)", sleeping.p50_us,
      sleeping.p99_us, sleeping.max_us, "shared memory, both sides asleep (epoll)",
      ep_sleeping.p50_us, ep_sleeping.p99_us, ep_sleeping.max_us,
      "raw shm ping-pong (physical limit)", raw.p50_us, raw.p99_us, raw.max_us,
      "unix socket echo (baseline)", uds.p50_us, uds.p99_us, uds.max_us, vs_raw_p50, vs_raw_p99,
      shm.p50_us > 0 ? uds.p50_us / shm.p50_us : 0.0, per_s / 1e6, ep.submissions_per_s / 1e6,
      kTenantBatch, ur.opens_per_s, ur.closes_per_s);
  report.table = buf;
  if (daemon_status != 0) return ScenarioError{"the daemon did not stop cleanly"};
  return report;
}

std::optional<std::string> plotRoundtrip(const nlohmann::json& report, const std::string& path) {
  static constexpr std::string_view kScript = R"PY(
r = report
cdf = r["cdf_us"]
fig, ax = plt.subplots(figsize=(7, 4))
for key, label, color in [("shm", "shared memory, busy-polling", "#1f77b4"),
                          ("shm_sleeping", "shared memory, both sides asleep", "#2ca02c"),
                          ("raw", "raw shm ping-pong (physical limit)", "#7f7f7f"),
                          ("uds", "unix-socket echo (baseline)", "#d62728")]:
    xs = cdf.get(key, [])
    if xs:
        ax.plot(xs, range(len(xs)), label=label, color=color)
ax.set_xscale("log")
ax.set_xlabel("round trip (us)")
ax.set_ylabel("percentile")
ax.set_title("submit -> completion through fairschedd vs a unix socket")
ax.grid(True, which="both", alpha=0.3)
ax.legend(loc="lower right")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
)PY";
  return plotWithPython(kScript, report, path);
}

}  // namespace fairsched::bench
