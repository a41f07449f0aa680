// The daemon going away: every outstanding request completes locally with
// SHUTTING_DOWN, exactly once; blocked wait() calls return promptly with
// kDaemonLost; a killed daemon process is noticed like a closed socket; and
// with a reconnect policy the client comes back (fresh Hello, tenants
// reopened) without resubmitting anything.
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "client_test_util.hpp"
#include "tests/support/requests.hpp"

namespace fairsched::testing {
namespace {

SubmitRequest request(Tenant t, std::uint64_t tag) {
  return makeRequest(t, {}, 1, tag);
}

// Submits `n` requests for `t` (tags first_tag, first_tag + 1, ...) and
// waits until `fake` holds them all.
::testing::AssertionResult submitHeld(Client& client, FakeDaemon& fake, Tenant t, std::uint64_t n,
                                      std::uint64_t first_tag = 0) {
  for (std::uint64_t i = 0; i < n; ++i) {
    if (!client.submit(request(t, first_tag + i))) {
      return ::testing::AssertionFailure() << "submit " << i << " failed";
    }
  }
  if (!fake.waitHeld(n)) return ::testing::AssertionFailure() << "the fake never held " << n;
  return ::testing::AssertionSuccess();
}

// The completions poll() has now.
std::vector<Completion> pollNow(Client& client) {
  std::vector<Completion> got;
  client.poll(got);
  return got;
}

void expectAllShuttingDown(const std::vector<Completion>& got, std::size_t n) {
  ASSERT_EQ(got.size(), n);
  std::set<std::uint64_t> tags;
  std::set<RequestId> ids;
  for (const Completion& c : got) {
    EXPECT_EQ(c.status, Status::kShuttingDown);
    EXPECT_TRUE(c.local);
    tags.insert(c.tag);
    ids.insert(c.request_id);
  }
  EXPECT_EQ(tags.size(), n);
  EXPECT_EQ(ids.size(), n);
}

TEST(ClientDaemonLoss, OutstandingRequestsCompleteShuttingDownAndWaitSaysDaemonLost) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll);
  const Tenant t = mustOpen(client, "acme");
  ASSERT_TRUE(submitHeld(client, fake, t, 10));

  fake.dropClients();
  const auto before = Clock::now();
  Result<void> w = client.wait(30s);
  EXPECT_LT(Clock::now() - before, 5s);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.code(), ErrorCode::kDaemonLost);
  EXPECT_FALSE(client.connected());

  expectAllShuttingDown(pollNow(client), 10);
  EXPECT_EQ(client.outstanding(), 0u);
  EXPECT_EQ(client.stats().local_completions, 10u);
  EXPECT_EQ(client.stats().connections_lost, 1u);

  // Nothing more comes, and the connection stays gone without a policy.
  EXPECT_TRUE(pollNow(client).empty());
  EXPECT_EQ(client.wait(10ms).code(), ErrorCode::kNotConnected);
  EXPECT_EQ(client.submit(request(t, 99)).code(), ErrorCode::kNotConnected);
  EXPECT_EQ(client.prepareToBlock().code(), ErrorCode::kNotConnected);
}

TEST(ClientDaemonLoss, CompletionsPublishedBeforeTheLossAreDeliveredAsSent) {
  FakeDaemon fake;
  fake.setResponder([](const shm::SubmissionSlot& s, std::span<const std::uint32_t> p) {
    return s.tag % 2 == 0 ? okCompletion(s, p) : std::nullopt;
  });
  fake.start();
  ClientOptions o = optionsFor(fake);
  Client client = mustConnect(o);
  const Tenant t = mustOpen(client, "acme");
  for (std::uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(client.submit(request(t, i)));
  ASSERT_TRUE(fake.waitHeld(3));
  fake.dropClients();

  const std::vector<Completion> got = collect(client, 6);
  ASSERT_EQ(got.size(), 6u);
  for (const Completion& c : got) {
    if (c.tag % 2 == 0) {
      EXPECT_EQ(c.status, Status::kOk) << c.tag;
      EXPECT_FALSE(c.local);
    } else {
      EXPECT_EQ(c.status, Status::kShuttingDown) << c.tag;
      EXPECT_TRUE(c.local);
    }
  }
}

TEST(ClientDaemonLoss, BlockedWaitReturnsPromptly) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll, [](ClientOptions& o) { o.spin = 0ns; });
  const Tenant t = mustOpen(client, "acme");
  ASSERT_TRUE(client.submit(request(t, 1)));

  std::atomic<bool> done{false};
  std::atomic<int> started{0};
  Result<void> result;
  Result<void> second;
  Clock::time_point returned_at;
  std::thread first_waiter([&] {
    ++started;
    result = client.wait(60s);
    returned_at = Clock::now();
    done = true;
  });
  std::thread second_waiter([&] {
    ++started;
    second = client.wait(60s);
  });
  ASSERT_TRUE(fake.waitFor([&] { return started == 2 && fake.clientSleeping(); }, 5000ms));
  std::this_thread::sleep_for(50ms);  // both are past their start, in the sleep phase
  EXPECT_FALSE(done);
  const auto dropped_at = Clock::now();
  fake.dropClients();
  first_waiter.join();
  second_waiter.join();
  EXPECT_LT(returned_at - dropped_at, 5s);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.code(), ErrorCode::kDaemonLost);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.code(), ErrorCode::kDaemonLost);
  expectAllShuttingDown(pollNow(client), 1);
}

TEST(ClientDaemonLoss, PollAloneNoticesTheLoss) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll);
  const Tenant t = mustOpen(client, "acme");
  ASSERT_TRUE(submitHeld(client, fake, t, 3));
  fake.dropClients();
  std::vector<Completion> got;
  const auto deadline = Clock::now() + 5s;
  while (got.size() < 3 && Clock::now() < deadline) {
    client.poll(got);
    std::this_thread::sleep_for(1ms);
  }
  expectAllShuttingDown(got, 3);
}

TEST(ClientDaemonLoss, CompletionFdBecomesReadableOnTheLoss) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll);
  const Tenant t = mustOpen(client, "acme");
  ASSERT_TRUE(submitHeld(client, fake, t, 1, 1));
  ASSERT_EQ(client.prepareToBlock().value(), true);
  fake.dropClients();
  pollfd p{client.completionFd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  expectAllShuttingDown(pollNow(client), 1);
}

TEST(ClientDaemonLoss, SubmitAndWaitGetsShuttingDown) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll);
  const Tenant t = mustOpen(client, "acme");
  Result<Completion> r = Error{ErrorCode::kSystem, 0, "not run"};
  std::thread waiter([&] { r = client.submitAndWait(request(t, 8), 60s); });
  ASSERT_TRUE(fake.waitHeld(1));
  fake.dropClients();
  waiter.join();
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(r->tag, 8u);
  EXPECT_EQ(r->status, Status::kShuttingDown);
  EXPECT_TRUE(r->local);
}

TEST(ClientDaemonLoss, KilledDaemonProcessIsNoticed) {
  char dir[] = "/tmp/fairsched-client-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/fairsched.sock";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FakeDaemonOptions fo;
    fo.socket_path = path;
    FakeDaemon fake(fo);
    fake.setResponder(holdAll);
    fake.serve();
    ::_exit(0);
  }
  // The socket file appears at bind(), before listen(): wait until a
  // connection is accepted, and never leave the child behind.
  struct KillChild {
    pid_t pid;
    ~KillChild() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } guard{child};
  ClientOptions o;
  o.socket_path = path;
  auto connected = Client::connect(o);
  for (const auto deadline = Clock::now() + 10s; !connected && Clock::now() < deadline;) {
    std::this_thread::sleep_for(1ms);
    connected = Client::connect(o);
  }
  ASSERT_TRUE(connected) << connected.error().toString();
  Client client = std::move(*connected);
  const Tenant t = mustOpen(client, "acme");
  for (std::uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(client.submit(request(t, i)));
  std::this_thread::sleep_for(20ms);  // let the child take them off the ring
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  guard.pid = -1;

  const auto before = Clock::now();
  Result<void> w = client.wait(30s);
  EXPECT_LT(Clock::now() - before, 5s);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.code(), ErrorCode::kDaemonLost);
  expectAllShuttingDown(pollNow(client), 5);
  ::unlink(path.c_str());
  ::rmdir(dir);
}

TEST(ClientReconnect, ComesBackAndReopensTenantsWithoutResubmitting) {
  FakeDaemon fake;
  fake.start();
  ClientOptions o = optionsFor(fake);
  o.reconnect.enabled = true;
  o.reconnect.initial_delay = 10ms;
  Client client = mustConnect(o);
  Result<Tenant> t = client.openTenant("acme", "gold");
  ASSERT_TRUE(t);
  ASSERT_TRUE(client.submit(request(*t, 1)));
  ASSERT_EQ(collect(client, 1).size(), 1u);

  fake.setResponder(holdAll);
  ASSERT_TRUE(client.submit(request(*t, 2)));
  ASSERT_TRUE(fake.waitHeld(1));
  fake.dropClients();
  fake.setResponder(okCompletion);
  EXPECT_EQ(client.wait(30s).code(), ErrorCode::kDaemonLost);
  std::vector<Completion> lost;
  client.poll(lost);
  expectAllShuttingDown(lost, 1);

  // The next call reconnects: a fresh Hello, acme reopened with its tier,
  // the same handle; request 2 is not resubmitted.
  Result<RequestId> id = client.submit(request(*t, 3));
  ASSERT_TRUE(id) << id.error().toString();
  EXPECT_TRUE(client.connected());
  const std::vector<Completion> got = collect(client, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tag, 3u);
  EXPECT_EQ(got[0].status, Status::kOk);
  EXPECT_EQ(fake.hellos(), 2u);
  const auto opened = fake.tenantsOpened();
  ASSERT_EQ(opened.size(), 2u);
  EXPECT_EQ(opened[1], std::make_pair(std::string("acme"), std::string("gold")));
  EXPECT_EQ(fake.submissions(), 3u);
  EXPECT_EQ(client.stats().reconnects, 1u);
  EXPECT_EQ(client.outstanding(), 0u);
}

TEST(ClientReconnect, BacksOffWhileTheDaemonIsAway) {
  char dir[] = "/tmp/fairsched-client-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  FakeDaemonOptions fo;
  fo.socket_path = std::string(dir) + "/fairsched.sock";
  auto fake = std::make_unique<FakeDaemon>(fo);
  fake->start();
  ClientOptions o = optionsFor(*fake);
  o.reconnect.enabled = true;
  o.reconnect.initial_delay = 50ms;
  Client client = mustConnect(o);
  const Tenant t = mustOpen(client, "acme");
  fake->dropClients();
  EXPECT_EQ(client.wait(30s).code(), ErrorCode::kDaemonLost);
  fake.reset();  // the daemon is gone, its socket file too

  EXPECT_EQ(client.submit(request(t, 1)).code(), ErrorCode::kNotConnected);  // attempt 1 fails
  EXPECT_EQ(client.submit(request(t, 2)).code(), ErrorCode::kNotConnected);  // too early to retry

  FakeDaemon back(fo);
  back.start();
  Result<RequestId> id = Error{ErrorCode::kNotConnected, 0, ""};
  const auto deadline = Clock::now() + 10s;
  while (!(id = client.submit(request(t, 3))) && Clock::now() < deadline) {
    EXPECT_EQ(id.code(), ErrorCode::kNotConnected);
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(id) << id.error().toString();
  EXPECT_EQ(collect(client, 1).size(), 1u);
  EXPECT_EQ(back.hellos(), 1u);
  back.stop();
  ::unlink(fo.socket_path.c_str());
  ::rmdir(dir);
}

TEST(ClientReconnect, WithoutAPolicyOnlyAnExplicitReconnectComesBack) {
  FakeDaemon fake;
  Client client = startAndConnect(fake);
  const Tenant t = mustOpen(client, "acme");
  fake.dropClients();
  EXPECT_EQ(client.wait(30s).code(), ErrorCode::kDaemonLost);
  EXPECT_EQ(client.submit(request(t, 1)).code(), ErrorCode::kNotConnected);
  EXPECT_EQ(fake.hellos(), 1u);
  Result<void> r = client.reconnect();
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_TRUE(client.submit(request(t, 2)));
  EXPECT_EQ(collect(client, 1).size(), 1u);
  EXPECT_EQ(fake.hellos(), 2u);
}

}  // namespace
}  // namespace fairsched::testing
