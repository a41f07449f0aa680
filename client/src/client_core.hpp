// The implementation behind fairsched::Client. include/fairsched/client.hpp
// states the public contract; this header states how it is kept. Client owns
// one ClientCore and forwards every call to it.
//
// Its jobs, one file each:
//   reconnect.cpp          the connection: the first session, openTenants(),
//                          closeTenant(), reconnecting (a new Session, every
//                          tenant reopened under its handle),
//                          and handleLoss(), which completes what a lost
//                          session held, SHUTTING_DOWN where the daemon had not
//   submit.cpp             submit(): local checks, the bookkeeping of what is
//                          outstanding, the push and the doorbell
//   completions.cpp        poll(), wait(), prepareToBlock(), submitAndWait():
//                          taking completions off the ring, sleeping for them
//   completion_router.hpp  where each completion goes (CompletionRouter)
//
// Threading: every public method may be called from any number of threads at
// once; the destructor REQUIRES that no other call is in progress.
//   - submit() and poll() never wait for control_mu_; they only try-lock it
//     (submit() to reconnect while disconnected, poll() to probe liveness).
//     submit() takes no lock (but, for submitAndWait(), the router's
//     await_mu_); poll() takes the session's consumer_mu.
//   - openTenants(), closeTenant(), reconnects and every read of the
//     control socket hold control_mu_ (a reply must reach the thread that
//     asked for it).
//   - handleLoss() may run on any thread, with or without control_mu_.
//
// Lock order: control_mu_ → Session::consumer_mu → the router's local_mu_ /
// await_mu_ → the PendingTable's overflow mutex. Session::sleep_mu_ is a leaf.
//
// Sessions: session_ holds the current one, null while disconnected. Only a
// thread holding control_mu_ installs one; handleLoss() clears it (once, by
// whoever flips Session::alive). A thread keeps its own reference while it
// uses a session, so a lost one stays mapped until the last user lets go.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "completion_router.hpp"
#include "fairsched/client.hpp"
#include "fork_guard.hpp"
#include "pending_table.hpp"
#include "session.hpp"
#include "tenant_registry.hpp"

namespace fairsched::client_detail {

inline Error notConnected() {
  return Error{ErrorCode::kNotConnected, 0, "not connected to the daemon"};
}

inline Error closedError() {
  return Error{ErrorCode::kNotConnected, 0, "the client is closed"};
}

inline Error daemonLost() {
  return Error{ErrorCode::kDaemonLost, 0, "the connection to the daemon was lost"};
}

// now + timeout, saturating; max() for a negative timeout (forever).
inline Clock::time_point deadlineAfter(std::chrono::nanoseconds timeout) {
  if (timeout.count() < 0) return Clock::time_point::max();
  const auto now = Clock::now();
  if (timeout > Clock::time_point::max() - now) return Clock::time_point::max();
  return now + timeout;
}

inline void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
  c.fetch_add(n, std::memory_order_relaxed);
}

// ClientStats as it is counted: relaxed atomics, any thread.
struct Counters {
  // Accepted submissions are the request ids handed out less these: ids
  // taken by a submit() that then failed (the connection lost meanwhile).
  // So the hot path bumps no counter of its own.
  std::atomic<std::uint64_t> ids_withdrawn{0};
  std::atomic<std::uint64_t> completed{0};
  std::atomic<std::uint64_t> local_completions{0};
  std::atomic<std::uint64_t> ring_full{0};
  std::atomic<std::uint64_t> doorbell_rings{0};
  std::atomic<std::uint64_t> connections_lost{0};
  std::atomic<std::uint64_t> reconnects{0};
  std::atomic<std::uint64_t> unknown_completions{0};
  std::atomic<std::uint64_t> abandoned{0};

  // `ids_taken`: request ids handed out so far.
  ClientStats snapshot(std::uint64_t ids_taken) const {
    auto get = [](const std::atomic<std::uint64_t>& a) {
      return a.load(std::memory_order_relaxed);
    };
    ClientStats s;
    s.submitted = ids_taken - std::min(ids_taken, get(ids_withdrawn));
    s.completed = get(completed);
    s.local_completions = get(local_completions);
    s.ring_full = get(ring_full);
    s.doorbell_rings = get(doorbell_rings);
    s.connections_lost = get(connections_lost);
    s.reconnects = get(reconnects);
    s.unknown_completions = get(unknown_completions);
    s.abandoned = get(abandoned);
    return s;
  }
};

class ClientCore {
 public:
  // Client::connect(): checks the options, makes completionFd() and opens
  // the first session. Errors: those of Client::connect().
  static Result<std::unique_ptr<ClientCore>> connect(ClientOptions options);
  // Shuts the current session's socket down, so the daemon cancels what it
  // still holds for this client (not in a child of fork() that inherited
  // it: there it only releases the child's copies).
  ~ClientCore();
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  // reconnect.cpp. All three serialise on control_mu_.
  std::vector<Result<Tenant>> openTenants(std::span<const std::string_view> names,
                                          std::optional<std::string_view> tier);
  std::vector<Result<void>> closeTenants(std::span<const Tenant> tenants);
  Result<void> reconnect();  // now, whatever the policy's backoff says

  // submit.cpp. `await_efd` non-null: a submitAndWait() call's; the
  // completion goes to a mailbox that writes it, not to poll().
  Result<RequestId> submit(const SubmitRequest& req, const shm::EventFd* await_efd);
  Result<void> cancel(RequestId id);

  // completions.cpp
  std::size_t poll(std::vector<Completion>& out, std::size_t max);
  Result<void> wait(std::chrono::nanoseconds timeout);
  Result<bool> prepareToBlock();
  Result<Completion> submitAndWait(const SubmitRequest& req, std::chrono::nanoseconds timeout);

  // Client::shutdown(): any thread, with other calls in progress.
  void shutdown();

  int completionFd() const { return router_.fd(); }
  bool connected() const { return !birth_.inherited() && !closed() && live(current()); }
  std::vector<EndpointDescription> endpoints() const {
    std::shared_ptr<Session> s = current();
    return s ? s->endpoints : std::vector<EndpointDescription>{};
  }
  std::uint64_t clientId() const {
    std::shared_ptr<Session> s = current();
    return s ? s->client_id : 0;
  }
  std::size_t outstanding() const { return pending_.size() + router_.localSize(); }
  ClientStats stats() const {
    return counters_.snapshot(next_id_.load(std::memory_order_relaxed) - 1);
  }
  RetryBudget& retryBudget() { return budget_; }

 private:
  ClientCore(ClientOptions options, CompletionFds fds);

  std::shared_ptr<Session> current() const { return session_.load(std::memory_order_acquire); }
  static bool live(const std::shared_ptr<Session>& s) {
    return s && s->alive.load(std::memory_order_acquire);
  }
  bool lostSince(std::uint64_t epoch) const {
    return loss_epoch_.load(std::memory_order_acquire) != epoch;
  }
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // Why a call cannot go on: inherited across fork(), or shut down. The
  // calls that would touch the connection ask first (submit() and poll()
  // only the former: a shut-down client has no session to use).
  std::optional<Error> unusable() const {
    if (birth_.inherited()) return birth_.inheritedError("client");
    if (closed()) return closedError();
    return std::nullopt;
  }

  // ---- reconnect.cpp ----------------------------------------------------
  // REQUIRES: control_mu_ held (all three).
  Result<std::shared_ptr<Session>> openSessionLocked();
  // Makes `s` current and watched by completionFd(), armed in fd mode.
  void install(const std::shared_ptr<Session>& s);
  // Connects again and reopens every tenant; `force` ignores the backoff.
  // OK at once when connected. Errors: kNotConnected (backoff, or the old
  // session still being torn down), those of connect and OpenTenant.
  Result<void> reconnectLocked(bool force);
  // Reconnects when the policy allows and one is due, without waiting for a
  // thread that holds control_mu_. true: connected now.
  bool tryReconnect();
  // Non-blocking: is `s`'s control socket still connected? Answers true
  // without looking when another thread holds control_mu_ (that thread
  // notices a loss itself).
  bool probe(const std::shared_ptr<Session>& s);
  // `s` is gone: every request outstanding on it completes, first with what
  // the daemon had already published, then SHUTTING_DOWN (local). Idempotent;
  // any thread; needs no lock held (control_mu_ may be).
  void handleLoss(const std::shared_ptr<Session>& s);

  // ---- submit.cpp -------------------------------------------------------
  // Removes a request that will never complete, and its mailbox; false when
  // a completion already claimed it.
  bool withdraw(RequestId id, bool awaited);

  // ---- completions.cpp --------------------------------------------------
  // popLocked() and popRing() are poll()'s path: declared inline, defined in
  // completions.cpp and called only there, so that path compiles as one
  // function. Other files empty a ring with drainRing().
  //
  // Pops up to `max` completions nobody awaits into `out` (null: the local
  // queue); awaited ones go to their mailboxes and do not count.
  // REQUIRES: s.consumer_mu held.
  inline std::size_t popLocked(Session& s, std::vector<Completion>* out, std::size_t max);
  // popLocked() under s->consumer_mu; `broken`: the daemon broke the ring.
  inline std::size_t popRing(const std::shared_ptr<Session>& s, std::vector<Completion>* out,
                             std::size_t max, bool& broken);
  // Everything published in s's ring, to mailboxes and the local queue
  // (handleLoss()). Takes s.consumer_mu.
  void drainRing(Session& s);
  // Something for poll(): local completions, or published ones in the ring
  // (a broken ring counts: poll() will notice and handle it).
  bool ready(const std::shared_ptr<Session>& s);
  void deliver(const Completion& c, const Pending& p, std::vector<Completion>* out) {
    if (!router_.deliver(c, p.awaited, out)) bump(counters_.abandoned);
  }

  const ClientOptions options_;
  const Birth birth_ = Birth::now();
  std::atomic<bool> closed_{false};  // shutdown() was called

  // The control connection (reconnect.cpp).
  std::mutex control_mu_;
  std::uint32_t next_seq_ = 1;         // guarded by control_mu_
  std::uint64_t next_generation_ = 1;  // guarded by control_mu_
  TenantRegistry tenants_;             // guarded by control_mu_ (but isOpen())
  Clock::time_point next_reconnect_ = Clock::time_point::min();  // guarded by control_mu_
  std::chrono::nanoseconds reconnect_delay_;                     // guarded by control_mu_

  std::atomic<std::shared_ptr<Session>> session_;  // null while disconnected
  std::atomic<std::uint64_t> loss_epoch_{0};       // connections lost so far
  std::atomic<std::int64_t> last_probe_ns_{0};     // poll()'s last liveness check (coarse clock)
  std::atomic<bool> fd_mode_{false};               // prepareToBlock() was used

  // What is outstanding (submit.cpp inserts, completions and losses erase).
  std::atomic<RequestId> next_id_{1};
  PendingTable pending_;

  CompletionRouter router_;
  RetryBudget budget_;
  Counters counters_;
};

}  // namespace fairsched::client_detail
