// Hot reload, drain and the admin commands against a real fairschedd and
// real client processes: 100 reloads under load with every request
// accounted for, a tenant taken from a client (its queued requests end
// UNAUTHORIZED, running ones finish), invalid files and restart-only changes
// refused with the daemon still serving its old config, drain/resume, and
// fairschedctl's exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/ctl/admin_client.hpp"
#include "fairsched/client.hpp"
#include "kernels/workload_reference.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/process_group.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/requests.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir_test.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;
using daemon::AdminResponse;
using nlohmann::json;
using shm::AdminCommand;
using shm::ControlStatus;

struct Variant {
  std::string tenants = "[\"*\"]";  // the rule's tenants
  double acme_weight = 2.0;
  bool trial_first = false;  // tier order
  std::string chat_limit = "1M requests/minute";
  std::uint32_t quantum = 0;
  bool admin = true;
  std::string socket_mode = "0600";
  double per_batch_us = 20.0;
  std::uint32_t max_batch_requests = 16;
  bool broken = false;  // a syntax error on a known line
};

std::string configText(const std::string& socket, const Variant& v) {
  testing::DaemonConfigText c;
  c.top = "default_tier = \"trial\"\n";
  c.socket = socket;
  c.socket_mode = v.socket_mode;
  c.test_event_loop = true;
  // Metrics on an ephemeral loopback port: reloads remap its tenant labels too.
  c.before_tiers = "[metrics]\nlisten = \"127.0.0.1:0\"\nmax_tenant_series = 1\n";
  c.tiers = v.trial_first ? std::vector<std::string>{"trial", "paid"}
                          : std::vector<std::string>{"paid", "trial"};
  c.body = "[endpoints.chat]\nmax_batch_requests = " + std::to_string(v.max_batch_requests) +
           "\nmax_batch_tokens = 8192\nmax_wait_us = 100\nmax_output_tokens = 64\n";
  if (v.quantum) c.body += "quantum = " + std::to_string(v.quantum) + "\n";
  c.body += "limits = [\"" + v.chat_limit + "\"]\n";
  c.body += "[endpoints.chat.cpu]\nper_batch_us = " + std::to_string(v.per_batch_us) +
            "\nper_token_us = 0.0\nthreads = 1\n";
  c.body += "[tenants.acme]\ntier = \"paid\"\nweight = " + std::to_string(v.acme_weight) + "\n";
  if (v.broken) c.body += "[tenants.broken\n";
  c.client_tenants = v.tenants;
  c.client_extra = std::string("admin = ") + (v.admin ? "true" : "false") + "\n";
  return c.text();
}

class Reload : public testing::TempDirTest {
 protected:
  Reload() : TempDirTest("fairsched-reload") {}
  std::string path() const { return dir_ + "/fairsched.toml"; }
  // A client of the daemon on socket().
  Result<Client> connect() const {
    ClientOptions o;
    o.socket_path = socket();
    return Client::connect(o);
  }

  // Replaces the file atomically, as an operator's config management would.
  void write(const Variant& v) {
    const std::string tmp = path() + ".new";
    std::ofstream(tmp) << configText(socket(), v);
    std::filesystem::rename(tmp, path());
  }
  std::optional<daemon::ForkedDaemon> start(const Variant& v) {
    write(v);
    auto loaded = config::loadConfigFile(path());
    if (auto* err = loaded.errorOrNull()) {
      ADD_FAILURE() << err->toString();
      return std::nullopt;
    }
    auto started = daemon::ForkedDaemon::start(loaded.value());
    if (!started) {
      ADD_FAILURE() << started.error().message;
      return std::nullopt;
    }
    return std::move(started).value();
  }
  AdminResponse admin(AdminCommand c) {
    auto r = daemon::adminCommand(socket(), c);
    if (!r) {
      ADD_FAILURE() << r.error().message;
      return {};
    }
    return r.value();
  }
  json status() {
    const AdminResponse r = admin(AdminCommand::kStatus);
    EXPECT_EQ(r.status, ControlStatus::kOk) << r.json;
    return json::parse(r.json, nullptr, false);
  }
  // Waits (at most 10 s) until the daemon has taken `n` submissions off the
  // rings: they are queued, running or done, no longer in shared memory.
  bool waitForSubmissions(std::uint64_t n) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < until) {
      const json s = status();
      if (!s.is_discarded() && s["counters"].value("submissions", 0ull) >= n) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
};

std::vector<std::uint32_t> promptFor(std::uint64_t salt) {
  return testing::promptFor(salt, testing::kReloadPrompts);
}

Result<RequestId> submitTo(Client& client, Tenant t, const std::vector<std::uint32_t>& prompt,
                           std::uint64_t tag) {
  return client.submit(testing::makeRequest(t, prompt, 4, tag));
}

// Completions of `client` until `n` have arrived or `limit` passes.
std::vector<Completion> collect(Client& client, std::size_t n,
                                std::chrono::milliseconds limit = 10s) {
  std::vector<Completion> out;
  const auto until = std::chrono::steady_clock::now() + limit;
  while (out.size() < n && std::chrono::steady_clock::now() < until) {
    (void)client.wait(50ms);
    client.poll(out);
  }
  return out;
}

// How many of the next `n` completions (collect()) ended with each status.
std::map<Status, int> countStatuses(Client& client, std::size_t n) {
  std::map<Status, int> statuses;
  for (const Completion& c : collect(client, n)) statuses[c.status]++;
  return statuses;
}

std::optional<Status> nextStatus(Client& client) {
  const std::vector<Completion> c = collect(client, 1);
  return c.empty() ? std::nullopt : std::optional<Status>(c.front().status);
}

// One client process: at least `n` requests over tenants acme and "u<p>",
// and more until the file `stop` exists, so the load spans the reloads
// however fast they go. Exit 0 when every request got exactly one
// completion, OK ones with their own checksum; 16 when `stop` did not
// appear within 120 s.
int clientProcess(const std::string& socket, int p, int n, const std::string& stop) {
  ClientOptions o;
  o.socket_path = socket;
  auto client = Client::connect(o);
  if (!client) return 10;
  auto acme = client->openTenant("acme");
  auto mine = client->openTenant("u" + std::to_string(p));
  if (!acme || !mine) return 11;
  std::map<RequestId, std::uint64_t> expected;
  std::map<RequestId, int> seen;
  std::vector<Completion> done;
  int bad = 0;
  auto drain = [&] {
    done.clear();
    client->poll(done);
    for (const Completion& c : done) {
      ++seen[c.request_id];
      if (c.status == Status::kOk && c.checksum != expected[c.request_id]) ++bad;
      if (c.status != Status::kOk && c.status != Status::kRateLimited) ++bad;
    }
  };
  std::uint64_t salt = static_cast<std::uint64_t>(p) << 32;
  const auto give_up = std::chrono::steady_clock::now() + 120s;
  bool stopped = false;
  for (int i = 0; i < n || !stopped; ++i, ++salt) {
    const auto prompt = promptFor(salt);
    for (;;) {
      auto id = submitTo(*client, i % 2 ? *acme : *mine, prompt, salt);
      if (id) {
        expected[*id] = kernels::workloadChecksum(prompt);
        break;
      }
      if (id.error().code != ErrorCode::kRingFull) return 12;
      (void)client->wait(5ms);
      drain();
    }
    if (i % 4 == 0) {  // paced
      drain();
      std::this_thread::sleep_for(1ms);
      stopped = std::filesystem::exists(stop);
      if (!stopped && std::chrono::steady_clock::now() > give_up) return 16;
    }
  }
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (seen.size() < expected.size() && std::chrono::steady_clock::now() < until) {
    (void)client->wait(50ms);
    drain();
  }
  if (seen.size() != expected.size()) return 13;
  for (const auto& [id, count] : seen) {
    if (count != 1) return 14;
  }
  return bad == 0 ? 0 : 15;
}

TEST_F(Reload, StressHundredReloadsUnderLoadEveryRequestAccountedFor) {
  auto d = start(Variant{});
  ASSERT_TRUE(d);
  const std::string stop = dir_ + "/stop";  // the clients' signal that the reloads are done
  testing::ProcessGroup clients;            // killed if the test ends early
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    children.push_back(clients.spawn([&] { return clientProcess(socket(), p, 6000, stop); }));
  }
  int ok = 0, failed = 0;
  for (int i = 0; i < 100; ++i) {
    Variant v;
    v.acme_weight = 1.0 + i % 4;
    v.trial_first = i % 3 == 0;
    v.quantum = i % 5 == 0 ? 0 : 64 * (1 + i % 7);
    v.chat_limit = i % 4 == 0 ? "2000 requests/second" : "1M requests/minute";
    v.max_batch_requests = 4 + i % 13;
    v.broken = i % 10 == 9;
    write(v);
    if (i % 20 == 7) {  // SIGHUP does the same as the command
      ASSERT_EQ(kill(d->pid(), SIGHUP), 0);
      std::this_thread::sleep_for(5ms);
      ++ok;
      continue;
    }
    const AdminResponse r = admin(AdminCommand::kReload);
    if (v.broken) {
      EXPECT_EQ(r.status, ControlStatus::kFailed) << r.json;
      EXPECT_NE(r.json.find("fairsched.toml:"), std::string::npos) << r.json;
      ++failed;
    } else {
      EXPECT_EQ(r.status, ControlStatus::kOk) << r.json;
      ++ok;
    }
    std::this_thread::sleep_for(5ms);
  }
  // The load ran through every reload: the clients stop only now.
  std::ofstream(stop) << "stop\n";
  for (pid_t c : children) {
    // Each drains its completions for at most 60 s once it stops submitting.
    EXPECT_EQ(clients.wait(c, testing::ProcessGroup::in(90s)), 0) << "client process exit";
  }
  const json s = status();
  EXPECT_EQ(s["reloads"]["ok"].get<int>() + s["reloads"]["failed"].get<int>(), ok + failed);
  EXPECT_EQ(s["reloads"]["failed"].get<int>(), failed);
  EXPECT_EQ(s["queued"].get<int>(), 0);
  EXPECT_EQ(s["in_flight"].get<int>(), 0);
  EXPECT_EQ(d->terminate(), 0);
}

TEST_F(Reload, ATenantTakenFromAClientEndsItsQueuedRequestsUnauthorized) {
  Variant v;
  v.tenants = "[\"keep\", \"gone\"]";
  v.per_batch_us = 20000;  // 20 ms a batch of one: requests wait in the queue
  v.max_batch_requests = 1;
  auto d = start(v);
  ASSERT_TRUE(d);
  auto client = connect();
  ASSERT_TRUE(client) << client.error().message;
  auto keep = client->openTenant("keep");
  auto gone = client->openTenant("gone");
  ASSERT_TRUE(keep && gone);
  std::map<RequestId, std::string> who;
  for (int i = 0; i < 10; ++i) {
    auto a = submitTo(*client, *gone, promptFor(i), i);
    auto b = submitTo(*client, *keep, promptFor(100 + i), i);
    ASSERT_TRUE(a && b);
    who[*a] = "gone";
    who[*b] = "keep";
  }
  ASSERT_TRUE(waitForSubmissions(20)) << "the daemon did not take the 20 submissions";
  v.tenants = "[\"keep\"]";
  write(v);
  const AdminResponse r = admin(AdminCommand::kReload);
  ASSERT_EQ(r.status, ControlStatus::kOk) << r.json;
  auto late = submitTo(*client, *gone, promptFor(7), 7);
  ASSERT_TRUE(late);
  who[*late] = "late";

  std::map<std::string, std::map<Status, int>> by;
  std::map<RequestId, int> seen;
  for (const Completion& c : collect(*client, who.size(), 20s)) {
    ++seen[c.request_id];
    by[who[c.request_id]][c.status]++;
  }
  ASSERT_EQ(seen.size(), who.size());
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1);
  EXPECT_EQ(by["keep"][Status::kOk], 10);
  EXPECT_EQ(by["late"][Status::kUnauthorized], 1);
  EXPECT_EQ(by["gone"][Status::kOk] + by["gone"][Status::kUnauthorized], 10);
  EXPECT_GE(by["gone"][Status::kUnauthorized], 5) << "queued requests are not drained";

  // Allowed again: the same ring serves the tenant once more.
  v.tenants = "[\"keep\", \"gone\"]";
  write(v);
  ASSERT_EQ(admin(AdminCommand::kReload).status, ControlStatus::kOk);
  auto again = submitTo(*client, *gone, promptFor(9), 9);
  ASSERT_TRUE(again);
  EXPECT_EQ(nextStatus(*client), Status::kOk);
  EXPECT_EQ(d->terminate(), 0);
}

TEST_F(Reload, InvalidFilesAndRestartOnlyChangesKeepTheRunningConfig) {
  Variant v;
  v.chat_limit = "2 requests/minute";
  auto d = start(v);
  ASSERT_TRUE(d);
  v.socket_mode = "0666";
  v.chat_limit = "100 requests/minute";
  write(v);
  AdminResponse r = admin(AdminCommand::kReload);
  EXPECT_EQ(r.status, ControlStatus::kFailed);
  EXPECT_NE(r.json.find("daemon.socket_mode: cannot change while running"), std::string::npos)
      << r.json;
  std::filesystem::remove(path());
  r = admin(AdminCommand::kReload);
  EXPECT_EQ(r.status, ControlStatus::kFailed);
  EXPECT_NE(r.json.find("cannot open"), std::string::npos) << r.json;

  // Still the old limit: two admitted, the third rate limited.
  auto client = connect();
  ASSERT_TRUE(client);
  auto t = client->openTenant("x");
  ASSERT_TRUE(t);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(submitTo(*client, *t, promptFor(i), i));
  std::map<Status, int> statuses = countStatuses(*client, 3);
  EXPECT_EQ(statuses[Status::kOk], 2);
  EXPECT_EQ(statuses[Status::kRateLimited], 1);
  const json s = status();
  EXPECT_EQ(s["reloads"]["failed"].get<int>(), 2);
  EXPECT_NE(s["reloads"]["last_error"].get<std::string>().find("cannot open"), std::string::npos);
  EXPECT_EQ(d->terminate(), 0);
}

TEST_F(Reload, DrainFinishesTheQueueAndRefusesNewWorkUntilResumed) {
  Variant v;
  v.per_batch_us = 5000;
  v.max_batch_requests = 1;
  auto d = start(v);
  ASSERT_TRUE(d);
  auto client = connect();
  ASSERT_TRUE(client);
  auto t = client->openTenant("acme");
  ASSERT_TRUE(t);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(submitTo(*client, *t, promptFor(i), i));
  ASSERT_TRUE(waitForSubmissions(10)) << "the daemon did not take the 10 submissions";
  const AdminResponse r = admin(AdminCommand::kDrain);
  ASSERT_EQ(r.status, ControlStatus::kOk);
  EXPECT_EQ(json::parse(r.json)["state"], "draining");
  ASSERT_TRUE(submitTo(*client, *t, promptFor(50), 50));  // submitted while draining
  std::map<Status, int> statuses = countStatuses(*client, 11);
  EXPECT_EQ(statuses[Status::kOk], 10) << "what was queued before the drain runs";
  EXPECT_EQ(statuses[Status::kShuttingDown], 1);
  EXPECT_FALSE(connect()) << "new clients are refused while draining";
  EXPECT_EQ(status()["queued"].get<int>(), 0);

  ASSERT_EQ(admin(AdminCommand::kResume).status, ControlStatus::kOk);
  ASSERT_TRUE(submitTo(*client, *t, promptFor(60), 60));
  EXPECT_EQ(nextStatus(*client), Status::kOk);
  EXPECT_EQ(d->terminate(), 0);
}

// fairschedctl itself: its exit codes and --json output.
int runCtl(const std::string& args, std::string* out = nullptr) {
  return testing::runFairschedctl(args, out);
}

TEST_F(Reload, FairschedctlExitCodesAndJson) {
  auto d = start(Variant{});
  ASSERT_TRUE(d);
  const std::string sock = "--socket " + socket();
  std::string out;
  ASSERT_EQ(runCtl(sock + " --json status", &out), 0) << out;
  const json s = json::parse(out, nullptr, false);
  ASSERT_FALSE(s.is_discarded()) << out;
  EXPECT_EQ(s["state"], "serving");
  EXPECT_EQ(s["pid"].get<int>(), d->pid());
  ASSERT_EQ(runCtl(sock + " --json tenants", &out), 0) << out;
  const json t = json::parse(out, nullptr, false);
  ASSERT_FALSE(t.is_discarded()) << out;
  ASSERT_EQ(t["tenants"].size(), 1u);  // acme is listed
  EXPECT_EQ(t["tenants"][0]["tenant"], "acme");
  EXPECT_EQ(t["tenants"][0]["weight"].get<double>(), 2.0);
  EXPECT_EQ(t["tenants"][0]["limits"][0]["limit"], "1M requests/minute");
  EXPECT_EQ(runCtl(sock + " tenants --tenant acme", &out), 0) << out;
  EXPECT_NE(out.find("acme"), std::string::npos);
  ASSERT_EQ(runCtl(sock + " --json tenants --tenant nosuch", &out), 0) << out;
  EXPECT_EQ(json::parse(out, nullptr, false)["tenants"].size(), 0u) << "filtered by the daemon";
  EXPECT_EQ(runCtl(sock + " top --iterations 1", &out), 0) << out;
  EXPECT_EQ(runCtl(sock + " reload", &out), 0) << out;
  Variant broken;
  broken.broken = true;
  write(broken);
  EXPECT_EQ(runCtl(sock + " reload", &out), 1) << out;
  EXPECT_NE(out.find("fairsched.toml:"), std::string::npos) << out;
  EXPECT_EQ(runCtl(sock + " frobnicate", &out), 2) << out;
  EXPECT_EQ(runCtl("--socket " + dir_ + "/nothing.sock status", &out), 3) << out;
  Variant no_admin;
  no_admin.admin = false;
  write(no_admin);
  EXPECT_EQ(runCtl(sock + " reload", &out), 0) << out;  // the reload takes admin away
  EXPECT_EQ(runCtl(sock + " status", &out), 4) << out;
  EXPECT_NE(out.find("not allowed admin commands"), std::string::npos) << out;
  EXPECT_EQ(d->terminate(), 0);
}

}  // namespace
}  // namespace fairsched
