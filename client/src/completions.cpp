// ClientCore's completion side: poll(), wait(), prepareToBlock() and
// submitAndWait() take completions off the session's ring (under its
// consumer_mu) and hand them on through the CompletionRouter; wait() and
// submitAndWait() sleep by the daemon's sleep/wake protocol (shm/doorbell.hpp)
// and notice a lost daemon while they do.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <limits>
#include <optional>
#include <utility>
#include <variant>

#include "client_core.hpp"
#include "shm/completion_ring.hpp"
#include "shm/shared_word.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched::client_detail {

using std::chrono::nanoseconds;

namespace {

// poll() looks at the control socket at most this often when it finds
// nothing; wait() and prepareToBlock() look every time before they block.
constexpr nanoseconds kLivenessInterval = std::chrono::milliseconds(1);

// The clock poll() reads for it: CLOCK_MONOTONIC_COARSE (the kernel's tick,
// a few ms; a load from the vDSO page, about a quarter of the cost of
// CLOCK_MONOTONIC, which was the largest part of an empty poll). So a
// spinning poll() looks about once per tick.
std::int64_t coarseNowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// ppoll on `fds` until `deadline`; the result of ppoll (EINTR counts as 0).
int pollUntil(pollfd* fds, nfds_t n, Clock::time_point deadline) {
  timespec ts{};
  const timespec* tsp = nullptr;
  if (deadline != Clock::time_point::max()) {
    const auto left =
        std::max(nanoseconds(0), std::chrono::duration_cast<nanoseconds>(deadline - Clock::now()));
    ts.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
    tsp = &ts;
  }
  const int r = ::ppoll(fds, n, tsp, nullptr);
  if (r < 0 && errno == EINTR) return 0;
  return r;
}

nanoseconds fromWire(std::uint64_t ns) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  return nanoseconds(static_cast<std::int64_t>(std::min(ns, kMax)));
}

Completion fromSlot(const shm::CompletionSlot& slot, const Pending& p) {
  Completion c;
  c.request_id = slot.request_id;
  c.tag = p.tag;
  // A status this build does not know can only come from a daemon of
  // another layout version; it is reported as the daemon's failure.
  c.status = shm::decodeStatus(slot.status).value_or(Status::kExecutorFailed);
  c.retry_after = nanoseconds(std::max<std::int64_t>(0, slot.retry_after_ns));
  c.queue_wait = fromWire(slot.queue_wait_ns);
  c.service = fromWire(slot.service_ns);
  c.output_tokens = slot.output_tokens;
  c.input_tokens = slot.input_tokens;
  c.time_to_first_token = std::chrono::microseconds(slot.ttft_us);
  c.checksum = slot.checksum;
  return c;
}

// A stream chunk (slot.status == shm::kStreamChunk) of `p`.
Completion chunkFromSlot(const shm::CompletionSlot& slot, const Pending& p,
                         const std::vector<std::uint32_t>& tokens) {
  Completion c;
  c.request_id = slot.request_id;
  c.tag = p.tag;
  c.partial = true;
  c.tokens = tokens;
  c.first_token =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(slot.queue_wait_ns, UINT32_MAX));
  c.emitted = Clock::time_point(fromWire(slot.service_ns));
  return c;
}

// The calling thread's eventfd for submitAndWait(): whoever takes the
// awaited completion off the ring writes it.
shm::EventFd* threadEventFd() {
  thread_local std::optional<shm::EventFd> efd;
  if (!efd) {
    shm::Result<shm::EventFd> made = shm::EventFd::create();
    if (!made.ok()) return nullptr;
    efd.emplace(std::move(made).value());
  }
  return &*efd;
}

// The scope of one thread's announcement that it is about to block.
class SleepScope {
 public:
  explicit SleepScope(Session& s) : s_(s) { s_.enterSleep(); }
  ~SleepScope() { s_.leaveSleep(); }
  SleepScope(const SleepScope&) = delete;
  SleepScope& operator=(const SleepScope&) = delete;

 private:
  Session& s_;
};

}  // namespace

std::size_t ClientCore::popLocked(Session& s, std::vector<Completion>* out, std::size_t max) {
  std::size_t n = 0;
  shm::CompletionSlot slot;
  while (n < max && s.consumer.tryPop(slot, s.chunk_tokens, shm::streamPayloadWords)) {
    if (slot.status == shm::kStreamChunk) {
      const std::optional<Pending> p = pending_.find(slot.request_id);
      if (!p) {
        bump(counters_.unknown_completions);
        continue;
      }
      // Chunks come in order without gaps: this one's end is the count so far.
      s.streamed[slot.request_id] = static_cast<std::uint32_t>(
          std::min<std::uint64_t>(slot.queue_wait_ns + s.chunk_tokens.size(), UINT32_MAX));
      if (!p->awaited) {  // submitAndWait() returns the final completion only
        deliver(chunkFromSlot(slot, *p, s.chunk_tokens), *p, out);
        ++n;
      }
      continue;
    }
    if (!s.streamed.empty()) s.streamed.erase(slot.request_id);
    std::optional<Pending> p = pending_.erase(slot.request_id);
    if (!p) {
      bump(counters_.unknown_completions);
      continue;
    }
    deliver(fromSlot(slot, *p), *p, out);
    if (!p->awaited) ++n;
  }
  return n;
}

std::size_t ClientCore::popRing(const std::shared_ptr<Session>& s, std::vector<Completion>* out,
                                std::size_t max, bool& broken) {
  std::lock_guard lk(s->consumer_mu);
  const std::size_t n = popLocked(*s, out, max);
  broken = s->consumer.broken();
  return n;
}

void ClientCore::drainRing(Session& s) {
  std::lock_guard lk(s.consumer_mu);
  popLocked(s, nullptr, std::numeric_limits<std::size_t>::max());
}

bool ClientCore::ready(const std::shared_ptr<Session>& s) {
  if (router_.hasLocal()) return true;
  if (!s) return false;
  std::lock_guard lk(s->consumer_mu);
  return s->consumer.hasNext() || s->consumer.broken();
}

std::size_t ClientCore::poll(std::vector<Completion>& out, std::size_t max) {
  if (birth_.inherited()) return 0;  // the parent's completions
  std::size_t n = router_.takeLocal(out, max);
  std::shared_ptr<Session> s = current();
  if (s && n < max) {
    bool broken = false;
    n += popRing(s, &out, max - n, broken);
    if (broken) {
      handleLoss(s);
      n += router_.takeLocal(out, max - n);
    }
  }
  if (n == 0 && live(s)) {
    const std::int64_t now = coarseNowNs();
    std::int64_t last = last_probe_ns_.load(std::memory_order_relaxed);
    if (now - last >= kLivenessInterval.count() &&
        last_probe_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed) && !probe(s)) {
      handleLoss(s);
      n += router_.takeLocal(out, max);
    }
  }
  if (n > 0) bump(counters_.completed, n);  // an empty poll writes no shared line
  return n;
}

Result<void> ClientCore::wait(nanoseconds timeout) {
  if (std::optional<Error> e = unusable()) return *e;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = deadlineAfter(timeout);
  const std::uint64_t epoch = loss_epoch_.load(std::memory_order_acquire);
  std::shared_ptr<Session> s = current();
  if (router_.hasLocal()) return {};
  if (s && !live(s)) return daemonLost();  // another thread is handling the loss right now
  if (!live(s)) {
    if (!tryReconnect()) return notConnected();
    s = current();
    if (!live(s)) return notConnected();
  }
  // Spin: a completion that is microseconds away costs no sleep and wake-up.
  const Clock::time_point spin_end = start + options_.spin;
  for (;;) {
    if (closed()) return closedError();
    if (lostSince(epoch)) return daemonLost();
    if (ready(s)) return {};
    const auto now = Clock::now();
    if (now >= spin_end) break;
    if (now >= deadline) return Error{ErrorCode::kTimedOut, 0, {}};
    for (int i = 0; i < 16; ++i) shm::cpuRelax();
  }
  // Sleep: announce, re-check, block on the bell, the socket and the
  // local-queue eventfd (shm::sleepUntil's protocol, with two more fds).
  for (;;) {
    SleepScope scope(*s);
    s->bell.drain();
    router_.consumeNotify();
    if (closed()) return closedError();  // shutdown() from another thread
    if (lostSince(epoch)) return daemonLost();
    if (ready(s)) return {};
    if (!probe(s)) {
      handleLoss(s);
      return daemonLost();
    }
    if (Clock::now() >= deadline) return Error{ErrorCode::kTimedOut, 0, {}};
    pollfd fds[3] = {
        {s->bell.fd(), POLLIN, 0}, {s->sock, POLLIN, 0}, {router_.notifyFd(), POLLIN, 0}};
    if (pollUntil(fds, 3, deadline) < 0) {
      return Error{ErrorCode::kSystem, errno, "ppoll in wait()"};
    }
  }
}

Result<bool> ClientCore::prepareToBlock() {
  if (std::optional<Error> e = unusable()) return *e;
  router_.consumeNotify();
  if (router_.hasLocal()) return false;
  std::shared_ptr<Session> s = current();
  if (!live(s)) {
    if (!tryReconnect()) return notConnected();
    s = current();
    if (!live(s)) return notConnected();
  }
  // From now on the client counts as sleeping for good: the daemon rings
  // the bell for every batch, so the descriptor never misses one, whichever
  // thread polls. Reconnected sessions inherit it (install()).
  fd_mode_.store(true, std::memory_order_release);
  s->arm();
  s->bell.drain();
  if (ready(s)) return false;
  if (!probe(s)) {
    handleLoss(s);
    return false;
  }
  return true;
}

Result<Completion> ClientCore::submitAndWait(const SubmitRequest& req, nanoseconds timeout) {
  if (std::optional<Error> e = unusable()) return *e;
  shm::EventFd* efd = threadEventFd();
  if (efd == nullptr) return Error{ErrorCode::kSystem, errno, "eventfd for submitAndWait"};
  efd->drain();
  Result<RequestId> submitted = submit(req, efd);
  if (!submitted) return std::move(submitted).error();
  const RequestId id = *submitted;
  const Clock::time_point deadline = deadlineAfter(timeout);
  const Clock::time_point spin_end = Clock::now() + options_.spin;
  for (;;) {
    if (closed()) {  // shutdown() from another thread: the completion is dropped
      router_.closeMailbox(id);
      return closedError();
    }
    if (auto c = router_.takeMailbox(id)) {
      bump(counters_.completed);
      return *c;
    }
    std::shared_ptr<Session> s = current();
    if (s) {
      bool broken = false;
      popRing(s, nullptr, std::numeric_limits<std::size_t>::max(), broken);
      if (broken) handleLoss(s);
      if (auto c = router_.takeMailbox(id)) {
        bump(counters_.completed);
        return *c;
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      // Its completion, or else the mailbox goes and the completion is
      // dropped when it arrives.
      if (auto c = router_.takeOrCloseMailbox(id)) {
        bump(counters_.completed);
        return *c;
      }
      return Error{ErrorCode::kTimedOut, 0, "no completion in time"};
    }
    if (!live(s)) {
      // A loss is being handled by another thread; it fills the mailbox.
      pollfd fd{efd->fd(), POLLIN, 0};
      pollUntil(&fd, 1, std::min(deadline, now + std::chrono::milliseconds(1)));
      efd->drain();
      continue;
    }
    if (now < spin_end) {
      for (int i = 0; i < 16; ++i) shm::cpuRelax();
      continue;
    }
    SleepScope scope(*s);
    s->bell.drain();
    efd->drain();
    if (router_.mailboxFilled(id) || ready(s)) continue;
    if (!probe(s)) {
      handleLoss(s);
      continue;
    }
    pollfd fds[3] = {{efd->fd(), POLLIN, 0}, {s->bell.fd(), POLLIN, 0}, {s->sock, POLLIN, 0}};
    if (pollUntil(fds, 3, deadline) < 0) {
      return Error{ErrorCode::kSystem, errno, "ppoll in submitAndWait()"};
    }
  }
}

}  // namespace fairsched::client_detail
