#include "daemon/loop/make_event_loop.hpp"

#include "daemon/loop/epoll_loop.hpp"
#include "daemon/loop/io_uring_loop.hpp"

namespace fairsched::daemon {

Result<std::unique_ptr<EventLoop>> makeEventLoop(config::EventLoopKind kind, unsigned entries,
                                                 std::string* fallback_reason) {
  if (fallback_reason) fallback_reason->clear();
  if (kind == config::EventLoopKind::kEpoll) return EpollLoop::create();
  auto uring = IoUringLoop::create(entries);
  if (uring || kind == config::EventLoopKind::kIoUring) return uring;
  if (fallback_reason) *fallback_reason = uring.error().message;
  return EpollLoop::create();
}

}  // namespace fairsched::daemon
