// Segments across real processes: create in the "daemon", attach in a forked
// "client" through the inherited memfd, submissions one way, completions the
// other with eventfd wake-ups; the read-only completion part faults on write;
// the seals hold; bad headers and bad descriptors give the right error; a
// client killed mid-push or scribbling over its whole writable part cannot
// hurt the daemon; nothing appears in /dev/shm.
#include "shm/segment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "shm/shared_word.hpp"
#include "tests/support/seeded_rng.hpp"

namespace fairsched::shm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing::testSeed;

const Geometry kSmall{3, 16, 32, 64};

Segment mustCreate(const Geometry& g = kSmall) {
  Result<Segment> r = Segment::create(g);
  if (!r.ok()) {
    const Error* err = &r.error();
    ADD_FAILURE() << err->toString();
    std::abort();
  }
  return std::move(r).value();
}

ErrorCode attachError(int fd) {
  Result<Segment> r = Segment::attach(fd);
  if (r.ok()) {
    ADD_FAILURE() << "attach succeeded";
    return ErrorCode::kSystem;
  }
  return r.error().code;
}

// Runs `body` in a forked child and returns its exit status (or 128 + signal).
// The child reports failures through distinct exit codes, never through
// gtest, and leaves with _exit so nothing of the parent's runs twice.
template <class Body>
int inChild(Body&& body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

// Forks a client process that attaches the segment behind `fd` (exit 10
// when it cannot) and runs `body(segment)`, leaving with what it returns.
// The parent gets the pid (or -1).
template <class Body>
pid_t forkClient(int fd, Body&& body) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  Result<Segment> r = Segment::attach(fd);
  if (!r.ok()) ::_exit(10);
  Segment seg = std::move(r).value();
  ::_exit(body(seg));
}

// Kills and reaps a forked child when a test returns early.
struct ChildGuard {
  pid_t pid = -1;
  ~ChildGuard() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// Back to the default action for SIGSEGV, past any sanitizer's handler (a
// raw rt_sigaction: all-zero is SIG_DFL, no flags, empty mask), so a fault
// kills the process with the signal.
void defaultSegv() {
  unsigned long kernel_sigaction[4] = {0, 0, 0, 0};
  ::syscall(SYS_rt_sigaction, SIGSEGV, kernel_sigaction, nullptr, sizeof(unsigned long));
}

std::uint32_t tokenOf(std::uint64_t id, std::size_t i) {
  return static_cast<std::uint32_t>(id * 131 + i);
}

std::uint64_t checksumOf(std::uint64_t id) {
  return id * 0x9e3779b97f4a7c15ULL;
}

std::set<std::string> devShmEntries() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

TEST(Segment, CreateGivesASealedMemfdOfTheLayoutsSize) {
  Segment seg = mustCreate();
  EXPECT_EQ(seg.side(), Segment::Side::kDaemon);
  ASSERT_GE(seg.fd(), 0);
  struct stat st {};
  ASSERT_EQ(::fstat(seg.fd(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), seg.layout().total_size);
  const int seals = ::fcntl(seg.fd(), F_GET_SEALS);
  EXPECT_EQ(seals, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  EXPECT_TRUE(::fcntl(seg.fd(), F_GETFD) & FD_CLOEXEC);
  SegmentHeader h{};
  std::memcpy(&h, seg.writablePart(), sizeof(h));
  EXPECT_EQ(h.magic, kMagic);
  EXPECT_EQ(h.version, kLayoutVersion);
  EXPECT_EQ(h.total_size, seg.layout().total_size);
}

// Pages of [at, at + bytes) that are in memory (for a memfd: that exist).
std::size_t residentPages(const std::byte* at, std::uint64_t bytes) {
  const std::uint64_t page = pageSize();
  std::vector<unsigned char> v((bytes + page - 1) / page);
  if (::mincore(const_cast<std::byte*>(at), bytes, v.data()) != 0) {
    ADD_FAILURE() << "mincore: " << std::strerror(errno);
    return SIZE_MAX;
  }
  std::size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

// Layout 4: a zero-filled ring is an empty ring, so setting up a connection
// writes its header and nothing else — no page of the rings, the completion
// cells or the arenas is touched (layout 3 wrote every submission cell and
// read every completion cell: 4 ms of the daemon's loop per connection).
TEST(Segment, CreateTouchesOnlyTheHeaderPage) {
  Geometry g;  // the daemon's client geometry: 8 lanes of 256, 16,384 completions
  g.completion_capacity = 16384;
  g.reply_tokens_per_slot = 64;
  Segment seg = mustCreate(g);
  EXPECT_EQ(residentPages(seg.writablePart(), seg.layout().writable_size), 1u);
  EXPECT_EQ(residentPages(seg.daemonPart(), seg.layout().daemon_size), 0u);
  // And the untouched rings work from their first position: a whole lap and
  // more of every lane, and of the completion ring.
  Result<Segment> attached = Segment::attach(seg.fd());
  ASSERT_TRUE(attached.ok()) << attached.error().toString();
  Segment& client = attached.value();
  for (std::uint32_t r = 0; r < g.ring_count; ++r) {
    SubmissionProducer producer(client.submissionRing(r));
    SubmissionConsumer consumer(seg.submissionRing(r), 0);
    for (std::uint64_t i = 0; i < 2 * g.ring_capacity + 3; ++i) {
      const std::uint32_t tokens[] = {static_cast<std::uint32_t>(i), r};
      SubmissionSlot in;
      in.request_id = i;
      ASSERT_EQ(producer.tryPushPrompt(in, tokens), PushResult::kOk) << r << " " << i;
      SubmissionSlot out;
      std::vector<std::uint32_t> prompt;
      ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kOk) << r << " " << i;
      EXPECT_EQ(out.request_id, i);
      EXPECT_EQ(prompt, (std::vector<std::uint32_t>{tokens[0], r}));
    }
  }
  CompletionProducer producer(seg.completionRing(), 0);
  CompletionConsumer consumer(client.completionRing());
  CompletionSlot out;
  EXPECT_FALSE(consumer.tryPop(out));  // nothing reads as published
  for (std::uint64_t i = 0; i < 2 * g.completion_capacity + 3; ++i) {
    CompletionSlot c;
    c.request_id = i;
    ASSERT_TRUE(producer.tryPush(c)) << i;
    ASSERT_TRUE(consumer.tryPop(out)) << i;
    EXPECT_EQ(out.request_id, i);
  }
}

TEST(Segment, CreateRejectsAnInvalidGeometry) {
  Result<Segment> r = Segment::create(Geometry{0, 16, 32, 64});
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidGeometry);
}

TEST(Segment, AttachInTheSameProcessSeesTheSameRings) {
  Segment daemon = mustCreate();
  Result<Segment> r = Segment::attach(daemon.fd());
  ASSERT_TRUE(r.ok()) << r.error().toString();
  Segment client = std::move(r).value();
  EXPECT_EQ(client.side(), Segment::Side::kClient);
  EXPECT_EQ(client.fd(), -1);
  EXPECT_EQ(client.layout().geometry, kSmall);
  EXPECT_NE(client.writablePart(), daemon.writablePart());

  SubmissionProducer producer(client.submissionRing(2));
  const std::uint32_t tokens[] = {7, 8, 9};
  SubmissionSlot s;
  s.request_id = 5;
  ASSERT_EQ(producer.tryPushPrompt(s, tokens), PushResult::kOk);
  ReadyBitmap bitmap = daemon.readyBitmap();
  std::vector<std::uint32_t> ready;
  bitmap.takeEach([&](std::uint32_t ring) { ready.push_back(ring); });
  EXPECT_EQ(ready, (std::vector<std::uint32_t>{2}));
  SubmissionConsumer consumer(daemon.submissionRing(2), 0);
  SubmissionSlot out;
  std::vector<std::uint32_t> prompt;
  ASSERT_EQ(consumer.tryPop(out, prompt), PopResult::kOk);
  EXPECT_EQ(out.request_id, 5u);
  EXPECT_EQ(prompt, (std::vector<std::uint32_t>{7, 8, 9}));
}

TEST(Segment, ClosingTheDaemonsFdKeepsTheMappings) {
  Segment daemon = mustCreate();
  Result<Segment> r = Segment::attach(daemon.fd());
  ASSERT_TRUE(r.ok());
  daemon.closeFd();
  EXPECT_EQ(daemon.fd(), -1);
  CompletionProducer producer(daemon.completionRing(), 0);
  CompletionConsumer consumer(r.value().completionRing());
  CompletionSlot c;
  c.request_id = 77;
  ASSERT_TRUE(producer.tryPush(c));
  CompletionSlot out;
  ASSERT_TRUE(consumer.tryPop(out));
  EXPECT_EQ(out.request_id, 77u);
}

// The main round trip: a forked client attaches through the inherited fd,
// submits over two rings and waits for its completions; the daemon side
// drains by the ready bitmap and completes each request. Both sides sleep on
// their eventfds when idle. The client also checks that a write to the
// read-only completion part faults (in a grandchild) and that the seals hold.
TEST(Segment, ForkedClientRoundTrip) {
  const std::uint64_t seed = testSeed();
  constexpr std::uint64_t kPerRing = 300;
  constexpr std::uint32_t kRings = 2;
  Segment daemon = mustCreate();
  Result<EventFd> doorbell_r = EventFd::create();    // client -> daemon
  Result<EventFd> completion_r = EventFd::create();  // daemon -> client
  ASSERT_TRUE(doorbell_r.ok());
  ASSERT_TRUE(completion_r.ok());
  EventFd& doorbell = doorbell_r.value();
  EventFd& completion_bell = completion_r.value();
  const int fd = daemon.fd();

  const pid_t child = forkClient(fd, [&](Segment& seg) {
    // ---- the client -------------------------------------------------------
    // The completion part is read-only here: a write must fault.
    const int fault = inChild([&] {
      defaultSegv();
      auto* p = const_cast<std::byte*>(seg.daemonPart());
      *reinterpret_cast<volatile std::uint64_t*>(p) = 1;
      return 0;
    });
    if (fault != 128 + SIGSEGV) ::_exit(11);
    // The seals hold against the client.
    const auto size = static_cast<off_t>(seg.layout().total_size);
    if (::ftruncate(fd, size / 2) == 0 || errno != EPERM) ::_exit(12);
    if (::ftruncate(fd, size * 2) == 0 || errno != EPERM) ::_exit(13);
    if (::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == 0 || errno != EPERM) ::_exit(14);

    std::mt19937_64 rng(seed);
    std::vector<SubmissionProducer> producers;
    for (std::uint32_t ring = 0; ring < kRings; ++ring) {
      producers.emplace_back(seg.submissionRing(ring));
    }
    CompletionConsumer completions(seg.completionRing());
    const PeerSleepFlag daemon_sleeping = seg.peerSleepFlag();
    std::vector<std::uint32_t> prompt;
    std::vector<std::uint64_t> sent(kRings, 0);
    std::uint64_t received = 0;
    std::set<std::uint64_t> outstanding;
    const auto deadline = Clock::now() + 20s;
    while (received < kRings * kPerRing) {
      if (Clock::now() > deadline) ::_exit(20);
      const auto ring = static_cast<std::uint32_t>(rng() % kRings);
      if (sent[ring] < kPerRing) {
        const std::uint64_t id = (std::uint64_t{ring} << 32) | sent[ring];
        prompt.resize(rng() % (kSmall.prompt_tokens_per_slot + 1));
        for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = tokenOf(id, i);
        SubmissionSlot s;
        s.request_id = id;
        s.tag = ~id;
        s.endpoint = static_cast<std::uint16_t>(ring);
        const PushResult pr = producers[ring].tryPushPrompt(s, prompt);
        if (pr == PushResult::kOk) {
          ++sent[ring];
          outstanding.insert(id);
          if (daemon_sleeping.sleeping()) doorbell.signal();
          continue;
        }
        if (pr != PushResult::kFull) ::_exit(21);
      }
      CompletionSlot c;
      while (completions.tryPop(c)) {
        if (outstanding.erase(c.request_id) != 1) ::_exit(22);
        if (c.tag != ~c.request_id || c.checksum != checksumOf(c.request_id)) ::_exit(23);
        if (decodeStatus(c.status) != Status::kOk) ::_exit(24);
        ++received;
      }
      const bool all_sent = sent[0] == kPerRing && sent[1] == kPerRing;
      if (all_sent && received < kRings * kPerRing) {
        const WaitOutcome w =
            sleepUntil([&] { return completions.available() > 0; }, seg.ownSleepFlag(),
                       completion_bell, SpinPolicy{std::chrono::microseconds(rng() % 50)}, 10s);
        if (w != WaitOutcome::kReady) ::_exit(25);
      }
    }
    if (completions.broken()) ::_exit(26);
    return 0;
  });
  ASSERT_GE(child, 0);

  // ---- the daemon ---------------------------------------------------------
  ChildGuard guard{child};
  std::vector<SubmissionConsumer> consumers;
  for (std::uint32_t ring = 0; ring < kSmall.ring_count; ++ring) {
    consumers.emplace_back(daemon.submissionRing(ring), 0);
  }
  CompletionProducer completions(daemon.completionRing(), 0);
  ReadyBitmap bitmap = daemon.readyBitmap();
  SleepFlag own = daemon.ownSleepFlag();
  const PeerSleepFlag client_sleeping = daemon.peerSleepFlag();
  std::vector<std::uint64_t> next(kRings, 0);
  std::set<std::uint32_t> pending;  // rings whose drain hit the budget
  std::vector<CompletionSlot> backlog;
  std::uint64_t completed = 0;
  bool failed = false;
  int lost_wakeups = 0;
  const auto deadline = Clock::now() + 20s;
  while (completed < kRings * kPerRing && !failed && Clock::now() < deadline) {
    bitmap.takeEach([&](std::uint32_t ring) { pending.insert(ring); });
    std::set<std::uint32_t> again;
    for (const std::uint32_t ring : pending) {
      const DrainResult d = consumers[ring].drain(
          4, [&](const SubmissionSlot& s, std::span<const std::uint32_t> prompt) {
            const std::uint64_t n = s.request_id & 0xffffffffu;
            if (s.request_id >> 32 != ring || n != next[ring] || s.endpoint != ring) failed = true;
            for (std::size_t i = 0; i < prompt.size(); ++i) {
              if (prompt[i] != tokenOf(s.request_id, i)) failed = true;
            }
            ++next[ring];
            CompletionSlot c;
            c.request_id = s.request_id;
            c.tag = s.tag;
            c.status = encodeStatus(Status::kOk);
            c.output_tokens = static_cast<std::uint32_t>(prompt.size());
            c.checksum = checksumOf(s.request_id);
            backlog.push_back(c);
          });
      if (d.stop == PopResult::kCorrupt) failed = true;
      if (d.stop == PopResult::kOk) again.insert(ring);
    }
    pending.swap(again);
    const std::size_t written = completions.tryPushBatch(backlog);
    backlog.erase(backlog.begin(), backlog.begin() + static_cast<std::ptrdiff_t>(written));
    completed += written;
    if (written > 0 && client_sleeping.sleeping()) completion_bell.signal();
    if (pending.empty() && backlog.empty() && completed < kRings * kPerRing) {
      // Announce, re-check the bitmap, then block on the doorbell.
      // The client is submitting, so a long silence means a lost wake-up.
      own.announceSleep();
      if (!bitmap.anySet() && doorbell.wait(5s) == EventFd::WaitResult::kTimedOut) {
        ++lost_wakeups;
      }
      own.clear();
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  guard.pid = -1;
  EXPECT_FALSE(failed);
  EXPECT_EQ(lost_wakeups, 0);
  EXPECT_EQ(completed, kRings * kPerRing);
  ASSERT_TRUE(WIFEXITED(status)) << "client killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "client failed at check " << WEXITSTATUS(status);
}

TEST(Segment, ClientKilledMidPushLeavesTheDaemonConsistent) {
  const std::uint64_t seed = testSeed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 5; ++trial) {
    Segment daemon = mustCreate();
    const int fd = daemon.fd();
    const pid_t child = forkClient(fd, [&](Segment& seg) -> int {
      SubmissionProducer producer(seg.submissionRing(0));
      std::vector<std::uint32_t> prompt(kSmall.prompt_tokens_per_slot);
      for (std::uint64_t id = 0;; ++id) {
        for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = tokenOf(id, i);
        SubmissionSlot s;
        s.request_id = id;
        while (producer.tryPushPrompt(s, prompt) == PushResult::kFull) cpuRelax();
      }
    });
    ASSERT_GE(child, 0);
    ChildGuard guard{child};
    SubmissionConsumer consumer(daemon.submissionRing(0), 0);
    SubmissionSlot out;
    std::vector<std::uint32_t> prompt;
    std::uint64_t expected = 0;
    const auto kill_at = Clock::now() + std::chrono::microseconds(200 + rng() % 3000);
    bool killed = false;
    const auto deadline = Clock::now() + 2s;
    while (Clock::now() < deadline) {
      if (!killed && Clock::now() >= kill_at) {
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
        guard.pid = -1;
        killed = true;
      }
      const PopResult r = consumer.tryPop(out, prompt);
      ASSERT_NE(r, PopResult::kCorrupt) << "trial " << trial;
      if (r == PopResult::kOk) {
        ASSERT_EQ(out.request_id, expected);
        for (std::size_t i = 0; i < prompt.size(); ++i) ASSERT_EQ(prompt[i], tokenOf(expected, i));
        ++expected;
      } else if (killed) {
        break;  // a dead client's ring reads empty from its last published slot
      }
    }
  }
}

// A client process that writes random bytes over its whole writable part —
// header, bitmap, rings and arena — while the daemon consumes every ring and
// completes into a ring whose read index is garbage.
TEST(Segment, StressDaemonSurvivesAClientScribblingOverItsWritablePart) {
  const std::uint64_t seed = testSeed();
  Segment daemon = mustCreate();
  const int fd = daemon.fd();
  const pid_t child = forkClient(fd, [&](Segment& seg) -> int {
    auto* words = reinterpret_cast<std::uint64_t*>(seg.writablePart());
    const std::uint64_t nwords = seg.layout().writable_size / 8;
    const std::uint64_t ring_words = seg.layout().arena_offset / 8;
    std::mt19937_64 rng(seed);
    for (;;) {
      // Mostly the rings and control words, where it matters, sometimes anywhere.
      const std::uint64_t i = rng() % 4 == 0 ? rng() % nwords : rng() % ring_words;
      words[i] = rng() % 3 == 0 ? rng() % 64 : rng();
    }
  });
  ASSERT_GE(child, 0);
  ChildGuard guard{child};
  ReadyBitmap bitmap = daemon.readyBitmap();
  std::vector<SubmissionConsumer> consumers;
  for (std::uint32_t ring = 0; ring < kSmall.ring_count; ++ring) {
    consumers.emplace_back(daemon.submissionRing(ring), 0);
  }
  CompletionProducer completions(daemon.completionRing(), 0);
  const std::uint64_t arena_tokens = daemon.layout().arenaRegionTokens();
  std::uint64_t counts[3] = {0, 0, 0};
  std::uint64_t completed = 0;
  const auto deadline = Clock::now() + 300ms;
  while (Clock::now() < deadline) {
    bitmap.takeEach([&](std::uint32_t ring) { ASSERT_LT(ring, kSmall.ring_count); });
    for (std::uint32_t ring = 0; ring < kSmall.ring_count; ++ring) {
      SubmissionSlot out;
      std::vector<std::uint32_t> prompt;
      const PopResult r = consumers[ring].tryPop(out, prompt);
      ++counts[static_cast<int>(r)];
      if (r == PopResult::kOk) {
        ASSERT_EQ(checkSlot(out, arena_tokens), SlotCheck::kValid);
        ASSERT_EQ(prompt.size(), out.arenaWords());
      } else if (r == PopResult::kCorrupt) {
        consumers[ring] =
            SubmissionConsumer(daemon.submissionRing(ring), consumers[ring].position());
      }
    }
    CompletionSlot c;
    if (completions.tryPush(c)) ++completed;
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  guard.pid = -1;
  EXPECT_TRUE(WIFSIGNALED(status)) << "the scribbler exited early with " << WEXITSTATUS(status);
  std::cout << "empty " << counts[0] << ", ok " << counts[1] << ", corrupt " << counts[2]
            << ", completions written " << completed << "\n";
  EXPECT_GT(counts[2], 0u);
}

// ---- attach refuses what is not a well-formed segment ----------------------

TEST(SegmentAttach, RejectsATamperedHeader) {
  struct Case {
    const char* name;
    void (*tamper)(SegmentHeader&);
    ErrorCode want;
  };
  const Case cases[] = {
      {"magic", [](SegmentHeader& h) { h.magic = 0; }, ErrorCode::kBadMagic},
      {"version", [](SegmentHeader& h) { h.version = kLayoutVersion + 1; }, ErrorCode::kBadVersion},
      {"page size", [](SegmentHeader& h) { h.page_size *= 2; }, ErrorCode::kBadPageSize},
      {"total size", [](SegmentHeader& h) { h.total_size += 4096; }, ErrorCode::kSizeMismatch},
      {"geometry", [](SegmentHeader& h) { h.completion_capacity = 3; },
       ErrorCode::kInvalidGeometry},
      {"ring count", [](SegmentHeader& h) { h.ring_count = 2; }, ErrorCode::kLayoutMismatch},
      {"offset", [](SegmentHeader& h) { h.arena_offset += 64; }, ErrorCode::kLayoutMismatch},
  };
  for (const Case& c : cases) {
    Segment daemon = mustCreate();
    SegmentHeader h{};
    std::memcpy(&h, daemon.writablePart(), sizeof(h));
    c.tamper(h);
    std::memcpy(daemon.writablePart(), &h, sizeof(h));
    EXPECT_EQ(attachError(daemon.fd()), c.want) << c.name;
  }
}

TEST(SegmentAttach, RejectsAMemfdWithoutSizeSeals) {
  const int fd = ::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);
  EXPECT_EQ(attachError(fd), ErrorCode::kBadSeals);
  ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  EXPECT_EQ(attachError(fd), ErrorCode::kBadSeals) << "F_SEAL_SEAL missing";
  ::close(fd);
}

TEST(SegmentAttach, RejectsAMemfdThatCannotBeSealed) {
  const int fd = ::memfd_create("no-sealing", MFD_CLOEXEC);  // F_SEAL_SEAL from birth
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);
  EXPECT_EQ(attachError(fd), ErrorCode::kBadSeals);
  ::close(fd);
}

TEST(SegmentAttach, RejectsAWriteSealedMemfd) {
  const int fd = ::memfd_create("write-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);
  ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
  EXPECT_EQ(attachError(fd), ErrorCode::kBadSeals);
  ::close(fd);
}

TEST(SegmentAttach, RejectsAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_EQ(attachError(fds[0]), ErrorCode::kBadSeals);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(SegmentAttach, RejectsASealedMemfdTooSmallForAHeader) {
  const int fd = ::memfd_create("tiny", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 100), 0);
  ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
  EXPECT_EQ(attachError(fd), ErrorCode::kTooSmall);
  ::close(fd);
}

// A valid header copied into a sealed memfd of another size.
TEST(SegmentAttach, RejectsAFileWhoseSizeDisagreesWithItsHeader) {
  Segment daemon = mustCreate();
  const int fd = ::memfd_create("resized", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(daemon.layout().total_size + 4096)), 0);
  ASSERT_EQ(::pwrite(fd, daemon.writablePart(), sizeof(SegmentHeader), 0),
            static_cast<ssize_t>(sizeof(SegmentHeader)));
  ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
  EXPECT_EQ(attachError(fd), ErrorCode::kSizeMismatch);
  ::close(fd);
}

TEST(SegmentAttach, ErrorsAreValuesWithAMessage) {
  Segment daemon = mustCreate();
  std::memset(daemon.writablePart(), 0, 8);
  Result<Segment> r = Segment::attach(daemon.fd());
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().toString(), "bad magic: not a fairsched segment");
  r = Segment::attach(-1);
  ASSERT_TRUE(!r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kSystem);
  EXPECT_EQ(r.error().sys_errno, EBADF);
}

// ---- nothing is left behind ----------------------------------------------

TEST(Segment, NothingAppearsInDevShm) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm on this machine";
  const std::set<std::string> before = devShmEntries();
  {
    Segment daemon = mustCreate();
    const int status = inChild([&] {
      Result<Segment> r = Segment::attach(daemon.fd());
      return r.ok() ? 0 : 1;
    });
    EXPECT_EQ(status, 0);
    Result<Segment> client = Segment::attach(daemon.fd());
    ASSERT_TRUE(client.ok());
    EXPECT_EQ(devShmEntries(), before);
  }
  EXPECT_EQ(devShmEntries(), before);
}

TEST(Segment, MappingsAreOfTheMemfdAndGoAwayWithTheSegment) {
  auto memfdMappings = [] {
    std::ifstream maps("/proc/self/maps");
    int n = 0;
    for (std::string line; std::getline(maps, line);) {
      if (line.find("/memfd:fairsched-client") != std::string::npos) ++n;
    }
    return n;
  };
  const int before = memfdMappings();
  {
    // The kernel may merge adjacent mappings with the same protection, so
    // count at least one per side.
    Segment daemon = mustCreate();
    const int with_daemon = memfdMappings();
    EXPECT_GT(with_daemon, before);
    Result<Segment> client = Segment::attach(daemon.fd());
    ASSERT_TRUE(client.ok());
    EXPECT_GT(memfdMappings(), with_daemon);
  }
  EXPECT_EQ(memfdMappings(), before);
}

}  // namespace
}  // namespace fairsched::shm
