#include "daemon/loop/event_loop.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace fairsched::daemon {

EventLoop::~EventLoop() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

Result<> EventLoop::openWakeFd() {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return systemError("eventfd");
  return {};
}

void EventLoop::wake() {
  const std::uint64_t one = 1;
  // A full counter (after 2^64-2 wakes without a read) only means a wake is pending.
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

EventLoop::OpId EventLoop::track(Handler h) {
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
  return (static_cast<OpId>(op.gen) << 32) | i;
}

bool EventLoop::queued(OpId id) const {
  const std::uint32_t i = slotOf(id);
  return i < ops_.size() && ops_[i].live && ops_[i].gen == static_cast<std::uint32_t>(id >> 32);
}

bool EventLoop::finish(OpId id, int result) {
  if (!queued(id)) return false;
  const std::uint32_t i = slotOf(id);
  Handler h = std::move(ops_[i].handler);
  ops_[i].live = false;
  ops_[i].gen++;
  free_.push_back(i);
  --live_;
  if (h) h(result);
  return true;
}

int EventLoop::run() {
  running_ = true;
  TimeNs idle_since = 0;   // when the current run of idle passes began
  std::uint32_t idle = 0;  // idle passes since the last work
  while (running_) {
    const bool worked = hooks_.poll ? hooks_.poll() : false;
    flush();
    const unsigned ran = dispatch();
    if (worked || ran > 0) {
      idle = 0;
      continue;
    }
    if (hooks_.spin_ns > 0) {
      // The clock is read on the first idle pass and every 16th after it:
      // an idle pass is short, and the one a request lands in should be
      // shorter still.
      if (idle++ == 0) {
        idle_since = monotonicNow();
        continue;
      }
      if (idle % 16 != 0 || monotonicNow() - idle_since < hooks_.spin_ns) continue;
    }
    idle = 0;
    if (hooks_.before_sleep && hooks_.before_sleep()) continue;
    if (const int err = block(); err != 0) return err;
  }
  return 0;
}

}  // namespace fairsched::daemon
