// Quota usage survives a restart of a real fairschedd: a tenant with 1000
// requests a day that used 600 gets 400 more after a SIGTERM restart, not
// 1000; after kill -9 it gets at most what it used in the last state
// interval more; `fairschedctl status` says how old the state file is.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/ctl/admin_client.hpp"
#include "fairsched/client.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/requests.hpp"
#include "tests/support/temp_dir_test.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

class RestartState : public testing::TempDirTest {
 protected:
  RestartState() : TempDirTest("fairsched-restart") {}

  config::Config config() const {
    testing::DaemonConfigText c;
    c.socket = socket();
    c.test_event_loop = true;
    c.state_dir = dir_ + "/state";
    c.daemon_extra = "state_interval_s = 1\nshutdown_grace_ms = 1000\n";
    c.body =
        "[endpoints.chat]\nmax_batch_requests = 64\nmax_batch_tokens = 8192\nmax_wait_us = 0\n"
        "max_output_tokens = 8\nlimits = [\"1000 requests/day\"]\n"
        "[endpoints.chat.cpu]\nper_batch_us = 0.0\nper_token_us = 0.0\nthreads = 1\n"
        "workload = false\n";
    c.client_extra = "admin = true\n";
    return c.parsed();
  }
  std::optional<daemon::ForkedDaemon> start() {
    auto d = daemon::ForkedDaemon::start(config());
    if (!d) {
      ADD_FAILURE() << d.error().message;
      return std::nullopt;
    }
    return std::move(d).value();
  }
  // Sends `n` requests of tenant `name`, every one answered; how many were OK
  // (the others must be RATE_LIMITED).
  int send(const std::string& name, int n) {
    ClientOptions o;
    o.socket_path = socket();
    auto client = Client::connect(o);
    if (!client) {
      ADD_FAILURE() << client.error().message;
      return -1;
    }
    auto tenant = client->openTenant(name);
    if (!tenant) {
      ADD_FAILURE() << tenant.error().message;
      return -1;
    }
    const std::vector<std::uint32_t> prompt{1, 2, 3};
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      auto done = client->submitAndWait(testing::makeRequest(*tenant, prompt, 1), 10s);
      if (!done) {
        ADD_FAILURE() << done.error().message;
        return -1;
      }
      if (done->status == Status::kOk) {
        ++ok;
      } else {
        EXPECT_EQ(done->status, Status::kRateLimited);
      }
    }
    return ok;
  }
  json stateFile() {
    auto r = daemon::adminCommand(socket(), shm::AdminCommand::kStatus);
    if (!r || r->status != shm::ControlStatus::kOk) return json();
    const json j = json::parse(r->json, nullptr, false);
    return j.is_discarded() ? json() : j["state_file"];
  }
};

TEST_F(RestartState, ADayOfQuotaUsedBeforeASigtermRestartStaysUsed) {
  {
    auto d = start();
    ASSERT_TRUE(d);
    EXPECT_EQ(send("org-1", 600), 600);
    EXPECT_EQ(d->terminate(), 0);
  }
  auto d = start();
  ASSERT_TRUE(d);
  const json st = stateFile();
  ASSERT_TRUE(st.is_object());
  EXPECT_TRUE(st["enabled"].get<bool>());
  EXPECT_EQ(st["at_start"], "restored 1 tenant states");
  EXPECT_GE(st["age_s"].get<double>(), 0.0);
  EXPECT_EQ(send("org-1", 500), 400) << "the day's 1000 requests are 600 used";
}

TEST_F(RestartState, AfterKillNineAtMostTheLastIntervalsUsageIsForgotten) {
  auto d = start();
  ASSERT_TRUE(d);
  EXPECT_EQ(send("org-2", 600), 600);
  // The periodic write that includes them (state_interval_s = 1).
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!stateFile().value("up_to_date", false) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(stateFile().value("up_to_date", false)) << "no state written within 10 s";
  EXPECT_EQ(stateFile().value("tenant_states", 0), 1);
  EXPECT_EQ(send("org-2", 100), 100);  // within the next interval: may be lost
  d->kill();
  d.reset();
  auto again = start();
  ASSERT_TRUE(again);
  const json st = stateFile();
  const int ok = send("org-2", 1000);
  EXPECT_LE(ok, 400) << "the 600 written before the crash stay used; the state file: " << st;
  EXPECT_GE(ok, 300) << "no more than the 700 sent were counted";
}

}  // namespace
}  // namespace fairsched
