// A fairschedd Server in a child process, for tests and benchmarks that need
// a real daemon: fork, serve on the config's socket, and stop it on request.
// The parent waits (bounded) until the socket accepts.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "daemon/config/config.hpp"
#include "daemon/error.hpp"
#include "daemon/exec/executor_factory.hpp"

namespace fairsched::daemon {

// `cfg` with daemon.event_loop set from FAIRSCHED_TEST_EVENT_LOOP ("epoll" or
// "io_uring") when it is set: ctest runs the daemon suites once per loop.
config::Config withTestEventLoop(config::Config cfg);

}  // namespace fairsched::daemon

namespace fairsched::testing {

// The same for a config file a test writes (one the daemon reads again on
// reload): `event_loop = "..."` for the [daemon] table, or "".
std::string testEventLoopLine();

}  // namespace fairsched::testing

namespace fairsched::daemon {

class ForkedDaemon {
 public:
  // Forks; the child serves `cfg` until SIGTERM and exits with run()'s
  // status (3 when the server cannot start). Returns once the socket accepts,
  // or why it did not within `ready_timeout` (kSystem: fork failed;
  // kUnavailable: the child exited first, its reason on stderr; kTimedOut).
  static Result<ForkedDaemon> start(
      const config::Config& cfg,
      std::chrono::milliseconds ready_timeout = std::chrono::seconds(10));
  // The same with the executors `make_executors` builds (in the child).
  static Result<ForkedDaemon> start(
      const config::Config& cfg, const MakeExecutors& make_executors,
      std::chrono::milliseconds ready_timeout = std::chrono::seconds(10));

  ForkedDaemon(ForkedDaemon&& o) noexcept : pid_(o.pid_), socket_(std::move(o.socket_)) {
    o.pid_ = -1;
  }
  ForkedDaemon& operator=(ForkedDaemon&&) = delete;
  ~ForkedDaemon();  // SIGKILL if still running

  // SIGTERM, then the exit status (128 + signal when killed); -1 when it did
  // not exit within `timeout` (it is killed then).
  int terminate(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // SIGKILL, as a crash would.
  void kill();
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }

 private:
  ForkedDaemon(pid_t pid, std::string socket) : pid_(pid), socket_(std::move(socket)) {}
  pid_t pid_ = -1;
  std::string socket_;
};

}  // namespace fairsched::daemon
