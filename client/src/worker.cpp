// fairsched::Worker (include/fairsched/worker.hpp): the worker role over a
// Session attached with Hello{role = worker}. Its segment's ring 0 is the
// event ring this process writes (multi-producer: any thread may emit); its
// completion ring is the assignment ring the daemon writes
// (shm/worker_protocol.hpp has the records).
#include "fairsched/worker.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "fairsched/name.hpp"
#include "fork_guard.hpp"
#include "session.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched {
namespace worker_detail {

using client_detail::Birth;
using client_detail::Clock;
using client_detail::Session;

class WorkerCore {
 public:
  static Result<std::unique_ptr<WorkerCore>> connect(WorkerOptions options) {
    if (options.endpoint.empty()) {
      return Error{ErrorCode::kInvalidArgument, 0, "WorkerOptions::endpoint is empty"};
    }
    if (auto err = nameError(options.endpoint, kMaxEndpointNameBytes)) {
      return Error{ErrorCode::kInvalidArgument, 0, "endpoint name: " + *err};
    }
    if (!options.worker_name.empty()) {
      if (auto err = nameError(options.worker_name)) {
        return Error{ErrorCode::kInvalidArgument, 0, "worker name: " + *err};
      }
    }
    ClientOptions co;
    co.socket_path = options.socket_path;
    co.client_name = options.worker_name;
    co.connect_timeout = options.connect_timeout;
    Result<std::shared_ptr<Session>> s = Session::open(co, 1, 1, options.endpoint);
    if (!s) return std::move(s).error();
    std::shared_ptr<Session> session = std::move(s).value();
    if (session->laneCount() != 1 || session->endpoints.size() != 1) {
      return Error{ErrorCode::kProtocol, 0, "the daemon's reply is not a worker's"};
    }
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return Error{ErrorCode::kSystem, errno, "epoll_create1"};
    for (int fd : {session->bell.fd(), session->sock}) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = fd;
      if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        const int err = errno;
        ::close(ep);
        return Error{ErrorCode::kSystem, err, "epoll_ctl"};
      }
    }
    return std::unique_ptr<WorkerCore>(new WorkerCore(std::move(options), std::move(session), ep));
  }

  ~WorkerCore() {
    // In a child of fork() the connection is the parent's: only the child's
    // copies go.
    if (!birth_.inherited()) ::shutdown(s_->sock, SHUT_RDWR);
    ::close(epoll_fd_);
  }

  void shutdown() {
    if (birth_.inherited()) return;
    closed_.store(true, std::memory_order_release);
    // The daemon sees EOF; wait() and a push waiting for room see the
    // socket hung up and then closed_.
    ::shutdown(s_->sock, SHUT_RDWR);
  }

  Result<void> setCapacity(std::uint32_t free_sequences, std::uint64_t free_kv_tokens) {
    if (std::optional<Error> e = unusable()) return *e;
    shm::WorkerEvent ev;
    ev.kind = shm::WorkerEventKind::kCapacity;
    ev.free_sequences = free_sequences;
    ev.free_kv_tokens = free_kv_tokens;
    // What was taken off the assignment ring so far: the daemon subtracts
    // whatever it assigned after that.
    ev.assignments_seen = taken_.load(std::memory_order_acquire);
    return push(shm::encodeWorkerEvent(ev), {}, {});
  }

  std::size_t poll(std::vector<WorkItem>& out, std::size_t max) {
    if (birth_.inherited()) return 0;  // the parent's assignments
    std::lock_guard lk(s_->consumer_mu);
    std::size_t n = 0;
    shm::CompletionSlot slot;
    while (n < max && s_->consumer.tryPop(slot, payload_, shm::assignmentPayloadWords)) {
      const std::optional<shm::AssignmentRecord> a =
          shm::decodeAssignment(slot, static_cast<std::uint32_t>(payload_.size()));
      if (!a) {  // a record this build cannot read: nothing safe to do with it
        broken_.store(true, std::memory_order_release);
        break;
      }
      WorkItem item;
      item.id = a->assignment;
      if (a->kind == shm::AssignmentKind::kAbort) {
        item.kind = WorkItem::Kind::kAbort;
        ++stats_.aborted;
      } else if (a->kind == shm::AssignmentKind::kPreempt) {
        item.kind = WorkItem::Kind::kPreempt;
      } else {
        item.kind = WorkItem::Kind::kAssign;
        Assignment& as = item.assignment;
        as.id = a->assignment;
        as.tenant = a->tenant;
        as.priority = a->priority;
        if (a->deadline_ns > 0) {
          as.deadline = Clock::time_point(std::chrono::nanoseconds(a->deadline_ns));
        }
        as.prompt_tokens = a->prompt_tokens;
        as.max_output_tokens = a->max_output_tokens;
        as.counts_only = a->counts_only;
        const std::size_t prompt_words = a->counts_only ? 0 : a->prompt_tokens;
        as.prompt.assign(payload_.begin(),
                         payload_.begin() + static_cast<std::ptrdiff_t>(prompt_words));
        as.resumed.assign(
            payload_.begin() + static_cast<std::ptrdiff_t>(prompt_words),
            payload_.begin() + static_cast<std::ptrdiff_t>(prompt_words + a->resume_tokens));
        const std::size_t params_at = prompt_words + a->resume_tokens;
        as.params.resize(a->params_bytes);
        if (a->params_bytes > 0) {
          std::memcpy(as.params.data(), payload_.data() + params_at, a->params_bytes);
        }
        ++stats_.assigned;
        taken_.fetch_add(1, std::memory_order_acq_rel);
      }
      out.push_back(std::move(item));
      ++n;
    }
    return n;
  }

  bool ready() {
    std::lock_guard lk(s_->consumer_mu);
    return s_->consumer.hasNext();
  }

  Result<void> wait(std::chrono::nanoseconds timeout) {
    if (std::optional<Error> e = unusable()) return *e;
    const auto deadline = timeout.count() < 0 || timeout > std::chrono::hours(24 * 365)
                              ? Clock::time_point::max()
                              : Clock::now() + timeout;
    const auto spin_end = Clock::now() + std::chrono::microseconds(20);
    for (;;) {
      if (closed_.load(std::memory_order_acquire)) return closedError();
      if (lost()) return daemonLost();
      if (ready()) return {};
      const auto now = Clock::now();
      if (now >= deadline) return Error{ErrorCode::kTimedOut, 0, {}};
      if (now < spin_end) continue;
      s_->enterSleep();
      if (ready()) {
        s_->leaveSleep();
        return {};
      }
      const auto left = deadline == Clock::time_point::max()
                            ? -1
                            : static_cast<int>(std::min<std::int64_t>(
                                  std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - now + std::chrono::microseconds(999))
                                      .count(),
                                  1000));
      pollfd fds[2] = {{s_->bell.fd(), POLLIN, 0}, {s_->sock, POLLIN | POLLRDHUP, 0}};
      const int r = ::poll(fds, 2, left < 0 ? 1000 : left);
      s_->leaveSleep();
      if (r < 0 && errno != EINTR) return Error{ErrorCode::kSystem, errno, "poll"};
      if (r > 0 && fds[0].revents != 0) s_->bell.drain();
    }
  }

  Result<bool> prepareToBlock() {
    if (std::optional<Error> e = unusable()) return *e;
    if (lost()) return daemonLost();
    s_->arm();
    s_->bell.drain();
    return !ready();
  }

  Result<void> emit(std::uint64_t id, std::span<const std::uint32_t> tokens) {
    if (std::optional<Error> e = unusable()) return *e;
    if (tokens.empty()) return Error{ErrorCode::kInvalidArgument, 0, "no tokens to emit"};
    const std::int64_t now = Clock::now().time_since_epoch().count();
    for (std::size_t i = 0; i < tokens.size(); i += shm::kWorkerTokensPerEvent) {
      const std::size_t n = std::min<std::size_t>(shm::kWorkerTokensPerEvent, tokens.size() - i);
      shm::WorkerEvent ev;
      ev.kind = shm::WorkerEventKind::kTokens;
      ev.assignment = id;
      ev.emit_ns = now;
      if (Result<void> r = push(shm::encodeWorkerEvent(ev), tokens.subspan(i, n), {}); !r) return r;
      stats_.tokens_emitted += n;
    }
    return {};
  }

  Result<void> emitStep(std::span<const StepToken> tokens) {
    if (std::optional<Error> e = unusable()) return *e;
    if (tokens.empty()) return Error{ErrorCode::kInvalidArgument, 0, "no tokens to emit"};
    const std::int64_t now = Clock::now().time_since_epoch().count();
    shm::WorkerEvent ev;
    ev.kind = shm::WorkerEventKind::kStep;
    ev.emit_ns = now;
    const shm::SubmissionSlot slot = shm::encodeWorkerEvent(ev);
    std::array<std::uint32_t, shm::kWorkerStepTokensPerEvent * shm::kStepWordsPerToken> words{};
    for (std::size_t i = 0; i < tokens.size(); i += shm::kWorkerStepTokensPerEvent) {
      const std::size_t n =
          std::min<std::size_t>(shm::kWorkerStepTokensPerEvent, tokens.size() - i);
      for (std::size_t k = 0; k < n; ++k) {
        const StepToken& t = tokens[i + k];
        words[k * 3] = static_cast<std::uint32_t>(t.id);
        words[k * 3 + 1] = static_cast<std::uint32_t>(t.id >> 32);
        words[k * 3 + 2] = t.token;
      }
      const auto used = std::span<const std::uint32_t>(words.data(), n * shm::kStepWordsPerToken);
      if (Result<void> r = push(slot, used, {}); !r) return r;
      stats_.tokens_emitted += n;
    }
    return {};
  }

  Result<void> finish(std::uint64_t id, Status status, std::uint32_t output_tokens,
                      std::string_view message, std::uint32_t input_tokens) {
    if (std::optional<Error> e = unusable()) return *e;
    if (message.size() > shm::kMaxParamsBytes) message = message.substr(0, shm::kMaxParamsBytes);
    shm::WorkerEvent ev;
    ev.kind = shm::WorkerEventKind::kFinish;
    ev.assignment = id;
    ev.status = status;
    ev.output_tokens = output_tokens;
    ev.input_tokens = input_tokens;
    Result<void> r = push(shm::encodeWorkerEvent(ev), {},
                          std::as_bytes(std::span<const char>(message.data(), message.size())));
    if (r) ++stats_.finished;
    return r;
  }

  Result<void> cacheEvent(shm::CacheOp op, std::span<const std::uint64_t> hashes) {
    if (std::optional<Error> e = unusable()) return *e;
    shm::WorkerEvent ev;
    ev.kind = shm::WorkerEventKind::kCache;
    ev.cache_op = op;
    const shm::SubmissionSlot slot = shm::encodeWorkerEvent(ev);
    if (op == shm::CacheOp::kCleared) return push(slot, {}, {});
    if (hashes.empty()) return Error{ErrorCode::kInvalidArgument, 0, "no block hashes"};
    std::array<std::uint32_t, shm::kWorkerCacheBlocksPerEvent * shm::kCacheWordsPerBlock> words{};
    for (std::size_t i = 0; i < hashes.size(); i += shm::kWorkerCacheBlocksPerEvent) {
      const std::size_t n =
          std::min<std::size_t>(shm::kWorkerCacheBlocksPerEvent, hashes.size() - i);
      for (std::size_t k = 0; k < n; ++k) {
        words[k * 2] = static_cast<std::uint32_t>(hashes[i + k]);
        words[k * 2 + 1] = static_cast<std::uint32_t>(hashes[i + k] >> 32);
      }
      const auto used = std::span<const std::uint32_t>(words.data(), n * shm::kCacheWordsPerBlock);
      if (Result<void> r = push(slot, used, {}); !r) return r;
    }
    return {};
  }

  Result<void> preempted(std::uint64_t id, std::uint32_t output_tokens) {
    if (std::optional<Error> e = unusable()) return *e;
    shm::WorkerEvent ev;
    ev.kind = shm::WorkerEventKind::kPreempted;
    ev.assignment = id;
    ev.output_tokens = output_tokens;
    return push(shm::encodeWorkerEvent(ev), {}, {});
  }

  bool connected() {
    return !birth_.inherited() && !closed_.load(std::memory_order_acquire) && !lost();
  }
  EndpointDescription endpoint() const { return s_->endpoints.front(); }
  std::uint64_t workerId() const { return s_->client_id; }
  int eventFd() const { return epoll_fd_; }
  WorkerStats stats() const { return stats_.snapshot(); }

 private:
  struct Counters {
    std::atomic<std::uint64_t> assigned{0}, aborted{0}, tokens_emitted{0}, finished{0},
        ring_full_waits{0};
    WorkerStats snapshot() const {
      return {assigned.load(), aborted.load(), tokens_emitted.load(), finished.load(),
              ring_full_waits.load()};
    }
  };

  WorkerCore(WorkerOptions options, std::shared_ptr<Session> s, int epoll_fd)
      : options_(std::move(options)), s_(std::move(s)), epoll_fd_(epoll_fd) {}

  static Error daemonLost() {
    return Error{ErrorCode::kDaemonLost, 0, "the connection to the daemon was lost"};
  }
  static Error closedError() { return Error{ErrorCode::kNotConnected, 0, "the worker is closed"}; }
  // Inherited across fork(), or shut down: the call cannot go on.
  std::optional<Error> unusable() const {
    if (birth_.inherited()) return birth_.inheritedError("worker");
    if (closed_.load(std::memory_order_acquire)) return closedError();
    return std::nullopt;
  }

  // The socket carries nothing after the Hello: readable or hung up means gone.
  bool lost() {
    if (broken_.load(std::memory_order_acquire)) return true;
    char b;
    const ssize_t r = ::recv(s_->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      broken_.store(true, std::memory_order_release);
      return true;
    }
    return false;
  }

  Result<void> push(const shm::SubmissionSlot& slot, std::span<const std::uint32_t> tokens,
                    std::span<const std::byte> bytes) {
    shm::SubmissionProducer& ring = s_->producers[0];
    const auto deadline = Clock::now() + options_.event_timeout;
    bool waited = false;
    for (;;) {
      const shm::PushResult r = ring.tryPushPrompt(slot, tokens, bytes);
      if (r == shm::PushResult::kOk) break;
      if (r != shm::PushResult::kFull) {
        return Error{ErrorCode::kInvalidArgument, 0, "event refused by the ring"};
      }
      if (!waited) {
        waited = true;
        ++stats_.ring_full_waits;
      }
      if (closed_.load(std::memory_order_acquire)) return closedError();
      if (lost()) return daemonLost();
      if (Clock::now() >= deadline) return Error{ErrorCode::kRingFull, 0, "event ring full"};
      s_->ringIfAsleep();
      std::this_thread::yield();
    }
    s_->ringIfAsleep();
    if (broken_.load(std::memory_order_acquire)) return daemonLost();
    return {};
  }

  const WorkerOptions options_;
  const Birth birth_ = Birth::now();
  std::atomic<bool> closed_{false};  // shutdown() was called
  std::shared_ptr<Session> s_;
  const int epoll_fd_;
  std::vector<std::uint32_t> payload_;  // guarded by s_->consumer_mu
  std::atomic<std::uint64_t> taken_{0};
  std::atomic<bool> broken_{false};
  Counters stats_;
};

}  // namespace worker_detail

Result<Worker> Worker::connect(WorkerOptions options) {
  auto core = worker_detail::WorkerCore::connect(std::move(options));
  if (!core) return std::move(core).error();
  return Worker(std::move(core).value());
}

Worker::Worker(std::unique_ptr<worker_detail::WorkerCore> impl) : impl_(std::move(impl)) {}
Worker::Worker(Worker&&) noexcept = default;
Worker& Worker::operator=(Worker&&) noexcept = default;
Worker::~Worker() = default;

Result<void> Worker::setCapacity(std::uint32_t free_sequences, std::uint64_t free_kv_tokens) {
  return impl_->setCapacity(free_sequences, free_kv_tokens);
}
std::size_t Worker::poll(std::vector<WorkItem>& out, std::size_t max) {
  return impl_->poll(out, max);
}
Result<void> Worker::wait(std::chrono::nanoseconds timeout) {
  return impl_->wait(timeout);
}
int Worker::eventFd() const {
  return impl_->eventFd();
}
Result<bool> Worker::prepareToBlock() {
  return impl_->prepareToBlock();
}
Result<void> Worker::emit(std::uint64_t id, std::span<const std::uint32_t> tokens) {
  return impl_->emit(id, tokens);
}

Result<void> Worker::emitStep(std::span<const StepToken> tokens) {
  return impl_->emitStep(tokens);
}
Result<void> Worker::preempted(std::uint64_t id, std::uint32_t output_tokens) {
  return impl_->preempted(id, output_tokens);
}

Result<void> Worker::blocksStored(std::span<const std::uint64_t> hashes) {
  return impl_->cacheEvent(shm::CacheOp::kStored, hashes);
}
Result<void> Worker::blocksRemoved(std::span<const std::uint64_t> hashes) {
  return impl_->cacheEvent(shm::CacheOp::kRemoved, hashes);
}
Result<void> Worker::cacheCleared() {
  return impl_->cacheEvent(shm::CacheOp::kCleared, {});
}

Result<void> Worker::finish(std::uint64_t id, Status status, std::uint32_t output_tokens,
                            std::string_view message, std::uint32_t input_tokens) {
  return impl_->finish(id, status, output_tokens, message, input_tokens);
}
void Worker::shutdown() {
  impl_->shutdown();
}
bool Worker::connected() const {
  return impl_->connected();
}
EndpointDescription Worker::endpoint() const {
  return impl_->endpoint();
}
std::uint64_t Worker::workerId() const {
  return impl_->workerId();
}
WorkerStats Worker::stats() const {
  return impl_->stats();
}

}  // namespace fairsched
