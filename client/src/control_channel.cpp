#include "control_channel.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace fairsched::client_detail {
namespace {

Error sysError(ErrorCode code, const std::string& what) {
  return Error{code, errno, what};
}

bool connectionGone(int err) {
  return err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ECONNABORTED;
}

timeval toTimeval(std::chrono::nanoseconds d) {
  if (d.count() <= 0) d = std::chrono::microseconds(1);  // 0 would mean "no timeout"
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1'000'000);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1;
  return tv;
}

// Takes every descriptor of `msg`'s control data into `fds`.
void collectFds(msghdr& msg, std::vector<shm::UniqueFd>& fds) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
}

// One non-blocking recvmsg. >0 bytes, 0 EOF, -1 with errno.
ssize_t receiveOnce(int sock, ReceivedMessage& out, int& msg_flags) {
  out.bytes.resize(kMaxControlMessage);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxControlFds)];
  iovec iov{out.bytes.data(), out.bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n >= 0) {
    collectFds(msg, out.fds);
    out.bytes.resize(static_cast<std::size_t>(n));
    msg_flags = msg.msg_flags;
  }
  return n;
}

}  // namespace

Result<shm::UniqueFd> connectControlSocket(const std::string& path,
                                           std::chrono::nanoseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Error{ErrorCode::kInvalidArgument, 0,
                 "socket path must be 1 to " + std::to_string(sizeof(addr.sun_path) - 1) +
                     " bytes: '" + path + "'"};
  }
  if (path.find('\0') != std::string::npos) {
    // The kernel would stop at it and connect to another path.
    return Error{ErrorCode::kInvalidArgument, 0, "socket path contains a NUL byte"};
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  shm::UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock) return sysError(ErrorCode::kSystem, "socket(AF_UNIX, SOCK_SEQPACKET)");
  // The send timeout also bounds a connect() that waits for a full backlog.
  const timeval tv = toTimeval(timeout);
  if (::setsockopt(sock.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return sysError(ErrorCode::kSystem, "setsockopt(SO_SNDTIMEO)");
  }
  for (;;) {
    if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EINPROGRESS) {
      return sysError(ErrorCode::kTimedOut, "connect(" + path + "): the daemon's backlog is full");
    }
    return sysError(ErrorCode::kConnectFailed, "connect(" + path + ")");
  }
  return sock;
}

Result<void> sendControl(int sock, std::span<const std::byte> bytes) {
  for (;;) {
    const ssize_t n = ::send(sock, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes.size())) return {};
    if (n >= 0) return Error{ErrorCode::kProtocol, 0, "short send of a control message"};
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return sysError(ErrorCode::kTimedOut, "sending a control message");
    if (connectionGone(errno)) return sysError(ErrorCode::kDaemonLost, "sending a control message");
    return sysError(ErrorCode::kSystem, "sending a control message");
  }
}

Result<ReceivedMessage> receiveControl(int sock, Clock::time_point deadline) {
  for (;;) {
    ReceivedMessage out;
    int flags = 0;
    const ssize_t n = receiveOnce(sock, out, flags);
    if (n > 0) {
      if ((flags & MSG_TRUNC) != 0) {
        return Error{ErrorCode::kProtocol, 0, "control message longer than any known message"};
      }
      if ((flags & MSG_CTRUNC) != 0) {
        return Error{ErrorCode::kProtocol, 0, "control message carried too many descriptors"};
      }
      return out;
    }
    if (n == 0) return Error{ErrorCode::kDaemonLost, 0, "the daemon closed the connection"};
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      if (connectionGone(errno)) return sysError(ErrorCode::kDaemonLost, "receiving a reply");
      return sysError(ErrorCode::kSystem, "receiving a reply");
    }
    const auto now = Clock::now();
    if (now >= deadline) return Error{ErrorCode::kTimedOut, 0, "no reply from the daemon in time"};
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
    pollfd pfd{sock, POLLIN, 0};
    if (::ppoll(&pfd, 1, &ts, nullptr) < 0 && errno != EINTR) {
      return sysError(ErrorCode::kSystem, "ppoll on the control socket");
    }
  }
}

bool socketAlive(int sock) {
  for (;;) {
    ReceivedMessage discard;
    int flags = 0;
    const ssize_t n = receiveOnce(sock, discard, flags);
    if (n > 0) continue;  // unsolicited: nothing in protocol version 1; dropped
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN;
  }
}

}  // namespace fairsched::client_detail
