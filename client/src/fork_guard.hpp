// Telling a handle's own process from a child of fork() that inherited it.
//
// A child inherits the parent's connections whole: the same control socket,
// segment, eventfds and epoll instance. Using them would take the parent's
// completions and, worse, shutting the socket down (as closing a connection
// does) or changing the epoll set would cut the parent off. So a Client or
// Worker records the process's fork count when it connects, and a call that
// finds another count is a child's: it fails with kNotConnected, and the
// destructor only releases the child's own copies of the mappings and
// descriptors, telling the daemon nothing.
//
// The count is bumped by a pthread_atfork child handler, so the check on
// the hot paths is one relaxed load, not a getpid() system call.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "fairsched/error.hpp"

namespace fairsched::client_detail {

// Forks this process came through (0 in a process that never was a child).
extern std::atomic<std::uint64_t> g_fork_count;

// Where a handle was made: the fork count and the pid then.
struct Birth {
  std::uint64_t forks;
  pid_t pid;

  // Registers the at-fork handler (once per process).
  static Birth now();
  // True in a child of fork() that inherited the handle.
  bool inherited() const { return g_fork_count.load(std::memory_order_relaxed) != forks; }
  // kNotConnected, saying so; `what` is "client" or "worker".
  Error inheritedError(const char* what) const;
};

}  // namespace fairsched::client_detail
