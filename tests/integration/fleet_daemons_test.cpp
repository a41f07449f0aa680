// Two fairschedd daemons sharing one Redis for a fleet-scoped limit, with a
// client process hammering each: the admitted count in any window never
// exceeds the limit plus the leases outstanding (docs/operations.md, "Fleet
// limits"), checked from the clients' submit and completion times. Once on
// one plain server, once on a Redis Cluster over TLS with a password, with
// tenants whose keys live on different masters. Skipped, with the reason,
// when the servers cannot be started.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/ctl/admin_client.hpp"
#include "fairsched/client.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/process_group.hpp"
#include "tests/support/redis_cluster.hpp"
#include "tests/support/redis_server.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tls_files.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kLimit = 300;
constexpr auto kWindow = 2s;
constexpr std::uint64_t kLease = 5;
constexpr int kDaemons = 2;

// `fleet`: the [fleet] keys that say where Redis is (url, mode, TLS files).
config::Config makeConfig(const std::string& socket, const std::string& fleet) {
  testing::DaemonConfigText c;
  c.socket = socket;
  c.before_tiers = "[fleet]\n" + fleet + "lease = " + std::to_string(kLease) +
                   "\nhosts = " + std::to_string(kDaemons) +
                   "\non_backend_error = \"fail_closed\"\n";
  c.body =
      "[endpoints.chat]\nmax_batch_requests = 16\nmax_batch_tokens = 8192\nmax_wait_us = 100\n"
      "max_output_tokens = 8\nexecutor = \"cpu\"\n"
      "limits = [{ limit = \"" +
      std::to_string(kLimit) +
      " requests/2s\", scope = \"fleet\" }]\n"
      "[endpoints.chat.cpu]\nper_batch_us = 20.0\nper_token_us = 0.0\nthreads = 1\n";
  c.client_extra = "admin = true\n";
  c.after = "[metrics]\nlisten = \"127.0.0.1:0\"\n";
  return c.parsed();
}

std::int64_t monotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Submits for `run` (at most kMaxSubmits) round robin over `tenants`,
// keeping up to 32 outstanding; writes "<tenant index> <completion ns>
// <submit-to-completion ns>" per OK completion to `out`. Returns "" or what
// went wrong.
std::string hammer(const std::string& socket, const std::string& out, std::chrono::milliseconds run,
                   const std::vector<std::string>& tenants) {
  constexpr int kMaxSubmits = 2'000'000;
  ClientOptions o;
  o.socket_path = socket;
  o.client_name = "fleet-it";
  auto client = Client::connect(o);
  if (!client) return "connect: " + client.error().message;
  std::vector<Tenant> handles;
  for (const std::string& name : tenants) {
    auto tenant = client->openTenant(name);
    if (!tenant) return "open: " + tenant.error().message;
    handles.push_back(*tenant);
  }
  const std::vector<std::uint32_t> prompt{1, 2, 3};
  struct Sent {
    std::size_t tenant;
    std::int64_t at;
  };
  std::map<RequestId, Sent> outstanding;
  std::vector<std::tuple<std::size_t, std::int64_t, std::int64_t>> ok;
  std::vector<Completion> done;
  std::uint64_t rate_limited = 0;
  auto pause_until = std::chrono::steady_clock::now();
  auto drain = [&] {
    done.clear();
    client->poll(done);
    const std::int64_t t = monotonicNs();
    for (const Completion& c : done) {
      const auto it = outstanding.find(c.request_id);
      if (it == outstanding.end()) continue;
      if (c.status == Status::kOk) ok.emplace_back(it->second.tenant, t, t - it->second.at);
      if (c.status == Status::kRateLimited) {
        ++rate_limited;
        // Back off as told (capped: keep hammering), like a well-behaved client.
        const auto pause = std::min<std::chrono::nanoseconds>(c.retry_after, 2ms);
        pause_until = std::max(pause_until, std::chrono::steady_clock::now() + pause);
      }
      outstanding.erase(it);
    }
  };
  const auto end = std::chrono::steady_clock::now() + run;
  for (int i = 0; i < kMaxSubmits && std::chrono::steady_clock::now() < end;) {
    if (outstanding.size() < 32 && std::chrono::steady_clock::now() >= pause_until) {
      SubmitRequest r;
      const std::size_t which = static_cast<std::size_t>(i) % handles.size();
      r.tenant = handles[which];
      r.endpoint = "chat";
      r.prompt = prompt;
      r.max_output_tokens = 1;
      const std::int64_t t = monotonicNs();
      auto id = client->submit(r);
      if (id) {
        outstanding[*id] = {which, t};
        ++i;
      } else if (id.error().code != ErrorCode::kRingFull) {
        return "submit: " + id.error().message;
      }
    } else {
      (void)client->wait(std::chrono::microseconds(200));
    }
    drain();
  }
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!outstanding.empty() && std::chrono::steady_clock::now() < until) {
    (void)client->wait(10ms);
    drain();
  }
  if (!outstanding.empty()) return std::to_string(outstanding.size()) + " never completed";
  if (rate_limited == 0) return "nothing was rate limited: the limit never bound";
  std::ofstream f(out);
  for (const auto& [tenant, t, latency] : ok) f << tenant << ' ' << t << ' ' << latency << '\n';
  return f ? "" : "cannot write " + out;
}

// One OK request: when it was submitted and when it completed (ns, steady clock).
struct Span {
  std::int64_t submit;
  std::int64_t completion;
};

// The most requests admitted within one window [a, a + window): those
// submitted at or after a and completed before a + window, for the best a
// (a submit time). A lower bound on what the limiter admitted in that window.
std::size_t mostAdmittedWithinAWindow(std::vector<Span> spans, std::int64_t window) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& x, const Span& y) { return x.submit < y.submit; });
  std::size_t best = 0;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const std::int64_t end = spans[i].submit + window;
    std::size_t n = 0;
    for (std::size_t j = i; j < spans.size() && spans[j].submit < end; ++j) {
      if (spans[j].completion < end) ++n;
    }
    best = std::max(best, n);
  }
  return best;
}

// Two daemons with `fleet` as their [fleet] keys, a client hammering each
// over `tenants`; every tenant's limit holds within the fleet bound.
// `expected_nodes`: where each tenant's keys live, as fairschedctl tenants
// should say.
void twoDaemonsStayWithinTheBound(const std::string& fleet, const std::vector<std::string>& tenants,
                                  const std::map<std::string, std::string>& expected_nodes) {
  testing::TempDir tmp("fairsched-fleet-it");
  const std::string dir = tmp.path();
  ASSERT_FALSE(dir.empty()) << "no temporary directory";
  std::vector<daemon::ForkedDaemon> daemons;
  for (int d = 0; d < kDaemons; ++d) {
    auto fd =
        daemon::ForkedDaemon::start(makeConfig(dir + "/d" + std::to_string(d) + ".sock", fleet));
    ASSERT_TRUE(fd.ok()) << fd.error().message;
    daemons.push_back(std::move(fd).value());
  }

  const auto run = std::chrono::milliseconds(5000);
  testing::ProcessGroup clients;
  for (int d = 0; d < kDaemons; ++d) {
    clients.spawnChecked("client " + std::to_string(d), [&] {
      return hammer(daemons[d].socket(), dir + "/c" + std::to_string(d) + ".txt", run, tenants);
    });
  }
  EXPECT_TRUE(clients.waitAll(testing::ProcessGroup::in(run + 60s)))
      << "a client process failed or did not end within a minute of its run";
  // Operators see the fleet through fairschedctl status: breaker closed,
  // leases fetched with far fewer round trips than admissions, and where
  // each tenant's keys live.
  std::map<std::string, std::string> nodes;  // tenant -> where its fleet keys live
  for (auto& d : daemons) {
    auto r = daemon::adminCommand(d.socket(), shm::AdminCommand::kStatus);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const auto j = nlohmann::json::parse(r.value().json);
    ASSERT_TRUE(j.contains("fleet")) << j.dump();
    EXPECT_EQ(j["fleet"]["breaker"], "closed");
    EXPECT_GT(j["fleet"]["round_trips"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(j["fleet"]["backend_failures"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(j["fleet"]["last_error"], "");
    EXPECT_EQ(j["fleet"]["backend"].get<std::string>().find("s3cret"), std::string::npos)
        << "the password is shown";
    auto t = daemon::adminCommand(d.socket(), shm::AdminCommand::kTenants);
    ASSERT_TRUE(t.ok()) << t.error().message;
    const auto rows = nlohmann::json::parse(t.value().json);
    for (const auto& row : rows["tenants"]) {
      if (row.contains("fleet_node")) nodes[row["tenant"]] = row["fleet_node"].get<std::string>();
    }
  }
  for (const std::string& tenant : tenants) {
    ASSERT_TRUE(nodes.contains(tenant)) << tenant << ": no row says where its fleet keys live";
    if (expected_nodes.contains(tenant)) {
      EXPECT_EQ(nodes[tenant], expected_nodes.at(tenant)) << tenant;
    }
  }
  for (auto& d : daemons) EXPECT_EQ(d.terminate(), 0);

  std::vector<std::vector<Span>> spans(tenants.size());
  std::int64_t latency = 0;  // the longest submit-to-completion seen (printed)
  std::vector<std::size_t> per_daemon;
  for (int d = 0; d < kDaemons; ++d) {
    std::ifstream f(dir + "/c" + std::to_string(d) + ".txt");
    std::size_t tenant = 0;
    std::int64_t t = 0;
    std::int64_t l = 0;
    std::size_t n = 0;
    while (f >> tenant >> t >> l) {
      if (tenant < spans.size()) spans[tenant].push_back({t - l, t});
      latency = std::max(latency, l);
      ++n;
    }
    per_daemon.push_back(n);
  }

  // An admission lies between its submit and its completion: the requests
  // counted in a window by mostAdmittedWithinAWindow were all admitted in
  // it, however long each took (a slow one only falls out of the count).
  const std::int64_t window = std::chrono::nanoseconds(kWindow).count();
  // Two leases per daemon, plus one request (cost 1) each may admit on credit.
  const std::uint64_t bound = kLimit + kDaemons * (2 * kLease + 1);
  for (std::size_t k = 0; k < tenants.size(); ++k) {
    const std::size_t most = mostAdmittedWithinAWindow(spans[k], window);
    std::printf(
        "fleet %s: %zu OK completions, at most %zu surely admitted in one window of "
        "%lld ms (longest submit to completion %.1f ms), bound %llu\n",
        tenants[k].c_str(), spans[k].size(), most, static_cast<long long>(window / 1'000'000),
        static_cast<double>(latency) / 1e6, static_cast<unsigned long long>(bound));
    EXPECT_LE(most, bound) << tenants[k] << ": admitted within " << window / 1'000'000 << " ms";
    EXPECT_GE(most, kLimit * 8 / 10) << tenants[k] << ": the limit was never approached";
    // Over the run (2.5 windows) the daemons together did not exceed the
    // bound per window either.
    EXPECT_LE(spans[k].size(), 3 * bound) << tenants[k];
  }
  for (int d = 0; d < kDaemons; ++d) EXPECT_GT(per_daemon[d], 0u) << "daemon " << d;
}

TEST(FleetDaemons, StressTwoDaemonsSharingRedisStayWithinTheFleetBound) {
  auto started = testing::RedisServer::start();
  if (auto* why = std::get_if<std::string>(&started)) GTEST_SKIP() << "no redis-server: " << *why;
  auto redis = std::move(std::get<std::unique_ptr<testing::RedisServer>>(started));
  twoDaemonsStayWithinTheBound("url = \"" + redis->url() + "\"\n", {"acme"},
                               {{"acme", "127.0.0.1:" + std::to_string(redis->port())}});
}

// The same on a Redis Cluster (3 masters, 3 replicas) over TLS with a
// password, with three tenants whose keys live on three different masters.
TEST(FleetDaemons, StressTwoDaemonsSharingATlsClusterStayWithinTheFleetBound) {
  auto files = testing::TlsFiles::make();
  if (auto* why = std::get_if<std::string>(&files)) GTEST_SKIP() << "no TLS files: " << *why;
  const auto tls = std::move(std::get<std::unique_ptr<testing::TlsFiles>>(files));
  testing::RedisClusterOptions o;
  o.tls = tls.get();
  o.password = "s3cret";
  auto started = testing::RedisClusterServers::start(o);
  if (auto* why = std::get_if<std::string>(&started)) {
    GTEST_SKIP() << "cannot start a Redis Cluster: " << *why;
  }
  const auto cluster = std::move(std::get<std::unique_ptr<testing::RedisClusterServers>>(started));
  std::map<std::uint16_t, std::string> by_master;
  for (int i = 0; i < 1000 && by_master.size() < 3; ++i) {
    const std::string tenant = "org" + std::to_string(i);
    const auto owner =
        cluster->ownerOfSlot(testing::RedisClusterServers::slotOf("{" + tenant + "}"));
    if (owner && !by_master.contains(*owner)) by_master[*owner] = tenant;
  }
  ASSERT_EQ(by_master.size(), 3u);
  std::vector<std::string> tenants;
  std::map<std::string, std::string> expected;
  for (const auto& [port, tenant] : by_master) {
    tenants.push_back(tenant);
    expected[tenant] = "127.0.0.1:" + std::to_string(port);
  }
  std::string url = "rediss://:s3cret@";
  for (const std::uint16_t p : cluster->masterPorts()) {
    url += (url.back() == '@' ? "" : ",") + std::string("127.0.0.1:") + std::to_string(p);
  }
  twoDaemonsStayWithinTheBound(
      "url = \"" + url + "\"\nmode = \"cluster\"\ntls_ca_file = \"" + tls->caCert() + "\"\n",
      tenants, expected);
}

}  // namespace
}  // namespace fairsched
