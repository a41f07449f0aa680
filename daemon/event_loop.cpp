#include "daemon/event_loop.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fairsched::daemon {
namespace {
constexpr std::uint64_t kWakeTag = ~std::uint64_t{0};
std::uint32_t slotOf(EventLoop::OpId id) {
  return static_cast<std::uint32_t>(id & 0xffffffffu);
}
std::uint32_t genOf(EventLoop::OpId id) {
  return static_cast<std::uint32_t>(id >> 32);
}
}  // namespace

TimeNs monotonicNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

Result<std::unique_ptr<EventLoop>> EventLoop::create(unsigned entries) {
  std::unique_ptr<EventLoop> loop(new EventLoop());
  const int rc = io_uring_queue_init(entries, &loop->ring_, 0);
  if (rc < 0) return systemError("io_uring_queue_init", -rc);
  loop->ring_ready_ = true;
  loop->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (loop->wake_fd_ < 0) return systemError("eventfd");
  return loop;
}

EventLoop::~EventLoop() {
  if (ring_ready_) io_uring_queue_exit(&ring_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

io_uring_sqe* EventLoop::sqe() {
  io_uring_sqe* s = io_uring_get_sqe(&ring_);
  if (!s) {  // the submission queue is full: hand what we have to the kernel
    io_uring_submit(&ring_);
    s = io_uring_get_sqe(&ring_);
  }
  return s;
}

EventLoop::OpId EventLoop::track(io_uring_sqe* s, Handler h) {
  std::uint32_t i;
  if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
  } else {
    i = static_cast<std::uint32_t>(ops_.size());
    ops_.emplace_back();
  }
  Op& op = ops_[i];
  op.handler = std::move(h);
  op.live = true;
  ++live_;
  const OpId id = (static_cast<OpId>(op.gen) << 32) | i;
  io_uring_sqe_set_data64(s, id);
  return id;
}

EventLoop::OpId EventLoop::read(int fd, void* buf, unsigned len, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_read(s, fd, buf, len, 0);
  return track(s, std::move(h));
}

EventLoop::OpId EventLoop::write(int fd, const void* buf, unsigned len, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_write(s, fd, buf, len, 0);
  return track(s, std::move(h));
}

EventLoop::OpId EventLoop::accept(int fd, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_accept(s, fd, nullptr, nullptr, SOCK_CLOEXEC);
  return track(s, std::move(h));
}

EventLoop::OpId EventLoop::recvmsg(int fd, msghdr* msg, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_recvmsg(s, fd, msg, MSG_CMSG_CLOEXEC);
  return track(s, std::move(h));
}

EventLoop::OpId EventLoop::pollIn(int fd, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_poll_add(s, fd, POLLIN);
  return track(s, std::move(h));
}

EventLoop::OpId EventLoop::pollOut(int fd, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_poll_add(s, fd, POLLOUT);
  return track(s, std::move(h));
}

EventLoop::OpId EventLoop::timerAt(TimeNs deadline, Handler h) {
  io_uring_sqe* s = sqe();
  const OpId id = track(s, std::move(h));
  Op& op = ops_[slotOf(id)];
  op.ts.tv_sec = deadline / kNsPerSec;
  op.ts.tv_nsec = deadline % kNsPerSec;
  io_uring_prep_timeout(s, &op.ts, 0, IORING_TIMEOUT_ABS);
  io_uring_sqe_set_data64(s, id);
  return id;
}

void EventLoop::cancel(OpId id) {
  const std::uint32_t i = slotOf(id);
  if (i >= ops_.size() || !ops_[i].live || ops_[i].gen != genOf(id)) return;
  io_uring_sqe* s = sqe();
  io_uring_prep_cancel64(s, id, 0);
  io_uring_sqe_set_data64(s, kWakeTag - 1);  // its own completion is ignored
}

void EventLoop::armWake() {
  // A read that completes whenever another thread calls wake().
  io_uring_sqe* s = sqe();
  io_uring_prep_read(s, wake_fd_, &wake_buf_, sizeof wake_buf_, 0);
  io_uring_sqe_set_data64(s, kWakeTag);
  wake_armed_ = true;
}

void EventLoop::wake() {
  const std::uint64_t one = 1;
  // A full counter (after 2^64-2 wakes without a read) only means a wake is pending.
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

unsigned EventLoop::reap() {
  unsigned n = 0;
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe) {
    const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    ++n;
    if (tag == kWakeTag) {
      armWake();
      continue;
    }
    const std::uint32_t i = slotOf(tag);
    if (i >= ops_.size() || !ops_[i].live || ops_[i].gen != genOf(tag))
      continue;  // cancel's own cqe
    Handler h = std::move(ops_[i].handler);
    ops_[i].live = false;
    ops_[i].gen++;
    free_.push_back(i);
    --live_;
    if (h) h(res);
  }
  return n;
}

int EventLoop::run() {
  running_ = true;
  if (!wake_armed_) armWake();
  std::uint32_t idle = 0;
  while (running_) {
    const bool worked = hooks_.poll ? hooks_.poll() : false;
    io_uring_submit(&ring_);
    const unsigned reaped = reap();
    if (worked || reaped > 0) {
      idle = 0;
      continue;
    }
    if (++idle < hooks_.spin_iterations) continue;
    if (hooks_.before_sleep && hooks_.before_sleep()) {
      idle = 0;
      continue;
    }
    const int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) return -rc;
    idle = 0;
    reap();
  }
  return 0;
}

}  // namespace fairsched::daemon
