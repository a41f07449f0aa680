// Eventfd doorbells, the sleep flags and the sleep/wake protocol: no
// wake-up is lost when both sides go to sleep as eagerly as they can.
#include "shm/doorbell.hpp"
#include "tests/support/seeded_rng.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <thread>
#include <variant>

namespace fairsched::shm {
namespace {

using namespace std::chrono_literals;

using testing::testSeed;

EventFd makeEventFd() {
  Result<EventFd> r = EventFd::create();
  if (!r.ok()) ADD_FAILURE() << r.error().toString();
  return std::move(r).value();
}

TEST(EventFd, CountsSignalsAndDrainsThemAtOnce) {
  EventFd bell = makeEventFd();
  ASSERT_GE(bell.fd(), 0);
  EXPECT_EQ(bell.drain(), 0u);
  EXPECT_TRUE(bell.signal());
  EXPECT_TRUE(bell.signal());
  EXPECT_TRUE(bell.signal());
  EXPECT_EQ(bell.drain(), 3u);
  EXPECT_EQ(bell.drain(), 0u);
}

TEST(EventFd, WaitTimesOutWithoutASignal) {
  EventFd bell = makeEventFd();
  const auto before = std::chrono::steady_clock::now();
  EXPECT_EQ(bell.wait(2ms), EventFd::WaitResult::kTimedOut);
  EXPECT_GE(std::chrono::steady_clock::now() - before, 2ms);
}

TEST(EventFd, WaitReturnsAtOnceForAPendingSignalAndDrainsIt) {
  EventFd bell = makeEventFd();
  ASSERT_TRUE(bell.signal());
  EXPECT_EQ(bell.wait(-1ns), EventFd::WaitResult::kSignalled);
  EXPECT_EQ(bell.drain(), 0u);
}

TEST(EventFd, WaitWakesOnASignalFromAnotherThread) {
  EventFd bell = makeEventFd();
  std::thread waker([&] {
    std::this_thread::sleep_for(5ms);
    bell.signal();
  });
  EXPECT_EQ(bell.wait(10s), EventFd::WaitResult::kSignalled);
  waker.join();
}

TEST(SleepFlag, AnnounceAndClearAreWhatThePeerSees) {
  std::uint32_t word = 0;
  SleepFlag own(&word);
  PeerSleepFlag peer(&word);
  EXPECT_FALSE(peer.sleeping());
  own.announceSleep();
  EXPECT_TRUE(peer.sleeping());
  own.clear();
  EXPECT_FALSE(peer.sleeping());
  word = 0xdeadbeef;  // a client's garbage counts as "sleeping": one extra ring at most
  EXPECT_TRUE(peer.sleeping());
}

TEST(SleepUntil, ReturnsReadyWithoutSleepingWhenWorkIsThere) {
  EventFd bell = makeEventFd();
  std::uint32_t flag = 0;
  EXPECT_EQ(sleepUntil([] { return true; }, SleepFlag(&flag), bell, SpinPolicy{}, 0ns),
            WaitOutcome::kReady);
  EXPECT_EQ(flag, 0u);
}

TEST(SleepUntil, TimesOutAndLeavesTheFlagClear) {
  EventFd bell = makeEventFd();
  std::uint32_t flag = 0;
  EXPECT_EQ(sleepUntil([] { return false; }, SleepFlag(&flag), bell, SpinPolicy{0ns}, 3ms),
            WaitOutcome::kTimedOut);
  EXPECT_EQ(flag, 0u);
}

// Two threads bounce a counter, each side sleeping on its own eventfd as soon
// as it finds nothing to do and ringing the other only when that one has
// announced sleep. A lost wake-up leaves a side blocked: it shows up as a
// timeout.
TEST(SleepUntil, PingPongLosesNoWakeUp) {
  const std::uint64_t seed = testSeed();
  constexpr std::uint64_t kRounds = 1500;
  struct Side {
    std::uint32_t sleeping = 0;
    EventFd bell = makeEventFd();
  };
  Side a;
  Side b;
  std::uint64_t ball = 0;  // a shared word: odd for b to answer, even for a
  auto ballIs = [&](std::uint64_t v) {
    return [&ball, v] { return sharedLoad(ball, std::memory_order_acquire) == v; };
  };
  std::atomic<std::uint64_t> rings{0};
  auto throwTo = [&](Side& peer, std::uint64_t v) {
    sharedStore(ball, v, std::memory_order_release);
    if (PeerSleepFlag(&peer.sleeping).sleeping()) {
      peer.bell.signal();
      rings.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::atomic<std::uint64_t> lost{0};
  std::thread answerer([&] {
    std::mt19937_64 rng(seed + 1);
    for (std::uint64_t r = 0; r < kRounds; ++r) {
      const SpinPolicy spin{std::chrono::nanoseconds(rng() % 3 == 0 ? 2000 : 0)};
      if (sleepUntil(ballIs(2 * r + 1), SleepFlag(&b.sleeping), b.bell, spin, 5s) !=
          WaitOutcome::kReady) {
        lost.fetch_add(1);
        return;
      }
      throwTo(a, 2 * r + 2);
    }
  });
  std::mt19937_64 rng(seed);
  for (std::uint64_t r = 0; r < kRounds; ++r) {
    throwTo(b, 2 * r + 1);
    const SpinPolicy spin{std::chrono::nanoseconds(rng() % 3 == 0 ? 2000 : 0)};
    if (sleepUntil(ballIs(2 * r + 2), SleepFlag(&a.sleeping), a.bell, spin, 5s) !=
        WaitOutcome::kReady) {
      lost.fetch_add(1);
      break;
    }
  }
  answerer.join();
  std::cout << rings.load() << " of " << 2 * kRounds << " hand-offs rang a sleeper\n";
  EXPECT_EQ(lost.load(), 0u);
  EXPECT_EQ(ball, 2 * kRounds);
}

}  // namespace
}  // namespace fairsched::shm
