// Chooses and builds the event loop's backend ([daemon] event_loop): kept
// out of EventLoop itself so the base class knows neither backend.
#pragma once

#include <memory>
#include <string>

#include "daemon/config/config.hpp"
#include "daemon/error.hpp"
#include "daemon/loop/event_loop.hpp"

namespace fairsched::daemon {

// A loop of `kind`. kAuto tries io_uring, then epoll; `fallback_reason`
// (when given) gets why io_uring was refused then, and stays empty
// otherwise. Errors: kSystem (io_uring refused for kIoUring, or epoll,
// eventfd or timerfd failed).
Result<std::unique_ptr<EventLoop>> makeEventLoop(
    config::EventLoopKind kind = config::EventLoopKind::kIoUring, unsigned entries = 512,
    std::string* fallback_reason = nullptr);

}  // namespace fairsched::daemon
