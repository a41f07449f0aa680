#include "daemon/ctl/admin_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace fairsched::daemon {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

Result<AdminResponse> adminCommand(const std::string& socket_path, shm::AdminCommand command,
                                   std::uint32_t limit, std::chrono::milliseconds timeout,
                                   std::string_view tenant) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) {
    return Error{Errc::kInvalidArgument, "socket path too long: " + socket_path};
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  Fd s{socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) return systemError("socket");
  if (connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return systemError("connect " + socket_path);
  }
  constexpr std::uint32_t kSeq = 1;
  auto req = shm::makeMessage<shm::AdminRequestMessage>(kSeq);
  req.command = static_cast<std::uint32_t>(command);
  req.limit = limit;
  if (tenant.size() >= shm::kNameBytes)
    return Error{Errc::kInvalidArgument, "tenant name too long"};
  shm::setString(req.tenant, tenant);
  if (send(s.fd, &req, sizeof req, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof req)) {
    return systemError("send");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto reply = std::make_unique<shm::AdminReplyMessage>();
  AdminResponse out;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Error{Errc::kTimedOut, "no complete reply within the timeout"};
    pollfd p{s.fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return systemError("poll");
    if (ready == 0) continue;
    const ssize_t n = recv(s.fd, reply.get(), sizeof *reply, 0);
    if (n == 0) {
      return Error{Errc::kProtocol, "the daemon closed the connection before replying"};
    }
    if (n < 0) return systemError("recv");
    const auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(reply.get()),
                                                  static_cast<std::size_t>(n));
    if (const auto e = shm::decode(bytes, *reply); e != shm::DecodeError::kNone) {
      return Error{Errc::kProtocol, "malformed reply: " + std::string(shm::toString(e))};
    }
    if (reply->header.seq != kSeq) return Error{Errc::kProtocol, "reply to another request"};
    out.status = static_cast<shm::ControlStatus>(reply->status);
    out.json.append(reply->text, reply->bytes);
    if (!reply->more) return out;
  }
}

}  // namespace fairsched::daemon
