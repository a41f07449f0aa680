// The daemon's event loop, driven from one thread, over one of two kernel
// interfaces: io_uring (io_uring_loop.cpp) or epoll (epoll_loop.cpp) where
// io_uring is refused — under gVisor, Docker's default seccomp profile and
// many Kubernetes pods. `[daemon] event_loop` chooses (make_event_loop.hpp); "auto" takes io_uring
// and falls back to epoll.
//
// Operations (accept, recvmsg, reads of doorbell eventfds, writes of
// completion eventfds, timers, polls) are queued with a handler; run() hands
// them to the kernel in batches and calls each handler on the loop thread
// with the operation's result (bytes, a new fd, a poll mask, or -errno).
// Handlers may queue more operations. A handler never runs inside the call
// that queued its operation. Buffers passed to an operation must stay valid
// until its handler runs. Before closing a descriptor with an operation
// queued on it, cancel() the operation (its handler then runs with
// -ECANCELED): an epoll backend cannot see a close, and the number may be
// reused by the next descriptor opened.
//
// The loop spins before it sleeps: each iteration calls the `poll` hook
// (scan shared-memory rings, drain executor completions); while it reports
// work, the loop only peeks at the kernel. Once it has found no work for
// `spin_ns` (`[daemon] busy_poll_us`) it calls `before_sleep` (advertise "sleeping", re-check) and
// then blocks until an operation completes or the next timer is due.
//
// Spinning is only worth it on a core nobody else wants. When the loop
// thread spends more than a quarter of its time runnable but waiting for a
// CPU (its run delay in /proc/thread-self/schedstat, looked at every 2 ms at
// most) the cores are contended: for the next 100 ms the loop sleeps as
// soon as it is idle. A spinning thread gets no more CPU than any
// other spinning thread — eight clients spinning on RING_FULL would leave it
// a ninth of the cores — while one that sleeps is run first when its
// doorbell or an executor wakes it.
//
// Threading: everything here is loop-thread only, except wake(), which any
// thread may call to end a sleep.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/types.hpp"
#include "daemon/env.hpp"
#include "daemon/error.hpp"

namespace fairsched::daemon {

class EventLoop {
 public:
  using Handler = std::function<void(int result)>;
  using OpId = std::uint64_t;  // identifies a queued operation (for cancel)

  struct Hooks {
    std::function<bool()> poll;  // returns true when it did work
    // Optional: true when poll() would find nothing now but what time
    // brings. Between idle passes that read the clock, the loop calls this
    // instead of poll() and skips the pass when it says so: a busy-polling
    // loop spends most passes finding nothing, and the one a request lands
    // in starts sooner. The first pass after any work or a sleep is whole.
    std::function<bool()> idle_glance;
    std::function<bool()> before_sleep;  // returns true when work appeared: don't sleep
    TimeNs spin_ns = 500'000;            // 0: sleep at the first idle iteration
  };

  virtual ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // "io_uring" or "epoll".
  virtual std::string_view name() const = 0;

  virtual OpId read(int fd, void* buf, unsigned len, Handler h) = 0;
  virtual OpId write(int fd, const void* buf, unsigned len, Handler h) = 0;
  // The accepted descriptor is blocking and close-on-exec.
  virtual OpId accept(int fd, Handler h) = 0;
  // With MSG_CMSG_CLOEXEC.
  virtual OpId recvmsg(int fd, msghdr* msg, Handler h) = 0;
  // The result is the poll mask (POLLIN, POLLOUT, POLLHUP, ...).
  virtual OpId pollIn(int fd, Handler h) = 0;
  virtual OpId pollOut(int fd, Handler h) = 0;
  // Fires at `deadline` on CLOCK_MONOTONIC with result -ETIME (or -ECANCELED).
  virtual OpId timerAt(TimeNs deadline, Handler h) = 0;
  // Cancels a queued operation; its handler still runs, with -ECANCELED
  // unless it completed first. Unknown or finished ids are ignored.
  virtual void cancel(OpId id) = 0;

  void setHooks(Hooks hooks) { hooks_ = std::move(hooks); }
  // Run until stop(). Returns the errno of a fatal kernel error, else 0.
  int run();
  void stop() { running_ = false; }
  // Any thread: end the current or next sleep.
  void wake();

  std::size_t pending() const { return live_; }
  // Idle passes that slept at once, without spinning, because the cores
  // were contended.
  std::uint64_t contendedSleeps() const { return contended_sleeps_; }

 protected:
  EventLoop() = default;
  // Creates the wake eventfd; the backends watch it.
  Result<> openWakeFd();

  // The backend's three steps of run(): hand queued operations to the
  // kernel; run the handlers of every finished operation without blocking
  // (returns how many ran); block until at least one operation finished or
  // wake() was called, then run their handlers (returns 0 or a fatal errno).
  virtual void flush() = 0;
  virtual unsigned dispatch() = 0;
  virtual int block() = 0;

  // The table of queued operations, shared by the backends: track() takes a
  // slot for a handler, find() says whether `id` is still queued, finish()
  // frees the slot and then runs the handler once.
  OpId track(Handler h);
  bool queued(OpId id) const;
  bool finish(OpId id, int result);
  static std::uint32_t slotOf(OpId id) { return static_cast<std::uint32_t>(id & 0xffffffffu); }

  int wake_fd_ = -1;

 private:
  struct Op {
    Handler handler;
    std::uint32_t gen = 0;
    bool live = false;
  };
  std::vector<Op> ops_;
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
  bool running_ = false;
  Hooks hooks_;
  // Contention (see the top of this file): the loop thread's run delay when
  // last looked at, when, and until when it counts as contended.
  static constexpr TimeNs kContentionCheckNs = 2'000'000;
  // Idle passes between two clock reads (and two whole passes, with idle_glance).
  static constexpr std::uint32_t kIdlePassesPerClockRead = 64;
  static constexpr TimeNs kContendedForNs = 100'000'000;
  bool contended(TimeNs now);
  int schedstat_fd_ = -1;  // -2: the kernel has none
  TimeNs run_delay_ = 0;
  TimeNs contention_checked_ = 0;
  TimeNs contended_until_ = 0;
  std::uint64_t contended_sleeps_ = 0;
};

}  // namespace fairsched::daemon
