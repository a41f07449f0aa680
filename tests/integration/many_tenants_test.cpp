// Ten thousand tenants on one connection against a real fairschedd (forked):
// through the C ABI every tenant is opened in one pipelined batch and each
// gets a request that completes OK with its own checksum; closing half of
// them releases them in the daemon; and a client killed with 10,000 tenants
// open leaves the daemon's descriptors, mappings and tenant handles as they
// were before it came.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/config/config.hpp"
#include "daemon/ctl/admin_client.hpp"
#include "fairsched/fairsched.h"
#include "kernels/workload_reference.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/requests.hpp"
#include "tests/support/temp_dir_test.hpp"
#include "tests/support/wait_until.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kTenants = 10'000;

config::Config makeConfig(const std::string& socket) {
  testing::DaemonConfigText c;
  c.socket = socket;
  c.test_event_loop = true;
  // Released tenants are forgotten at once: the tenant table shows the
  // daemon back at its baseline.
  c.daemon_extra = "tenant_idle_timeout_s = 0\n";
  c.body =
      "[endpoints.chat]\nmax_batch_requests = 64\nmax_batch_tokens = 65536\nmax_wait_us = 50\n"
      "max_output_tokens = 16\n"
      "[endpoints.chat.cpu]\nper_batch_us = 20.0\nper_token_us = 0.0\nthreads = 1\n";
  c.client_extra = "admin = true\n";
  return c.parsed();
}

std::string tenantName(std::size_t i) {
  return "org-" + std::to_string(i);
}

std::vector<std::uint32_t> promptFor(std::uint64_t salt) {
  return testing::promptFor(salt, testing::kShortPrompts);
}

class ManyTenants : public testing::TempDirTest {
 protected:
  ManyTenants() : TempDirTest("fairsched-many") {}

  void SetUp() override {
    TempDirTest::SetUp();
    auto started = daemon::ForkedDaemon::start(makeConfig(socket()));
    ASSERT_TRUE(started) << started.error().message;
    daemon_.emplace(std::move(started).value());
  }

  json status() {
    auto r = daemon::adminCommand(daemon_->socket(), shm::AdminCommand::kStatus);
    if (!r) {
      ADD_FAILURE() << r.error().message;
      return json();
    }
    return json::parse(r->json, nullptr, false);
  }
  std::uint64_t handlesOpen() {
    const json s = status();
    return s.is_object() ? s["counters"].value("tenant_handles_open", ~0ull) : ~0ull;
  }
  std::uint64_t tenantsKnown() {
    const json s = status();
    return s.is_object() ? s.value("tenants", ~0ull) : ~0ull;
  }
  // Open descriptors and mapped client segments of the daemon process.
  std::size_t daemonFds() const {
    std::size_t n = 0;
    const std::string dir = "/proc/" + std::to_string(daemon_->pid()) + "/fd";
    if (DIR* d = opendir(dir.c_str())) {
      while (readdir(d) != nullptr) ++n;
      closedir(d);
    }
    return n;
  }
  std::size_t daemonSegmentMappings() const {
    std::ifstream maps("/proc/" + std::to_string(daemon_->pid()) + "/maps");
    std::size_t n = 0;
    for (std::string line; std::getline(maps, line);) {
      if (line.find("fairsched-client") != std::string::npos) ++n;
    }
    return n;
  }

  std::optional<daemon::ForkedDaemon> daemon_;
};

fairsched_client* connectC(const std::string& socket) {
  fairsched_options o;
  fairsched_options_init(&o);
  o.socket_path = socket.c_str();
  o.client_name = "many";
  fairsched_client* c = nullptr;
  if (fairsched_connect(&o, &c) != FAIRSCHED_OK) {
    ADD_FAILURE() << fairsched_last_error_message();
    return nullptr;
  }
  return c;
}

// Opens kTenants tenants on `c` in one batch; their handles.
std::vector<std::uint32_t> openAll(fairsched_client* c) {
  std::vector<std::string> names(kTenants);
  std::vector<const char*> ptrs(kTenants);
  for (std::size_t i = 0; i < kTenants; ++i) {
    names[i] = tenantName(i);
    ptrs[i] = names[i].c_str();
  }
  std::vector<std::uint32_t> handles(kTenants, FAIRSCHED_NO_TENANT);
  const auto t0 = Clock::now();
  const fairsched_error e =
      fairsched_open_tenants(c, ptrs.data(), kTenants, nullptr, handles.data());
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(e, FAIRSCHED_OK) << fairsched_last_error_message();
  std::printf("opened %zu tenants on one connection in %.1f ms (%.0f per second)\n", kTenants,
              s * 1e3, static_cast<double>(kTenants) / s);
  return handles;
}

TEST_F(ManyTenants, TenThousandTenantsOnOneConnectionThroughTheCAbiEachCompleteWithTheirChecksum) {
  fairsched_client* c = connectC(daemon_->socket());
  ASSERT_NE(c, nullptr);
  const std::vector<std::uint32_t> handles = openAll(c);
  ASSERT_EQ(std::set<std::uint32_t>(handles.begin(), handles.end()).size(), kTenants)
      << "a handle of its own for every tenant";
  EXPECT_EQ(handlesOpen(), kTenants);

  std::map<std::uint64_t, std::uint64_t> expected;  // tag (= tenant) -> checksum
  std::map<std::uint64_t, int> seen;
  std::vector<fairsched_completion> done(256);
  std::string problem;
  auto drain = [&] {
    const std::size_t n = fairsched_poll(c, done.data(), done.size());
    for (std::size_t k = 0; k < n; ++k) {
      const fairsched_completion& d = done[k];
      ++seen[d.tag];
      if (problem.empty() && d.status != FAIRSCHED_STATUS_OK) {
        problem = "tenant " + std::to_string(d.tag) + " status " + std::to_string(d.status);
      }
      if (problem.empty() && d.checksum != expected[d.tag]) {
        problem = "tenant " + std::to_string(d.tag) + ": another request's checksum";
      }
    }
  };
  for (std::size_t i = 0; i < kTenants; ++i) {
    const std::vector<std::uint32_t> prompt = promptFor(i + 1);
    expected[i] = kernels::workloadChecksum(prompt);
    fairsched_submit_request r;
    fairsched_submit_request_init(&r);
    r.tenant = handles[i];
    r.endpoint = "chat";
    r.prompt = prompt.data();
    r.prompt_tokens = prompt.size();
    r.max_output_tokens = 4;
    r.tag = i;
    for (;;) {
      const fairsched_error e = fairsched_submit(c, &r, nullptr);
      if (e == FAIRSCHED_OK) break;
      ASSERT_EQ(e, FAIRSCHED_ERR_RING_FULL) << fairsched_last_error_message();
      (void)fairsched_wait(c, 10'000'000);
      drain();
    }
  }
  const auto until = Clock::now() + 60s;
  while (seen.size() < kTenants && Clock::now() < until) {
    (void)fairsched_wait(c, 50'000'000);
    drain();
  }
  EXPECT_EQ(problem, "");
  ASSERT_EQ(seen.size(), kTenants) << "every tenant's request completed";
  for (const auto& [tag, n] : seen) ASSERT_EQ(n, 1) << "tenant " << tag << " completed twice";

  // Half of them released: the daemon holds the other half.
  for (std::size_t i = 0; i < kTenants; i += 2) {
    ASSERT_EQ(fairsched_close_tenant(c, handles[i]), FAIRSCHED_OK)
        << fairsched_last_error_message();
  }
  EXPECT_EQ(handlesOpen(), kTenants / 2);
  fairsched_submit_request r;
  fairsched_submit_request_init(&r);
  r.tenant = handles[0];
  r.endpoint = "chat";
  r.max_output_tokens = 1;
  EXPECT_EQ(fairsched_submit(c, &r, nullptr), FAIRSCHED_ERR_UNKNOWN_TENANT);
  fairsched_close(c);
  EXPECT_TRUE(testing::waitUntil([&] { return handlesOpen() == 0; }, 10s,
                                 "the daemon releases the rest with the connection"));
}

TEST_F(ManyTenants, AClientKilledWithTenThousandTenantsOpenLeavesTheDaemonAsItWas) {
  // The baseline: the daemon with no client. The connection that checked
  // it was up may still be open a moment: read until two reads agree, and
  // compare with at most that afterwards.
  std::size_t fds_before = daemonFds();
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(20ms);
    const std::size_t again = daemonFds();
    if (again == fds_before) break;
    fds_before = again;
  }
  const std::size_t maps_before = daemonSegmentMappings();
  const std::uint64_t tenants_before = tenantsKnown();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    fairsched_client* c = connectC(daemon_->socket());
    if (c == nullptr) _exit(1);
    const std::vector<std::uint32_t> handles = openAll(c);
    // Requests for the first thousand, some queued when the kill comes.
    const std::vector<std::uint32_t> prompt = promptFor(7);
    for (std::size_t i = 0; i < 1000; ++i) {
      fairsched_submit_request r;
      fairsched_submit_request_init(&r);
      r.tenant = handles[i];
      r.endpoint = "chat";
      r.prompt = prompt.data();
      r.prompt_tokens = prompt.size();
      r.max_output_tokens = 16;
      (void)fairsched_submit(c, &r, nullptr);
    }
    const char one = 1;
    if (write(ready[1], &one, 1) != 1) _exit(1);
    for (;;) pause();  // until killed
  }
  close(ready[1]);
  char got = 0;
  ASSERT_EQ(read(ready[0], &got, 1), 1) << "the child opened its tenants";
  close(ready[0]);
  EXPECT_EQ(handlesOpen(), kTenants);
  EXPECT_GE(tenantsKnown(), tenants_before + kTenants);
  EXPECT_GT(daemonSegmentMappings(), maps_before);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(testing::waitUntil([&] { return handlesOpen() == 0; }, 10s, "handles released"));
  EXPECT_TRUE(testing::waitUntil([&] { return tenantsKnown() == tenants_before; }, 20s,
                                 "the 10,000 tenants forgotten"));
  EXPECT_TRUE(testing::waitUntil([&] { return daemonSegmentMappings() == maps_before; }, 10s,
                                 "the segment unmapped"));
  EXPECT_TRUE(testing::waitUntil([&] { return daemonFds() <= fds_before; }, 10s,
                                 "descriptors back to " + std::to_string(fds_before)));
  EXPECT_EQ(daemon_->terminate(), 0);
}

}  // namespace
}  // namespace fairsched
