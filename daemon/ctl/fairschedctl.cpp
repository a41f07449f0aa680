// fairschedctl: the operator's view of a running fairschedd, over its control
// socket. Allowed only to peers whose [[clients]] rule has admin = true.
//
//   fairschedctl [--socket PATH] [--json] status
//   fairschedctl [--socket PATH] [--json] tenants [--limit N] [--tenant NAME]
//   fairschedctl [--socket PATH] top [--interval S] [--iterations N] [--limit N]
//   fairschedctl [--socket PATH] [--json] reload
//   fairschedctl [--socket PATH] [--json] drain [--wait] [--wait-timeout S]
//   fairschedctl [--socket PATH] [--json] resume
//
// Exit status (docs/operations.md): 0 done; 1 the daemon refused or the
// command failed (e.g. a reload with an invalid file: the daemon keeps its
// config); 2 usage; 3 the daemon cannot be reached or did not answer;
// 4 not authorised (no admin rule names this uid/gid); 5 drain --wait gave up
// before the daemon was empty.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "daemon/ctl/admin_client.hpp"
#include "fairsched/name.hpp"

namespace {

using fairsched::daemon::AdminResponse;
using fairsched::shm::AdminCommand;
using fairsched::shm::ControlStatus;
using nlohmann::json;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;
constexpr int kExitUnauthorized = 4;
constexpr int kExitDrainTimeout = 5;

struct Options {
  std::string socket = "/run/fairsched/fairsched.sock";
  bool json = false;
  int timeout_ms = 10000;
  std::uint32_t limit = 50;
  std::string tenant;
  double interval_s = 1.0;
  int iterations = 0;  // top: 0 = until interrupted
  bool wait = false;
  double wait_timeout_s = 300;
};

// One command; prints the failure and returns the exit status when there is
// no usable reply.
struct Call {
  int rc = kExitOk;
  json body;
};

Call call(const Options& o, AdminCommand cmd, std::uint32_t limit = 0,
          std::string_view tenant = {}) {
  auto r = fairsched::daemon::adminCommand(o.socket, cmd, limit,
                                           std::chrono::milliseconds(o.timeout_ms), tenant);
  if (!r) {
    std::cerr << "fairschedctl: " << r.error().message << "\n";
    return {kExitUnreachable, {}};
  }
  const AdminResponse& resp = r.value();
  Call c;
  c.body = json::parse(resp.json, nullptr, false);
  if (c.body.is_discarded()) {
    std::cerr << "fairschedctl: the daemon's reply is not JSON\n";
    return {kExitUnreachable, {}};
  }
  if (resp.status == ControlStatus::kOk) return c;
  c.rc = resp.status == ControlStatus::kUnauthorized ? kExitUnauthorized : kExitFailed;
  return c;
}

// A string field of the daemon's reply, safe to print: whatever the daemon
// (of any version) sends, no control byte reaches the operator's terminal.
std::string text(const json& j, const char* key, const char* fallback = "") {
  return fairsched::escapeForDisplay(j.value(key, std::string(fallback)));
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * x);
  return buf;
}

std::string duration(double s) {
  const long t = static_cast<long>(s);
  std::ostringstream out;
  if (t >= 86400) out << t / 86400 << "d";
  if (t >= 3600) out << (t % 86400) / 3600 << "h";
  if (t >= 60) out << (t % 3600) / 60 << "m";
  out << t % 60 << "s";
  return out.str();
}

void printStatus(const json& s) {
  std::cout << "fairschedd " << text(s, "version", "?") << " (pid " << s.value("pid", 0) << ") "
            << text(s, "state", "?") << " on " << text(s, "socket", "?") << ", up "
            << duration(s.value("uptime_s", 0.0)) << "\n";
  const json& rl = s["reloads"];
  std::cout << "config    "
            << (text(s, "config", "").empty() ? "<embedded>" : text(s, "config", "")) << " (policy "
            << text(s, "policy", "?") << "; reloads " << rl.value("ok", 0) << " ok, "
            << rl.value("failed", 0) << " failed";
  if (!text(rl, "last_error", "").empty())
    std::cout << "; last error: " << text(rl, "last_error", "");
  std::cout << ")\n";
  std::cout << "clients   " << s.value("clients", 0) << "   tenants " << s.value("tenants", 0)
            << "   queued " << s.value("queued", 0) << "   in flight " << s.value("in_flight", 0)
            << " (" << s.value("in_flight_batches", 0) << " batches)\n";
  if (s.contains("state_file") && s["state_file"].is_object()) {
    const json& st = s["state_file"];
    std::cout << "state     ";
    if (!st.value("enabled", false)) {
      std::cout << "not kept (" << text(st, "problem", "?") << ")";
    } else {
      std::cout << text(st, "path", "?") << ": ";
      if (st.contains("age_s") && st["age_s"].is_number()) {
        std::cout << st.value("tenant_states", 0ull) << " tenant states, written "
                  << duration(st["age_s"].get<double>()) << " ago";
      } else {
        std::cout << "not written yet";
      }
      if (!text(st, "problem", "").empty())
        std::cout << "; last write failed: " << text(st, "problem", "");
      if (!text(st, "at_start", "").empty())
        std::cout << "; at start: " << text(st, "at_start", "");
    }
    std::cout << "\n";
  }
  std::cout << "\n";
  std::printf("%-16s %-8s %10s %14s %10s %14s\n", "ENDPOINT", "EXECUTOR", "QUEUED", "QUEUED_TOKENS",
              "FREE_SLOTS", "TOKENS_10S");
  for (const json& e : s["endpoints"]) {
    std::printf("%-16s %-8s %10llu %14llu %10llu %14llu\n", text(e, "name").c_str(),
                text(e, "executor").c_str(), e.value("queued", 0ull),
                e.value("queued_tokens", 0ull), e.value("free_executor_slots", 0ull),
                e.value("tokens_last_10s", 0ull));
  }
  if (s.contains("workers") && !s["workers"].empty()) {
    std::printf("\n%-8s %-16s %-20s %8s %8s %10s %14s %12s %9s\n", "WORKER", "ENDPOINT", "NAME",
                "PID", "RUNNING", "FREE_SEQS", "FREE_KV", "TOKENS", "PREFIX_HIT");
    for (const json& w : s["workers"]) {
      // Of the prompt blocks it was assigned, the share it held then.
      const json pc = w.value("prefix_cache", json::object());
      const auto blocks = pc.value("assigned_blocks", 0ull);
      char hit[16] = "-";
      if (blocks > 0) {
        std::snprintf(hit, sizeof hit, "%.0f%%",
                      100.0 * static_cast<double>(pc.value("hit_blocks", 0ull)) /
                          static_cast<double>(blocks));
      }
      std::printf("%-8llu %-16s %-20s %8llu %8llu %10llu %14llu %12llu %9s\n", w.value("id", 0ull),
                  text(w, "endpoint").c_str(), text(w, "name").c_str(), w.value("pid", 0ull),
                  w.value("running", 0ull), w.value("free_sequences", 0ull),
                  w.value("free_kv_tokens", 0ull), w.value("tokens", 0ull), hit);
    }
  }
  if (s.contains("fleet")) {
    const json& f = s["fleet"];
    std::cout << "\nfleet     " << text(f, "backend", "") << ": breaker " << text(f, "breaker", "?")
              << (f.value("degraded", false) ? " (DEGRADED: on_backend_error applies)" : "") << ", "
              << f.value("limits", 0ull) << " limits, " << f.value("leases_held", 0ull)
              << " held in leases, " << f.value("round_trips", 0ull) << " round trips, "
              << f.value("backend_failures", 0ull) << " failures\n";
    std::cout << "          " << text(f, "topology", "single");
    if (f.contains("nodes")) {
      for (const json& n : f["nodes"]) {
        std::cout << "  " << text(n, "address", "?");
        if (n.contains("slots")) std::cout << " [" << text(n, "slots", "") << "]";
      }
    }
    std::cout << ", " << f.value("redirects_moved", 0ull) << " MOVED, "
              << f.value("redirects_ask", 0ull) << " ASK, " << f.value("failovers", 0ull)
              << " failovers followed\n";
    if (!text(f, "last_error", "").empty()) {
      std::cout << "          last error: " << text(f, "last_error", "") << "\n";
    }
  }
  const json& c = s["counters"];
  std::cout << "\nsubmissions " << c.value("submissions", 0ull) << ", completions "
            << c.value("completions_delivered", 0ull) << " (+"
            << c.value("completions_dropped", 0ull) << " for clients gone), batches "
            << c.value("batches", 0ull) << ", bad slots " << c.value("bad_slots", 0ull)
            << ", connections " << c.value("connections_accepted", 0ull) << " ("
            << c.value("connections_refused", 0ull) << " refused)\n";
}

std::string limitsText(const json& limits) {
  std::string out;
  for (const json& l : limits) {
    if (!out.empty()) out += "; ";
    out += text(l, "limit", "") + ": " + std::to_string(l.value("used", 0ull)) + " used, " +
           std::to_string(l.value("remaining", 0ull)) + " left";
  }
  return out.empty() ? "-" : out;
}

void printTenants(const json& t) {
  std::printf("%-20s %-10s %-8s %6s %7s %8s %9s %10s %9s %10s  %s\n", "TENANT", "ENDPOINT", "TIER",
              "WEIGHT", "QUEUED", "INFLIGHT", "SHARE_10S", "ADMITTED", "REJECTED", "COMPLETED",
              "LIMITS (used, left)");
  for (const json& r : t["tenants"]) {
    const json& rej = r["rejected"];
    const unsigned long long rejected = rej.value("rate_limited", 0ull) +
                                        rej.value("overloaded", 0ull) +
                                        rej.value("queue_full", 0ull) + rej.value("invalid", 0ull);
    std::printf("%-20s %-10s %-8s %6.2g %7llu %8llu %9s %10llu %9llu %10llu  %s\n",
                text(r, "tenant").c_str(), text(r, "endpoint").c_str(), text(r, "tier").c_str(),
                r.value("weight", 0.0), r.value("queued", 0ull), r.value("in_flight", 0ull),
                pct(r.value("share_last_10s", 0.0)).c_str(), r.value("admitted", 0ull), rejected,
                r.value("completed", 0ull), limitsText(r["limits"]).c_str());
  }
  if (t.value("truncated", false)) {
    std::cout << "(" << t["tenants"].size() << " of " << t.value("total_rows", 0)
              << " rows, busiest first; --limit 0 shows all)\n";
  }
}

int finish(const Options& o, const Call& c, void (*print)(const json&)) {
  if (c.rc == kExitUnreachable) return c.rc;
  if (o.json) {
    std::cout << c.body.dump(2) << "\n";
  } else if (c.rc != kExitOk) {
    std::cerr << "fairschedctl: " << text(c.body, "error", "failed") << "\n";
  } else {
    print(c.body);
  }
  return c.rc;
}

int runTop(const Options& o) {
  for (int i = 0; o.iterations == 0 || i < o.iterations; ++i) {
    const Call s = call(o, AdminCommand::kStatus);
    if (s.rc != kExitOk) return finish(o, s, printStatus);
    const Call t = call(o, AdminCommand::kTenants, o.limit);
    if (t.rc != kExitOk) return finish(o, t, printStatus);
    if (isatty(STDOUT_FILENO)) std::cout << "\x1b[H\x1b[2J";  // home, clear
    printStatus(s.body);
    std::cout << "\n";
    printTenants(t.body);
    std::cout.flush();
    if (o.iterations == 0 || i + 1 < o.iterations) {
      std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
    }
  }
  return kExitOk;
}

int runDrain(const Options& o) {
  Call c = call(o, AdminCommand::kDrain);
  if (c.rc != kExitOk || !o.wait) return finish(o, c, printStatus);
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(o.wait_timeout_s);
  for (;;) {
    if (c.body.value("queued", 1ull) == 0 && c.body.value("in_flight", 1ull) == 0) {
      return finish(o, c, printStatus);
    }
    if (std::chrono::steady_clock::now() >= until) {
      std::cerr << "fairschedctl: still " << c.body.value("queued", 0ull) << " queued and "
                << c.body.value("in_flight", 0ull) << " in flight after " << o.wait_timeout_s
                << " s\n";
      return kExitDrainTimeout;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c = call(o, AdminCommand::kStatus);
    if (c.rc != kExitOk) return finish(o, c, printStatus);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const char* env = std::getenv("FAIRSCHED_SOCKET"); env && *env) o.socket = env;
  CLI::App app{"fairschedctl: inspect and steer a running fairschedd"};
  app.set_version_flag("--version", std::string("fairschedctl ") + FAIRSCHED_VERSION);
  app.add_option("--socket", o.socket, "the daemon's control socket (env FAIRSCHED_SOCKET)")
      ->capture_default_str();
  app.add_flag("--json", o.json, "print the daemon's JSON reply instead of a table");
  app.add_option("--timeout-ms", o.timeout_ms, "how long to wait for a reply")
      ->capture_default_str();
  app.require_subcommand(1, 1);
  // Global options are accepted after the subcommand too (`tenants --json`).
  app.fallthrough();

  auto* status = app.add_subcommand("status", "daemon state, queues, counters, config in use");
  auto* tenants = app.add_subcommand(
      "tenants", "per tenant and endpoint: tier, weight, queue, share, counters, limit usage");
  tenants->add_option("--limit", o.limit, "at most N rows, busiest first (0 = all)")
      ->capture_default_str();
  tenants->add_option("--tenant", o.tenant, "only this tenant")->check([](const std::string& name) {
    return fairsched::nameError(name).value_or("");
  });
  auto* top = app.add_subcommand("top", "status and tenants, refreshed");
  top->add_option("--interval", o.interval_s, "seconds between refreshes")->capture_default_str();
  top->add_option("--iterations", o.iterations, "stop after N refreshes (0 = never)");
  top->add_option("--limit", o.limit, "rows of tenants")->capture_default_str();
  auto* reload = app.add_subcommand("reload", "re-read the config file and apply it (like SIGHUP)");
  auto* drain = app.add_subcommand(
      "drain", "admit nothing new; finish what is queued and running (resume undoes it)");
  drain->add_flag("--wait", o.wait, "wait until nothing is queued or running");
  drain->add_option("--wait-timeout", o.wait_timeout_s, "give up waiting after S seconds (exit 5)")
      ->capture_default_str();
  auto* resume = app.add_subcommand("resume", "admit again after a drain");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  if (status->parsed()) return finish(o, call(o, AdminCommand::kStatus), printStatus);
  if (tenants->parsed()) {
    const Call c = call(o, AdminCommand::kTenants, o.tenant.empty() ? o.limit : 0, o.tenant);
    return finish(o, c, printTenants);
  }
  if (top->parsed()) return runTop(o);
  if (reload->parsed()) {
    return finish(o, call(o, AdminCommand::kReload),
                  [](const json& j) { std::cout << j.value("message", "reloaded") << "\n"; });
  }
  if (drain->parsed()) return runDrain(o);
  if (resume->parsed()) return finish(o, call(o, AdminCommand::kResume), printStatus);
  return kExitUsage;
}
