#include "daemon/loop/io_uring_loop.hpp"

#include <poll.h>

#include <cerrno>

namespace fairsched::daemon {
namespace {
constexpr std::uint64_t kWakeTag = ~std::uint64_t{0};
constexpr std::uint64_t kCancelTag = kWakeTag - 1;  // a cancel's own completion, ignored
}  // namespace

Result<std::unique_ptr<EventLoop>> IoUringLoop::create(unsigned entries) {
  std::unique_ptr<IoUringLoop> loop(new IoUringLoop());
  const int rc = io_uring_queue_init(entries, &loop->ring_, 0);
  if (rc < 0) return systemError("io_uring_queue_init", -rc);
  loop->ring_ready_ = true;
  if (auto ok = loop->openWakeFd(); !ok) return std::move(ok).error();
  return std::unique_ptr<EventLoop>(std::move(loop));
}

IoUringLoop::~IoUringLoop() {
  if (ring_ready_) io_uring_queue_exit(&ring_);
}

io_uring_sqe* IoUringLoop::sqe() {
  io_uring_sqe* s = io_uring_get_sqe(&ring_);
  if (!s) {  // the submission queue is full: hand what we have to the kernel
    io_uring_submit(&ring_);
    s = io_uring_get_sqe(&ring_);
  }
  return s;
}

EventLoop::OpId IoUringLoop::queue(io_uring_sqe* s, Handler h) {
  const OpId id = track(std::move(h));
  io_uring_sqe_set_data64(s, id);
  return id;
}

EventLoop::OpId IoUringLoop::read(int fd, void* buf, unsigned len, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_read(s, fd, buf, len, 0);
  return queue(s, std::move(h));
}

EventLoop::OpId IoUringLoop::write(int fd, const void* buf, unsigned len, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_write(s, fd, buf, len, 0);
  return queue(s, std::move(h));
}

EventLoop::OpId IoUringLoop::accept(int fd, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_accept(s, fd, nullptr, nullptr, SOCK_CLOEXEC);
  return queue(s, std::move(h));
}

EventLoop::OpId IoUringLoop::recvmsg(int fd, msghdr* msg, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_recvmsg(s, fd, msg, MSG_CMSG_CLOEXEC);
  return queue(s, std::move(h));
}

EventLoop::OpId IoUringLoop::pollIn(int fd, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_poll_add(s, fd, POLLIN);
  return queue(s, std::move(h));
}

EventLoop::OpId IoUringLoop::pollOut(int fd, Handler h) {
  io_uring_sqe* s = sqe();
  io_uring_prep_poll_add(s, fd, POLLOUT);
  return queue(s, std::move(h));
}

EventLoop::OpId IoUringLoop::timerAt(TimeNs deadline, Handler h) {
  io_uring_sqe* s = sqe();
  const OpId id = queue(s, std::move(h));
  const std::uint32_t i = slotOf(id);
  if (timespecs_.size() <= i) timespecs_.resize(i + 1);
  // The kernel reads the timespec when the SQE is submitted: it lives in
  // timespecs_ until then (a slot is reused only after its operation ended).
  timespecs_[i].tv_sec = deadline / kNsPerSec;
  timespecs_[i].tv_nsec = deadline % kNsPerSec;
  io_uring_prep_timeout(s, &timespecs_[i], 0, IORING_TIMEOUT_ABS);
  io_uring_sqe_set_data64(s, id);
  return id;
}

void IoUringLoop::cancel(OpId id) {
  if (!queued(id)) return;
  io_uring_sqe* s = sqe();
  io_uring_prep_cancel64(s, id, 0);
  io_uring_sqe_set_data64(s, kCancelTag);
}

void IoUringLoop::armWake() {
  // A read that completes whenever another thread calls wake().
  io_uring_sqe* s = sqe();
  io_uring_prep_read(s, wake_fd_, &wake_buf_, sizeof wake_buf_, 0);
  io_uring_sqe_set_data64(s, kWakeTag);
  wake_armed_ = true;
}

void IoUringLoop::flush() {
  if (!wake_armed_) armWake();
  io_uring_submit(&ring_);
}

unsigned IoUringLoop::dispatch() {
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
    if (tag == kCancelTag) continue;
    finish(tag, res);
  }
  return n;
}

int IoUringLoop::block() {
  if (!wake_armed_) armWake();
  const int rc = io_uring_submit_and_wait(&ring_, 1);
  if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) return -rc;
  dispatch();
  return 0;
}

}  // namespace fairsched::daemon
