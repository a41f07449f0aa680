// fairschedd end to end: a real daemon process (forked, serving on a socket
// in a temporary directory) and clients speaking the control protocol and
// the shared-memory rings directly. Every request gets exactly one
// completion, checksums match each request's own prompt, refusals are
// explicit, a client that dies loses its queued requests without disturbing
// others, and SIGTERM stops the daemon cleanly.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <variant>

#include "daemon/config/config.hpp"
#include "daemon/ctl/admin_client.hpp"
#include "daemon/server/server.hpp"
#include "kernels/workload_reference.hpp"
#include "shm/control_protocol.hpp"
#include "shm/segment.hpp"
#include "shm/tenant_handle.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/raw_client.hpp"
#include "tests/support/seeded_rng.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;

std::string configText(const std::string& socket, const std::string& extra_rules = "",
                       const std::string& daemon_extra = "") {
  testing::DaemonConfigText c;
  c.socket = socket;
  c.socket_mode = "0666";
  c.log_level = "warn";
  c.daemon_extra = "shutdown_grace_ms = 2000\n" + daemon_extra;
  c.body =
      "[endpoints.chat]\nmax_batch_requests = 8\nmax_batch_tokens = 4096\nmax_wait_us = 200\n"
      "max_output_tokens = 64\n"
      "[endpoints.chat.cpu]\nper_batch_us = 50.0\nper_token_us = 0.1\nthreads = 2\n"
      // One request at a time, 500 ms each: what is submitted stays queued.
      "[endpoints.slow]\nmax_batch_requests = 1\nmax_batch_tokens = 4096\nmax_wait_us = 0\n"
      "max_output_tokens = 64\n"
      "[endpoints.slow.cpu]\nper_batch_us = 500000.0\nper_token_us = 0.0\nthreads = 1\n";
  c.client_tenants = "[\"acme\", \"globex\", \"victim\", \"crasher\"]";
  c.client_extra = "assign_tiers = [\"*\"]\nadmin = true\n";
  c.after = extra_rules;
  return c.text();
}

// A daemon in a child process for the duration of a test.
class DaemonProcess {
 public:
  explicit DaemonProcess(const std::string& dir, const std::string& daemon_extra = "") {
    auto parsed =
        config::parseConfig(configText(dir + "/fairsched.sock", "", daemon_extra), "test");
    if (auto* err = parsed.errorOrNull()) {
      ADD_FAILURE() << err->toString();
      return;
    }
    auto started = daemon::ForkedDaemon::start(parsed.value());
    if (!started) {
      ADD_FAILURE() << started.error().message;
      return;
    }
    daemon_.emplace(std::move(started).value());
  }
  int terminate() { return daemon_ ? daemon_->terminate() : -1; }
  std::string socket() const { return daemon_ ? daemon_->socket() : ""; }

 private:
  std::optional<daemon::ForkedDaemon> daemon_;
};

using testing::RawClient;

class DaemonServer : public ::testing::Test {
 protected:
  fairsched::testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

std::vector<std::uint32_t> promptFor(std::uint64_t id) {
  return testing::promptFor(id, testing::kRawClientPrompts);
}

TEST_F(DaemonServer, EveryRequestCompletesOnceWithItsOwnChecksum) {
  DaemonProcess d(dir_);
  RawClient c;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  const auto [st_a, ring_a] = c.open("acme");
  const auto [st_b, ring_b] = c.open("globex");
  ASSERT_EQ(st_a, shm::ControlStatus::kOk);
  ASSERT_EQ(st_b, shm::ControlStatus::kOk);
  EXPECT_NE(ring_a, ring_b);
  std::map<std::uint64_t, std::uint64_t> expected;  // id -> checksum
  std::uint64_t id = 1;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 50; ++i, ++id) {
      const auto prompt = promptFor(id);
      // A full lane is back-pressure: wait for the daemon to make room (under a
      // sanitizer beside a busy process it may fall behind the rounds).
      ASSERT_TRUE(c.submitWhenRoom(id % 2 ? ring_a : ring_b, id, prompt));
      expected[id] = kernels::workloadChecksum(prompt);
    }
    std::this_thread::sleep_for(1ms);
  }
  const auto got = c.collect(expected.size());
  ASSERT_EQ(got.size(), expected.size());
  std::map<std::uint64_t, int> seen;
  for (const auto& s : got) {
    ++seen[s.request_id];
    EXPECT_EQ(s.status, shm::encodeStatus(Status::kOk)) << "request " << s.request_id;
    EXPECT_EQ(s.tag, s.request_id * 3);
    EXPECT_EQ(s.checksum, expected.at(s.request_id)) << "request " << s.request_id;
    EXPECT_EQ(s.output_tokens, 8u);
  }
  for (const auto& [rid, n] : seen) EXPECT_EQ(n, 1) << "request " << rid;
  EXPECT_EQ(d.terminate(), 0);
}

// The daemon's `status` (its uid is an admin here), or an empty object.
nlohmann::json daemonStatus(const std::string& socket) {
  auto r = daemon::adminCommand(socket, shm::AdminCommand::kStatus);
  if (!r || r->status != shm::ControlStatus::kOk) return nlohmann::json::object();
  return nlohmann::json::parse(r->json, nullptr, false);
}

// A storm of connections from one uid while a steady client of the same uid
// is served: past the uid's set-up budget (here one a second) Hellos wait
// in the daemon instead of taking its loop, and the steady client's
// requests are served meanwhile; killed mid-wait, the storm leaves nothing
// behind. Structural: what is asserted is who waits and who is served, not
// how long anything takes.
TEST_F(DaemonServer, AConnectStormWaitsForItsBudgetWhileASteadyClientIsServed) {
  DaemonProcess d(dir_, "max_connects_per_s = 1\n");
  RawClient steady;
  ASSERT_EQ(steady.connect(d.socket()), shm::ControlStatus::kOk);  // the uid's burst of one
  const auto [st, acme] = steady.open("acme");
  ASSERT_EQ(st, shm::ControlStatus::kOk);
  constexpr int kStorm = 12;  // 11 waiting: 11 s of budget
  const pid_t storm = fork();
  ASSERT_GE(storm, 0);
  if (storm == 0) {
    std::vector<std::thread> threads;
    for (int i = 0; i < kStorm; ++i) {
      threads.emplace_back([&] {
        RawClient c;
        (void)c.connect(d.socket());
        pause();
      });
    }
    for (auto& t : threads) t.join();
    _exit(0);
  }
  ASSERT_TRUE(testing::waitUntil(
      [&] { return daemonStatus(d.socket()).value("connects_waiting", 0u) >= 2; }, 30s,
      "the storm's Hellos waiting for their budget"));
  // The loop serves the steady client while they wait.
  std::map<std::uint64_t, std::uint64_t> expected;
  for (std::uint64_t id = 1; id <= 40; ++id) {
    const auto prompt = promptFor(id);
    ASSERT_TRUE(steady.submitWhenRoom(acme, id, prompt));
    expected[id] = kernels::workloadChecksum(prompt);
  }
  const auto got = steady.collect(expected.size());
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& s : got) {
    EXPECT_EQ(s.status, shm::encodeStatus(Status::kOk));
    EXPECT_EQ(s.checksum, expected.at(s.request_id));
  }
  const nlohmann::json mid = daemonStatus(d.socket());
  EXPECT_GE(mid.value("connects_waiting", 0u), 1u) << "the storm still waits: " << mid.dump();
  EXPECT_GE(mid["counters"].value("connects_deferred", 0u), 2u);
  // Killed with its Hellos waiting: they leave the queue, and only the
  // steady client is left.
  kill(storm, SIGKILL);
  int ws = 0;
  waitpid(storm, &ws, 0);
  ASSERT_TRUE(testing::waitUntil(
      [&] {
        const nlohmann::json j = daemonStatus(d.socket());
        return j.value("connects_waiting", 1u) == 0 && j.value("clients", 0u) == 1;
      },
      30s, "the storm's connections gone"));
  ASSERT_TRUE(steady.submitWhenRoom(acme, 1000, promptFor(1000)));
  const auto last = steady.collect(1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].status, shm::encodeStatus(Status::kOk));
  EXPECT_EQ(d.terminate(), 0);
}

// A peer whose Hello waits for its uid's budget and then sends more — a
// second Hello, or an OpenTenant before its welcome — is dropped without a
// welcome, and nothing is left behind; the steady client is not disturbed.
// Ten blockers' Hellos wait ahead of the peers (the budget is one a second,
// first come first served within the uid), so the peers' Hellos are still
// waiting when they misbehave, on any machine that sends a message within
// ten seconds.
TEST_F(DaemonServer, APeerThatSendsMoreWhileItsHelloWaitsIsDroppedWithoutAWelcome) {
  DaemonProcess d(dir_, "max_connects_per_s = 1\n");
  RawClient steady;
  ASSERT_EQ(steady.connect(d.socket()), shm::ControlStatus::kOk);  // the uid's burst of one
  const auto [st, acme] = steady.open("acme");
  ASSERT_EQ(st, shm::ControlStatus::kOk);
  const pid_t blockers = fork();
  ASSERT_GE(blockers, 0);
  if (blockers == 0) {
    std::vector<std::thread> threads;
    for (int i = 0; i < 10; ++i) {
      threads.emplace_back([&] {
        RawClient c;
        (void)c.connect(d.socket());
        pause();
      });
    }
    for (auto& t : threads) t.join();
    _exit(0);
  }
  ASSERT_TRUE(testing::waitUntil(
      [&] { return daemonStatus(d.socket()).value("connects_waiting", 0u) >= 8; }, 30s,
      "the blockers' Hellos waiting"));
  for (const bool second_hello : {true, false}) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, d.socket().c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    auto hello = shm::makeMessage<shm::HelloMessage>(1);
    hello.layout_version = shm::kLayoutVersion;
    ASSERT_EQ(send(fd, &hello, sizeof hello, 0), static_cast<ssize_t>(sizeof hello));
    if (second_hello) {
      auto again = shm::makeMessage<shm::HelloMessage>(2);
      again.layout_version = shm::kLayoutVersion;
      ASSERT_EQ(send(fd, &again, sizeof again, 0), static_cast<ssize_t>(sizeof again));
    } else {
      auto open = shm::makeMessage<shm::OpenTenantMessage>(2);
      shm::setString(open.tenant, "acme");
      ASSERT_EQ(send(fd, &open, sizeof open, 0), static_cast<ssize_t>(sizeof open));
    }
    char byte;
    EXPECT_EQ(recv(fd, &byte, 1, 0), 0) << "dropped without a welcome";
    close(fd);
  }
  // The steady client is served meanwhile; with the blockers gone, nothing
  // waits and only it is connected.
  ASSERT_TRUE(steady.submitWhenRoom(acme, 1, promptFor(1)));
  const auto got = steady.collect(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, shm::encodeStatus(Status::kOk));
  kill(blockers, SIGKILL);
  int ws = 0;
  waitpid(blockers, &ws, 0);
  ASSERT_TRUE(testing::waitUntil(
      [&] {
        const nlohmann::json j = daemonStatus(d.socket());
        return j.value("connects_waiting", 1u) == 0 && j.value("clients", 0u) == 1;
      },
      30s, "nothing waiting, one client"));
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(DaemonServer, InvalidRequestsAreRejectedOneByOne) {
  DaemonProcess d(dir_);
  RawClient c;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  const auto acme = c.open("acme").second;
  ASSERT_TRUE(c.submit(acme, 1, {1, 2, 3}, 65));  // above max_output_tokens = 64
  ASSERT_TRUE(c.submit(acme, 2, {1, 2, 3}, 8));
  // A slot naming tokens outside the arena, written by hand into lane 0.
  shm::SubmissionSlot bad;
  bad.request_id = 3;
  bad.prompt_offset = 0;
  bad.prompt_tokens = 1;
  bad.tenant = acme;
  shm::SubmissionProducer raw(c.ringMemory(0));
  ASSERT_TRUE(raw.tryPush(bad));
  auto cells = c.ringMemory(0).cells;
  // Publish first, then corrupt the published count beyond the arena.
  shm::sharedStore(cells[2].words[4], std::uint64_t{0xffffffff}, std::memory_order_relaxed);
  ASSERT_TRUE(c.submit(acme, 4, {9}, 8));
  const auto got = c.collect(4);
  ASSERT_EQ(got.size(), 4u);
  std::map<std::uint64_t, std::uint32_t> status;
  for (const auto& s : got) status[s.request_id] = s.status;
  EXPECT_EQ(status[1], shm::encodeStatus(Status::kInvalid));
  EXPECT_EQ(status[2], shm::encodeStatus(Status::kOk));
  EXPECT_EQ(status[3], shm::encodeStatus(Status::kInvalid));
  EXPECT_EQ(status[4], shm::encodeStatus(Status::kOk)) << "the ring goes on after a bad slot";
}

TEST_F(DaemonServer, ACellNamingAHandleItsConnectionDoesNotHoldIsRejectedAndNoOneElseNotices) {
  DaemonProcess d(dir_);
  RawClient c, other;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  ASSERT_EQ(other.connect(d.socket()), shm::ControlStatus::kOk);
  const auto [st, acme] = c.open("acme");
  ASSERT_EQ(st, shm::ControlStatus::kOk);
  const auto victim = other.open("victim").second;
  // Handles another connection holds, one never opened, one out of range,
  // one with no generation, and a good one last.
  ASSERT_TRUE(c.submit(victim == acme ? acme + 1 : victim, 1, {1}));
  ASSERT_TRUE(c.submit(shm::makeTenantHandle(5, 1), 2, {1}));
  ASSERT_TRUE(c.submit(shm::makeTenantHandle(60000, 7), 3, {1}));
  ASSERT_TRUE(c.submit(shm::tenantIndex(acme), 4, {1}));
  ASSERT_TRUE(c.submit(acme, 5, {1}));
  for (std::uint64_t id = 1; id <= 50; ++id) ASSERT_TRUE(other.submit(victim, id, promptFor(id)));
  std::map<std::uint64_t, std::uint32_t> status;
  for (const auto& s : c.collect(5)) status[s.request_id] = s.status;
  ASSERT_EQ(status.size(), 5u);
  for (std::uint64_t id = 1; id <= 4; ++id) {
    EXPECT_EQ(status[id], shm::encodeStatus(Status::kInvalid)) << "request " << id;
  }
  EXPECT_EQ(status[5], shm::encodeStatus(Status::kOk)) << "the connection goes on";
  const auto theirs = other.collect(50);
  ASSERT_EQ(theirs.size(), 50u);
  for (const auto& s : theirs) EXPECT_EQ(s.status, shm::encodeStatus(Status::kOk));
  EXPECT_TRUE(c.connected());
}

TEST_F(DaemonServer, CloseTenantEndsItsQueuedRequestsCancelledAndItsHandleIsNeverTakenForAnother) {
  DaemonProcess d(dir_);
  RawClient c;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  c.useEndpoint("slow");
  const auto h1 = c.open("acme").second;
  for (std::uint64_t id = 1; id <= 20; ++id) ASSERT_TRUE(c.submit(h1, id, {1, 2}));
  std::this_thread::sleep_for(20ms);  // most likely admitted by now; either way they end CANCELLED
  const auto [closed, cancelled] = c.close(h1);
  ASSERT_EQ(closed, shm::ControlStatus::kOk);
  std::string why;
  EXPECT_EQ(c.close(h1, &why).first, shm::ControlStatus::kBadRequest) << "closed once";
  // A cell written for h1 before the client learned of the close.
  ASSERT_TRUE(c.submit(h1, 21, {3}));
  EXPECT_EQ(c.open("globex", &why, "", h1).first, shm::ControlStatus::kBadRequest)
      << "the just-closed handle, unchanged: " << why;
  const std::uint32_t h2 = shm::makeTenantHandle(shm::tenantIndex(h1), 2);
  ASSERT_EQ(c.open("globex", &why, "", h2).first, shm::ControlStatus::kOk) << why;
  ASSERT_TRUE(c.submit(h2, 22, {4}));
  ASSERT_TRUE(c.submit(h1, 23, {5}));  // still h1: still not globex's
  std::map<std::uint64_t, std::uint32_t> status;
  std::map<std::uint64_t, int> times;
  for (const auto& s : c.collect(23)) {
    status[s.request_id] = s.status;
    ++times[s.request_id];
  }
  ASSERT_EQ(status.size(), 23u) << "every request, exactly one completion";
  for (const auto& [rid, n] : times) EXPECT_EQ(n, 1) << "request " << rid;
  std::uint32_t ok = 0, cancelled_seen = 0;
  for (std::uint64_t id = 1; id <= 20; ++id) {
    if (status[id] == shm::encodeStatus(Status::kOk)) ++ok;
    if (status[id] == shm::encodeStatus(Status::kCancelled)) ++cancelled_seen;
  }
  EXPECT_EQ(ok + cancelled_seen, 20u) << "ran before the close, or cancelled by it";
  EXPECT_LE(ok, 2u) << "500 ms each, one at a time: the close came first";
  EXPECT_GE(cancelled_seen, cancelled) << "the queued ones, and any still in the lane";
  EXPECT_EQ(status[21], shm::encodeStatus(Status::kCancelled));
  EXPECT_EQ(status[22], shm::encodeStatus(Status::kOk));
  EXPECT_EQ(status[23], shm::encodeStatus(Status::kCancelled));
}

TEST_F(DaemonServer, HandlesAreBoundedByMaxTenantsPerConnectionNotByTheLanes) {
  DaemonProcess d(dir_);
  RawClient c;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  std::string why;
  EXPECT_EQ(c.open("acme", &why, "", shm::makeTenantHandle(65536, 1)).first,
            shm::ControlStatus::kNoCapacity);
  EXPECT_NE(why.find("max_tenants_per_connection"), std::string::npos) << why;
  EXPECT_EQ(c.open("acme", &why, "", shm::tenantIndex(3)).first, shm::ControlStatus::kBadRequest)
      << "a handle needs a generation";
  const std::uint32_t last = shm::makeTenantHandle(65535, 1);
  ASSERT_EQ(c.open("acme", &why, "", last).first, shm::ControlStatus::kOk) << why;
  EXPECT_EQ(c.open("globex", &why, "", last).first, shm::ControlStatus::kBadRequest)
      << "the slot is open";
  // Twenty handles of the same four tenants, more than the segment has lanes.
  std::vector<std::uint32_t> handles;
  for (int i = 0; i < 20; ++i) {
    const char* names[] = {"acme", "globex", "victim", "crasher"};
    const auto [st, h] = c.open(names[i % 4], &why);
    ASSERT_EQ(st, shm::ControlStatus::kOk) << why;
    handles.push_back(h);
  }
  for (std::size_t i = 0; i < handles.size(); ++i) {
    ASSERT_TRUE(
        c.submit(handles[i], i + 1, promptFor(i + 1), 8, 0, static_cast<std::uint32_t>(i % 8)));
  }
  const auto got = c.collect(handles.size());
  ASSERT_EQ(got.size(), handles.size());
  for (const auto& s : got) {
    EXPECT_EQ(s.status, shm::encodeStatus(Status::kOk));
    EXPECT_EQ(s.checksum, kernels::workloadChecksum(promptFor(s.request_id)));
  }
}

// A client with more requests in its lanes than its completion ring has
// room for: as it reads, the room it frees goes to its lanes in turn, not
// all to whichever lane the daemon lists first (that one's requests would
// run dry before another lane's first was taken). Requests go into the
// lanes one lane after another, so a long run of one lane in the
// completions can only come from the daemon's order.
TEST_F(DaemonServer, LanesTakeTurnsAtTheRoomTheirClientFrees) {
  DaemonProcess d(dir_);
  RawClient c;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  const auto [st, handle] = c.open("acme");
  ASSERT_EQ(st, shm::ControlStatus::kOk);
  constexpr std::uint64_t kLanes = 8;
  auto laneOf = [](std::uint64_t id) { return static_cast<std::uint32_t>((id - 1) % kLanes); };
  // Until the daemon stops taking (its completion room used up, every lane full).
  std::uint64_t next = 1;
  auto last_push = std::chrono::steady_clock::now();
  const auto give_up = last_push + 20s;
  constexpr std::uint64_t kAtMost = 60'000;  // the ring, the daemon's backlog, the lanes: 34,816
  while (std::chrono::steady_clock::now() - last_push < 300ms &&
         std::chrono::steady_clock::now() < give_up && next <= kAtMost) {
    if (c.submit(handle, next, promptFor(next), 8, 0, laneOf(next))) {
      ++next;
      last_push = std::chrono::steady_clock::now();
    } else {
      std::this_thread::sleep_for(100us);
    }
  }
  const std::uint64_t total = next - 1;
  ASSERT_LT(total, kAtMost) << "the daemon never stopped taking requests";
  // Read 16 at a time: each read frees that much room, a pass's worth.
  std::vector<std::uint32_t> order;
  while (order.size() < total) {
    const auto got = c.collect(std::min<std::size_t>(16, total - order.size()));
    if (got.empty()) break;
    for (const auto& s : got) order.push_back(laneOf(s.request_id));
    std::this_thread::sleep_for(200us);
  }
  ASSERT_EQ(order.size(), total);
  // The last lanes to run dry may end alone: the tail is left out.
  constexpr std::size_t kTail = 512;
  ASSERT_GT(order.size(), kTail);
  std::size_t longest = 0;
  for (std::size_t i = 0, run = 0; i + kTail < order.size(); ++i) {
    run = i > 0 && order[i] == order[i - 1] ? run + 1 : 1;
    longest = std::max(longest, run);
  }
  // A lane holds 256 and gets at most 64 a pass; one lane drained dry before
  // the others is a run of about 256 (without the turns: 248-254 measured).
  EXPECT_LT(longest, 160u) << total << " requests";
}

TEST_F(DaemonServer, AClientOfLayoutTwoIsRefusedNamingBothVersions) {
  DaemonProcess d(dir_);
  RawClient old;
  old.claimVersions(2, 2);
  std::string why;
  EXPECT_EQ(old.connect(d.socket(), &why), shm::ControlStatus::kVersionMismatch);
  EXPECT_NE(why.find("layout 2"), std::string::npos) << why;
  EXPECT_NE(why.find("layout " + std::to_string(shm::kLayoutVersion)), std::string::npos) << why;
  EXPECT_NE(why.find("protocol 2"), std::string::npos) << why;
}

TEST_F(DaemonServer, AMissingSocketDirectoryIsCreatedOrNamedWithHowToFixIt) {
  // One missing level: made, as systemd's RuntimeDirectory= would.
  {
    auto parsed = config::parseConfig(configText(dir_ + "/run/fairsched.sock"), "test");
    ASSERT_TRUE(parsed.ok()) << parsed.error().toString();
    auto started = daemon::ForkedDaemon::start(parsed.value());
    ASSERT_TRUE(started) << started.error().message;
    RawClient c;
    EXPECT_EQ(c.connect(dir_ + "/run/fairsched.sock"), shm::ControlStatus::kOk);
  }
  // Two: refused, saying what to do. (In a child: create() takes the signals.)
  auto parsed = config::parseConfig(configText(dir_ + "/a/b/fairsched.sock"), "test");
  ASSERT_TRUE(parsed.ok()) << parsed.error().toString();
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(out[0]);
    auto server = daemon::Server::create(parsed.value());
    const std::string why = server ? "created" : server.error().toString();
    [[maybe_unused]] const ssize_t w = write(out[1], why.data(), why.size());
    _exit(0);
  }
  close(out[1]);
  std::string why;
  char buf[512];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;)
    why.append(buf, static_cast<std::size_t>(n));
  close(out[0]);
  waitpid(child, nullptr, 0);
  EXPECT_NE(why.find(dir_ + "/a/b does not exist and cannot be created"), std::string::npos) << why;
  EXPECT_NE(why.find("RuntimeDirectory=fairsched"), std::string::npos) << why;
}

TEST_F(DaemonServer, UnlistedTenantIsRefusedWithTheReason) {
  DaemonProcess d(dir_);
  RawClient c;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  std::string why;
  EXPECT_EQ(c.open("intruder", &why).first, shm::ControlStatus::kUnauthorized);
  EXPECT_EQ(why, "rule 'tests' does not allow tenant 'intruder'");
}

TEST_F(DaemonServer, PeerWithoutARuleIsRefused) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  DaemonProcess d(dir_);
  const pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    RawClient c;
    std::string why;
    const auto status = c.connect(d.socket(), &why);
    _exit(status == shm::ControlStatus::kUnauthorized &&
                  why == "uid 65534 gid 65534 matches no [[clients]] rule"
              ? 0
              : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the refusal and its reason reach the client";
}

TEST_F(DaemonServer, KilledClientDoesNotDisturbOthers) {
  DaemonProcess d(dir_);
  std::mt19937 rng(static_cast<unsigned>(testing::testSeed()));
  for (int victim_round = 0; victim_round < 5; ++victim_round) {
    const pid_t child = fork();
    if (child == 0) {
      RawClient c;
      if (c.connect(d.socket()) != shm::ControlStatus::kOk) _exit(1);
      const auto ring = c.open("crasher").second;
      for (std::uint64_t id = 1;; ++id) c.submit(ring, id, promptFor(id), 64);  // until killed
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500 + rng() % 5000));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
  RawClient c;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  const auto ring = c.open("victim").second;
  for (std::uint64_t id = 1; id <= 200; ++id) {
    ASSERT_TRUE(testing::waitUntil([&] { return c.submit(ring, id, promptFor(id)); }, 10s,
                                   "room on the ring for request " + std::to_string(id)));
  }
  const auto got = c.collect(200);
  ASSERT_EQ(got.size(), 200u);
  for (const auto& s : got) EXPECT_EQ(s.status, shm::encodeStatus(Status::kOk));
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(DaemonServer, StressHostileClientScribblingOverItsSegmentHurtsOnlyItself) {
  DaemonProcess d(dir_);
  const std::uint64_t seed = testing::testSeed();
  const pid_t hostile = fork();
  if (hostile == 0) {
    RawClient c;
    if (c.connect(d.socket()) != shm::ControlStatus::kOk) _exit(1);
    for (const char* t : {"crasher", "acme"}) c.open(t);
    std::mt19937_64 rng(seed);
    const auto until = std::chrono::steady_clock::now() + 400ms;
    while (std::chrono::steady_clock::now() < until) c.scribble(rng);
    _exit(0);
  }
  RawClient c;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  const auto ring = c.open("victim").second;
  std::map<std::uint64_t, std::uint64_t> expected;
  for (std::uint64_t id = 1; id <= 300; ++id) {
    const ::testing::AssertionResult room =
        testing::waitUntil([&] { return c.submit(ring, id, promptFor(id)); }, 10s,
                           "room on the ring for request " + std::to_string(id), 100us);
    if (!room) waitpid(hostile, nullptr, 0);  // it ends by itself after 400 ms
    ASSERT_TRUE(room);
    expected[id] = kernels::workloadChecksum(promptFor(id));
    if (id % 50 == 0) std::this_thread::sleep_for(20ms);
  }
  const auto got = c.collect(expected.size());
  int status = 0;
  waitpid(hostile, &status, 0);
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& s : got) {
    EXPECT_EQ(s.status, shm::encodeStatus(Status::kOk));
    EXPECT_EQ(s.checksum, expected.at(s.request_id));
  }
  EXPECT_EQ(d.terminate(), 0) << "the daemon survived and stops cleanly";
}

TEST_F(DaemonServer, ShutdownCompletesQueuedRequestsExplicitly) {
  DaemonProcess d(dir_);
  RawClient c;
  ASSERT_EQ(c.connect(d.socket()), shm::ControlStatus::kOk);
  const auto ring = c.open("acme").second;
  std::size_t submitted = 0;
  for (std::uint64_t id = 1; id <= 250; ++id)
    submitted += c.submit(ring, id, promptFor(id), 64) ? 1 : 0;
  EXPECT_EQ(d.terminate(), 0);
  const auto got = c.collect(submitted);
  EXPECT_EQ(got.size(), submitted) << "every request ends, whatever the shutdown caught it doing";
  for (const auto& s : got) {
    EXPECT_TRUE(s.status == shm::encodeStatus(Status::kOk) ||
                s.status == shm::encodeStatus(Status::kShuttingDown))
        << "status " << s.status;
  }
}

}  // namespace
}  // namespace fairsched
