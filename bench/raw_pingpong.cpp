#include "bench/raw_pingpong.hpp"

#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "tests/support/process_group.hpp"

namespace fairsched::bench {

using testing::ProcessGroup;

namespace {

// Ping and pong on separate cache lines, so each side spins on a line only
// the other writes.
struct alignas(64) PingPong {
  std::atomic<std::uint64_t> ping{0};
  char pad0[64 - sizeof(std::atomic<std::uint64_t>)];
  std::atomic<std::uint64_t> pong{0};
  char pad1[64 - sizeof(std::atomic<std::uint64_t>)];
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

}  // namespace

void pinTo(int cpu) {
  if (std::thread::hardware_concurrency() < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

std::vector<double> rawPingPong(int iterations, int parent_cpu, int child_cpu) {
  void* mem =
      mmap(nullptr, sizeof(PingPong), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return {};
  auto* pp = new (mem) PingPong;
  const int warmup = iterations / 10;
  const auto total = static_cast<std::uint64_t>(warmup + iterations);
  ProcessGroup group;
  const pid_t child = group.spawn([&] {
    pinTo(child_cpu);
    // Answers ping i with pong i (release), having seen it (acquire).
    for (std::uint64_t i = 1; i <= total; ++i) {
      while (pp->ping.load(std::memory_order_acquire) != i) {
      }
      pp->pong.store(i, std::memory_order_release);
    }
    return 0;
  });
  if (child < 0) {
    munmap(mem, sizeof(PingPong));
    return {};
  }
  pinTo(parent_cpu);
  std::vector<double> rtt;
  rtt.reserve(static_cast<std::size_t>(iterations));
  for (std::uint64_t i = 1; i <= total; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    pp->ping.store(i, std::memory_order_release);
    while (pp->pong.load(std::memory_order_acquire) != i) {
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (i > static_cast<std::uint64_t>(warmup))
      rtt.push_back(static_cast<double>((t1 - t0).count()));
  }
  group.wait(child, ProcessGroup::in(std::chrono::seconds(10)));
  munmap(mem, sizeof(PingPong));
  return rtt;
}

std::vector<double> rawSleepingHandoff(int iterations, int cpu, int step_us) {
  struct alignas(64) Stamp {
    std::atomic<std::uint64_t> seq{0};
    std::atomic<std::int64_t> ns{0};
  };
  void* mem =
      mmap(nullptr, sizeof(Stamp), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return {};
  auto* st = new (mem) Stamp;
  const int warmup = iterations / 10;
  const auto total = static_cast<std::uint64_t>(warmup + iterations);
  const auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  ProcessGroup group;
  const pid_t child = group.spawn([&] {
    pinTo(cpu);
    for (std::uint64_t i = 1; i <= total; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(step_us));
      st->ns.store(now(), std::memory_order_relaxed);
      st->seq.store(i, std::memory_order_release);
    }
    return 0;
  });
  if (child < 0) {
    munmap(mem, sizeof(Stamp));
    return {};
  }
  pinTo(cpu);
  std::vector<double> delay;
  delay.reserve(static_cast<std::size_t>(iterations));
  for (std::uint64_t i = 1; i <= total; ++i) {
    while (st->seq.load(std::memory_order_acquire) < i) {
    }
    const std::int64_t seen = now();
    if (i > static_cast<std::uint64_t>(warmup)) {
      delay.push_back(static_cast<double>(seen - st->ns.load(std::memory_order_relaxed)));
    }
  }
  group.wait(child, ProcessGroup::in(std::chrono::seconds(10)));
  munmap(mem, sizeof(Stamp));
  return delay;
}

}  // namespace fairsched::bench
