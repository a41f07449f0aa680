// The io_uring backend of the event loop: every operation is one SQE whose
// user data is the operation's id; the wake eventfd has a read of its own
// queued at all times.
#pragma once

#include <liburing.h>

#include <deque>
#include <memory>
#include <vector>

#include "daemon/loop/event_loop.hpp"

namespace fairsched::daemon {

class IoUringLoop final : public EventLoop {
 public:
  // kSystem when io_uring is missing or refused (the message names the call).
  static Result<std::unique_ptr<EventLoop>> create(unsigned entries);
  ~IoUringLoop() override;

  std::string_view name() const override { return "io_uring"; }
  OpId read(int fd, void* buf, unsigned len, Handler h) override;
  OpId write(int fd, const void* buf, unsigned len, Handler h) override;
  OpId accept(int fd, Handler h) override;
  OpId recvmsg(int fd, msghdr* msg, Handler h) override;
  OpId pollIn(int fd, Handler h) override;
  OpId pollOut(int fd, Handler h) override;
  OpId timerAt(TimeNs deadline, Handler h) override;
  void cancel(OpId id) override;

 private:
  IoUringLoop() = default;
  void flush() override;
  unsigned dispatch() override;
  int block() override;

  io_uring_sqe* sqe();
  OpId queue(io_uring_sqe* s, Handler h);
  void armWake();

  io_uring ring_{};
  bool ring_ready_ = false;
  std::uint64_t wake_buf_ = 0;
  bool wake_armed_ = false;
  // By operation slot: a timer's deadline. A deque, so growing it never moves
  // a timespec an unsubmitted SQE points to.
  std::deque<__kernel_timespec> timespecs_;
};

}  // namespace fairsched::daemon
