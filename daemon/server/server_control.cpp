// fairschedd's control plane: accepting connections, SO_PEERCRED against the
// [[clients]] rules, Hello (a segment and two eventfds for a client),
// OpenTenant/CloseTenant (a tenant handle of the connection), replies, and
// dropping a connection. Every
// name a peer sends is checked against fairsched/name.hpp before it is
// stored, matched or printed. The worker role will be a second kind of peer
// here: Hello says which role, and a worker gets its own segment.
#include "daemon/server/server.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "fairsched/name.hpp"
#include "shm/tenant_handle.hpp"

namespace fairsched::daemon {
namespace {

constexpr std::uint32_t kCompletionCapacity = 16384;  // 1 MiB of completion ring per client
// Token ids per stream chunk: a reply arena of 4 MiB per client, touched only
// by clients that stream.
constexpr std::uint32_t kStreamChunkTokens = 64;

}  // namespace

void Server::acceptNext() {
  if (listen_fd_ < 0) return;
  accept_op_ = loop_->accept(listen_fd_, [this](int fd) {
    if (fd >= 0) onAccept(fd);
    if (!shutting_down_) acceptNext();
  });
}

void Server::onAccept(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    spdlog::warn("connection refused: SO_PEERCRED: {}", std::strerror(errno));
    close(fd);
    ++stats_.connections_refused;
    return;
  }
  Connection& c = conns_.add(fd);
  c.cred = cred;
  c.rule = rules_.match(cred.uid, cred.gid);
  ++stats_.connections_accepted;
  receiveNext(c);
}

void Server::receiveNext(Connection& c) {
  c.iov = {c.buf, sizeof c.buf};
  c.msg = {};
  c.msg.msg_iov = &c.iov;
  c.msg.msg_iovlen = 1;
  const std::uint64_t id = c.id;
  ++c.ops;
  c.recv_op = loop_->recvmsg(c.fd, &c.msg, [this, id](int res) {
    if (conns_.opDone(id)) onMessage(id, res);
  });
}

void Server::onMessage(std::uint64_t conn_id, int bytes) {
  Connection* found = conns_.find(conn_id);
  if (!found) return;
  Connection& c = *found;
  if (bytes <= 0) {
    dropConnection(conn_id, bytes == 0 ? "closed" : "receive failed");
    return;
  }
  if (c.msg.msg_flags & MSG_TRUNC) {
    dropConnection(conn_id, "message larger than any the protocol has");
    return;
  }
  const std::span<const std::byte> data(c.buf, static_cast<std::size_t>(bytes));
  shm::MessageHeader h;
  if (const auto e = shm::peekHeader(data, h, shm::kOldestControlVersion);
      e != shm::DecodeError::kNone) {
    spdlog::warn("client {} (pid {}): {}", conn_id, c.cred.pid, shm::toString(e));
    dropConnection(conn_id, "malformed control message");
    return;
  }
  // Whatever goes wrong serving one peer's message costs that peer its
  // connection, never the daemon. (A handler may free `c`: keep the pid.)
  const pid_t pid = c.cred.pid;
  try {
    if (h.type == static_cast<std::uint16_t>(shm::MessageType::kHello)) {
      shm::HelloMessage m;  // also from an older peer, to tell it why not
      if (shm::decode(data, m, shm::kOldestControlVersion) != shm::DecodeError::kNone ||
          c.segment || c.waiting_hello) {
        dropConnection(conn_id, "malformed or repeated hello");
        return;
      }
      onHello(c, m, env_.now());
    } else if (h.type == static_cast<std::uint16_t>(shm::MessageType::kOpenTenant)) {
      shm::OpenTenantMessage m;
      if (shm::decode(data, m) != shm::DecodeError::kNone || !c.segment) {
        dropConnection(conn_id, "malformed open-tenant or one before hello");
        return;
      }
      handleOpenTenant(c, m);
    } else if (h.type == static_cast<std::uint16_t>(shm::MessageType::kCloseTenant)) {
      shm::CloseTenantMessage m;
      if (shm::decode(data, m) != shm::DecodeError::kNone || !c.segment) {
        dropConnection(conn_id, "malformed close-tenant or one before hello");
        return;
      }
      handleCloseTenant(c, m);
    } else if (h.type == static_cast<std::uint16_t>(shm::MessageType::kAdminRequest)) {
      shm::AdminRequestMessage m;
      if (shm::decode(data, m) != shm::DecodeError::kNone || c.segment) {
        dropConnection(conn_id, "malformed admin request or one after hello");
        return;
      }
      handleAdmin(c, m);
    } else {
      dropConnection(conn_id, "unknown control message");
      return;
    }
  } catch (const std::exception& e) {
    spdlog::error("client {} (pid {}): internal error serving a control message: {}", conn_id, pid,
                  escapeForDisplay(e.what()));
    dropConnection(conn_id, "internal error");
    return;
  }
  // A handler may have closed the connection (and freed it).
  if (Connection* again = conns_.find(conn_id); again && !again->closing) receiveNext(*again);
}

bool Server::sendReply(Connection& c, std::span<const std::byte> bytes, const int* fds, int nfds) {
  iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * shm::kHelloReplyFds)] = {};
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<std::size_t>(nfds));
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<std::size_t>(nfds));
    std::memcpy(CMSG_DATA(cm), fds, sizeof(int) * static_cast<std::size_t>(nfds));
  }
  // Never block the loop on a peer that does not read its socket.
  return sendmsg(c.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

void Server::onHello(Connection& c, const shm::HelloMessage& m, TimeNs now) {
  if (set_ups_.admit(c.id, c.cred.uid, now)) return handleHello(c, m);
  // Its uid has spent its budget: the Hello waits (its client's connect()
  // takes longer) and the loop serves everyone else meanwhile. The
  // connection is still read, so a peer that goes away leaves the queue.
  c.waiting_hello = m;
  ++stats_.connects_deferred;
}

bool Server::serveWaitingHellos(TimeNs now) {
  if (set_ups_.waiting() == 0) return false;
  const std::vector<std::uint64_t> ready = set_ups_.takeReady(now);
  for (const std::uint64_t id : ready) {
    Connection* c = conns_.find(id);
    if (c == nullptr || c->closing || !c->waiting_hello) continue;
    const shm::HelloMessage m = *c->waiting_hello;
    c->waiting_hello.reset();
    try {
      handleHello(*c, m);
    } catch (const std::exception& e) {  // as in onMessage: the peer's loss, not the daemon's
      spdlog::error("client {} (pid {}): internal error serving its hello: {}", id, c->cred.pid,
                    escapeForDisplay(e.what()));
      dropConnection(id, "internal error");
    }
  }
  return !ready.empty();
}

void Server::handleHello(Connection& c, const shm::HelloMessage& m) {
  auto reply = shm::makeMessage<shm::HelloReplyMessage>(m.header.seq);
  reply.header.version = m.header.version;  // an older peer can read the refusal
  auto refuse = [&](shm::ControlStatus status, const std::string& why) {
    reply.status = static_cast<std::uint32_t>(status);
    shm::setString(reply.message, why);
    spdlog::warn("client uid {} gid {} pid {} refused: {}", c.cred.uid, c.cred.gid, c.cred.pid,
                 why);
    ++stats_.connections_refused;
    sendReply(c, shm::bytesOf(reply), nullptr, 0);
    c.closing = true;
    dropConnection(c.id, "refused");
  };
  if (m.header.version != shm::kControlVersion || m.layout_version != shm::kLayoutVersion) {
    return refuse(shm::ControlStatus::kVersionMismatch,
                  "client built for shared-memory layout " + std::to_string(m.layout_version) +
                      " (control protocol " + std::to_string(m.header.version) +
                      "); this daemon speaks layout " + std::to_string(shm::kLayoutVersion) +
                      " (protocol " + std::to_string(shm::kControlVersion) +
                      "): use the libfairsched of this fairsched release");
  }
  if (shutting_down_) return refuse(shm::ControlStatus::kShuttingDown, "the daemon is stopping");
  if (draining_) return refuse(shm::ControlStatus::kShuttingDown, "the daemon is draining");
  if (!c.rule) {
    return refuse(shm::ControlStatus::kUnauthorized, "uid " + std::to_string(c.cred.uid) + " gid " +
                                                         std::to_string(c.cred.gid) +
                                                         " matches no [[clients]] rule");
  }
  // The client's name is informational but goes into the log: it follows the
  // name rule or the client is refused (empty means "no name").
  const std::string_view client_name = *shm::getString(m.client_name);
  if (!client_name.empty()) {
    if (auto err = nameError(client_name)) {
      return refuse(shm::ControlStatus::kBadRequest, "client name refused: " + *err);
    }
  }
  if (m.role == static_cast<std::uint32_t>(shm::PeerRole::kWorker)) {
    return handleWorkerHello(c, m, reply, client_name);
  }
  shm::Geometry geometry;
  // Room for a burst: a client may have this many requests outstanding.
  geometry.completion_capacity = kCompletionCapacity;
  geometry.reply_tokens_per_slot = kStreamChunkTokens;
  if (!openSegment(c, geometry)) {
    return refuse(shm::ControlStatus::kInternal, "could not create the shared segment or eventfds");
  }
  const std::uint32_t rings = c.segment->layout().geometry.ring_count;
  c.lanes.reserve(rings);
  for (std::uint32_t r = 0; r < rings; ++r) c.lanes.emplace_back(c.segment->submissionRing(r), 0);
  c.ring_pending.assign(rings, false);
  c.tenants = TenantHandles(cfg_.daemon.max_tenants_per_connection);
  c.reject_budget =
      RejectBudget(cfg_.daemon.max_rejections_per_s,
                   std::max<std::uint64_t>(64, cfg_.daemon.max_rejections_per_s / 50));

  reply.ring_count = rings;
  reply.max_tenants = cfg_.daemon.max_tenants_per_connection;
  c.endpoint_allowed.assign(cfg_.endpoints.size(), false);
  for (std::size_t e = 0; e < cfg_.endpoints.size() && e < shm::kMaxEndpointsInReply; ++e) {
    c.endpoint_allowed[e] = ClientRules::allowsEndpoint(*c.rule, cfg_.endpoints[e].name);
    describeEndpoint(reply, e);
  }
  if (!sendWelcome(c, reply, "welcome")) return;
  spdlog::info("client {} connected: uid {} pid {} rule '{}' name '{}'", c.id, c.cred.uid,
               c.cred.pid, c.rule->name, client_name);
}

bool Server::openSegment(Connection& c, const shm::Geometry& geometry) {
  auto seg = shm::Segment::create(geometry);
  auto bell_in = shm::EventFd::create();
  auto bell_out = shm::EventFd::create();
  for (const shm::Error* err : {seg.errorOrNull(), bell_in.errorOrNull(), bell_out.errorOrNull()}) {
    if (err) {
      spdlog::error("connection {}: {}", c.id, err->toString());
      return false;
    }
  }
  c.segment.emplace(std::move(seg).value());
  ++clients_;  // dropConnection counts it down for every connection with a segment
  c.doorbell.emplace(std::move(bell_in).value());
  c.completion_bell.emplace(std::move(bell_out).value());
  c.producer.emplace(c.segment->completionRing(), 0);
  conns_.attach(c, env_.now());
  return true;
}

void Server::describeEndpoint(shm::HelloReplyMessage& reply, std::size_t e) const {
  const config::EndpointConfig& ec = cfg_.endpoints[e];
  shm::EndpointInfo& info = reply.endpoints[reply.endpoint_count++];
  shm::setString(info.name, ec.name);
  info.id = static_cast<std::uint16_t>(e);
  info.max_output_tokens = ec.max_output_tokens;
  info.max_batch_tokens = ec.max_batch_tokens;
}

bool Server::sendWelcome(Connection& c, shm::HelloReplyMessage& reply, const char* text) {
  reply.status = static_cast<std::uint32_t>(shm::ControlStatus::kOk);
  reply.client_id = c.id;
  shm::setString(reply.message, text);
  int fds[shm::kHelloReplyFds];
  fds[shm::kFdSegment] = c.segment->fd();
  fds[shm::kFdDaemonDoorbell] = c.doorbell->fd();
  fds[shm::kFdCompletionBell] = c.completion_bell->fd();
  if (!sendReply(c, shm::bytesOf(reply), fds, shm::kHelloReplyFds)) {
    c.closing = true;
    dropConnection(c.id, "could not send the hello reply");
    return false;
  }
  c.segment->closeFd();  // the peer holds it now; our mappings stay
  armDoorbell(c);
  return true;
}

bool Server::replyOrDrop(Connection& c, std::span<const std::byte> bytes) {
  if (sendReply(c, bytes, nullptr, 0)) return true;
  c.closing = true;
  dropConnection(c.id, "could not send a reply");
  return false;
}

void Server::handleOpenTenant(Connection& c, const shm::OpenTenantMessage& m) {
  auto reply = shm::makeMessage<shm::OpenTenantReplyMessage>(m.header.seq);
  reply.handle = m.handle;
  const std::string_view tenant = *shm::getString(m.tenant);
  const std::string_view tier = *shm::getString(m.tier);
  auto answer = [&](shm::ControlStatus status, const std::string& text) {
    reply.status = static_cast<std::uint32_t>(status);
    shm::setString(reply.message, text);
    if (status != shm::ControlStatus::kOk) {  // the name may break the rule: escaped
      spdlog::warn("client {} (uid {}): open tenant \"{}\": {}", c.id, c.cred.uid,
                   escapeForDisplay(tenant), text);
    }
    replyOrDrop(c, shm::bytesOf(reply));
  };
  if (c.worker) return answer(shm::ControlStatus::kBadRequest, "a worker opens no tenants");
  // Names from a peer are checked before anything stores, matches or prints them.
  if (auto err = nameError(tenant)) {
    return answer(shm::ControlStatus::kBadRequest, "tenant name refused: " + *err);
  }
  if (!tier.empty()) {
    if (auto err = nameError(tier)) {
      return answer(shm::ControlStatus::kBadRequest, "tier name refused: " + *err);
    }
  }
  if (!c.rule) {  // a reload removed the rule that admitted this client
    return answer(shm::ControlStatus::kUnauthorized,
                  "uid " + std::to_string(c.cred.uid) + " matches no [[clients]] rule any more");
  }
  if (!ClientRules::allowsTenant(*c.rule, tenant)) {
    return answer(
        shm::ControlStatus::kUnauthorized,
        "rule '" + c.rule->name + "' does not allow tenant '" + std::string(tenant) + "'");
  }
  std::optional<TierId> hint;
  if (!tier.empty()) {
    if (!ClientRules::allowsTier(*c.rule, tier)) {
      return answer(shm::ControlStatus::kUnauthorized,
                    "rule '" + c.rule->name + "' may not assign tier '" + std::string(tier) + "'");
    }
    for (std::size_t t = 0; t < cfg_.tiers.size(); ++t) {
      if (cfg_.tiers[t].name == tier) hint = static_cast<TierId>(t);
    }
    if (!hint)
      return answer(shm::ControlStatus::kBadRequest, "no tier '" + std::string(tier) + "'");
  }
  if (auto why = c.tenants.checkOpen(m.handle)) {
    const bool beyond = shm::wellFormedTenantHandle(m.handle) &&
                        shm::tenantIndex(m.handle) >= c.tenants.maxTenants();
    return answer(beyond ? shm::ControlStatus::kNoCapacity : shm::ControlStatus::kBadRequest, *why);
  }
  const TenantId id = sched_.tenants().acquire(tenant, hint);
  if (id == kNoTenant) return answer(shm::ControlStatus::kInternal, "tenant table refused");
  if (metrics_) metrics_->tenantOpened(id, tenant);
  c.tenants.open(m.handle, id);
  ++stats_.tenant_handles_open;
  answer(shm::ControlStatus::kOk, "open");
}

void Server::handleCloseTenant(Connection& c, const shm::CloseTenantMessage& m) {
  auto reply = shm::makeMessage<shm::CloseTenantReplyMessage>(m.header.seq);
  const std::optional<TenantHandles::Entry> closed = c.tenants.close(m.handle);
  if (!closed) {
    reply.status = static_cast<std::uint32_t>(shm::ControlStatus::kBadRequest);
    shm::setString(reply.message, "handle " + std::to_string(m.handle) + " is not open");
    replyOrDrop(c, shm::bytesOf(reply));
    return;
  }
  --stats_.tenant_handles_open;
  std::size_t cancelled = 0;
  if (!closed->revoked) {  // a revoked one's queue was emptied, its series closed, at the revoke
    // cancelOwner() scans every queued request: only when the tenant has some.
    if (sched_.queuedOf(closed->tenant) > 0) {
      cancelled = sched_.cancelOwner(c.id, Status::kCancelled, done_, closed->tenant);
    }
    finishDone(done_);  // counted under the tenant's label before the handle lets go of it
    if (metrics_) metrics_->tenantClosed(closed->tenant);
  }
  sched_.tenants().release(closed->tenant);
  reply.status = static_cast<std::uint32_t>(shm::ControlStatus::kOk);
  reply.cancelled = static_cast<std::uint32_t>(std::min<std::size_t>(cancelled, UINT32_MAX));
  shm::setString(reply.message, "closed");
  replyOrDrop(c, shm::bytesOf(reply));
}

void Server::armDoorbell(Connection& c) {
  const std::uint64_t id = c.id;
  ++c.ops;
  c.doorbell_op =
      loop_->read(c.doorbell->fd(), &c.doorbell_buf, sizeof c.doorbell_buf, [this, id](int res) {
        Connection* live = conns_.opDone(id);
        if (live && res > 0) activate(*live);  // it published while its flag was set
        if (live && (res > 0 || res == -EAGAIN)) armDoorbell(*live);
      });
}

void Server::dropLater(Connection& c, std::string why) {
  c.closing = true;
  c.drop_reason = std::move(why);
  drop_later_.push_back(c.id);
}

void Server::dropConnection(std::uint64_t conn_id, const char* why) {
  Connection* found = conns_.find(conn_id);
  if (!found) return;
  Connection& c = *found;
  c.closing = true;
  if (c.waiting_hello) {
    set_ups_.forget(c.id, c.cred.uid);
    c.waiting_hello.reset();
  }
  const std::string reason = c.drop_reason.empty() ? std::string(why) : c.drop_reason;
  if (c.worker) {
    workerLost(c, reason, env_.now());
  } else {
    abortClientRequests(c, env_.now());
  }
  // Their completions would go to a client that is gone: complete() counts
  // them dropped.
  const std::size_t cancelled = sched_.cancelOwner(conn_id, Status::kCancelled, done_);
  finishDone(done_);
  stats_.tenant_handles_open -= c.tenants.openCount();
  c.tenants.forEachOpen([&](TenantHandles::Entry& e) {
    if (metrics_ && !e.revoked) metrics_->tenantClosed(e.tenant);
    sched_.tenants().release(e.tenant);
  });
  c.tenants = TenantHandles();
  if (c.segment) {
    --clients_;
    if (!c.worker) {  // a worker's going is logged by workerLost(), with its requests
      spdlog::info("client {} (pid {}) {}: {} queued requests cancelled", conn_id, c.cred.pid,
                   reason, cancelled);
    }
  }
  // Queued operations write into this object's buffers: end them (shutdown
  // completes the recvmsg; cancel it, a pending admin pollOut and the
  // doorbell read, before the close, since the descriptor number may be
  // reused at once) and free the object only after the last one completed.
  shutdown(c.fd, SHUT_RDWR);
  loop_->cancel(c.recv_op);
  loop_->cancel(c.out_op);
  close(c.fd);
  c.fd = -1;
  if (c.doorbell_op != 0) loop_->cancel(c.doorbell_op);
  conns_.remove(conn_id);
}

}  // namespace fairsched::daemon
