// Where a completion goes once it is off the completion ring or made up after
// a loss: to the submitAndWait() caller waiting for it (its mailbox), straight
// into a poll() caller's vector, or into the local queue that poll() drains
// first. It also owns completionFd(): an epoll instance over the notify
// eventfd, and the current session's bell and control socket.
//
// The notify eventfd is readable while the local queue may be non-empty:
// whoever queues signals it, whoever takes from the queue clears it first and
// then looks, so a signal is never absorbed by a reader that found nothing.
//
// Thread-safety: any thread, any method. local_mu_ guards the local queue and
// await_mu_ the mailboxes; both are leaves, taken under Session::consumer_mu
// by the thread that pops the ring. The only system call under a lock is the
// write to a waiting thread's eventfd (under await_mu_). The fast paths of
// deliver() (to a vector) and takeLocal() (nothing queued) are inline and take
// no lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "fairsched/error.hpp"
#include "fairsched/request.hpp"
#include "shm/doorbell.hpp"
#include "shm/unique_fd.hpp"

namespace fairsched::client_detail {

// The router's descriptors, made before it is (it does not move).
struct CompletionFds {
  shm::EventFd notify;  // readable while the local queue may be non-empty
  shm::UniqueFd epoll;  // holds `notify` from the start
};

// An eventfd and an epoll instance watching it. Errors: kSystem.
Result<CompletionFds> openCompletionFds();

class CompletionRouter {
 public:
  explicit CompletionRouter(CompletionFds fds)
      : notify_(std::move(fds.notify)), epoll_(std::move(fds.epoll)) {}
  CompletionRouter(const CompletionRouter&) = delete;
  CompletionRouter& operator=(const CompletionRouter&) = delete;

  // completionFd(): stays the same across sessions.
  int fd() const { return epoll_.get(); }
  int notifyFd() const { return notify_.fd(); }

  // Adds (removes) a session's bell and control socket to (from) fd().
  void watchSession(int bell_fd, int sock);
  void unwatchSession(int bell_fd, int sock);

  // Hands `c` to the submitAndWait() caller waiting for it when `awaited`,
  // else to `out`, else (out null) to the local queue. false: it was awaited
  // and its waiter has given up (timed out), so it is dropped.
  [[nodiscard]] bool deliver(const Completion& c, bool awaited, std::vector<Completion>* out) {
    if (!awaited && out != nullptr) {
      out->push_back(c);
      return true;
    }
    return deliverSlow(c, awaited);
  }

  // Moves up to `max` queued completions to `out`, oldest first; how many.
  std::size_t takeLocal(std::vector<Completion>& out, std::size_t max) {
    if (!hasLocal()) return 0;
    return takeLocalSlow(out, max);
  }
  bool hasLocal() const { return localSize() > 0; }
  std::size_t localSize() const { return local_size_.load(std::memory_order_acquire); }

  // Makes the notify eventfd readable (once until the next consumeNotify()).
  void signalNotify() {
    if (!notify_pending_.exchange(true, std::memory_order_acq_rel)) notify_.signal();
  }
  // Clears the notify eventfd. Call it before re-checking hasLocal(), so a
  // signal that comes after the check is not lost.
  void consumeNotify() {
    if (notify_pending_.exchange(false, std::memory_order_acq_rel)) notify_.drain();
  }

  // Mailboxes: one per submitAndWait() in progress, keyed by request id.
  // REQUIRES for openMailbox: `efd` (the waiting thread's eventfd) stays open
  // until the mailbox is taken or closed; deliver() writes it.
  void openMailbox(RequestId id, int efd);
  // Forgets the mailbox; a completion that arrives later is dropped.
  void closeMailbox(RequestId id);
  // The completion, removing the mailbox; nullopt while it has none yet.
  std::optional<Completion> takeMailbox(RequestId id);
  bool mailboxFilled(RequestId id);
  // Like takeMailbox(), but an empty mailbox is closed (in the same critical
  // section, so the completion is either returned or dropped, never lost).
  std::optional<Completion> takeOrCloseMailbox(RequestId id);

 private:
  struct Mailbox {
    std::optional<Completion> completion;
    int efd = -1;  // the waiting thread's eventfd
  };

  bool deliverSlow(const Completion& c, bool awaited);
  std::size_t takeLocalSlow(std::vector<Completion>& out, std::size_t max);

  // Completions for poll() that did not come straight off the ring: those
  // made up after a loss, and those another thread took off for us.
  std::mutex local_mu_;
  std::deque<Completion> local_;  // guarded by local_mu_
  // local_.size(), readable without the lock; changed only under it.
  std::atomic<std::size_t> local_size_{0};
  // Whether notify_ was signalled since it was last drained.
  std::atomic<bool> notify_pending_{false};
  shm::EventFd notify_;
  shm::UniqueFd epoll_;  // notify_, and the current session's bell and socket

  std::mutex await_mu_;
  std::unordered_map<RequestId, Mailbox> mailboxes_;  // guarded by await_mu_
};

}  // namespace fairsched::client_detail
