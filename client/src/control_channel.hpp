// The client's end of the control connection: a SOCK_SEQPACKET socket to
// the daemon, one message per datagram, descriptors by SCM_RIGHTS.
//
// Plain functions over a descriptor. None of them serialises anything: the
// caller (Client) holds its control mutex around every read of the socket so
// that a reply goes to the request that asked for it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fairsched/error.hpp"
#include "shm/control_protocol.hpp"
#include "shm/unique_fd.hpp"

namespace fairsched::client_detail {

using Clock = std::chrono::steady_clock;

// Largest message of protocol version 1, plus room to notice a longer one.
inline constexpr std::size_t kMaxControlMessage = 2048;
// Descriptors accepted with one message; more is a protocol error.
inline constexpr int kMaxControlFds = 8;

// socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC) connected to `path`. The
// timeout also becomes the socket's send timeout. Errors: kInvalidArgument
// (path empty or longer than sun_path), kConnectFailed, kTimedOut, kSystem.
Result<shm::UniqueFd> connectControlSocket(const std::string& path,
                                           std::chrono::nanoseconds timeout);

// One datagram, MSG_NOSIGNAL. Errors: kDaemonLost (EPIPE, ECONNRESET),
// kTimedOut (send timeout), kSystem.
Result<void> sendControl(int sock, std::span<const std::byte> bytes);

struct ReceivedMessage {
  std::vector<std::byte> bytes;
  std::vector<shm::UniqueFd> fds;  // owned; closed unless the caller keeps them
};

// Waits until `deadline` for one datagram. Errors: kTimedOut, kDaemonLost
// (EOF or a connection error), kProtocol (truncated data or descriptors),
// kSystem.
Result<ReceivedMessage> receiveControl(int sock, Clock::time_point deadline);

// Non-blocking check of a connection nobody is waiting on a reply from:
// discards whatever unsolicited datagrams are queued (protocol version 1 has
// none) and returns false on EOF or a connection error.
bool socketAlive(int sock);

// Sends `request`, then receives until the reply carrying the request's seq
// (older replies, e.g. to a request that timed out, are skipped) and decodes
// it as Reply. Descriptors of the reply go to `fds`. Errors: those of
// sendControl/receiveControl; kVersionMismatch when the reply's header has
// another protocol version; kProtocol when it does not decode.
template <class Reply, class Request>
Result<Reply> exchange(int sock, const Request& request, Clock::time_point deadline,
                       std::vector<shm::UniqueFd>& fds) {
  if (Result<void> sent = sendControl(sock, shm::bytesOf(request)); !sent) {
    return std::move(sent).error();
  }
  for (;;) {
    Result<ReceivedMessage> got = receiveControl(sock, deadline);
    if (!got) return std::move(got).error();
    ReceivedMessage& msg = got.value();
    shm::MessageHeader header;
    const shm::DecodeError peeked = shm::peekHeader(msg.bytes, header);
    if (peeked == shm::DecodeError::kBadVersion) {
      return Error{ErrorCode::kVersionMismatch, 0,
                   "the daemon speaks control protocol version " + std::to_string(header.version) +
                       ", this library " + std::to_string(shm::kControlVersion)};
    }
    if (peeked != shm::DecodeError::kNone) {
      return Error{ErrorCode::kProtocol, 0,
                   "bad control message: " + std::string(shm::toString(peeked))};
    }
    if (header.seq != request.header.seq) continue;  // a stale reply; its fds close here
    Reply reply;
    const shm::DecodeError decoded = shm::decode(msg.bytes, reply);
    if (decoded != shm::DecodeError::kNone) {
      return Error{ErrorCode::kProtocol, 0,
                   "bad control reply: " + std::string(shm::toString(decoded))};
    }
    fds = std::move(msg.fds);
    return reply;
  }
}

}  // namespace fairsched::client_detail
