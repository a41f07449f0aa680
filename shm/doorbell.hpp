// Doorbells (eventfds) and the sleep/wake protocol around them.
//
// Each direction has something the waker publishes to (client → daemon: a
// submission ring and the ready bitmap; daemon → client: the completion ring),
// a flag word the sleeper sets while it sleeps, and an eventfd:
//
//   sleeper  spin a while, re-checking for work; then
//            flag = 1; seq_cst fence; re-check            (SleepFlag::announceSleep)
//            work found: flag = 0 and carry on; none: block on the eventfd,
//            then flag = 0, and start over (announce again before blocking again)
//   waker    publish (release); seq_cst fence; load flag  (PeerSleepFlag::sleeping)
//            flag set: write the eventfd; clear: write nothing
//
// Why no wake-up is lost. This is Dekker's pattern (store buffering): each
// side stores one location, then loads the other's. Without the fences both
// loads may read the old values — a store can wait in the store buffer past a
// later load, even on x86 — and the sleeper would block on an empty ring that
// the waker has just filled, while the waker skips the eventfd because it saw
// no sleeper. With a seq_cst fence between each side's store and load, the
// two fences are ordered in the single total order S, and the side whose
// fence comes second must see the other side's store: the waker sees the flag
// and rings, or the sleeper sees the work and does not block. A sleeper never
// blocks without a fresh announce, fence and re-check, so a flag it cleared
// earlier cannot hide a later publication. Extra rings cost only a spurious
// wake-up; a ring that arrives before the sleeper blocks stays in the
// eventfd's counter, so it is not lost either.
//
// Waking a sleeping thread costs microseconds to hundreds of microseconds
// (deep C-states), a busy-poll round trip a fraction of one: hence the spin.
//
// Sleep epochs. The flag word counts: odd while its owner sleeps, even
// while it is awake, and every announce stores a value it never stored
// before (the next odd one; 1 is never used), every clear the next even
// one. A waker that rang in epoch v need not ring again while the flag
// still reads v (PeerSleepFlag::shouldRing): the sleeper wakes on that
// ring and, before it sleeps again, announces v + 2 and re-checks, and by
// the argument above sees whatever the waker published before it read v.
// So a burst of publications costs one eventfd write per sleep, not one
// each. A value must not come back while a waker may still remember it:
// 2^31 sleeps in between.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "shm/error.hpp"
#include "shm/shared_word.hpp"
#include "shm/unique_fd.hpp"

namespace fairsched::shm {

// A non-blocking, close-on-exec eventfd used as a counter of rings.
class EventFd {
 public:
  enum class WaitResult : std::uint8_t { kSignalled, kTimedOut, kError };

  static Result<EventFd> create();
  // Takes ownership of an eventfd received from the peer.
  static EventFd adopt(UniqueFd fd) { return EventFd(std::move(fd)); }

  int fd() const { return fd_.get(); }

  // Adds one to the counter. A saturated counter (EAGAIN) already wakes the
  // reader and counts as success; false only on an unexpected error.
  bool signal() const;

  // Reads and resets the counter without blocking; 0 when it was 0.
  std::uint64_t drain() const;

  // Blocks until the counter is nonzero or `timeout` passes (negative:
  // forever), then drains it.
  WaitResult wait(std::chrono::nanoseconds timeout) const;

 private:
  explicit EventFd(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

// The sleeper's own flag word (writable by it, and by it alone).
class SleepFlag {
 public:
  SleepFlag() = default;
  explicit SleepFlag(std::uint32_t* word) : word_(word) {}

  // Store a new epoch (odd), then a seq_cst fence: the caller's re-check
  // after this sees any publication whose waker did not see the flag.
  void announceSleep() {
    announceSleepUnfenced();
    seqCstFence();
  }
  // The store alone, for announcing on many flags behind one seqCstFence().
  void announceSleepUnfenced() {
    const std::uint32_t w = sharedLoad(*word_, std::memory_order_relaxed);
    std::uint32_t next = w + ((w & 1u) != 0 ? 2u : 1u);
    if (next == 1) next = 3;  // 1: a sleep without epochs
    sharedStore(*word_, next, std::memory_order_relaxed);
  }
  // Awake (the next even value). Relaxed: a waker that still sees the epoch
  // only rings once too often.
  void clear() {
    const std::uint32_t w = sharedLoad(*word_, std::memory_order_relaxed);
    if ((w & 1u) != 0) sharedStore(*word_, w + 1, std::memory_order_relaxed);
  }

 private:
  std::uint32_t* word_ = nullptr;
};

// The other side's flag word (read-only to us; the client's mapping of the
// daemon's flag is read-only, the daemon's view of the client's flag is
// client-writable: a peer's garbage costs that peer its wake-ups at most).
class PeerSleepFlag {
 public:
  PeerSleepFlag() = default;
  explicit PeerSleepFlag(const std::uint32_t* word) : word_(word) {}

  // A seq_cst fence, then a relaxed load. Call after publishing: true means
  // the peer may be asleep and its eventfd must be written.
  bool sleeping() const {
    seqCstFence();
    return sleepingAfterFence();
  }
  // The load alone. REQUIRES: a seqCstFence() after the caller's
  // publication (one fence may serve many flags).
  bool sleepingAfterFence() const {
    return (sharedLoad(*word_, std::memory_order_relaxed) & 1u) != 0;
  }
  // sleeping(), less the epochs some waker sharing `rung` rang in already
  // (the sleep epochs above). Call after publishing; ring on true.
  bool shouldRing(std::atomic<std::uint32_t>& rung) const {
    seqCstFence();
    const std::uint32_t v = sharedLoad(*word_, std::memory_order_relaxed);
    if ((v & 1u) == 0) return false;
    if (v == 1) return true;  // a peer without epochs
    return rung.exchange(v, std::memory_order_relaxed) != v;
  }

 private:
  const std::uint32_t* word_ = nullptr;
};

struct SpinPolicy {
  std::chrono::nanoseconds spin{std::chrono::microseconds(20)};  // busy-poll before sleeping
};

enum class WaitOutcome : std::uint8_t { kReady, kTimedOut, kError };

// The sleeper's whole protocol for a thread that may block (the client; the
// daemon does the same steps inside its io_uring loop): spin on ready(), then
// announce, re-check, block on `bell`; until ready() or `timeout` (negative:
// forever). ready() must only read (it is called many times).
template <class Ready>
WaitOutcome sleepUntil(Ready&& ready, SleepFlag own, const EventFd& bell, SpinPolicy policy,
                       std::chrono::nanoseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const bool forever = timeout.count() < 0 || timeout > std::chrono::hours(24 * 365);
  const auto deadline = forever ? Clock::time_point::max() : start + timeout;
  const auto spin_end = start + policy.spin;
  for (;;) {
    if (ready()) return WaitOutcome::kReady;
    const auto now = Clock::now();
    if (now >= spin_end || now >= deadline) break;
    for (int i = 0; i < 16; ++i) cpuRelax();
  }
  for (;;) {
    own.announceSleep();
    if (ready()) {
      own.clear();
      return WaitOutcome::kReady;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      own.clear();
      return WaitOutcome::kTimedOut;
    }
    const auto left = forever
                          ? std::chrono::nanoseconds(-1)
                          : std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
    const EventFd::WaitResult r = bell.wait(left);
    own.clear();
    if (r == EventFd::WaitResult::kError) return WaitOutcome::kError;
  }
}

}  // namespace fairsched::shm
