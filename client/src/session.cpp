#include "session.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "shm/shared_word.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched::client_detail {
namespace {

// The descriptors of a successful HelloReply must behave as non-blocking
// eventfds for drain(); the daemon creates them so, and this makes sure.
bool setNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return false;
  return (flags & O_NONBLOCK) != 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

Error refusal(std::uint32_t status, const char* what, std::string_view reason) {
  std::string msg = std::string(what) + ": ";
  if (status <= static_cast<std::uint32_t>(shm::ControlStatus::kInternal)) {
    msg += shm::toString(static_cast<shm::ControlStatus>(status));
  } else {
    msg += "status " + std::to_string(status);
  }
  if (!reason.empty()) {
    msg += ": ";
    msg += reason;
  }
  return Error{errorForControlStatus(status), 0, std::move(msg)};
}

}  // namespace

ErrorCode errorForControlStatus(std::uint32_t status) {
  switch (static_cast<shm::ControlStatus>(status)) {
    case shm::ControlStatus::kOk:
      return ErrorCode::kProtocol;  // not an error; callers do not ask
    case shm::ControlStatus::kUnauthorized:
      return ErrorCode::kUnauthorized;
    case shm::ControlStatus::kVersionMismatch:
      return ErrorCode::kVersionMismatch;
    case shm::ControlStatus::kNoCapacity:
      return ErrorCode::kNoCapacity;
    case shm::ControlStatus::kShuttingDown:
      return ErrorCode::kShuttingDown;
    case shm::ControlStatus::kBadRequest:
    case shm::ControlStatus::kInternal:
    case shm::ControlStatus::kFailed:
      return ErrorCode::kRefused;
  }
  return ErrorCode::kProtocol;
}

Session::Session(std::uint64_t gen, shm::UniqueFd sock_fd, shm::Segment segment,
                 shm::EventFd doorbell_fd, shm::EventFd bell_fd)
    : generation(gen),
      sock_(std::move(sock_fd)),
      segment_(std::move(segment)),
      own_sleeping_(segment_.ownSleepFlag()),
      sock(sock_.get()),
      doorbell(std::move(doorbell_fd)),
      bell(std::move(bell_fd)),
      daemon_sleeping(segment_.peerSleepFlag()),
      consumer(segment_.completionRing()) {
  producers.reserve(ringCount());
  for (std::uint32_t r = 0; r < ringCount(); ++r)
    producers.emplace_back(segment_.submissionRing(r));
  for (auto& t : tenant_ring) t.store(-1, std::memory_order_relaxed);
}

Result<std::shared_ptr<Session>> Session::open(const ClientOptions& options,
                                               std::uint64_t generation, std::uint32_t seq,
                                               std::string_view worker_endpoint) {
  const auto deadline = Clock::now() + options.connect_timeout;
  Result<shm::UniqueFd> sock = connectControlSocket(options.socket_path, options.connect_timeout);
  if (!sock) return std::move(sock).error();

  auto hello = shm::makeMessage<shm::HelloMessage>(seq);
  hello.layout_version = shm::kLayoutVersion;
  hello.pid = static_cast<std::uint32_t>(::getpid());
  shm::setString(hello.client_name, options.client_name);
  if (!worker_endpoint.empty()) {
    hello.role = static_cast<std::uint32_t>(shm::PeerRole::kWorker);
    shm::setString(hello.endpoint, worker_endpoint);
  }
  std::vector<shm::UniqueFd> fds;
  Result<shm::HelloReplyMessage> got =
      exchange<shm::HelloReplyMessage>(sock->get(), hello, deadline, fds);
  if (!got) {
    Error e = std::move(got).error();
    e.message = "Hello to " + options.socket_path + ": " + e.message;
    return e;
  }
  const shm::HelloReplyMessage& reply = got.value();
  const std::string_view reason = shm::getString(reply.message).value_or("");
  if (reply.status != static_cast<std::uint32_t>(shm::ControlStatus::kOk)) {
    return refusal(reply.status, "the daemon refused Hello", reason);
  }
  if (fds.size() != static_cast<std::size_t>(shm::kHelloReplyFds)) {
    return Error{ErrorCode::kProtocol, 0,
                 "HelloReply carried " + std::to_string(fds.size()) + " descriptors, expected " +
                     std::to_string(shm::kHelloReplyFds)};
  }
  shm::Result<shm::Segment> attached = shm::Segment::attach(fds[shm::kFdSegment].get());
  if (!attached.ok()) {
    const shm::Error* err = &attached.error();
    const ErrorCode code = err->code == shm::ErrorCode::kBadVersion ? ErrorCode::kVersionMismatch
                                                                    : ErrorCode::kProtocol;
    return Error{code, err->sys_errno, "the daemon's segment: " + err->toString()};
  }
  for (int which : {shm::kFdDaemonDoorbell, shm::kFdCompletionBell}) {
    if (!setNonBlocking(fds[static_cast<std::size_t>(which)].get())) {
      return Error{ErrorCode::kProtocol, errno, "HelloReply descriptor is not usable"};
    }
  }
  std::shared_ptr<Session> s(
      new Session(generation, std::move(sock).value(), std::move(attached).value(),
                  shm::EventFd::adopt(std::move(fds[shm::kFdDaemonDoorbell])),
                  shm::EventFd::adopt(std::move(fds[shm::kFdCompletionBell]))));
  s->client_id = reply.client_id;
  s->tenant_capacity = std::min(reply.ring_count, s->ringCount());
  for (std::uint32_t i = 0; i < reply.endpoint_count; ++i) {
    const shm::EndpointInfo& e = reply.endpoints[i];
    s->endpoints.push_back(EndpointDescription{std::string(*shm::getString(e.name)), e.id,
                                               e.max_output_tokens, e.max_batch_tokens});
  }
  return s;
}

Result<std::uint32_t> Session::openTenant(std::string_view name, std::string_view tier,
                                          std::uint32_t seq, std::chrono::nanoseconds timeout) {
  auto msg = shm::makeMessage<shm::OpenTenantMessage>(seq);
  shm::setString(msg.tenant, name);
  shm::setString(msg.tier, tier);
  std::vector<shm::UniqueFd> fds;  // none expected; any are closed
  Result<shm::OpenTenantReplyMessage> got =
      exchange<shm::OpenTenantReplyMessage>(sock, msg, Clock::now() + timeout, fds);
  if (!got) {
    Error e = std::move(got).error();
    e.message = "OpenTenant '" + std::string(name) + "': " + e.message;
    return e;
  }
  const shm::OpenTenantReplyMessage& reply = got.value();
  if (reply.status != static_cast<std::uint32_t>(shm::ControlStatus::kOk)) {
    return refusal(reply.status, ("the daemon refused tenant '" + std::string(name) + "'").c_str(),
                   shm::getString(reply.message).value_or(""));
  }
  if (reply.ring >= ringCount()) {
    return Error{ErrorCode::kProtocol, 0,
                 "OpenTenant reply names ring " + std::to_string(reply.ring) + " of " +
                     std::to_string(ringCount())};
  }
  return reply.ring;
}

const EndpointDescription* Session::findEndpoint(std::string_view name) const {
  for (const EndpointDescription& e : endpoints) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

void Session::enterLocked() {
  if (sleepers_++ == 0) {
    own_sleeping_.announceSleep();  // store 1, seq_cst fence
  } else {
    // The flag is already 1 (stored before our lock); this thread still needs
    // its own fence between that store and its re-check.
    shm::seqCstFence();
  }
}

void Session::leaveLocked() {
  if (--sleepers_ == 0) own_sleeping_.clear();
}

void Session::enterSleep() {
  std::lock_guard lk(sleep_mu_);
  enterLocked();
}

void Session::leaveSleep() {
  std::lock_guard lk(sleep_mu_);
  leaveLocked();
}

void Session::arm() {
  std::lock_guard lk(sleep_mu_);
  if (armed_) return;
  armed_ = true;
  enterLocked();
}

}  // namespace fairsched::client_detail
