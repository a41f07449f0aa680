// A client that floods the daemon with submissions its limits refuse, and
// resubmits at once, gets no more rejections than its connection's budget
// ([daemon] max_rejections_per_s; daemon/server/reject_budget.hpp): the rest
// wait in its rings and it meets RING_FULL. Meanwhile another client's
// requests are all served. Structural checks only: the bound on rejections
// follows from the budget and the time the flood lasted, whatever the speed
// of the machine.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
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
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kRejectionsPerS = 2000;
constexpr std::uint64_t kBurst = 64;  // max(64, per_s / 50)

class Flood : public testing::TempDirTest {
 protected:
  Flood() : TempDirTest("fairsched-flood") {}

  config::Config config() const {
    testing::DaemonConfigText c;
    c.socket = socket();
    c.test_event_loop = true;
    c.daemon_extra = "max_rejections_per_s = " + std::to_string(kRejectionsPerS) + "\n";
    c.body =
        "[endpoints.chat]\nmax_batch_requests = 16\nmax_batch_tokens = 8192\nmax_wait_us = 0\n"
        "max_output_tokens = 8\n"
        "[endpoints.chat.cpu]\nper_batch_us = 50.0\nper_token_us = 0.0\nthreads = 1\n"
        "workload = false\n"
        "[tenants.flood.limits]\nchat = [\"10 requests/minute\"]\n";
    c.client_extra = "admin = true\n";
    return c.parsed();
  }
  Result<Client> connect() const {
    ClientOptions o;
    o.socket_path = socket();
    return Client::connect(o);
  }
};

TEST_F(Flood, RejectionsStayWithinTheConnectionsBudgetAndOtherClientsAreServed) {
  auto d = daemon::ForkedDaemon::start(config());
  ASSERT_TRUE(d) << d.error().message;

  std::atomic<bool> stop{false};
  std::uint64_t rejected = 0, admitted = 0, ring_full = 0, other = 0;
  Clock::time_point flood_start, last_answer;
  std::string flood_error;
  std::thread flooder([&] {
    auto client = connect();
    if (!client) {
      flood_error = client.error().message;
      return;
    }
    auto tenant = client->openTenant("flood");
    if (!tenant) {
      flood_error = tenant.error().message;
      return;
    }
    const std::vector<std::uint32_t> prompt{7, 8};
    std::vector<Completion> done;
    std::uint64_t submitted = 0;
    auto take = [&] {
      done.clear();
      const std::size_t n = client->poll(done, 256);
      for (std::size_t i = 0; i < n; ++i) {
        last_answer = Clock::now();
        if (done[i].status == Status::kRateLimited) {
          ++rejected;
        } else if (done[i].status == Status::kOk) {
          ++admitted;
        } else {
          ++other;
        }
      }
      return n;
    };
    flood_start = Clock::now();
    while (!stop.load(std::memory_order_relaxed)) {
      auto r = client->submit(testing::makeRequest(*tenant, prompt, 1));
      if (r) {
        ++submitted;
      } else if (r.error().code == ErrorCode::kRingFull) {
        ++ring_full;
      } else {
        flood_error = r.error().message;
        return;
      }
      take();
    }
    // Every submission is answered; the budget paces what is left.
    const auto until = Clock::now() + 30s;
    while (rejected + admitted + other < submitted && Clock::now() < until) {
      if (take() == 0) (void)client->wait(10ms);
    }
    if (rejected + admitted + other != submitted) flood_error = "answers missing";
  });

  // Meanwhile another client's requests, one after another, all served.
  {
    auto client = connect();
    ASSERT_TRUE(client) << client.error().message;
    auto tenant = client->openTenant("steady");
    ASSERT_TRUE(tenant) << tenant.error().message;
    const std::vector<std::uint32_t> prompt{1, 2, 3};
    for (int i = 0; i < 100; ++i) {
      auto done = client->submitAndWait(testing::makeRequest(*tenant, prompt, 1), 10s);
      ASSERT_TRUE(done) << done.error().message;
      ASSERT_EQ(done->status, Status::kOk) << "request " << i;
    }
  }
  std::this_thread::sleep_for(300ms);  // the flood goes on a little longer
  stop = true;
  flooder.join();
  ASSERT_EQ(flood_error, "");
  EXPECT_EQ(admitted, 10u) << "its limit admits 10 a minute";
  EXPECT_EQ(other, 0u);
  EXPECT_GT(ring_full, 0u) << "its cells waited in its rings: back-pressure";
  // Rejections made between its first submission and its last answer: at
  // most the budget over that time, its burst, and one pass of overshoot.
  const double seconds = std::chrono::duration<double>(last_answer - flood_start).count();
  const double bound = static_cast<double>(kRejectionsPerS) * seconds + kBurst + 64;
  EXPECT_LE(static_cast<double>(rejected), bound)
      << rejected << " rejections in " << seconds << " s";
  EXPECT_GT(rejected, 0u);
  std::printf("flood: %llu rejections in %.2f s (budget %llu/s), %llu RING_FULL\n",
              static_cast<unsigned long long>(rejected), seconds,
              static_cast<unsigned long long>(kRejectionsPerS),
              static_cast<unsigned long long>(ring_full));

  auto status = daemon::adminCommand(socket(), shm::AdminCommand::kStatus);
  ASSERT_TRUE(status);
  const auto j = nlohmann::json::parse(status->json);
  EXPECT_GT(j["counters"]["reject_throttled"].get<std::uint64_t>(), 0u);
}

}  // namespace
}  // namespace fairsched
