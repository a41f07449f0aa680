#include "daemon/loop/epoll_loop.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace fairsched::daemon {
namespace {

constexpr std::uint32_t kInEvents = EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP;
constexpr std::uint32_t kOutEvents = EPOLLOUT | EPOLLHUP | EPOLLERR;

bool wouldBlock(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

// Reads and discards an eventfd's or timerfd's counter.
void drain(int fd) {
  std::uint64_t v;
  [[maybe_unused]] const ssize_t n = ::read(fd, &v, sizeof v);
}

}  // namespace

Result<std::unique_ptr<EventLoop>> EpollLoop::create() {
  std::unique_ptr<EpollLoop> loop(new EpollLoop());
  loop->epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (loop->epfd_ < 0) return systemError("epoll_create1");
  if (auto ok = loop->openWakeFd(); !ok) return std::move(ok).error();
  loop->timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (loop->timer_fd_ < 0) return systemError("timerfd_create");
  for (const int fd : {loop->wake_fd_, loop->timer_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(loop->epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) return systemError("epoll_ctl");
  }
  return std::unique_ptr<EventLoop>(std::move(loop));
}

EpollLoop::~EpollLoop() {
  if (timer_fd_ >= 0) close(timer_fd_);
  if (epfd_ >= 0) close(epfd_);
}

EventLoop::OpId EpollLoop::wait(int fd, bool out, Wait w, Handler h) {
  w.id = track(std::move(h));
  FdWaits& f = fds_[fd];
  (out ? f.out : f.in).push_back(w);
  fd_of_[w.id] = fd;
  updateInterest(fd);
  return w.id;
}

EventLoop::OpId EpollLoop::read(int fd, void* buf, unsigned len, Handler h) {
  return wait(fd, false, {.kind = Kind::kRead, .buf = buf, .len = len}, std::move(h));
}

EventLoop::OpId EpollLoop::write(int fd, const void* buf, unsigned len, Handler h) {
  // Tried at once: an eventfd takes a write without waiting. The handler
  // still runs later, from the loop.
  const ssize_t n = ::write(fd, buf, len);
  if (n < 0 && wouldBlock(errno)) {
    return wait(fd, true, {.kind = Kind::kWrite, .cbuf = buf, .len = len}, std::move(h));
  }
  const OpId id = track(std::move(h));
  ready_.emplace_back(id, n < 0 ? -errno : static_cast<int>(n));
  return id;
}

EventLoop::OpId EpollLoop::accept(int fd, Handler h) {
  return wait(fd, false, {.kind = Kind::kAccept}, std::move(h));
}

EventLoop::OpId EpollLoop::recvmsg(int fd, msghdr* msg, Handler h) {
  return wait(fd, false, {.kind = Kind::kRecvmsg, .msg = msg}, std::move(h));
}

EventLoop::OpId EpollLoop::pollIn(int fd, Handler h) {
  return wait(fd, false, {.kind = Kind::kPoll}, std::move(h));
}

EventLoop::OpId EpollLoop::pollOut(int fd, Handler h) {
  return wait(fd, true, {.kind = Kind::kPoll}, std::move(h));
}

EventLoop::OpId EpollLoop::timerAt(TimeNs deadline, Handler h) {
  const OpId id = track(std::move(h));
  timers_.emplace(deadline, id);
  timer_of_[id] = deadline;
  armTimerFd();
  return id;
}

void EpollLoop::cancel(OpId id) {
  if (!queued(id)) return;
  if (auto it = fd_of_.find(id); it != fd_of_.end()) {
    const int fd = it->second;
    fd_of_.erase(it);
    FdWaits& f = fds_[fd];
    for (auto* q : {&f.in, &f.out}) {
      q->erase(std::remove_if(q->begin(), q->end(), [id](const Wait& w) { return w.id == id; }),
               q->end());
    }
    updateInterest(fd);
    ready_.emplace_back(id, -ECANCELED);
    return;
  }
  if (auto it = timer_of_.find(id); it != timer_of_.end()) {
    timers_.erase({it->second, id});
    timer_of_.erase(it);
    armTimerFd();
    ready_.emplace_back(id, -ECANCELED);
  }
  // Otherwise it has finished and its handler is about to run with its result.
}

void EpollLoop::updateInterest(int fd) {
  auto it = fds_.find(fd);
  if (it == fds_.end()) return;
  FdWaits& f = it->second;
  const std::uint32_t want =
      (f.in.empty() ? 0u : std::uint32_t{EPOLLIN}) | (f.out.empty() ? 0u : std::uint32_t{EPOLLOUT});
  if (want == f.registered) {
    if (want == 0) fds_.erase(it);
    return;
  }
  if (want == 0) {
    epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);  // fails harmlessly if fd was closed
    fds_.erase(it);
    return;
  }
  epoll_event ev{};
  ev.events = want;
  ev.data.fd = fd;
  int rc = epoll_ctl(epfd_, f.registered == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
  if (rc != 0 && errno == ENOENT) rc = epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  if (rc != 0 && errno == EEXIST) rc = epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
  if (rc == 0) {
    f.registered = want;
    return;
  }
  // The descriptor cannot be watched (closed, or a kind epoll refuses):
  // every operation waiting on it ends with the error.
  const int err = errno;
  for (auto* q : {&f.in, &f.out}) {
    for (const Wait& w : *q) {
      fd_of_.erase(w.id);
      ready_.emplace_back(w.id, -err);
    }
  }
  if (f.registered != 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  fds_.erase(it);
}

std::optional<int> EpollLoop::attempt(int fd, const Wait& w, std::uint32_t events) {
  ssize_t n = 0;
  switch (w.kind) {
    case Kind::kRead:
      n = ::read(fd, w.buf, w.len);
      break;
    case Kind::kWrite:
      n = ::write(fd, w.cbuf, w.len);
      break;
    case Kind::kAccept:
      n = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      break;
    case Kind::kRecvmsg:
      n = ::recvmsg(fd, w.msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
      break;
    case Kind::kPoll:  // EPOLLIN/OUT/ERR/HUP have poll(2)'s values
      return static_cast<int>(events & (POLLIN | POLLOUT | POLLERR | POLLHUP));
  }
  if (n >= 0) return static_cast<int>(n);
  if (wouldBlock(errno)) return std::nullopt;
  return -errno;
}

unsigned EpollLoop::onReady(int fd, std::uint32_t events) {
  unsigned n = 0;
  for (const bool out : {false, true}) {
    if ((events & (out ? kOutEvents : kInEvents)) == 0) continue;
    for (;;) {
      auto it = fds_.find(fd);
      if (it == fds_.end()) return n;
      std::deque<Wait>& q = out ? it->second.out : it->second.in;
      if (q.empty()) break;
      const Wait w = q.front();
      const std::optional<int> res = attempt(fd, w, events);
      if (!res) break;  // nothing there after all: keep waiting
      q.pop_front();
      fd_of_.erase(w.id);
      ready_.emplace_back(w.id, *res);
      ++n;
    }
  }
  updateInterest(fd);
  return n;
}

unsigned EpollLoop::runReady() {
  unsigned n = 0;
  ready_swap_.clear();
  ready_swap_.swap(ready_);  // handlers may queue more: those run next time
  for (const auto& [id, res] : ready_swap_) {
    if (finish(id, res)) ++n;
  }
  ready_swap_.clear();
  return n;
}

unsigned EpollLoop::fireTimers() {
  if (timers_.empty()) return 0;
  const TimeNs now = monotonicNow();
  unsigned n = 0;
  while (!timers_.empty() && timers_.begin()->first <= now) {
    const OpId id = timers_.begin()->second;
    timers_.erase(timers_.begin());
    timer_of_.erase(id);
    ready_.emplace_back(id, -ETIME);  // as io_uring reports an expired timeout
    ++n;
  }
  armTimerFd();
  return n;
}

void EpollLoop::armTimerFd() {
  const TimeNs want = timers_.empty() ? kNever : timers_.begin()->first;
  if (want == timer_fd_at_) return;
  itimerspec its{};
  if (want != kNever) {
    const TimeNs at = std::max<TimeNs>(want, 1);  // 0 would disarm it
    its.it_value.tv_sec = at / kNsPerSec;
    its.it_value.tv_nsec = at % kNsPerSec;
  }
  timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr);
  timer_fd_at_ = want;
}

int EpollLoop::poll(int timeout_ms, unsigned& ran) {
  epoll_event evs[64];
  const int n = epoll_wait(epfd_, evs, 64, timeout_ms);
  if (n < 0) return errno == EINTR ? 0 : errno;
  for (int i = 0; i < n; ++i) {
    const int fd = evs[i].data.fd;
    if (fd == wake_fd_) {
      drain(fd);
      ++ran;  // a wake counts as work, as the io_uring backend's does
    } else if (fd == timer_fd_) {
      drain(fd);
      timer_fd_at_ = kNever;  // a fired timerfd is disarmed; armTimerFd sets it again
    } else {
      onReady(fd, evs[i].events);
    }
  }
  fireTimers();
  ran += runReady();
  return 0;
}

unsigned EpollLoop::dispatch() {
  unsigned ran = runReady();
  poll(0, ran);
  return ran;
}

int EpollLoop::block() {
  if (!ready_.empty()) {
    runReady();
    return 0;
  }
  fireTimers();
  if (!ready_.empty()) {
    runReady();
    return 0;
  }
  unsigned ran = 0;
  return poll(-1, ran);
}

}  // namespace fairsched::daemon
