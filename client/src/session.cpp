#include "session.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "shm/shared_word.hpp"
#include "shm/tenant_handle.hpp"
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
  producers.reserve(laneCount());
  for (std::uint32_t r = 0; r < laneCount(); ++r)
    producers.emplace_back(segment_.submissionRing(r));
}

std::uint16_t Session::lane() const {
  static std::atomic<std::uint32_t> next_thread{0};
  thread_local const std::uint32_t thread_seq = next_thread.fetch_add(1, std::memory_order_relaxed);
  return static_cast<std::uint16_t>(thread_seq % producers.size());
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
  if (worker_endpoint.empty() && (reply.max_tenants == 0 || s->laneCount() == 0)) {
    return Error{ErrorCode::kProtocol, 0, "HelloReply grants no tenants or no lanes"};
  }
  s->max_tenants = std::min(reply.max_tenants, shm::kMaxTenantsPerConnection);
  for (std::uint32_t i = 0; i < reply.endpoint_count; ++i) {
    const shm::EndpointInfo& e = reply.endpoints[i];
    s->endpoints.push_back(EndpointDescription{std::string(*shm::getString(e.name)), e.id,
                                               e.max_output_tokens, e.max_batch_tokens});
  }
  return s;
}

Result<void> Session::tenantCalls(std::span<TenantCall> calls, std::uint32_t& seq,
                                  std::chrono::nanoseconds timeout) {
  const std::uint32_t first_seq = seq;
  std::size_t sent = 0;
  std::size_t answered = 0;
  Clock::time_point deadline = Clock::now() + timeout;
  auto what = [&](const TenantCall& c) {
    return std::string(c.close ? "CloseTenant '" : "OpenTenant '") + std::string(c.name) + "'";
  };
  while (answered < calls.size()) {
    while (sent < calls.size() && sent - answered < kTenantCallWindow) {
      const TenantCall& c = calls[sent];
      Result<void> ok;
      if (c.close) {
        auto msg = shm::makeMessage<shm::CloseTenantMessage>(seq);
        msg.handle = c.handle;
        ok = sendControl(sock, shm::bytesOf(msg));
      } else {
        auto msg = shm::makeMessage<shm::OpenTenantMessage>(seq);
        shm::setString(msg.tenant, c.name);
        shm::setString(msg.tier, c.tier);
        msg.handle = c.handle;
        ok = sendControl(sock, shm::bytesOf(msg));
      }
      if (!ok) {
        Error e = std::move(ok).error();
        e.message = what(c) + ": " + e.message;
        return e;
      }
      ++seq;
      ++sent;
    }
    Result<ReceivedMessage> got = receiveControl(sock, deadline);
    if (!got) {
      Error e = std::move(got).error();
      e.message = what(calls[answered]) + ": " + e.message;
      return e;
    }
    shm::MessageHeader header;
    const shm::DecodeError peeked = shm::peekHeader(got->bytes, header);
    if (peeked == shm::DecodeError::kBadVersion) {
      return Error{ErrorCode::kVersionMismatch, 0,
                   "the daemon speaks control protocol version " + std::to_string(header.version) +
                       ", this library " + std::to_string(shm::kControlVersion)};
    }
    if (peeked != shm::DecodeError::kNone) {
      return Error{ErrorCode::kProtocol, 0,
                   "bad control message: " + std::string(shm::toString(peeked))};
    }
    const std::uint32_t expected = first_seq + static_cast<std::uint32_t>(answered);
    if (header.seq != expected) {
      // A reply to a request that timed out earlier, or one out of order.
      if (header.seq - first_seq < sent) {
        return Error{
            ErrorCode::kProtocol, 0,
            "control reply " + std::to_string(header.seq) + " before " + std::to_string(expected)};
      }
      continue;
    }
    TenantCall& c = calls[answered];
    std::uint32_t status = 0;
    std::string_view reason;
    shm::DecodeError decoded = shm::DecodeError::kNone;
    shm::OpenTenantReplyMessage open_reply;
    shm::CloseTenantReplyMessage close_reply;
    if (c.close) {
      decoded = shm::decode(got->bytes, close_reply);
      status = close_reply.status;
      reason = shm::getString(close_reply.message).value_or("");
    } else {
      decoded = shm::decode(got->bytes, open_reply);
      status = open_reply.status;
      reason = shm::getString(open_reply.message).value_or("");
      if (decoded == shm::DecodeError::kNone && status == 0 && open_reply.handle != c.handle) {
        return Error{ErrorCode::kProtocol, 0, what(c) + ": the reply names another handle"};
      }
    }
    if (decoded != shm::DecodeError::kNone) {
      return Error{ErrorCode::kProtocol, 0,
                   what(c) + ": bad control reply: " + std::string(shm::toString(decoded))};
    }
    if (status != static_cast<std::uint32_t>(shm::ControlStatus::kOk)) {
      c.error = refusal(status,
                        (std::string(c.close ? "the daemon refused to close tenant '"
                                             : "the daemon refused tenant '") +
                         std::string(c.name) + "'")
                            .c_str(),
                        reason);
    }
    ++answered;
    deadline = Clock::now() + timeout;
  }
  return {};
}

const EndpointDescription* Session::findEndpoint(std::string_view name) const {
  for (const EndpointDescription& e : endpoints) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

void Session::enterLocked() {
  if (sleepers_++ == 0) {
    own_sleeping_.announceSleep();  // a new epoch, seq_cst fence
  } else {
    // The flag is set already (stored before our lock); this thread still needs
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
