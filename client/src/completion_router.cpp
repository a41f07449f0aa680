#include "completion_router.hpp"

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <variant>

namespace fairsched::client_detail {

Result<CompletionFds> openCompletionFds() {
  shm::Result<shm::EventFd> notify = shm::EventFd::create();
  if (!notify.ok()) {
    return Error{ErrorCode::kSystem, notify.error().sys_errno, "eventfd"};
  }
  shm::UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep) return Error{ErrorCode::kSystem, errno, "epoll_create1"};
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = notify.value().fd();
  if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, notify.value().fd(), &ev) != 0) {
    return Error{ErrorCode::kSystem, errno, "epoll_ctl"};
  }
  return CompletionFds{std::move(notify).value(), std::move(ep)};
}

void CompletionRouter::watchSession(int bell_fd, int sock) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = bell_fd;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, bell_fd, &ev);
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = sock;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, sock, &ev);
}

void CompletionRouter::unwatchSession(int bell_fd, int sock) {
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, sock, nullptr);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, bell_fd, nullptr);
}

bool CompletionRouter::deliverSlow(const Completion& c, bool awaited) {
  if (awaited) {
    std::lock_guard lk(await_mu_);
    auto it = mailboxes_.find(c.request_id);
    if (it == mailboxes_.end()) return false;
    it->second.completion = c;
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(it->second.efd, &one, sizeof(one));
    return true;
  }
  {
    std::lock_guard lk(local_mu_);
    local_.push_back(c);
    local_size_.fetch_add(1, std::memory_order_release);
  }
  signalNotify();
  return true;
}

std::size_t CompletionRouter::takeLocalSlow(std::vector<Completion>& out, std::size_t max) {
  consumeNotify();
  std::lock_guard lk(local_mu_);
  std::size_t n = 0;
  while (n < max && !local_.empty()) {
    out.push_back(local_.front());
    local_.pop_front();
    ++n;
  }
  local_size_.fetch_sub(n, std::memory_order_relaxed);
  if (!local_.empty()) signalNotify();
  return n;
}

void CompletionRouter::openMailbox(RequestId id, int efd) {
  std::lock_guard lk(await_mu_);
  mailboxes_[id] = Mailbox{std::nullopt, efd};
}

void CompletionRouter::closeMailbox(RequestId id) {
  std::lock_guard lk(await_mu_);
  mailboxes_.erase(id);
}

std::optional<Completion> CompletionRouter::takeMailbox(RequestId id) {
  std::lock_guard lk(await_mu_);
  auto it = mailboxes_.find(id);
  if (it == mailboxes_.end() || !it->second.completion) return std::nullopt;
  Completion c = *it->second.completion;
  mailboxes_.erase(it);
  return c;
}

bool CompletionRouter::mailboxFilled(RequestId id) {
  std::lock_guard lk(await_mu_);
  auto it = mailboxes_.find(id);
  return it != mailboxes_.end() && it->second.completion.has_value();
}

std::optional<Completion> CompletionRouter::takeOrCloseMailbox(RequestId id) {
  std::lock_guard lk(await_mu_);
  auto it = mailboxes_.find(id);
  if (it != mailboxes_.end() && it->second.completion) {
    Completion c = *it->second.completion;
    mailboxes_.erase(it);
    return c;
  }
  if (it != mailboxes_.end()) mailboxes_.erase(it);
  return std::nullopt;
}

}  // namespace fairsched::client_detail
