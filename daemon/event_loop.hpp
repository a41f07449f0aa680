// The daemon's event loop: one io_uring, driven from one thread.
//
// Operations (accept, recvmsg, reads of doorbell eventfds, writes of
// completion eventfds, timers, polls) are queued with a handler; run()
// submits them in batches and calls each handler on the loop thread with the
// operation's result (bytes, a new fd, or -errno). Handlers may queue more
// operations. Buffers passed to an operation must stay valid until its
// handler runs.
//
// The loop spins before it sleeps: each iteration calls the `poll` hook
// (scan shared-memory rings, drain executor completions); while it reports
// work, the loop only peeks at io_uring. After `spin_iterations` idle
// iterations it calls `before_sleep` (advertise "sleeping", re-check) and
// then blocks in io_uring until a completion arrives or the next timer is due.
//
// Threading: everything here is loop-thread only, except wake(), which any
// thread may call to end a sleep.
#pragma once

#include <liburing.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "daemon/core/types.hpp"
#include "daemon/error.hpp"

namespace fairsched::daemon {

class EventLoop {
 public:
  using Handler = std::function<void(int result)>;
  using OpId = std::uint64_t;  // identifies a queued operation (for cancel)

  struct Hooks {
    std::function<bool()> poll;          // returns true when it did work
    std::function<bool()> before_sleep;  // returns true when work appeared: don't sleep
    std::uint32_t spin_iterations = 2000;
  };

  // Returns the loop, or why it could not be created (kSystem: io_uring
  // missing or refused by the kernel, or the eventfd).
  static Result<std::unique_ptr<EventLoop>> create(unsigned entries = 512);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  OpId read(int fd, void* buf, unsigned len, Handler h);
  OpId write(int fd, const void* buf, unsigned len, Handler h);
  OpId accept(int fd, Handler h);
  OpId recvmsg(int fd, msghdr* msg, Handler h);
  OpId pollIn(int fd, Handler h);
  OpId pollOut(int fd, Handler h);
  // Fires at `deadline` on CLOCK_MONOTONIC with result 0 (or -ECANCELED).
  OpId timerAt(TimeNs deadline, Handler h);
  // Ask the kernel to cancel a queued operation; its handler still runs, with
  // -ECANCELED unless it completed first.
  void cancel(OpId id);

  void setHooks(Hooks hooks) { hooks_ = std::move(hooks); }
  // Run until stop(). Returns the errno of a fatal io_uring error, else 0.
  int run();
  void stop() { running_ = false; }
  // Any thread: end the current or next sleep.
  void wake();

  std::size_t pending() const { return live_; }

 private:
  struct Op {
    Handler handler;
    __kernel_timespec ts{};
    std::uint32_t gen = 0;
    bool live = false;
  };
  EventLoop() = default;
  io_uring_sqe* sqe();
  OpId track(io_uring_sqe* s, Handler h);
  // Dispatch every ready completion; returns how many.
  unsigned reap();
  void armWake();

  io_uring ring_{};
  bool ring_ready_ = false;
  int wake_fd_ = -1;
  std::uint64_t wake_buf_ = 0;
  bool wake_armed_ = false;
  std::vector<Op> ops_;
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
  bool running_ = false;
  Hooks hooks_;
};

// CLOCK_MONOTONIC now, in nanoseconds: the clock of every TimeNs in the daemon.
TimeNs monotonicNow();

}  // namespace fairsched::daemon
