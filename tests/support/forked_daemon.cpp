#include "tests/support/forked_daemon.hpp"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "daemon/log.hpp"
#include "daemon/server/server.hpp"

namespace fairsched::daemon {
namespace {

bool accepts(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// Waits for `pid` up to `timeout`; the exit status, or -1.
int reap(pid_t pid, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() >= until) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

}  // namespace fairsched::daemon

namespace fairsched::testing {

std::string testEventLoopLine() {
  const char* env = std::getenv("FAIRSCHED_TEST_EVENT_LOOP");
  if (env == nullptr || (std::string_view(env) != "epoll" && std::string_view(env) != "io_uring")) {
    return "";
  }
  return std::string("event_loop = \"") + env + "\"\n";
}

}  // namespace fairsched::testing

namespace fairsched::daemon {

config::Config withTestEventLoop(config::Config cfg) {
  const char* env = std::getenv("FAIRSCHED_TEST_EVENT_LOOP");
  if (env == nullptr) return cfg;
  const std::string_view kind = env;
  if (kind == "epoll") cfg.daemon.event_loop = config::EventLoopKind::kEpoll;
  if (kind == "io_uring") cfg.daemon.event_loop = config::EventLoopKind::kIoUring;
  return cfg;
}

Result<ForkedDaemon> ForkedDaemon::start(const config::Config& cfg,
                                         std::chrono::milliseconds ready_timeout) {
  return start(cfg, makeExecutors, ready_timeout);
}

Result<ForkedDaemon> ForkedDaemon::start(const config::Config& cfg,
                                         const MakeExecutors& make_executors,
                                         std::chrono::milliseconds ready_timeout) {
  const pid_t pid = fork();
  if (pid < 0) return systemError("fork");
  if (pid == 0) {
    signal(SIGPIPE, SIG_IGN);
    (void)setupLogging(cfg.daemon.log_level);  // a bad level keeps the default logger
    auto server = Server::create(withTestEventLoop(cfg), make_executors);
    if (!server) {
      std::fprintf(stderr, "fairschedd (forked): %s\n", server.error().message.c_str());
      _exit(3);
    }
    _exit(server.value()->run());
  }
  ForkedDaemon d(pid, cfg.daemon.socket);
  const auto until = std::chrono::steady_clock::now() + ready_timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (accepts(d.socket_)) return d;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      d.pid_ = -1;
      return Error{Errc::kUnavailable, "the daemon exited before serving on " + d.socket_};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return Error{Errc::kTimedOut, "the daemon did not accept on " + d.socket_ + " in time"};
}

ForkedDaemon::~ForkedDaemon() {
  if (pid_ > 0) kill();
}

int ForkedDaemon::terminate(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  const int status = reap(pid_, timeout);
  if (status < 0) {
    kill();
    return -1;
  }
  pid_ = -1;
  return status;
}

void ForkedDaemon::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  // The kernel tears a dead process's io_uring down after the process is
  // reaped; until then the listening socket may still accept. Bounded.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (accepts(socket_) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace fairsched::daemon
