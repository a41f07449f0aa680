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
#include <vector>

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
  word = 0xdeadbeef;  // a client's garbage (odd) counts as "sleeping": one extra ring at most
  EXPECT_TRUE(peer.sleeping());
}

// Each announce is a sleep never announced before (odd, never 1), each clear
// the next even value; a waker rings once per sleep, and a peer without
// epochs (always 1) on every publication.
TEST(SleepFlag, EachSleepIsANewEpochAndAWakerRingsOncePerSleep) {
  std::uint32_t word = 0;
  SleepFlag own(&word);
  PeerSleepFlag peer(&word);
  std::atomic<std::uint32_t> rung{0};
  EXPECT_FALSE(peer.shouldRing(rung));  // awake
  std::uint32_t last = word;
  for (int sleep = 0; sleep < 5; ++sleep) {
    own.announceSleep();
    EXPECT_EQ(word % 2, 1u);
    EXPECT_NE(word, 1u);
    EXPECT_GT(word, last);
    last = word;
    EXPECT_TRUE(peer.shouldRing(rung)) << "the first publication of sleep " << sleep;
    EXPECT_FALSE(peer.shouldRing(rung)) << "a second one in the same sleep";
    if (sleep == 2) {  // announced again without waking: a new epoch all the same
      own.announceSleepUnfenced();
      EXPECT_GT(word, last);
      last = word;
      EXPECT_TRUE(peer.shouldRing(rung));
    }
    own.clear();
    EXPECT_EQ(word % 2, 0u);
    EXPECT_FALSE(peer.shouldRing(rung));
  }
  word = 0xffffffffu;  // the count wraps past 1
  own.announceSleep();
  EXPECT_EQ(word, 3u);
  word = 1;  // a sleeper without epochs
  EXPECT_TRUE(peer.shouldRing(rung));
  EXPECT_TRUE(peer.shouldRing(rung));
}

// Three threads publish in bursts and ring through one `rung` (once per
// sleep between them); the consumer sleeps as soon as it finds nothing. A
// lost wake-up leaves it blocked until its deadline.
TEST(SleepFlag, ManyWakersSharingAnEpochLoseNoWakeUp) {
  const std::uint64_t seed = testSeed();
  constexpr std::uint64_t kPerWaker = 4000;
  constexpr int kWakers = 3;
  std::uint32_t flag = 0;
  EventFd bell = makeEventFd();
  std::atomic<std::uint32_t> rung{0};
  std::atomic<std::uint64_t> published{0};
  std::atomic<std::uint64_t> rings{0};
  std::vector<std::thread> wakers;
  for (int w = 0; w < kWakers; ++w) {
    wakers.emplace_back([&, w] {
      std::mt19937_64 rng(seed + static_cast<std::uint64_t>(w));
      for (std::uint64_t i = 0; i < kPerWaker; ++i) {
        published.fetch_add(1, std::memory_order_release);
        if (PeerSleepFlag(&flag).shouldRing(rung)) {
          bell.signal();
          rings.fetch_add(1, std::memory_order_relaxed);
        }
        // Bursts, then a pause: the pauses overlap, and the consumer sleeps.
        if (i % 32 == 31) std::this_thread::sleep_for(std::chrono::microseconds(50 + rng() % 200));
      }
    });
  }
  std::uint64_t consumed = 0;
  bool lost = false;
  std::mt19937_64 rng(seed + 100);
  while (consumed < kWakers * kPerWaker) {
    const SpinPolicy spin{std::chrono::nanoseconds(rng() % 3 == 0 ? 2000 : 0)};
    // A wait that runs to its deadline was not woken (sleepUntil then finds
    // the work and says ready): the wakers are done in milliseconds.
    const auto began = std::chrono::steady_clock::now();
    const WaitOutcome r =
        sleepUntil([&] { return published.load(std::memory_order_acquire) > consumed; },
                   SleepFlag(&flag), bell, spin, 5s);
    if (r != WaitOutcome::kReady || std::chrono::steady_clock::now() - began >= 5s) {
      lost = true;
      break;
    }
    consumed = published.load(std::memory_order_acquire);
  }
  for (std::thread& t : wakers) t.join();
  std::cout << rings.load() << " rings for " << kWakers * kPerWaker << " publications\n";
  EXPECT_FALSE(lost);
  EXPECT_EQ(consumed, kWakers * kPerWaker);
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
  EXPECT_EQ(flag % 2, 0u);  // awake
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
  // Ready before its deadline: a wait that ran to it was not woken (after
  // the deadline sleepUntil finds the ball and says ready all the same).
  auto wokeInTime = [](auto ready, Side& own, SpinPolicy spin) {
    const auto began = std::chrono::steady_clock::now();
    return sleepUntil(ready, SleepFlag(&own.sleeping), own.bell, spin, 5s) == WaitOutcome::kReady &&
           std::chrono::steady_clock::now() - began < 5s;
  };
  std::atomic<std::uint64_t> lost{0};
  std::thread answerer([&] {
    std::mt19937_64 rng(seed + 1);
    for (std::uint64_t r = 0; r < kRounds; ++r) {
      const SpinPolicy spin{std::chrono::nanoseconds(rng() % 3 == 0 ? 2000 : 0)};
      if (!wokeInTime(ballIs(2 * r + 1), b, spin)) {
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
    if (!wokeInTime(ballIs(2 * r + 2), a, spin)) {
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
