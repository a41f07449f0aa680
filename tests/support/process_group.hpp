// The child processes of a test or benchmark run: spawn them, wait for them
// with a deadline, and kill whatever is still running on timeout or when the
// group goes (an early return, a failed assertion): no run leaves processes
// behind.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace fairsched::testing {

class ProcessGroup {
 public:
  using Clock = std::chrono::steady_clock;

  ProcessGroup() = default;
  ~ProcessGroup() {  // SIGKILLs and reaps every child still in the group
    for (const pid_t p : pids_) kill(p, SIGKILL);
    for (const pid_t p : pids_) waitpid(p, nullptr, 0);
  }
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Forks a child that runs `body` and exits with what it returns; its pid,
  // or -1 when fork failed. The child never returns from spawn().
  pid_t spawn(const std::function<int()>& body) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body());
    if (pid > 0) pids_.push_back(pid);
    return pid;
  }
  // Takes a child forked elsewhere into the group.
  void add(pid_t pid) { pids_.push_back(pid); }
  // The same for a body that says what went wrong ("" when nothing did):
  // the child prints "<label>: <what>" to stderr and exits 1, or exits 0.
  pid_t spawnChecked(const std::string& label, const std::function<std::string()>& body) {
    return spawn([&] {
      const std::string err = body();
      if (!err.empty()) std::fprintf(stderr, "%s: %s\n", label.c_str(), err.c_str());
      return err.empty() ? 0 : 1;
    });
  }

  // Reaps `pid` by `deadline`, SIGKILLing it then if it still runs: its exit
  // status, or -1 when it did not exit by itself (killed, a signal).
  int wait(pid_t pid, Clock::time_point deadline) {
    if (pid <= 0) return -1;
    bool killed = false;
    for (;;) {
      int status = 0;
      const pid_t r = waitpid(pid, &status, WNOHANG);
      if (r != 0) {
        pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
        return !killed && r == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      if (!killed && Clock::now() >= deadline) {
        kill(pid, SIGKILL);
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  // Every child in the group, as wait() does. True when each exited with 0.
  bool waitAll(Clock::time_point deadline) {
    bool ok = true;
    while (!pids_.empty()) ok = wait(pids_.front(), deadline) == 0 && ok;
    return ok;
  }
  // Sends `pid` SIGTERM and waits for it as wait() does.
  int stop(pid_t pid, Clock::time_point deadline) {
    if (pid <= 0) return -1;
    kill(pid, SIGTERM);
    return wait(pid, deadline);
  }
  // A deadline `after` from now.
  static Clock::time_point in(Clock::duration after) { return Clock::now() + after; }

  std::size_t size() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

}  // namespace fairsched::testing
