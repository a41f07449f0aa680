#include "shm/doorbell.hpp"

#include <poll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <ctime>

namespace fairsched::shm {

Result<EventFd> EventFd::create() {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return Error{ErrorCode::kSystem, errno, "eventfd"};
  return EventFd(UniqueFd(fd));
}

bool EventFd::signal() const {
  const std::uint64_t one = 1;
  for (;;) {
    if (::write(fd_.get(), &one, sizeof(one)) == static_cast<ssize_t>(sizeof(one))) return true;
    if (errno == EINTR) continue;
    return errno == EAGAIN;
  }
}

std::uint64_t EventFd::drain() const {
  std::uint64_t count = 0;
  for (;;) {
    if (::read(fd_.get(), &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count))) {
      return count;
    }
    if (errno == EINTR) continue;
    return 0;
  }
}

EventFd::WaitResult EventFd::wait(std::chrono::nanoseconds timeout) const {
  if (drain() != 0) return WaitResult::kSignalled;
  pollfd pfd{fd_.get(), POLLIN, 0};
  timespec ts{};
  const timespec* tsp = nullptr;
  if (timeout.count() >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
    tsp = &ts;
  }
  for (;;) {
    const int n = ::ppoll(&pfd, 1, tsp, nullptr);
    if (n > 0) {
      if ((pfd.revents & POLLIN) == 0) return WaitResult::kError;
      drain();
      return WaitResult::kSignalled;
    }
    if (n == 0) return WaitResult::kTimedOut;
    if (errno != EINTR) return WaitResult::kError;
    // EINTR: poll again with the full timeout; sleepUntil re-checks its deadline.
  }
}

}  // namespace fairsched::shm
