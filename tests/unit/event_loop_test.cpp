// The event loop, each test on both backends (io_uring and epoll): timers,
// eventfd reads and writes, accept and recvmsg on a unix socket,
// cancellation, wake-ups from other threads, and the spin-then-sleep hooks.
// The io_uring runs skip with the reason where io_uring is refused; epoll
// runs everywhere.
#include "daemon/loop/event_loop.hpp"
#include "daemon/loop/make_event_loop.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.hpp"

namespace fairsched::daemon {
namespace {

using config::EventLoopKind;

class EventLoopTest : public ::testing::TestWithParam<EventLoopKind> {
 protected:
  std::unique_ptr<EventLoop> makeLoop() {
    auto created = makeEventLoop(GetParam(), 64);
    if (!created) {
      why_ = created.error().message;
      EXPECT_NE(GetParam(), EventLoopKind::kEpoll) << "epoll must work everywhere: " << why_;
      return nullptr;
    }
    EXPECT_EQ(created.value()->name(), GetParam() == EventLoopKind::kEpoll ? "epoll" : "io_uring");
    return std::move(created).value();
  }
  std::string why_;
};

#define REQUIRE_LOOP(loop) \
  if (!(loop)) GTEST_SKIP() << "io_uring unavailable on this machine: " << why_

TEST_P(EventLoopTest, TimersFireInDeadlineOrderAndNotEarly) {
  auto loop = makeLoop();
  REQUIRE_LOOP(loop);
  const TimeNs start = monotonicNow();
  std::vector<int> order;
  std::vector<TimeNs> fired_at;
  loop->timerAt(start + 3 * kNsPerMs, [&](int res) {
    EXPECT_EQ(res, -ETIME);
    order.push_back(2);
    fired_at.push_back(monotonicNow());
    loop->stop();
  });
  loop->timerAt(start + 1 * kNsPerMs, [&](int res) {
    EXPECT_EQ(res, -ETIME);
    order.push_back(1);
    fired_at.push_back(monotonicNow());
  });
  EXPECT_EQ(loop->run(), 0);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  ASSERT_EQ(fired_at.size(), 2u);
  EXPECT_GE(fired_at[0], start + 1 * kNsPerMs);
  EXPECT_GE(fired_at[1], start + 3 * kNsPerMs);
}

TEST_P(EventLoopTest, CancelledTimerReportsCancellation) {
  auto loop = makeLoop();
  REQUIRE_LOOP(loop);
  int result = 1;
  const auto id = loop->timerAt(monotonicNow() + 60 * kNsPerSec, [&](int res) {
    result = res;
    loop->stop();
  });
  loop->cancel(id);
  loop->run();
  EXPECT_EQ(result, -ECANCELED);
}

TEST_P(EventLoopTest, EventfdWriteAndReadComplete) {
  auto loop = makeLoop();
  REQUIRE_LOOP(loop);
  const int efd = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  std::uint64_t out = 0;
  const std::uint64_t one = 7;
  loop->read(efd, &out, sizeof out, [&](int res) {
    EXPECT_EQ(res, 8);
    loop->stop();
  });
  loop->write(efd, &one, sizeof one, [&](int res) { EXPECT_EQ(res, 8); });
  loop->run();
  EXPECT_EQ(out, 7u);
  close(efd);
}

TEST_P(EventLoopTest, WakeFromAnotherThreadEndsASleep) {
  auto loop = makeLoop();
  REQUIRE_LOOP(loop);
  std::atomic<bool> flag{false};
  std::atomic<int> sleeps{0};
  EventLoop::Hooks hooks;
  hooks.spin_ns = 10'000;
  hooks.poll = [&] {
    if (flag.load()) loop->stop();
    return false;
  };
  hooks.before_sleep = [&] {
    ++sleeps;
    return flag.load();
  };
  loop->setHooks(hooks);
  // Wakes the loop once it has gone to sleep (waiting at most 10 s for that).
  std::thread t([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (sleeps.load() == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    flag = true;
    loop->wake();
  });
  EXPECT_EQ(loop->run(), 0);
  t.join();
  EXPECT_GE(sleeps.load(), 1) << "the loop never went to sleep";
}

// A loop that has to share its core with a spinning thread stops spinning
// when idle: it sleeps at once (a timer wakes it), where it would otherwise
// spin for the whole busy_poll time. Both threads are pinned to one CPU, so
// the loop thread waits for that CPU about half the time.
TEST_P(EventLoopTest, OnAContendedCoreTheLoopSleepsInsteadOfSpinning) {
  auto loop = makeLoop();
  REQUIRE_LOOP(loop);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    (void)pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  EventLoop::Hooks hooks;
  hooks.spin_ns = 1'000'000'000;  // a second of spinning before each sleep, uncontended
  hooks.poll = [&] {
    if (loop->contendedSleeps() > 0 || std::chrono::steady_clock::now() > until) loop->stop();
    return false;
  };
  hooks.before_sleep = [&] {
    loop->timerAt(monotonicNow() + 1'000'000, [](int) {});
    return false;
  };
  loop->setHooks(hooks);
  EXPECT_EQ(loop->run(), 0);
  stop = true;
  spinner.join();
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  (void)pthread_setaffinity_np(pthread_self(), sizeof all, &all);
  EXPECT_GT(loop->contendedSleeps(), 0u) << "the loop kept spinning on a contended core";
}

TEST_P(EventLoopTest, AcceptsAndReceivesOnAUnixSocket) {
  auto loop = makeLoop();
  REQUIRE_LOOP(loop);
  const int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const testing::TempDir tmp("fairsched-el");
  ASSERT_FALSE(tmp.path().empty()) << "no temporary directory";
  const std::string path = tmp.file("loop.sock");
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(lfd, 4), 0);

  char buf[64] = {};
  iovec iov{buf, sizeof buf};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  int conn = -1;
  int received = -1;
  loop->accept(lfd, [&](int fd) {
    ASSERT_GE(fd, 0);
    conn = fd;
    loop->recvmsg(conn, &msg, [&](int n) {
      received = n;
      loop->stop();
    });
  });
  std::thread client([&] {
    const int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(send(c, "hello", 5, 0), 5);
    close(c);
  });
  loop->run();
  client.join();
  EXPECT_EQ(received, 5);
  EXPECT_EQ(std::string(buf, 5), "hello");
  close(conn);
  close(lfd);
}

TEST_P(EventLoopTest, ManyOperationsInFlightAllComplete) {
  auto loop = makeLoop();
  REQUIRE_LOOP(loop);  // 64 entries: the loop must submit when the queue fills
  const TimeNs now = monotonicNow();
  int fired = 0;
  constexpr int kTimers = 500;
  for (int i = 0; i < kTimers; ++i) {
    loop->timerAt(now + (i % 5) * kNsPerUs, [&](int) {
      if (++fired == kTimers) loop->stop();
    });
  }
  loop->run();
  EXPECT_EQ(fired, kTimers);
  EXPECT_EQ(loop->pending(), 0u);
}

TEST(EventLoopAuto, FallsBackToEpollOnlyWhenIoUringIsRefused) {
  std::string refused = "stale";
  auto loop = makeEventLoop(EventLoopKind::kAuto, 64, &refused);
  ASSERT_TRUE(loop) << loop.error().message;
  auto uring = makeEventLoop(EventLoopKind::kIoUring, 64);
  if (uring) {
    EXPECT_EQ(loop.value()->name(), "io_uring");
    EXPECT_TRUE(refused.empty()) << refused;
  } else {
    EXPECT_EQ(loop.value()->name(), "epoll");
    EXPECT_EQ(refused, uring.error().message);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, EventLoopTest,
                         ::testing::Values(EventLoopKind::kIoUring, EventLoopKind::kEpoll),
                         [](const ::testing::TestParamInfo<EventLoopKind>& p) {
                           return std::string(p.param == EventLoopKind::kEpoll ? "epoll"
                                                                               : "io_uring");
                         });

}  // namespace
}  // namespace fairsched::daemon
