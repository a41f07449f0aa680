// A Client's end, and its copies: shutdown() from another thread ends the
// calls that block (kNotConnected) without the destructor's requirement, and
// a child of fork() that inherited a Client cannot use it and, whatever it
// does with it, leaves the parent's connection alone.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>

#include "client_test_util.hpp"
#include "fairsched/fairsched.h"
#include "tests/support/requests.hpp"

namespace fairsched::testing {
namespace {

SubmitRequest request(Tenant t, std::uint64_t tag) {
  return makeRequest(t, {}, 1, tag);
}

TEST(ClientShutdown, EndsABlockedWaitAndEveryLaterCall) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll, [](ClientOptions& o) { o.spin = 0ns; });
  const Tenant t = mustOpen(client, "acme");
  ASSERT_TRUE(client.submit(request(t, 1)));
  ASSERT_TRUE(fake.waitHeld(1));

  std::atomic<bool> started{false};
  Result<void> waited;
  std::thread waiter([&] {
    started = true;
    waited = client.wait(-1ns);
  });
  ASSERT_TRUE(fake.waitFor([&] { return started && fake.clientSleeping(); }, 5000ms));
  client.shutdown();
  waiter.join();
  ASSERT_FALSE(waited);
  EXPECT_EQ(waited.code(), ErrorCode::kNotConnected);
  EXPECT_FALSE(client.connected());
  // The daemon saw the connection go.
  EXPECT_TRUE(fake.waitFor([&] { return fake.connections() == 0; }, 5000ms));

  EXPECT_EQ(client.submit(request(t, 2)).code(), ErrorCode::kNotConnected);
  EXPECT_EQ(client.wait(0ns).code(), ErrorCode::kNotConnected);
  EXPECT_EQ(client.openTenant("other").code(), ErrorCode::kNotConnected);
  EXPECT_EQ(client.reconnect().code(), ErrorCode::kNotConnected);
  // What was outstanding is still handed out, once.
  std::vector<Completion> got;
  client.poll(got);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, Status::kShuttingDown);
  client.shutdown();  // idempotent
}

TEST(ClientShutdown, EndsASubmitAndWaitWithNotConnected) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, holdAll);
  const Tenant t = mustOpen(client, "acme");
  Result<Completion> r = Error{ErrorCode::kSystem, 0, "not run"};
  std::thread waiter([&] { r = client.submitAndWait(request(t, 8), 60s); });
  ASSERT_TRUE(fake.waitHeld(1));
  client.shutdown();
  waiter.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.code(), ErrorCode::kNotConnected);
}

TEST(ClientShutdown, AReconnectPolicyDoesNotComeBack) {
  FakeDaemon fake;
  Client client = startAndConnect(fake, {}, [](ClientOptions& o) {
    o.reconnect.enabled = true;
    o.reconnect.initial_delay = 0ns;
  });
  const Tenant t = mustOpen(client, "acme");
  client.shutdown();
  EXPECT_EQ(client.submit(request(t, 1)).code(), ErrorCode::kNotConnected);
  EXPECT_FALSE(client.connected());
  EXPECT_EQ(fake.hellos(), 1u);
}

// Runs `child` in a child of fork(); its exit status (0: it held).
int inChild(const std::function<int()>& child) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(child());
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ClientFork, AChildCannotUseTheParentsClient) {
  FakeDaemon fake;
  Client client = startAndConnect(fake);
  const Tenant t = mustOpen(client, "acme");
  EXPECT_EQ(inChild([&] {
              if (client.connected()) return 1;
              Result<RequestId> r = client.submit(request(t, 1));
              if (r || r.code() != ErrorCode::kNotConnected) return 2;
              if (r.error().message.find("fork") == std::string::npos) return 3;
              if (client.wait(0ns).code() != ErrorCode::kNotConnected) return 4;
              if (client.openTenant("x").code() != ErrorCode::kNotConnected) return 5;
              std::vector<Completion> got;
              if (client.poll(got) != 0) return 6;
              client.shutdown();  // nothing, in a child
              return 0;
            }),
            0);
  EXPECT_TRUE(client.connected());
  EXPECT_EQ(fake.submissions(), 0u);
  const std::vector<Completion> got = [&] {
    EXPECT_TRUE(client.submit(request(t, 7)));
    return collect(client, 1);
  }();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, Status::kOk);
  EXPECT_EQ(got[0].tag, 7u);
}

TEST(ClientFork, AChildThatDestroysItsCopyLeavesTheParentConnected) {
  FakeDaemon fake;
  std::optional<Client> client(startAndConnect(fake));
  const Tenant t = mustOpen(*client, "acme");
  EXPECT_EQ(inChild([&] {
              client.reset();  // the destructor, in the child
              return 0;
            }),
            0);
  EXPECT_TRUE(client->connected());
  EXPECT_EQ(fake.connections(), 1u);
  ASSERT_TRUE(client->submit(request(t, 3)));
  const std::vector<Completion> got = collect(*client, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, Status::kOk);
  EXPECT_TRUE(client->connected());
}

TEST(ClientFork, AChildThatClosesTheCHandleLeavesTheParentConnected) {
  FakeDaemon fake;
  fake.start();
  fairsched_options o;
  fairsched_options_init(&o);
  const std::string path = fake.socketPath();
  o.socket_path = path.c_str();
  fairsched_client* c = nullptr;
  ASSERT_EQ(fairsched_connect(&o, &c), FAIRSCHED_OK);
  EXPECT_EQ(inChild([&] {
              fairsched_close(c);
              return 0;
            }),
            0);
  EXPECT_EQ(fairsched_connected(c), 1);
  uint32_t tenant = 0;
  EXPECT_EQ(fairsched_open_tenant(c, "acme", nullptr, &tenant), FAIRSCHED_OK);
  fairsched_close(c);
}

}  // namespace
}  // namespace fairsched::testing
