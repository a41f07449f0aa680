// libfairsched against a real fairschedd: several client processes and
// tenants (every request completes exactly once, with its own checksum), and
// a daemon that dies and comes back (outstanding requests end SHUTTING_DOWN
// at once, the client reconnects and carries on).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#if FAIRSCHED_HAVE_CUDA
#include "daemon/exec/cuda_executor.hpp"
#endif
#include "fairsched/client.hpp"
#include "kernels/workload_reference.hpp"
#include "tests/support/process_group.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/requests.hpp"
#include "tests/support/temp_dir_test.hpp"
#include "tests/support/wait_until.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;

config::Config makeConfig(const std::string& socket, double per_batch_us,
                          const std::string& executor = "cpu") {
  testing::DaemonConfigText c;
  c.socket = socket;
  c.body =
      "[endpoints.chat]\nmax_batch_requests = 16\nmax_batch_tokens = 8192\nmax_wait_us = 100\n"
      "max_output_tokens = 64\nexecutor = \"" +
      executor +
      "\"\n"
      "[endpoints.chat.cpu]\nper_batch_us = " +
      std::to_string(per_batch_us) +
      "\nper_token_us = 0.0\nthreads = 1\n"
      "[endpoints.chat.cuda]\ndevice = 0\nstreams = 2\nstaging_bytes = 8388608\n";
  return c.parsed();
}

std::vector<std::uint32_t> promptFor(std::uint64_t salt) {
  return testing::promptFor(salt, testing::kLongPrompts);
}

SubmitRequest request(Tenant tenant, std::span<const std::uint32_t> prompt, std::uint64_t tag = 0) {
  return testing::makeRequest(tenant, prompt, 4, tag);
}

ClientOptions options(const std::string& socket) {
  ClientOptions o;
  o.socket_path = socket;
  o.client_name = "it";
  return o;
}

class ClientDaemon : public testing::TempDirTest {
 protected:
  ClientDaemon() : TempDirTest("fairsched-it") {}
};

// Submits `n` requests for each of `tenants` and checks every completion;
// returns a description of the first problem, or "".
std::string runClient(const std::string& socket, const std::vector<std::string>& tenants, int n) {
  auto client = Client::connect(options(socket));
  if (!client) return "connect: " + client.error().message;
  std::map<RequestId, std::uint64_t> expected;  // id -> checksum
  std::vector<Completion> done;
  std::map<RequestId, int> seen;
  auto drain = [&] {
    done.clear();
    client->poll(done);
    for (const Completion& c : done) {
      ++seen[c.request_id];
      if (c.status != Status::kOk) return std::string("status ") + std::string(toString(c.status));
      if (c.checksum != expected[c.request_id]) return std::string("checksum mismatch");
    }
    return std::string();
  };
  std::uint64_t salt = static_cast<std::uint64_t>(getpid()) << 20;
  for (const std::string& name : tenants) {
    auto tenant = client->openTenant(name);
    if (!tenant) return "open " + name + ": " + tenant.error().message;
    for (int i = 0; i < n; ++i, ++salt) {
      const auto prompt = promptFor(salt);
      for (;;) {
        auto id = client->submit(request(*tenant, prompt, salt));
        if (id) {
          expected[*id] = kernels::workloadChecksum(prompt);
          break;
        }
        if (id.error().code != ErrorCode::kRingFull) return "submit: " + id.error().message;
        (void)client->wait(10ms);
        if (auto e = drain(); !e.empty()) return e;
      }
    }
  }
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (seen.size() < expected.size() && std::chrono::steady_clock::now() < until) {
    (void)client->wait(50ms);
    if (auto e = drain(); !e.empty()) return e;
  }
  if (seen.size() != expected.size()) {
    return std::to_string(expected.size() - seen.size()) + " requests never completed";
  }
  for (const auto& [id, count] : seen) {
    if (count != 1)
      return "request " + std::to_string(id) + " completed " + std::to_string(count) + " times";
  }
  return "";
}

// Three client processes with two tenants each ("<prefix><p>a", "<prefix><p>b"),
// `n` requests per tenant, all checked by runClient.
void runClientProcesses(const std::string& socket, const std::string& prefix, int n) {
  testing::ProcessGroup clients;
  for (int p = 0; p < 3; ++p) {
    const std::string base = prefix + std::to_string(p);
    clients.spawnChecked("client " + std::to_string(p), [&] {
      return runClient(socket, {base + "a", base + "b"}, n);
    });
  }
  EXPECT_TRUE(clients.waitAll(testing::ProcessGroup::in(120s)))
      << "a client process failed or did not end within 120 s";
}

TEST_F(ClientDaemon, StressManyProcessesAndTenantsEachRequestCompletesOnce) {
  auto started = daemon::ForkedDaemon::start(makeConfig(socket(), 20.0));
  ASSERT_TRUE(started.ok()) << started.error().message;
  auto& d = started.value();
  runClientProcesses(d.socket(), "t", 400);
  EXPECT_EQ(d.terminate(), 0);
}

// While one client keeps the daemon awake, another goes quiet long enough
// for the daemon to stop looking at its rings (Server::kDemoteAfterNs) and
// then submits: its doorbell brings it back, and its request completes
// although the daemon never slept.
TEST_F(ClientDaemon, AQuietClientIsHeardAgainWhileAnotherKeepsTheDaemonBusy) {
  auto started = daemon::ForkedDaemon::start(makeConfig(socket(), 0.0));
  ASSERT_TRUE(started) << started.error().message;
  auto busy = Client::connect(options(socket()));
  auto quiet = Client::connect(options(socket()));
  ASSERT_TRUE(busy && quiet);
  auto busy_tenant = busy->openTenant("busy");
  auto quiet_tenant = quiet->openTenant("quiet");
  ASSERT_TRUE(busy_tenant && quiet_tenant);
  const auto prompt = promptFor(7);

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> busy_done{0};
  std::thread load([&] {
    std::vector<Completion> got;
    const auto until = std::chrono::steady_clock::now() + 20s;
    std::uint64_t in_flight = 0;
    while (!stop.load() && std::chrono::steady_clock::now() < until) {
      if (in_flight < 8 && busy->submit(request(*busy_tenant, prompt))) ++in_flight;
      got.clear();
      const std::size_t n = busy->poll(got);
      in_flight -= n;
      busy_done += n;
    }
  });
  auto one = [&]() -> std::optional<Completion> {
    auto id = quiet->submit(request(*quiet_tenant, prompt));
    if (!id) return std::nullopt;
    std::vector<Completion> got;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (got.empty() && std::chrono::steady_clock::now() < until) {
      (void)quiet->wait(100ms);
      quiet->poll(got);
    }
    if (got.empty()) return std::nullopt;
    return got[0];
  };
  const ::testing::AssertionResult busy_now =
      testing::waitUntil([&] { return busy_done.load() >= 100; }, 10s,
                         "100 completions for the busy client (the daemon busy)", 50us);
  if (!busy_now) {
    stop = true;
    load.join();
  }
  ASSERT_TRUE(busy_now);
  auto first = one();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, Status::kOk);
  const std::uint64_t rings_before = quiet->stats().doorbell_rings;
  const std::uint64_t busy_before = busy_done.load();
  std::this_thread::sleep_for(50ms);  // quiet for 25 times the demotion delay
  ASSERT_GT(busy_done.load(), busy_before) << "the other client stopped keeping the daemon busy";
  auto second = one();
  stop = true;
  load.join();
  ASSERT_TRUE(second) << "the quiet client's request never completed";
  EXPECT_EQ(second->status, Status::kOk);
  EXPECT_EQ(second->checksum, kernels::workloadChecksum(prompt));
  EXPECT_GT(quiet->stats().doorbell_rings, rings_before)
      << "the daemon still looked at the quiet client's rings: the path was not exercised";
  EXPECT_EQ(started.value().terminate(), 0);
}

TEST_F(ClientDaemon, CudaEndpointServesConcurrentClientsWithTheirOwnChecksums) {
#if FAIRSCHED_HAVE_CUDA
  if (const auto device = daemon::CudaExecutor::checkDevice(0); !device)
    GTEST_SKIP() << "no CUDA device: " << device.error().message;
#else
  GTEST_SKIP() << "built without CUDA (nvcc not found at configure time)";
#endif
  auto started = daemon::ForkedDaemon::start(makeConfig(socket(), 0.0, "cuda"));
  ASSERT_TRUE(started.ok()) << started.error().message;
  auto& d = started.value();
  runClientProcesses(d.socket(), "g", 300);
  EXPECT_EQ(d.terminate(), 0);
}

// A batch the executor does not finish within batch_timeout_ms ends its
// requests EXECUTOR_FAILED; its late result is dropped, not delivered a
// second time, and the endpoint serves again once the executor returns the
// slot. The modelled service is 25 ms per token: 44 tokens take 1.1 s, past
// the 300 ms timeout; 5 tokens take 125 ms, within it.
TEST_F(ClientDaemon, AHungBatchEndsItsRequestsExecutorFailedOnceAndServingGoesOn) {
  config::Config cfg = makeConfig(socket(), 0.0);
  cfg.endpoints[0].cpu.per_token_us = 25000.0;
  cfg.endpoints[0].batch_timeout_ms = 300;
  auto started = daemon::ForkedDaemon::start(cfg);
  ASSERT_TRUE(started.ok()) << started.error().message;
  auto& d = started.value();
  auto client = Client::connect(options(socket()));
  ASSERT_TRUE(client) << client.error().message;
  auto tenant = client->openTenant("acme");
  ASSERT_TRUE(tenant);
  const auto long_prompt = promptFor(39);  // 40 tokens
  const auto short_prompt = promptFor(0);  // 1 token
  auto hung = client->submit(request(*tenant, long_prompt));
  ASSERT_TRUE(hung);
  std::map<RequestId, std::vector<Completion>> seen;
  std::vector<Completion> done;
  auto collect = [&](std::chrono::milliseconds for_how_long) {
    const auto until = std::chrono::steady_clock::now() + for_how_long;
    while (std::chrono::steady_clock::now() < until) {
      (void)client->wait(20ms);
      done.clear();
      client->poll(done);
      for (const Completion& c : done) seen[c.request_id].push_back(c);
    }
  };
  for (int i = 0; i < 200 && seen.empty(); ++i) collect(50ms);
  ASSERT_EQ(seen[*hung].size(), 1u);
  EXPECT_EQ(seen[*hung][0].status, Status::kExecutorFailed);
  auto next = client->submit(request(*tenant, short_prompt));
  ASSERT_TRUE(next);
  for (int i = 0; i < 200 && seen.count(*next) == 0; ++i) collect(50ms);
  collect(200ms);  // room for a (wrong) second completion of the hung request
  EXPECT_EQ(seen[*hung].size(), 1u) << "the late result must be dropped";
  ASSERT_EQ(seen[*next].size(), 1u);
  EXPECT_EQ(seen[*next][0].status, Status::kOk);
  EXPECT_EQ(seen[*next][0].checksum, kernels::workloadChecksum(short_prompt));
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(ClientDaemon, DaemonDeathEndsOutstandingRequestsAndTheClientReconnects) {
  const config::Config slow = makeConfig(socket(), 20000.0);  // 20 ms per batch
  auto started = daemon::ForkedDaemon::start(slow);
  ASSERT_TRUE(started.ok()) << started.error().message;
  auto daemon1 = std::make_optional(std::move(started).value());

  ClientOptions opts = options(socket());
  opts.reconnect.enabled = true;
  opts.reconnect.initial_delay = 10ms;
  opts.reconnect.max_delay = 50ms;
  auto client = Client::connect(opts);
  ASSERT_TRUE(client) << client.error().message;
  auto tenant = client->openTenant("acme");
  ASSERT_TRUE(tenant);
  const auto prompt = promptFor(7);
  std::size_t submitted = 0;
  for (int i = 0; i < 100; ++i) {
    if (client->submit(request(*tenant, prompt))) {
      ++submitted;
    }
  }
  ASSERT_GT(submitted, 0u);
  std::this_thread::sleep_for(5ms);
  daemon1->kill();

  // Every outstanding request ends exactly once: from the daemon before it
  // died, or made up locally as SHUTTING_DOWN.
  std::vector<Completion> done;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (done.size() < submitted && std::chrono::steady_clock::now() < until) {
    (void)client->wait(20ms);
    client->poll(done);
  }
  ASSERT_EQ(done.size(), submitted);
  std::size_t local = 0;
  for (const Completion& c : done) {
    EXPECT_TRUE(c.status == Status::kOk || c.status == Status::kShuttingDown);
    local += c.local ? 1 : 0;
  }
  EXPECT_GT(local, 0u) << "some requests were still queued when the daemon died";

  // The daemon comes back; the client reconnects and serves again.
  auto restarted = daemon::ForkedDaemon::start(slow);
  ASSERT_TRUE(restarted.ok()) << restarted.error().message;
  Result<RequestId> id = client->submit(request(*tenant, prompt));
  for (const auto retry_until = std::chrono::steady_clock::now() + 20s;
       !id && std::chrono::steady_clock::now() < retry_until;) {
    id = client->submit(request(*tenant, prompt));
    if (!id) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(id) << id.error().message;
  done.clear();
  const auto until2 = std::chrono::steady_clock::now() + 10s;
  while (done.empty() && std::chrono::steady_clock::now() < until2) {
    (void)client->wait(50ms);
    client->poll(done);
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].request_id, *id);
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(done[0].checksum, kernels::workloadChecksum(prompt));
  EXPECT_GE(client->stats().reconnects, 1u);
  EXPECT_EQ(restarted.value().terminate(), 0);
}

}  // namespace
}  // namespace fairsched
