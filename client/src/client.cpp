#include "fairsched/client.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <ctime>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "fairsched/name.hpp"
#include "pending_table.hpp"
#include "session.hpp"
#include "shm/completion_ring.hpp"
#include "shm/shared_word.hpp"

namespace fairsched {

using client_detail::Clock;
using client_detail::kMaxTenants;
using client_detail::Pending;
using client_detail::PendingTable;
using client_detail::Session;
using std::chrono::nanoseconds;

namespace {

// poll() looks at the control socket at most this often when it finds
// nothing; wait() and prepareToBlock() look every time before they block.
constexpr nanoseconds kLivenessInterval = std::chrono::milliseconds(1);

Error notConnected() {
  return Error{ErrorCode::kNotConnected, 0, "not connected to the daemon"};
}

Error daemonLost() {
  return Error{ErrorCode::kDaemonLost, 0, "the connection to the daemon was lost"};
}

Clock::time_point deadlineAfter(nanoseconds timeout) {
  if (timeout.count() < 0) return Clock::time_point::max();
  const auto now = Clock::now();
  if (timeout > Clock::time_point::max() - now) return Clock::time_point::max();
  return now + timeout;
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

// The calling thread's eventfd for submitAndWait(): whoever takes the
// awaited completion off the ring writes it.
shm::EventFd* threadEventFd() {
  thread_local std::optional<shm::EventFd> efd;
  if (!efd) {
    shm::Result<shm::EventFd> made = shm::EventFd::create();
    if (std::holds_alternative<shm::Error>(made)) return nullptr;
    efd.emplace(std::move(std::get<shm::EventFd>(made)));
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

struct Counters {
  std::atomic<std::uint64_t> submitted{0};
  std::atomic<std::uint64_t> completed{0};
  std::atomic<std::uint64_t> local_completions{0};
  std::atomic<std::uint64_t> ring_full{0};
  std::atomic<std::uint64_t> doorbell_rings{0};
  std::atomic<std::uint64_t> connections_lost{0};
  std::atomic<std::uint64_t> reconnects{0};
  std::atomic<std::uint64_t> unknown_completions{0};
  std::atomic<std::uint64_t> abandoned{0};
};

void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
  c.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace

// Lock order: control_mu → Session::consumer_mu → local_mu / await_mu →
// PendingTable shards. handleLoss() takes no control_mu, so it may run under
// it. Session::sleep_mu_ is a leaf.
class client_detail::ClientCore {
 public:
  struct TenantEntry {
    std::string name;
    std::string tier;
  };
  struct Mailbox {
    std::optional<Completion> completion;
    int efd = -1;  // the waiting thread's eventfd
  };

  explicit ClientCore(ClientOptions opts, shm::EventFd notify_fd, shm::UniqueFd epoll_fd)
      : options(std::move(opts)),
        reconnect_delay(options.reconnect.initial_delay),
        notify(std::move(notify_fd)),
        epoll(std::move(epoll_fd)) {}

  ~ClientCore() {
    if (auto s = session.load()) {
      ::shutdown(s->sock, SHUT_RDWR);
    }
  }

  // ---- sessions --------------------------------------------------------

  std::shared_ptr<Session> current() const { return session.load(std::memory_order_acquire); }

  static bool live(const std::shared_ptr<Session>& s) {
    return s && s->alive.load(std::memory_order_acquire);
  }

  // REQUIRES: control_mu held.
  Result<std::shared_ptr<Session>> openSessionLocked() {
    return Session::open(options, next_generation++, next_seq++);
  }

  void install(const std::shared_ptr<Session>& s) {
    if (fd_mode.load(std::memory_order_acquire)) s->arm();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = s->bell.fd();
    ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, s->bell.fd(), &ev);
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = s->sock;
    ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, s->sock, &ev);
    session.store(s, std::memory_order_release);
  }

  // Connects again and reopens every tenant. REQUIRES: control_mu held.
  Result<void> reconnectLocked(bool force) {
    std::shared_ptr<Session> cur = current();
    if (live(cur)) return {};
    if (cur) return notConnected();  // another thread is still tearing the old one down
    const auto now = Clock::now();
    if (!force && now < next_reconnect) return notConnected();
    Result<std::shared_ptr<Session>> opened = openSessionLocked();
    if (opened) {
      std::shared_ptr<Session> s = std::move(opened).value();
      for (std::uint32_t i = 0; i < tenants.size(); ++i) {
        Result<std::uint32_t> ring =
            s->openTenant(tenants[i].name, tenants[i].tier, next_seq++, options.control_timeout);
        if (ring) {
          s->tenant_ring[i].store(static_cast<std::int32_t>(*ring), std::memory_order_relaxed);
        } else if (ring.code() == ErrorCode::kDaemonLost || ring.code() == ErrorCode::kTimedOut) {
          opened = std::move(ring).error();
          break;
        }
        // Other refusals leave this tenant closed; submit() says kUnknownTenant.
      }
      if (opened) {
        install(s);
        reconnect_delay = options.reconnect.initial_delay;
        next_reconnect = Clock::time_point::min();
        bump(counters.reconnects);
        return {};
      }
    }
    next_reconnect = now + reconnect_delay;
    reconnect_delay = std::min(reconnect_delay * 2, options.reconnect.max_delay);
    return std::move(opened).error();
  }

  // Reconnects if the policy allows, without waiting for another thread that
  // holds the control mutex.
  bool tryReconnect() {
    if (!options.reconnect.enabled) return false;
    std::unique_lock lk(control_mu, std::try_to_lock);
    if (!lk.owns_lock()) return false;
    return reconnectLocked(false).ok();
  }

  // Non-blocking: is the control socket still connected? Skips the check
  // (answers true) when another thread is using the socket; that thread
  // notices a loss itself.
  bool probe(const std::shared_ptr<Session>& s) {
    std::unique_lock lk(control_mu, std::try_to_lock);
    if (!lk.owns_lock()) return true;
    if (!s->alive.load(std::memory_order_acquire)) return false;
    return client_detail::socketAlive(s->sock);
  }

  // The connection `s` is gone: every request outstanding on it completes,
  // first with whatever the daemon had already published, then SHUTTING_DOWN.
  // Idempotent; any thread; needs no lock held (control_mu may be).
  void handleLoss(const std::shared_ptr<Session>& s) {
    if (!s->alive.exchange(false, std::memory_order_acq_rel)) return;
    loss_epoch.fetch_add(1, std::memory_order_acq_rel);
    // Makes the daemon see EOF (it cancels what it holds) and wakes any
    // thread blocked on this socket; the descriptor stays open while the
    // Session is referenced, so no other thread reads a reused number.
    ::shutdown(s->sock, SHUT_RDWR);
    ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, s->sock, nullptr);
    ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, s->bell.fd(), nullptr);
    {
      std::lock_guard lk(s->consumer_mu);
      popLocked(*s, nullptr, std::numeric_limits<std::size_t>::max());
    }
    // A submit() that inserts after this scan sees alive == false afterwards
    // (the shard mutex orders it) and withdraws its request itself.
    for (auto& [id, p] : pending.takeGeneration(s->generation)) {
      Completion c;
      c.request_id = id;
      c.tag = p.tag;
      c.status = Status::kShuttingDown;
      c.local = true;
      bump(counters.local_completions);
      deliver(c, p, nullptr);
    }
    std::shared_ptr<Session> expected = s;
    session.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);
    bump(counters.connections_lost);
    signalNotify();  // wakes epoll users even when nothing was outstanding
  }

  // ---- completions -----------------------------------------------------

  static Completion fromSlot(const shm::CompletionSlot& slot, const Pending& p) {
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
    c.checksum = slot.checksum;
    return c;
  }

  // Hands a completion to its submitAndWait() caller, to `out`, or (out
  // null) to the local queue for poll().
  void deliver(const Completion& c, const Pending& p, std::vector<Completion>* out) {
    if (p.awaited) {
      std::lock_guard lk(await_mu);
      auto it = mailboxes.find(c.request_id);
      if (it == mailboxes.end()) {
        bump(counters.abandoned);
        return;
      }
      it->second.completion = c;
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t w = ::write(it->second.efd, &one, sizeof(one));
      return;
    }
    if (out != nullptr) {
      out->push_back(c);
      return;
    }
    {
      std::lock_guard lk(local_mu);
      local.push_back(c);
      local_size.fetch_add(1, std::memory_order_release);
    }
    signalNotify();
  }

  // Pops up to `max` completions not awaited by anyone into `out` (or the
  // local queue); awaited ones go to their mailboxes and do not count.
  // REQUIRES: s.consumer_mu held.
  std::size_t popLocked(Session& s, std::vector<Completion>* out, std::size_t max) {
    std::size_t n = 0;
    shm::CompletionSlot slot;
    while (n < max && s.consumer.tryPop(slot)) {
      std::optional<Pending> p = pending.erase(slot.request_id);
      if (!p) {
        bump(counters.unknown_completions);
        continue;
      }
      deliver(fromSlot(slot, *p), *p, out);
      if (!p->awaited) ++n;
    }
    return n;
  }

  // The ring part of poll(); false when the daemon broke the ring.
  std::size_t popRing(const std::shared_ptr<Session>& s, std::vector<Completion>* out,
                      std::size_t max, bool& broken) {
    std::lock_guard lk(s->consumer_mu);
    const std::size_t n = popLocked(*s, out, max);
    broken = s->consumer.broken();
    return n;
  }

  void signalNotify() {
    if (!notify_pending.exchange(true, std::memory_order_acq_rel)) notify.signal();
  }

  // Clears the notify eventfd before its condition (local queue non-empty)
  // is re-checked, so a later signal is never absorbed.
  void consumeNotify() {
    if (notify_pending.exchange(false, std::memory_order_acq_rel)) notify.drain();
  }

  std::size_t takeLocal(std::vector<Completion>& out, std::size_t max) {
    if (local_size.load(std::memory_order_acquire) == 0) return 0;
    consumeNotify();
    std::lock_guard lk(local_mu);
    std::size_t n = 0;
    while (n < max && !local.empty()) {
      out.push_back(local.front());
      local.pop_front();
      ++n;
    }
    local_size.fetch_sub(n, std::memory_order_relaxed);
    if (!local.empty()) signalNotify();
    return n;
  }

  // Something for poll(): local completions, or published ones in the ring
  // (a broken ring counts: poll() will notice and handle it).
  bool ready(const std::shared_ptr<Session>& s) {
    if (local_size.load(std::memory_order_acquire) > 0) return true;
    if (!s) return false;
    std::lock_guard lk(s->consumer_mu);
    return s->consumer.available() > 0 || s->consumer.broken();
  }

  bool lostSince(std::uint64_t epoch) const {
    return loss_epoch.load(std::memory_order_acquire) != epoch;
  }

  // ---- the API ---------------------------------------------------------

  Result<Tenant> openTenant(std::string_view name, std::optional<std::string_view> tier) {
    // The daemon refuses a name that breaks the rule; say so before asking it.
    if (auto err = nameError(name)) return Error{ErrorCode::kInvalidArgument, 0, "tenant " + *err};
    if (tier && !tier->empty()) {
      if (auto err = nameError(*tier)) return Error{ErrorCode::kInvalidArgument, 0, "tier " + *err};
    }
    std::lock_guard lk(control_mu);
    std::optional<std::uint32_t> index;
    for (std::uint32_t i = 0; i < tenants.size(); ++i) {
      if (tenants[i].name == name) index = i;
    }
    std::shared_ptr<Session> s = current();
    if (!live(s)) {
      if (!options.reconnect.enabled) return notConnected();
      if (Result<void> r = reconnectLocked(false); !r) return std::move(r).error();
      s = current();
    }
    if (index && s->tenant_ring[*index].load(std::memory_order_relaxed) >= 0) {
      return Tenant{*index};
    }
    if (!index && tenants.size() >= kMaxTenants) {
      return Error{ErrorCode::kNoCapacity, 0, "this client has opened the most tenants it can"};
    }
    const std::string tier_name = index ? tenants[*index].tier : std::string(tier.value_or(""));
    Result<std::uint32_t> ring =
        s->openTenant(name, tier_name, next_seq++, options.control_timeout);
    if (!ring) {
      if (ring.code() == ErrorCode::kDaemonLost) handleLoss(s);
      return std::move(ring).error();
    }
    for (std::uint32_t i = 0; i < kMaxTenants; ++i) {
      if (s->tenant_ring[i].load(std::memory_order_relaxed) == static_cast<std::int32_t>(*ring) &&
          (!index || i != *index)) {
        return Error{ErrorCode::kProtocol, 0,
                     "the daemon gave tenant '" + std::string(name) + "' ring " +
                         std::to_string(*ring) + ", which serves another tenant"};
      }
    }
    if (!index) {
      index = static_cast<std::uint32_t>(tenants.size());
      tenants.push_back(TenantEntry{std::string(name), tier_name});
      tenant_count.store(static_cast<std::uint32_t>(tenants.size()), std::memory_order_release);
    }
    s->tenant_ring[*index].store(static_cast<std::int32_t>(*ring), std::memory_order_release);
    return Tenant{*index};
  }

  Result<RequestId> submit(const SubmitRequest& req, const shm::EventFd* await_efd) {
    const std::uint32_t index = req.tenant.index;
    if (index >= tenant_count.load(std::memory_order_acquire)) {
      return Error{ErrorCode::kUnknownTenant, 0, "not a tenant handle of this client"};
    }
    std::shared_ptr<Session> s = current();
    if (!live(s)) {
      if (!tryReconnect()) return notConnected();
      s = current();
      if (!live(s)) return notConnected();
    }
    const std::int32_t ring = s->tenant_ring[index].load(std::memory_order_acquire);
    if (ring < 0) {
      return Error{ErrorCode::kUnknownTenant, 0, "the tenant is not open on this connection"};
    }
    const EndpointDescription* ep = s->findEndpoint(req.endpoint);
    if (ep == nullptr) {
      return Error{ErrorCode::kUnknownEndpoint, 0,
                   "the daemon has no endpoint '" + std::string(req.endpoint) + "'"};
    }
    if (req.prompt.size() > s->promptTokensPerSlot()) {
      return Error{ErrorCode::kPromptTooLarge, 0,
                   std::to_string(req.prompt.size()) + " prompt tokens; a slot holds " +
                       std::to_string(s->promptTokensPerSlot())};
    }
    if (ep->max_output_tokens != 0 && req.max_output_tokens > ep->max_output_tokens) {
      return Error{ErrorCode::kInvalidArgument, 0,
                   "max_output_tokens " + std::to_string(req.max_output_tokens) + " above '" +
                       ep->name + "' limit " + std::to_string(ep->max_output_tokens)};
    }
    if (ep->max_batch_tokens != 0 &&
        req.prompt.size() + std::uint64_t{req.max_output_tokens} > ep->max_batch_tokens) {
      return Error{ErrorCode::kPromptTooLarge, 0,
                   "prompt + max_output_tokens exceed '" + ep->name + "' batch limit " +
                       std::to_string(ep->max_batch_tokens)};
    }

    std::int64_t deadline_ns = 0;
    std::optional<Clock::time_point> deadline = req.deadline;
    if (req.timeout) {
      const Clock::time_point t = deadlineAfter(*req.timeout);
      if (!deadline || t < *deadline) deadline = t;
    }
    if (deadline && *deadline != Clock::time_point::max()) {
      deadline_ns = std::max<std::int64_t>(
          1, std::chrono::duration_cast<nanoseconds>(deadline->time_since_epoch()).count());
    }

    const RequestId id = next_id.fetch_add(1, std::memory_order_relaxed);
    if (await_efd != nullptr) {
      std::lock_guard lk(await_mu);
      mailboxes[id] = Mailbox{std::nullopt, await_efd->fd()};
    }
    pending.insert(id, Pending{req.tag, s->generation, await_efd != nullptr});

    shm::SubmissionSlot slot;
    slot.request_id = id;
    slot.tag = req.tag;
    slot.deadline_ns = deadline_ns;
    slot.max_output_tokens = req.max_output_tokens;
    slot.priority = req.priority;
    slot.endpoint = ep->id;
    const shm::PushResult pushed =
        s->producers[static_cast<std::size_t>(ring)].tryPushPrompt(slot, req.prompt);
    if (pushed != shm::PushResult::kOk) {
      withdraw(id, await_efd != nullptr);
      if (pushed == shm::PushResult::kFull) {
        bump(counters.ring_full);
        return Error{ErrorCode::kRingFull, 0, {}};
      }
      if (pushed == shm::PushResult::kPromptTooLarge) {
        return Error{ErrorCode::kPromptTooLarge, 0, "prompt does not fit a slot"};
      }
      return Error{ErrorCode::kInvalidArgument, 0, "slot rejected by the ring"};
    }
    // The daemon sleeps only after announcing it; fence, then look (doorbell.hpp).
    if (s->daemon_sleeping.sleeping()) {
      s->doorbell.signal();
      bump(counters.doorbell_rings);
    }
    if (!s->alive.load(std::memory_order_acquire) && withdraw(id, await_efd != nullptr)) {
      // Lost while we pushed, and the loss handler did not see our entry:
      // no completion will come, so the caller hears it now.
      return daemonLost();
    }
    bump(counters.submitted);
    return id;
  }

  // Removes a request that will never complete; false when a completion
  // already claimed it.
  bool withdraw(RequestId id, bool awaited) {
    const bool was_pending = pending.erase(id).has_value();
    if (awaited && was_pending) {
      std::lock_guard lk(await_mu);
      mailboxes.erase(id);
    }
    return was_pending;
  }

  std::size_t poll(std::vector<Completion>& out, std::size_t max) {
    std::size_t n = takeLocal(out, max);
    std::shared_ptr<Session> s = current();
    if (s && n < max) {
      bool broken = false;
      n += popRing(s, &out, max - n, broken);
      if (broken) {
        handleLoss(s);
        n += takeLocal(out, max - n);
      }
    }
    if (n == 0 && live(s)) {
      const std::int64_t now = Clock::now().time_since_epoch().count();
      std::int64_t last = last_probe_ns.load(std::memory_order_relaxed);
      if (now - last >= kLivenessInterval.count() &&
          last_probe_ns.compare_exchange_strong(last, now, std::memory_order_relaxed) &&
          !probe(s)) {
        handleLoss(s);
        n += takeLocal(out, max);
      }
    }
    bump(counters.completed, n);
    return n;
  }

  Result<void> wait(nanoseconds timeout) {
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = deadlineAfter(timeout);
    const std::uint64_t epoch = loss_epoch.load(std::memory_order_acquire);
    std::shared_ptr<Session> s = current();
    if (local_size.load(std::memory_order_acquire) > 0) return {};
    if (s && !live(s)) return daemonLost();  // another thread is handling the loss right now
    if (!live(s)) {
      if (!tryReconnect()) return notConnected();
      s = current();
      if (!live(s)) return notConnected();
    }
    // Spin: a completion that is microseconds away costs no sleep and wake-up.
    const Clock::time_point spin_end = start + options.spin;
    for (;;) {
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
      consumeNotify();
      if (lostSince(epoch)) return daemonLost();
      if (ready(s)) return {};
      if (!probe(s)) {
        handleLoss(s);
        return daemonLost();
      }
      if (Clock::now() >= deadline) return Error{ErrorCode::kTimedOut, 0, {}};
      pollfd fds[3] = {{s->bell.fd(), POLLIN, 0}, {s->sock, POLLIN, 0}, {notify.fd(), POLLIN, 0}};
      if (pollUntil(fds, 3, deadline) < 0) {
        return Error{ErrorCode::kSystem, errno, "ppoll in wait()"};
      }
    }
  }

  Result<bool> prepareToBlock() {
    consumeNotify();
    if (local_size.load(std::memory_order_acquire) > 0) return false;
    std::shared_ptr<Session> s = current();
    if (!live(s)) {
      if (!tryReconnect()) return notConnected();
      s = current();
      if (!live(s)) return notConnected();
    }
    // From now on the client counts as sleeping for good: the daemon rings
    // the bell for every batch, so the descriptor never misses one, whichever
    // thread polls. Reconnected sessions inherit it (install()).
    fd_mode.store(true, std::memory_order_release);
    s->arm();
    s->bell.drain();
    if (ready(s)) return false;
    if (!probe(s)) {
      handleLoss(s);
      return false;
    }
    return true;
  }

  std::optional<Completion> takeMailbox(RequestId id) {
    std::lock_guard lk(await_mu);
    auto it = mailboxes.find(id);
    if (it == mailboxes.end() || !it->second.completion) return std::nullopt;
    Completion c = *it->second.completion;
    mailboxes.erase(it);
    return c;
  }

  Result<Completion> submitAndWait(const SubmitRequest& req, nanoseconds timeout) {
    shm::EventFd* efd = threadEventFd();
    if (efd == nullptr) return Error{ErrorCode::kSystem, errno, "eventfd for submitAndWait"};
    efd->drain();
    Result<RequestId> submitted = submit(req, efd);
    if (!submitted) return std::move(submitted).error();
    const RequestId id = *submitted;
    const Clock::time_point deadline = deadlineAfter(timeout);
    const Clock::time_point spin_end = Clock::now() + options.spin;
    for (;;) {
      if (auto c = takeMailbox(id)) {
        bump(counters.completed);
        return *c;
      }
      std::shared_ptr<Session> s = current();
      if (s) {
        bool broken = false;
        popRing(s, nullptr, std::numeric_limits<std::size_t>::max(), broken);
        if (broken) handleLoss(s);
        if (auto c = takeMailbox(id)) {
          bump(counters.completed);
          return *c;
        }
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        std::lock_guard lk(await_mu);
        auto it = mailboxes.find(id);
        if (it != mailboxes.end() && it->second.completion) {
          Completion c = *it->second.completion;
          mailboxes.erase(it);
          bump(counters.completed);
          return c;
        }
        mailboxes.erase(id);  // its completion is dropped when it arrives
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
      if (takeMailboxReady(id) || ready(s)) continue;
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

  bool takeMailboxReady(RequestId id) {
    std::lock_guard lk(await_mu);
    auto it = mailboxes.find(id);
    return it != mailboxes.end() && it->second.completion.has_value();
  }

  ClientOptions options;

  std::mutex control_mu;
  std::uint32_t next_seq = 1;         // guarded by control_mu
  std::uint64_t next_generation = 1;  // guarded by control_mu
  std::vector<TenantEntry> tenants;   // guarded by control_mu; index = Tenant
  Clock::time_point next_reconnect = Clock::time_point::min();  // guarded by control_mu
  nanoseconds reconnect_delay;                                  // guarded by control_mu
  std::atomic<std::uint32_t> tenant_count{0};                   // tenants.size(), for submit()

  std::atomic<std::shared_ptr<Session>> session;  // null while disconnected
  std::atomic<std::uint64_t> loss_epoch{0};       // connections lost so far
  std::atomic<std::int64_t> last_probe_ns{0};     // poll()'s last liveness check
  std::atomic<bool> fd_mode{false};               // prepareToBlock() was used

  std::atomic<RequestId> next_id{1};
  PendingTable pending;

  // Completions for poll() that did not come straight off the ring: those
  // made up after a loss, and those another thread took off for us.
  std::mutex local_mu;
  std::deque<Completion> local;  // guarded by local_mu
  std::atomic<std::size_t> local_size{0};
  // The notify eventfd is readable while local may be non-empty;
  // notify_pending says whether it was signalled since last drained.
  std::atomic<bool> notify_pending{false};
  shm::EventFd notify;
  shm::UniqueFd epoll;  // completionFd(): notify, and the session's bell and socket

  std::mutex await_mu;
  std::unordered_map<RequestId, Mailbox> mailboxes;  // guarded by await_mu

  RetryBudget budget;
  Counters counters;
};

using Impl = client_detail::ClientCore;

Result<Client> Client::connect(ClientOptions options) {
  if (!options.client_name.empty()) {
    if (auto err = nameError(options.client_name)) {
      return Error{ErrorCode::kInvalidArgument, 0, "client " + *err};
    }
  }
  if (options.spin.count() < 0) options.spin = nanoseconds(0);
  shm::Result<shm::EventFd> notify = shm::EventFd::create();
  if (auto* err = std::get_if<shm::Error>(&notify)) {
    return Error{ErrorCode::kSystem, err->sys_errno, "eventfd"};
  }
  shm::UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep) return Error{ErrorCode::kSystem, errno, "epoll_create1"};
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = std::get<shm::EventFd>(notify).fd();
  if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, std::get<shm::EventFd>(notify).fd(), &ev) != 0) {
    return Error{ErrorCode::kSystem, errno, "epoll_ctl"};
  }
  auto impl = std::make_unique<Impl>(std::move(options), std::move(std::get<shm::EventFd>(notify)),
                                     std::move(ep));
  {
    std::lock_guard lk(impl->control_mu);
    Result<std::shared_ptr<Session>> s = impl->openSessionLocked();
    if (!s) return std::move(s).error();
    impl->install(*s);
  }
  return Client(std::move(impl));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

Result<Tenant> Client::openTenant(std::string_view name, std::optional<std::string_view> tier) {
  return impl_->openTenant(name, tier);
}

Result<RequestId> Client::submit(const SubmitRequest& request) {
  return impl_->submit(request, nullptr);
}

std::size_t Client::poll(std::vector<Completion>& out, std::size_t max) {
  return impl_->poll(out, max);
}

Result<void> Client::wait(nanoseconds timeout) {
  return impl_->wait(timeout);
}

int Client::completionFd() const {
  return impl_->epoll.get();
}

Result<bool> Client::prepareToBlock() {
  return impl_->prepareToBlock();
}

Result<Completion> Client::submitAndWait(const SubmitRequest& request, nanoseconds timeout) {
  return impl_->submitAndWait(request, timeout);
}

Result<void> Client::reconnect() {
  std::lock_guard lk(impl_->control_mu);
  return impl_->reconnectLocked(true);
}

bool Client::connected() const {
  return Impl::live(impl_->current());
}

std::vector<EndpointDescription> Client::endpoints() const {
  std::shared_ptr<Session> s = impl_->current();
  return s ? s->endpoints : std::vector<EndpointDescription>{};
}

std::uint64_t Client::clientId() const {
  std::shared_ptr<Session> s = impl_->current();
  return s ? s->client_id : 0;
}

std::size_t Client::outstanding() const {
  return impl_->pending.size() + impl_->local_size.load(std::memory_order_acquire);
}

ClientStats Client::stats() const {
  const Counters& c = impl_->counters;
  auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  ClientStats s;
  s.submitted = get(c.submitted);
  s.completed = get(c.completed);
  s.local_completions = get(c.local_completions);
  s.ring_full = get(c.ring_full);
  s.doorbell_rings = get(c.doorbell_rings);
  s.connections_lost = get(c.connections_lost);
  s.reconnects = get(c.reconnects);
  s.unknown_completions = get(c.unknown_completions);
  s.abandoned = get(c.abandoned);
  return s;
}

RetryBudget& Client::retryBudget() {
  return impl_->budget;
}

}  // namespace fairsched
