// The epoll backend of the event loop, for hosts that refuse io_uring. It
// emulates completions on readiness: an operation waits in its descriptor's
// queue (reads, accepts, recvmsgs and pollIn on EPOLLIN; writes and pollOut
// on EPOLLOUT), and when the descriptor is ready the loop makes the
// non-blocking call itself and runs the handler with its result. A call that
// finds nothing (EAGAIN) keeps waiting. Writes are tried at once (the daemon
// writes only eventfds, which take a write without waiting). Timers share
// one timerfd set to the earliest deadline; wake() is an eventfd in the set.
//
// Results match the io_uring backend's: bytes, a new blocking close-on-exec
// descriptor, a poll mask, -ETIME for a timer that fired, or -errno.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/loop/event_loop.hpp"

namespace fairsched::daemon {

class EpollLoop final : public EventLoop {
 public:
  // kSystem when epoll, the eventfd or the timerfd cannot be created.
  static Result<std::unique_ptr<EventLoop>> create();
  ~EpollLoop() override;

  std::string_view name() const override { return "epoll"; }
  OpId read(int fd, void* buf, unsigned len, Handler h) override;
  OpId write(int fd, const void* buf, unsigned len, Handler h) override;
  OpId accept(int fd, Handler h) override;
  OpId recvmsg(int fd, msghdr* msg, Handler h) override;
  OpId pollIn(int fd, Handler h) override;
  OpId pollOut(int fd, Handler h) override;
  OpId timerAt(TimeNs deadline, Handler h) override;
  void cancel(OpId id) override;

 private:
  enum class Kind : std::uint8_t { kRead, kWrite, kAccept, kRecvmsg, kPoll };
  struct Wait {
    OpId id = 0;
    Kind kind = Kind::kRead;
    void* buf = nullptr;
    const void* cbuf = nullptr;
    unsigned len = 0;
    msghdr* msg = nullptr;
  };
  struct FdWaits {
    std::deque<Wait> in;   // on EPOLLIN
    std::deque<Wait> out;  // on EPOLLOUT
    std::uint32_t registered = 0;
  };

  EpollLoop() = default;
  void flush() override {}
  unsigned dispatch() override;
  int block() override;

  OpId wait(int fd, bool out, Wait w, Handler h);
  // Registers, modifies or removes `fd` in the epoll set for its queues;
  // on failure every operation waiting on it ends with the error.
  void updateInterest(int fd);
  // Runs the calls of `fd`'s waiting operations the readiness `events` allow.
  unsigned onReady(int fd, std::uint32_t events);
  // The call of `w`; nullopt when it would block (keep waiting).
  std::optional<int> attempt(int fd, const Wait& w, std::uint32_t events);
  unsigned runReady();
  unsigned fireTimers();
  void armTimerFd();
  // epoll_wait with `timeout_ms`; runs what is ready; -errno on failure.
  int poll(int timeout_ms, unsigned& ran);

  int epfd_ = -1;
  int timer_fd_ = -1;
  std::unordered_map<int, FdWaits> fds_;
  std::unordered_map<OpId, int> fd_of_;  // queued fd operations: their descriptor
  std::set<std::pair<TimeNs, OpId>> timers_;
  std::unordered_map<OpId, TimeNs> timer_of_;
  TimeNs timer_fd_at_ = kNever;                   // what timer_fd_ is set to
  std::vector<std::pair<OpId, int>> ready_;       // finished, handler not yet run
  std::vector<std::pair<OpId, int>> ready_swap_;  // ready_ while its handlers run
};

}  // namespace fairsched::daemon
