// fairschedd and its supervisor: run with NOTIFY_SOCKET pointing at a test
// socket, the daemon sends READY=1 once it accepts, WATCHDOG=1 from its event
// loop at half the configured watchdog timeout, STATUS= lines, RELOADING=1
// then READY=1 on SIGHUP, and STOPPING=1 on SIGTERM — what Type=notify with WatchdogSec= relies on.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/temp_dir.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;

class SystemdNotify : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    ASSERT_FALSE(dir_.empty()) << "no temporary directory";
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = dir_ + "/notify";
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ASSERT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{0, 50'000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setenv("NOTIFY_SOCKET", path.c_str(), 1);
    setenv("WATCHDOG_USEC", "100000", 1);  // pings every 50 ms
    unsetenv("WATCHDOG_PID");              // the forked daemon's pid is not known yet
  }
  void TearDown() override {
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    close(fd_);
  }
  // Datagrams received for `d`.
  std::vector<std::string> receiveFor(std::chrono::milliseconds d) {
    std::vector<std::string> out;
    const auto until = std::chrono::steady_clock::now() + d;
    char buf[4096];
    while (std::chrono::steady_clock::now() < until) {
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n > 0) out.emplace_back(buf, static_cast<std::size_t>(n));
    }
    return out;
  }
  testing::TempDir tmp_{"fairsched-notify"};
  std::string dir_;
  int fd_ = -1;
};

std::size_t count(const std::vector<std::string>& msgs, const std::string& needle) {
  std::size_t n = 0;
  for (const auto& m : msgs) n += m.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

TEST_F(SystemdNotify, ReadyWatchdogStatusThenStopping) {
  testing::DaemonConfigText c;
  c.socket = dir_ + "/fairsched.sock";
  c.socket_mode = "";
  c.body = "[endpoints.chat]\n";
  c.client_name = "t";
  c.client_endpoints = "";
  const std::string text = c.text();
  const std::string file = dir_ + "/fairsched.toml";
  std::ofstream(file) << text;
  auto parsed = config::loadConfigFile(file);
  ASSERT_TRUE(parsed.ok()) << parsed.error().toString();
  auto started = daemon::ForkedDaemon::start(parsed.value());
  ASSERT_TRUE(started.ok()) << started.error().message;
  auto& d = started.value();

  const auto running = receiveFor(600ms);
  ASSERT_FALSE(running.empty());
  EXPECT_NE(running.front().find("READY=1"), std::string::npos) << running.front();
  EXPECT_GE(count(running, "WATCHDOG=1"), 4u) << "pings at half of WATCHDOG_USEC while idle";
  EXPECT_GE(count(running, "STATUS="), 1u);

  // SIGHUP: RELOADING=1 (with MONOTONIC_USEC), then READY=1 once applied.
  ASSERT_EQ(kill(d.pid(), SIGHUP), 0);
  const auto reloading = receiveFor(300ms);
  EXPECT_EQ(count(reloading, "RELOADING=1"), 1u);
  EXPECT_EQ(count(reloading, "MONOTONIC_USEC="), 1u);
  EXPECT_EQ(count(reloading, "READY=1\nSTATUS=reloaded " + file), 1u);

  EXPECT_EQ(d.terminate(), 0);
  const auto stopping = receiveFor(200ms);
  EXPECT_EQ(count(stopping, "STOPPING=1"), 1u);
}

}  // namespace
}  // namespace fairsched
