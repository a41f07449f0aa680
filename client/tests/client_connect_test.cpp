// Connecting and opening tenants against a fake daemon: Hello with real
// SCM_RIGHTS, refusals with their reasons, version mismatches, timeouts, and
// the local checks done before anything is sent.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "client_test_util.hpp"

namespace fairsched::testing {
namespace {

TEST(ClientConnect, SaysHelloMapsTheSegmentAndListsEndpoints) {
  FakeDaemon fake;
  Client client = startAndConnect(fake);
  EXPECT_TRUE(client.connected());
  EXPECT_EQ(client.clientId(), 42u);
  const std::vector<EndpointDescription> eps = client.endpoints();
  ASSERT_EQ(eps.size(), 2u);
  EXPECT_EQ(eps[0].name, "chat");
  EXPECT_EQ(eps[0].id, 7);
  EXPECT_EQ(eps[0].max_output_tokens, 4096u);
  EXPECT_EQ(eps[1].name, "embed");
  EXPECT_EQ(eps[1].id, 9);
  EXPECT_EQ(fake.hellos(), 1u);
  EXPECT_GE(client.completionFd(), 0);
}

TEST(ClientConnect, FailsWithConnectFailedWhenNoDaemonListens) {
  ClientOptions o;
  o.socket_path = "/nonexistent-fairsched-dir/fairsched.sock";
  Result<Client> c = Client::connect(o);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.code(), ErrorCode::kConnectFailed);
  EXPECT_NE(c.error().message.find("/nonexistent-fairsched-dir"), std::string::npos);
  EXPECT_EQ(c.error().sys_errno, ENOENT);
}

TEST(ClientConnect, RejectsASocketPathLongerThanSunPath) {
  ClientOptions o;
  o.socket_path = "/tmp/" + std::string(200, 'x');
  Result<Client> c = Client::connect(o);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.code(), ErrorCode::kInvalidArgument);
}

TEST(ClientConnect, RejectsAClientNameThatDoesNotFitTheMessage) {
  FakeDaemon fake;
  fake.start();
  ClientOptions o = optionsFor(fake);
  o.client_name = std::string(64, 'n');
  Result<Client> c = Client::connect(o);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(fake.hellos(), 0u);
}

// What connect() says to a fake daemon that answers Hello with `status`
// and `message`, in protocol version `version`.
Result<Client> connectRefused(shm::ControlStatus status, const std::string& message = "",
                              std::uint16_t version = shm::kControlVersion) {
  FakeDaemonOptions fo;
  fo.hello_status = status;
  fo.hello_message = message;
  fo.reply_version = version;
  FakeDaemon fake(fo);
  fake.start();
  return Client::connect(optionsFor(fake));
}

TEST(ClientConnect, RefusedHelloSurfacesUnauthorizedWithTheDaemonsReason) {
  Result<Client> c =
      connectRefused(shm::ControlStatus::kUnauthorized, "no client rule admits uid 1000");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.code(), ErrorCode::kUnauthorized);
  EXPECT_NE(c.error().message.find("no client rule admits uid 1000"), std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("UNAUTHORIZED"), std::string::npos);
}

TEST(ClientConnect, VersionMismatchStatusIsVersionMismatch) {
  Result<Client> c =
      connectRefused(shm::ControlStatus::kVersionMismatch, "layout version 2 required");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.code(), ErrorCode::kVersionMismatch);
  EXPECT_NE(c.error().message.find("layout version 2 required"), std::string::npos);
}

TEST(ClientConnect, ReplyInAnotherProtocolVersionIsVersionMismatch) {
  Result<Client> c = connectRefused(shm::ControlStatus::kOk, "", shm::kControlVersion + 1);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.code(), ErrorCode::kVersionMismatch);
  EXPECT_NE(c.error().message.find("version " + std::to_string(shm::kControlVersion + 1)),
            std::string::npos)
      << c.error().message;
}

TEST(ClientConnect, DaemonShuttingDownIsShuttingDown) {
  Result<Client> c = connectRefused(shm::ControlStatus::kShuttingDown);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.code(), ErrorCode::kShuttingDown);
}

TEST(ClientConnect, HelloTimesOutWhenTheDaemonNeverAnswers) {
  // A listener that never accepts: connect() completes (backlog), Hello waits.
  char dir[] = "/tmp/fairsched-client-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/silent.sock";
  shm::UniqueFd listener(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);

  ClientOptions o;
  o.socket_path = path;
  o.connect_timeout = 50ms;
  const auto before = Clock::now();
  Result<Client> c = Client::connect(o);
  const auto took = Clock::now() - before;
  ASSERT_FALSE(c);
  EXPECT_EQ(c.code(), ErrorCode::kTimedOut);
  EXPECT_GE(took, 50ms);
  EXPECT_LT(took, 5s);
  ::unlink(path.c_str());
  ::rmdir(dir);
}

TEST(ClientConnect, ASocketPathWithANulInsideIsInvalidNotCutShort) {
  FakeDaemon fake;
  fake.start();
  ClientOptions o = optionsFor(fake);
  o.socket_path += std::string("\0x", 2);  // the kernel would connect to the part before it
  Result<Client> c = Client::connect(o);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(c.error().message.find("NUL"), std::string::npos) << c.error().message;
}

TEST(ClientTenants, OpenReturnsAHandleAndReusesItForTheSameName) {
  FakeDaemon fake;
  Client client = startAndConnect(fake);
  Result<Tenant> a = client.openTenant("acme", "gold");
  ASSERT_TRUE(a) << a.error().toString();
  Result<Tenant> b = client.openTenant("beta");
  ASSERT_TRUE(b) << b.error().toString();
  Result<Tenant> again = client.openTenant("acme");
  ASSERT_TRUE(again);
  EXPECT_EQ(*a, *again);
  EXPECT_NE(*a, *b);
  const auto opened = fake.tenantsOpened();
  ASSERT_EQ(opened.size(), 2u);  // the second open of acme never reached the daemon
  EXPECT_EQ(opened[0], std::make_pair(std::string("acme"), std::string("gold")));
  EXPECT_EQ(opened[1], std::make_pair(std::string("beta"), std::string("")));
}

TEST(ClientTenants, RefusedTenantSurfacesUnauthorizedWithTheReason) {
  FakeDaemonOptions fo;
  fo.refused_tenants = {"mallory"};
  FakeDaemon fake(fo);
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  Result<Tenant> t = client.openTenant("mallory");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.code(), ErrorCode::kUnauthorized);
  EXPECT_NE(t.error().message.find("not allowed for this client"), std::string::npos);
  EXPECT_TRUE(client.openTenant("alice")) << "a refusal leaves the connection usable";
}

TEST(ClientTenants, TenantsAreNotBoundedByTheLanes) {
  FakeDaemonOptions fo;
  fo.geometry.ring_count = 2;
  FakeDaemon fake(fo);
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  std::set<std::uint32_t> handles;
  for (int i = 0; i < 40; ++i) {
    Result<Tenant> t = client.openTenant("t" + std::to_string(i));
    ASSERT_TRUE(t) << t.error().toString();
    handles.insert(t->index);
  }
  EXPECT_EQ(handles.size(), 40u) << "a handle per tenant, 2 lanes for all of them";
  EXPECT_EQ(client.openTenant("t7")->index, client.openTenant("t7")->index);
}

TEST(ClientTenants, MoreTenantsThanTheConnectionAllowsIsNoCapacityUntilOneCloses) {
  FakeDaemonOptions fo;
  fo.max_tenants = 2;
  FakeDaemon fake(fo);
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  Result<Tenant> t1 = client.openTenant("t1");
  ASSERT_TRUE(t1);
  EXPECT_TRUE(client.openTenant("t2"));
  Result<Tenant> t3 = client.openTenant("t3");
  ASSERT_FALSE(t3);
  EXPECT_EQ(t3.code(), ErrorCode::kNoCapacity);
  ASSERT_TRUE(client.closeTenant(*t1));
  Result<Tenant> again = client.openTenant("t3");
  ASSERT_TRUE(again) << "closing a tenant frees its slot";
  EXPECT_NE(again->index, t1->index) << "the slot comes back under a new generation";
  SubmitRequest req;
  req.tenant = *t1;
  req.endpoint = "chat";
  Result<RequestId> stale = client.submit(req);
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.code(), ErrorCode::kUnknownTenant) << "a closed handle names nothing";
  EXPECT_EQ(client.closeTenant(*t1).code(), ErrorCode::kUnknownTenant);
}

TEST(ClientTenants, ABatchThatTimesOutDropsTheConnectionAndRegistersNothing) {
  FakeDaemonOptions fo;
  fo.answer_tenants = false;
  FakeDaemon fake(fo);
  fake.start();
  ClientOptions o = optionsFor(fake);
  o.control_timeout = std::chrono::milliseconds(100);
  Client client = mustConnect(o);
  const std::vector<std::string_view> names = {"a", "b", "c"};
  std::vector<Result<Tenant>> got = client.openTenants(names);
  ASSERT_EQ(got.size(), 3u);
  for (const Result<Tenant>& t : got) EXPECT_EQ(t.code(), ErrorCode::kTimedOut);
  EXPECT_FALSE(client.connected()) << "which opens the daemon took is unknown: the connection goes";
}

TEST(ClientTenants, OpenTenantsOpensABatchAndReportsEachRefusal) {
  FakeDaemonOptions fo;
  fo.refused_tenants = {"mallory"};
  FakeDaemon fake(fo);
  fake.start();
  Client client = mustConnect(optionsFor(fake));
  const std::vector<std::string_view> names = {"a", "b", "mallory", "not a name", "a", "c"};
  std::vector<Result<Tenant>> got = client.openTenants(names);
  ASSERT_EQ(got.size(), names.size());
  EXPECT_TRUE(got[0]);
  EXPECT_TRUE(got[1]);
  EXPECT_EQ(got[2].code(), ErrorCode::kUnauthorized);
  EXPECT_EQ(got[3].code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(got[4]);
  EXPECT_EQ(got[4]->index, got[0]->index) << "the same name twice is one tenant";
  EXPECT_TRUE(got[5]);
  EXPECT_EQ(fake.tenantsOpened().size(), 3u) << "a, b and c, each asked once";
  const std::vector<Tenant> closing = {*got[0], *got[1], *got[0]};
  std::vector<Result<void>> closed = client.closeTenants(closing);
  ASSERT_EQ(closed.size(), 3u);
  EXPECT_TRUE(closed[0]);
  EXPECT_TRUE(closed[1]);
  EXPECT_EQ(closed[2].code(), ErrorCode::kUnknownTenant) << "the same tenant twice: closed once";
  SubmitRequest req;
  req.tenant = *got[1];
  req.endpoint = "chat";
  EXPECT_EQ(client.submit(req).code(), ErrorCode::kUnknownTenant);
  req.tenant = *got[5];
  EXPECT_TRUE(client.submit(req)) << "c is still open";
}

TEST(ClientTenants, NamesThatDoNotFitAreRejectedLocally) {
  FakeDaemon fake;
  Client client = startAndConnect(fake);
  EXPECT_EQ(client.openTenant("").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(client.openTenant(std::string(64, 't')).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(client.openTenant(std::string(63, 't')));
  EXPECT_EQ(client.openTenant("x", std::string(64, 'g')).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(fake.tenantsOpened().size(), 1u);
}

}  // namespace
}  // namespace fairsched::testing
