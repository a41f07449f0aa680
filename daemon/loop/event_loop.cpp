#include "daemon/loop/event_loop.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace fairsched::daemon {

EventLoop::~EventLoop() {
  if (wake_fd_ >= 0) close(wake_fd_);
  if (schedstat_fd_ >= 0) close(schedstat_fd_);
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

bool EventLoop::contended(TimeNs now) {
  const TimeNs window = now - contention_checked_;
  if (window < kContentionCheckNs) return now < contended_until_;
  contention_checked_ = now;
  // The loop thread's time waiting for a CPU while runnable: the second
  // field of /proc/thread-self/schedstat.
  if (schedstat_fd_ == -1) {
    schedstat_fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (schedstat_fd_ < 0) schedstat_fd_ = -2;  // not there: never contended
  }
  if (schedstat_fd_ < 0) return false;
  char buf[96];
  const ssize_t n = ::pread(schedstat_fd_, buf, sizeof buf - 1, 0);
  if (n <= 0) return now < contended_until_;
  buf[n] = '\0';
  unsigned long long ran = 0, waited = 0;
  if (std::sscanf(buf, "%llu %llu", &ran, &waited) != 2) return now < contended_until_;
  const auto delay = static_cast<TimeNs>(waited);
  // More than a quarter of the window spent waiting for a CPU: contended.
  if (run_delay_ != 0 && (delay - run_delay_) * 4 > window) {
    contended_until_ = now + kContendedForNs;
  }
  run_delay_ = delay;
  return now < contended_until_;
}

int EventLoop::run() {
  running_ = true;
  TimeNs idle_since = 0;   // when the current run of idle passes began
  std::uint32_t idle = 0;  // idle passes since the last work
  while (running_) {
    const bool glance =
        idle % kIdlePassesPerClockRead != 0 && hooks_.idle_glance && hooks_.idle_glance();
    const bool worked = (!glance && hooks_.poll) ? hooks_.poll() : false;
    flush();
    const unsigned ran = dispatch();
    if (worked || ran > 0) {
      idle = 0;
      continue;
    }
    if (hooks_.spin_ns > 0) {
      // The clock is read every kIdlePassesPerClockRead idle passes only:
      // an idle pass is short (poll() mostly glances), and the one a
      // request lands in should be shorter still. The spin window starts
      // at the first read.
      // On contended cores (see event_loop.hpp) spinning would only give
      // the loop the share of a spinning client: it sleeps then instead,
      // and a sleeper is what the kernel runs first when a doorbell or an
      // executor wakes it.
      if (++idle % kIdlePassesPerClockRead != 0) {
        continue;
      } else if (idle == kIdlePassesPerClockRead) {
        idle_since = monotonicNow();
        if (!contended(idle_since)) continue;
        ++contended_sleeps_;
      } else if (const TimeNs now = monotonicNow(); now - idle_since < hooks_.spin_ns) {
        if (!contended(now)) continue;
        ++contended_sleeps_;
      }
    }
    idle = 0;
    if (hooks_.before_sleep && hooks_.before_sleep()) continue;
    if (const int err = block(); err != 0) return err;
  }
  return 0;
}

}  // namespace fairsched::daemon
