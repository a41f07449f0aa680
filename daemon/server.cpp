#include "daemon/server.hpp"

#include <grp.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/config/scheduler_setup.hpp"
#include "daemon/cpu_executor.hpp"
#include "daemon/log.hpp"
#include "fairsched/name.hpp"
#if FAIRSCHED_HAVE_CUDA
#include "daemon/cuda_executor.hpp"
#endif

namespace fairsched::daemon {
namespace {

constexpr std::size_t kRingBudget = 64;  // slots drained from one ring per pass
constexpr std::size_t kIdleCollectBudget = 64;
constexpr std::uint32_t kCompletionCapacity = 16384;  // 1 MiB of completion ring per client

std::string errnoText(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

shm::CompletionSlot completionFor(std::uint64_t request_id, std::uint64_t tag, Status status) {
  shm::CompletionSlot s;
  s.request_id = request_id;
  s.tag = tag;
  s.status = shm::encodeStatus(status);
  return s;
}

}  // namespace

std::variant<std::unique_ptr<Server>, std::string> Server::create(const config::Config& cfg) {
  // SIGTERM and SIGINT arrive through a signalfd read by the loop. Blocked
  // first, so the executor threads started below inherit the mask and the
  // signal can only be taken by the signalfd.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  if (pthread_sigmask(SIG_BLOCK, &mask, nullptr) != 0) return std::string("pthread_sigmask failed");
  std::unique_ptr<Server> s(new Server(cfg, config::buildSchedulerSpec(cfg)));
  if (cfg.fleet) {  // its thread inherits the signal mask set above
    s->fleet_ = fleet::makeFleetLimiter(*cfg.fleet);
    s->sched_.setFleetGate(s->fleet_.get());
    s->fleet_->start();
  }
  s->signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (s->signal_fd_ < 0) return errnoText("signalfd");
  auto loop = EventLoop::create(1024);
  if (auto* err = std::get_if<std::string>(&loop)) return "event loop: " + *err;
  s->loop_ = std::move(std::get<std::unique_ptr<EventLoop>>(loop));

  for (const config::EndpointConfig& ec : cfg.endpoints) {
    if (ec.executor == config::ExecutorKind::kCuda) {
#if FAIRSCHED_HAVE_CUDA
      auto ex = CudaExecutor::create(
          {ec.cuda.device, ec.cuda.streams, ec.cuda.staging_bytes, ec.max_batch_requests, {}});
      if (auto* ok = std::get_if<std::unique_ptr<CudaExecutor>>(&ex)) {
        if ((*ok)->maxBatchTokens() < ec.max_batch_tokens) {
          return "endpoints." + ec.name +
                 ": cuda.staging_bytes = " + std::to_string(ec.cuda.staging_bytes) + " holds " +
                 std::to_string((*ok)->maxBatchTokens()) +
                 " tokens per batch, fewer than max_batch_tokens = " +
                 std::to_string(ec.max_batch_tokens);
        }
        spdlog::info("endpoints.{}: cuda executor on device {} ({} streams)", ec.name,
                     ec.cuda.device, ec.cuda.streams);
        s->executors_.push_back(std::move(*ok));
        continue;
      }
      const std::string why = std::get<std::string>(ex);
#else
      const std::string why = "executor \"cuda\" is not available in this build";
#endif
      if (ec.cuda.fallback != config::ExecutorKind::kCpu) {
        return "endpoints." + ec.name + ": " + why + " and no fallback = \"cpu\" is set";
      }
      spdlog::warn("endpoints.{}: {}; falling back to the cpu executor", ec.name, why);
    }
    auto ex = CpuExecutor::create({ec.cpu.per_batch_us, ec.cpu.per_token_us, ec.cpu.threads});
    if (auto* err = std::get_if<std::string>(&ex)) return "endpoints." + ec.name + ": " + *err;
    s->executors_.push_back(std::move(std::get<std::unique_ptr<CpuExecutor>>(ex)));
  }
  s->executor_buf_.resize(s->executors_.size());
  if (!cfg.metrics.listen.empty()) {
    auto m = Metrics::create(cfg, s->sched_);
    if (auto* err = std::get_if<std::string>(&m)) return *err;
    s->metrics_ = std::move(std::get<std::unique_ptr<Metrics>>(m));
    if (s->fleet_) s->metrics_->setFleet(s->fleet_.get());
    spdlog::info("metrics on {} (port {})", cfg.metrics.listen, s->metrics_->port());
  }
  if (auto err = s->listen()) return *err;

  return s;
}

Server::Server(const config::Config& cfg, core::SchedulerSpec spec)
    : cfg_(cfg), rules_(cfg_), sched_(std::move(spec)), notifier_(makeSystemdNotifier()) {}

std::string Server::statusLine() const {
  std::size_t queued = 0;
  for (std::size_t e = 0; e < executors_.size(); ++e) {
    queued += sched_.queued(static_cast<EndpointId>(e));
  }
  return std::string(draining_ ? "draining: " : "") + std::to_string(clients_) + " clients, " +
         std::to_string(sched_.tenants().size()) + " tenants, " + std::to_string(queued) +
         " queued, " + std::to_string(sched_.inFlight()) + " in flight";
}

void Server::notifyWatchdog(TimeNs now) {
  if (now < next_watchdog_) return;
  // Sent from the loop itself: a wedged loop stops pinging and is restarted.
  notifier_->watchdog();
  notifier_->status(statusLine());
  next_watchdog_ = now + notifier_->watchdogInterval();
}

Server::~Server() {
  conns_.clear();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(socket_path_.c_str());
  }
  if (signal_fd_ >= 0) close(signal_fd_);
}

std::optional<std::string> Server::listen() {
  socket_path_ = cfg_.daemon.socket;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof addr.sun_path) return "daemon.socket: path too long";
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return errnoText("socket");
  // A socket file left by a daemon that died is stale: replace it. Anything
  // else at that path is not ours to remove.
  struct stat st {};
  if (lstat(socket_path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return socket_path_ + " exists and is not a socket";
    const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const bool live =
        probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    if (probe >= 0) close(probe);
    if (live) return socket_path_ + ": another daemon is serving on it";
    unlink(socket_path_.c_str());
  }
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return errnoText(("bind " + socket_path_).c_str());
  }
  if (chmod(socket_path_.c_str(), cfg_.daemon.socket_mode) != 0) return errnoText("chmod socket");
  if (!cfg_.daemon.socket_group.empty()) {
    const group* g = getgrnam(cfg_.daemon.socket_group.c_str());
    if (!g) return "daemon.socket_group: no group '" + cfg_.daemon.socket_group + "'";
    if (chown(socket_path_.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
      return errnoText("chown socket");
    }
  }
  if (::listen(listen_fd_, 128) != 0) return errnoText("listen");
  return std::nullopt;
}

int Server::run() {
  EventLoop::Hooks hooks;
  hooks.poll = [this] { return poll(); };
  hooks.before_sleep = [this] { return beforeSleep(); };
  loop_->setHooks(hooks);
  acceptNext();
  armSignals();
  for (std::size_t e = 0; e < executors_.size(); ++e) armExecutorWatch(e);
  spdlog::info("serving on {} ({} endpoints, policy {})", socket_path_, executors_.size(),
               cfg_.daemon.policy == Policy::kFair ? "fair" : "fifo");
  // The socket was bound and listening before run(): clients can connect now.
  notifier_->ready("serving on " + socket_path_);
  started_at_ = monotonicNow();
  if (notifier_->watchdogInterval() > 0) next_watchdog_ = monotonicNow();
  return loop_->run();
}

void Server::armSignals() {
  loop_->read(signal_fd_, signal_buf_, sizeof signal_buf_, [this](int res) {
    if (res < static_cast<int>(sizeof(signalfd_siginfo))) return;
    signalfd_siginfo info;
    std::memcpy(&info, signal_buf_, sizeof info);
    if (info.ssi_signo == SIGHUP) {
      if (!shutting_down_) reload();
      armSignals();
      return;
    }
    spdlog::info("signal {} received: shutting down", info.ssi_signo);
    beginShutdown();
  });
}

void Server::beginShutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  shutdown_deadline_ =
      monotonicNow() + static_cast<TimeNs>(cfg_.daemon.shutdown_grace_ms) * kNsPerMs;
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    unlink(socket_path_.c_str());
  }
  spdlog::info("shutting down: admitting nothing more, draining queues for up to {} ms",
               cfg_.daemon.shutdown_grace_ms);
  notifier_->stopping("stopping: " + statusLine());
  armTimer(shutdown_deadline_);
}

bool Server::shutdownStep(TimeNs now) {
  std::size_t queued = 0;
  for (std::size_t e = 0; e < executors_.size(); ++e)
    queued += sched_.queued(static_cast<EndpointId>(e));
  if (now >= shutdown_deadline_ && queued > 0) {
    spdlog::warn("shutdown grace over: {} queued requests end SHUTTING_DOWN", queued);
    sched_.cancelAll(Status::kShuttingDown, done_);
    finishDone(done_);
    queued = 0;
  }
  // Running batches finish (their results are delivered) unless they outlast
  // the grace period by as much again; then their requests end SHUTTING_DOWN.
  const TimeNs hard_stop = shutdown_deadline_ +
                           static_cast<TimeNs>(cfg_.daemon.shutdown_grace_ms) * kNsPerMs +
                           kNsPerSec;
  if (in_flight_batches_ > 0 && now >= hard_stop) {
    spdlog::error("{} batches still running at the hard stop", in_flight_batches_);
    for (std::uint64_t id = 0; id < pending_.size(); ++id) {
      Pending& p = pending_[id];
      if (!p.live) continue;
      if (metrics_) metrics_->ended(p.tenant, p.endpoint, Status::kShuttingDown);
      complete(p.conn, completionFor(p.request_id, p.tag, Status::kShuttingDown), true);
      releasePending(id);
    }
    in_flight_batches_ = 0;
  }
  // Submissions still in the rings are answered (SHUTTING_DOWN) before the
  // daemon goes: ingest keeps draining them.
  bool rings_idle = true;
  for (const auto& [id, c] : conns_) {
    if (c->segment && !c->closing &&
        (!c->pending_rings.empty() || c->segment->readyBitmap().anySet())) {
      rings_idle = false;
    }
  }
  if (queued == 0 && in_flight_batches_ == 0 && (rings_idle || now >= hard_stop)) {
    flush();
    return true;
  }
  if (now < shutdown_deadline_)
    armTimer(shutdown_deadline_);
  else
    armTimer(hard_stop);
  return false;
}

Server::ReloadResult Server::reload() {
  const std::string path = cfg_.source_path;
  notifier_->reloading("reloading " + (path.empty() ? std::string("<embedded config>") : path));
  auto fail = [&](const std::string& why) {
    ++reloads_failed_;
    last_reload_error_ = why;
    spdlog::error("reload failed; still serving the previous config: {}", why);
    notifier_->ready("reload failed: " + why + "; " + statusLine());
    return ReloadResult{false, why};
  };
  if (path.empty())
    return fail("started without a config file (the embedded default): nothing to reload");
  auto loaded = config::loadConfigFile(path);
  if (auto* err = std::get_if<config::ConfigError>(&loaded)) return fail(err->toString());
  config::Config next = std::move(std::get<config::Config>(loaded));
  if (const auto blockers = config::reloadBlockers(cfg_, next); !blockers.empty()) {
    std::string keys;
    for (const std::string& b : blockers) keys += (keys.empty() ? "" : ", ") + b;
    return fail(path + ": " + keys + ": cannot change while running; restart fairschedd to apply");
  }
  if (auto err = sched_.reconfigure(config::buildSchedulerSpec(next)))
    return fail(path + ": " + *err);
  cfg_ = std::move(next);
  rules_ = ClientRules(cfg_);  // every Connection::rule points into the old rules: re-match now
  reapplyRules();
  finishDone(done_);
  if (metrics_) metrics_->remapTenants(cfg_, sched_);
  if (!log_level_pinned_) {
    if (const auto level = parseLogLevel(cfg_.daemon.log_level)) spdlog::set_level(*level);
  }
  ++reloads_ok_;
  last_reload_error_.clear();
  spdlog::info("reloaded {}: {} tiers, {} tenants listed, {} client rules", path, cfg_.tiers.size(),
               cfg_.tenants.size(), cfg_.clients.size());
  notifier_->ready("reloaded " + path + "; " + statusLine());
  return {true, "reloaded " + path};
}

void Server::reapplyRules() {
  for (auto& [id, cp] : conns_) {
    Connection& c = *cp;
    if (c.closing) continue;
    c.rule = rules_.match(c.cred.uid, c.cred.gid);
    if (!c.segment) continue;
    for (std::size_t e = 0; e < c.endpoint_allowed.size() && e < cfg_.endpoints.size(); ++e) {
      c.endpoint_allowed[e] =
          c.rule && ClientRules::allowsEndpoint(*c.rule, cfg_.endpoints[e].name);
    }
    for (Ring& r : c.rings) {
      if (!r.consumer) continue;
      const bool allowed = c.rule && ClientRules::allowsTenant(*c.rule, r.name);
      if (!allowed && !r.revoked) {
        revokeRing(c, r);
      } else if (allowed && r.revoked) {  // allowed again: the ring serves the tenant once more
        std::optional<TierId> hint;       // only a tier the rule may still assign
        for (std::size_t t = 0; t < cfg_.tiers.size() && !r.tier_hint.empty(); ++t) {
          if (cfg_.tiers[t].name == r.tier_hint && ClientRules::allowsTier(*c.rule, r.tier_hint))
            hint = static_cast<TierId>(t);
        }
        const TenantId tid = sched_.tenants().acquire(r.name, hint);
        if (tid == kNoTenant) continue;
        r.tenant = tid;
        r.revoked = false;
        if (metrics_) metrics_->tenantOpened(tid, r.name);
        spdlog::info("client {} (uid {}): tenant '{}' allowed again", c.id, c.cred.uid, r.name);
      }
    }
  }
}

void Server::revokeRing(Connection& c, Ring& r) {
  const std::size_t n = sched_.cancelOwner(c.id, Status::kUnauthorized, done_, r.tenant);
  finishDone(done_);  // counted under the tenant's label before the ring lets go of it
  if (metrics_) metrics_->tenantClosed(r.tenant);
  sched_.tenants().release(r.tenant);
  spdlog::warn(
      "client {} (uid {}): the config no longer allows tenant '{}': {} queued requests end "
      "UNAUTHORIZED, running ones finish",
      c.id, c.cred.uid, r.name, n);
  r.tenant = kNoTenant;
  r.revoked = true;
}

void Server::acceptNext() {
  if (listen_fd_ < 0) return;
  loop_->accept(listen_fd_, [this](int fd) {
    if (fd >= 0) onAccept(fd);
    if (!shutting_down_) acceptNext();
  });
}

void Server::onAccept(int fd) {
  auto c = std::make_unique<Connection>();
  c->id = next_conn_++;
  c->fd = fd;
  socklen_t len = sizeof c->cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &len) != 0) {
    spdlog::warn("connection refused: SO_PEERCRED: {}", std::strerror(errno));
    close(fd);
    ++stats_.connections_refused;
    return;
  }
  c->rule = rules_.match(c->cred.uid, c->cred.gid);
  ++stats_.connections_accepted;
  Connection& ref = *c;
  conns_.emplace(c->id, std::move(c));
  receiveNext(ref);
}

void Server::receiveNext(Connection& c) {
  c.iov = {c.buf, sizeof c.buf};
  c.msg = {};
  c.msg.msg_iov = &c.iov;
  c.msg.msg_iovlen = 1;
  const std::uint64_t id = c.id;
  ++c.ops;
  loop_->recvmsg(c.fd, &c.msg, [this, id](int res) {
    if (opDone(id)) onMessage(id, res);
  });
}

Server::Connection* Server::opDone(std::uint64_t id) {
  if (auto it = conns_.find(id); it != conns_.end()) {
    --it->second->ops;
    return it->second->closing ? nullptr : it->second.get();
  }
  if (auto it = closed_.find(id); it != closed_.end()) {
    if (--it->second->ops <= 0) closed_.erase(it);
  }
  return nullptr;
}

void Server::onMessage(std::uint64_t conn_id, int bytes) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end()) return;
  Connection& c = *it->second;
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
  if (const auto e = shm::peekHeader(data, h); e != shm::DecodeError::kNone) {
    spdlog::warn("client {} (pid {}): {}", conn_id, c.cred.pid, shm::toString(e));
    dropConnection(conn_id, "malformed control message");
    return;
  }
  // Whatever goes wrong serving one peer's message costs that peer its
  // connection, never the daemon. (A handler may free `c`: keep the pid.)
  const pid_t pid = c.cred.pid;
  try {
    if (h.type == static_cast<std::uint16_t>(shm::MessageType::kHello)) {
      shm::HelloMessage m;
      if (shm::decode(data, m) != shm::DecodeError::kNone || c.segment) {
        dropConnection(conn_id, "malformed or repeated hello");
        return;
      }
      handleHello(c, m);
    } else if (h.type == static_cast<std::uint16_t>(shm::MessageType::kOpenTenant)) {
      shm::OpenTenantMessage m;
      if (shm::decode(data, m) != shm::DecodeError::kNone || !c.segment) {
        dropConnection(conn_id, "malformed open-tenant or one before hello");
        return;
      }
      handleOpenTenant(c, m);
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
    spdlog::error("client {} (pid {}): internal error serving a control message: {}", conn_id,
                  pid, escapeForDisplay(e.what()));
    dropConnection(conn_id, "internal error");
    return;
  }
  // A handler may have closed the connection (and freed it).
  if (auto again = conns_.find(conn_id); again != conns_.end() && !again->second->closing) {
    receiveNext(*again->second);
  }
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

void Server::handleHello(Connection& c, const shm::HelloMessage& m) {
  auto reply = shm::makeMessage<shm::HelloReplyMessage>(m.header.seq);
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
  if (m.layout_version != shm::kLayoutVersion) {
    return refuse(shm::ControlStatus::kVersionMismatch,
                  "shared-memory layout " + std::to_string(m.layout_version) + ", daemon has " +
                      std::to_string(shm::kLayoutVersion));
  }
  shm::Geometry geometry;
  // Room for a burst: a client may have this many requests outstanding.
  geometry.completion_capacity = kCompletionCapacity;
  auto seg = shm::Segment::create(geometry);
  auto bell_in = shm::EventFd::create();
  auto bell_out = shm::EventFd::create();
  for (const shm::Error* err : {std::get_if<shm::Error>(&seg), std::get_if<shm::Error>(&bell_in),
                                std::get_if<shm::Error>(&bell_out)}) {
    if (err) {
      spdlog::error("client {}: {}", c.id, err->toString());
      return refuse(shm::ControlStatus::kInternal,
                    "could not create the shared segment or eventfds");
    }
  }
  c.segment.emplace(std::move(std::get<shm::Segment>(seg)));
  ++clients_;  // dropConnection counts it down for every connection with a segment
  c.doorbell.emplace(std::move(std::get<shm::EventFd>(bell_in)));
  c.completion_bell.emplace(std::move(std::get<shm::EventFd>(bell_out)));
  c.producer.emplace(c.segment->completionRing(), 0);
  const std::uint32_t rings = c.segment->layout().geometry.ring_count;
  c.rings.resize(rings);
  c.ring_pending.assign(rings, false);

  reply.status = static_cast<std::uint32_t>(shm::ControlStatus::kOk);
  reply.client_id = c.id;
  reply.ring_count = rings;
  c.endpoint_allowed.assign(cfg_.endpoints.size(), false);
  for (std::size_t e = 0; e < cfg_.endpoints.size() && e < shm::kMaxEndpointsInReply; ++e) {
    const auto& ec = cfg_.endpoints[e];
    c.endpoint_allowed[e] = ClientRules::allowsEndpoint(*c.rule, ec.name);
    shm::EndpointInfo& info = reply.endpoints[reply.endpoint_count++];
    shm::setString(info.name, ec.name);
    info.id = static_cast<std::uint16_t>(e);
    info.max_output_tokens = ec.max_output_tokens;
    info.max_batch_tokens = ec.max_batch_tokens;
  }
  shm::setString(reply.message, "welcome");
  int fds[shm::kHelloReplyFds];
  fds[shm::kFdSegment] = c.segment->fd();
  fds[shm::kFdDaemonDoorbell] = c.doorbell->fd();
  fds[shm::kFdCompletionBell] = c.completion_bell->fd();
  if (!sendReply(c, shm::bytesOf(reply), fds, shm::kHelloReplyFds)) {
    c.closing = true;
    dropConnection(c.id, "could not send the hello reply");
    return;
  }
  c.segment->closeFd();  // the client holds it now; our mappings stay
  armDoorbell(c);
  spdlog::info("client {} connected: uid {} pid {} rule '{}' name '{}'", c.id, c.cred.uid,
               c.cred.pid, c.rule->name, client_name);
}

void Server::handleOpenTenant(Connection& c, const shm::OpenTenantMessage& m) {
  auto reply = shm::makeMessage<shm::OpenTenantReplyMessage>(m.header.seq);
  const std::string_view tenant = *shm::getString(m.tenant);
  const std::string_view tier = *shm::getString(m.tier);
  auto answer = [&](shm::ControlStatus status, const std::string& text, std::uint32_t ring) {
    reply.status = static_cast<std::uint32_t>(status);
    reply.ring = ring;
    shm::setString(reply.message, text);
    if (status != shm::ControlStatus::kOk) {  // the name may break the rule: escaped
      spdlog::warn("client {} (uid {}): open tenant \"{}\": {}", c.id, c.cred.uid,
                   escapeForDisplay(tenant), text);
    }
    if (!sendReply(c, shm::bytesOf(reply), nullptr, 0)) {
      c.closing = true;
      dropConnection(c.id, "could not send a reply");
    }
  };
  // Names from a peer are checked before anything stores, matches or prints them.
  if (auto err = nameError(tenant)) {
    return answer(shm::ControlStatus::kBadRequest, "tenant name refused: " + *err, 0);
  }
  if (!tier.empty()) {
    if (auto err = nameError(tier)) {
      return answer(shm::ControlStatus::kBadRequest, "tier name refused: " + *err, 0);
    }
  }
  if (!c.rule) {  // a reload removed the rule that admitted this client
    return answer(shm::ControlStatus::kUnauthorized,
                  "uid " + std::to_string(c.cred.uid) + " matches no [[clients]] rule any more", 0);
  }
  if (!ClientRules::allowsTenant(*c.rule, tenant)) {
    return answer(shm::ControlStatus::kUnauthorized,
                  "rule '" + c.rule->name + "' does not allow tenant '" + std::string(tenant) + "'",
                  0);
  }
  std::optional<TierId> hint;
  if (!tier.empty()) {
    if (!ClientRules::allowsTier(*c.rule, tier)) {
      return answer(shm::ControlStatus::kUnauthorized,
                    "rule '" + c.rule->name + "' may not assign tier '" + std::string(tier) + "'",
                    0);
    }
    for (std::size_t t = 0; t < cfg_.tiers.size(); ++t) {
      if (cfg_.tiers[t].name == tier) hint = static_cast<TierId>(t);
    }
    if (!hint)
      return answer(shm::ControlStatus::kBadRequest, "no tier '" + std::string(tier) + "'", 0);
  }
  for (std::uint32_t r = 0; r < c.rings.size(); ++r) {
    Ring& ring = c.rings[r];
    if (!ring.consumer || ring.name != tenant) continue;
    return answer(shm::ControlStatus::kOk, "open", r);
  }
  for (std::uint32_t r = 0; r < c.rings.size(); ++r) {
    if (c.rings[r].consumer) continue;
    const TenantId id = sched_.tenants().acquire(tenant, hint);
    if (id == kNoTenant) return answer(shm::ControlStatus::kInternal, "tenant table refused", 0);
    if (metrics_) metrics_->tenantOpened(id, tenant);
    c.rings[r].tenant = id;
    c.rings[r].name = std::string(tenant);
    c.rings[r].tier_hint = std::string(tier);
    c.rings[r].consumer.emplace(c.segment->submissionRing(r), 0);
    return answer(shm::ControlStatus::kOk, "open", r);
  }
  answer(shm::ControlStatus::kNoCapacity,
         "all " + std::to_string(c.rings.size()) + " rings of this connection are in use", 0);
}

void Server::armDoorbell(Connection& c) {
  const std::uint64_t id = c.id;
  ++c.ops;
  c.doorbell_op =
      loop_->read(c.doorbell->fd(), &c.doorbell_buf, sizeof c.doorbell_buf, [this, id](int res) {
        Connection* live = opDone(id);
        if (live && (res > 0 || res == -EAGAIN)) armDoorbell(*live);
      });
}

void Server::dropConnection(std::uint64_t conn_id, const char* why) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end()) return;
  Connection& c = *it->second;
  c.closing = true;
  const std::size_t cancelled = sched_.cancelOwner(conn_id, Status::kCancelled, done_);
  // Their completions would go to a client that is gone.
  stats_.completions_dropped += cancelled;
  for (const core::Done& d : done_) {
    if (metrics_) metrics_->ended(d.tenant, d.endpoint, d.status);
    if (findPending(d.id)) releasePending(d.id);
  }
  done_.clear();
  for (Ring& r : c.rings) {
    if (!r.consumer || r.revoked) continue;
    if (metrics_) metrics_->tenantClosed(r.tenant);
    sched_.tenants().release(r.tenant);
  }
  if (c.segment) {
    --clients_;
    spdlog::info("client {} (pid {}) {}: {} queued requests cancelled", conn_id, c.cred.pid, why,
                 cancelled);
  }
  // Queued io_uring operations hold the files and write into this object's
  // buffers: end them (shutdown completes the recvmsg, cancel the doorbell
  // read) and free the object only after the last one has completed.
  shutdown(c.fd, SHUT_RDWR);
  close(c.fd);
  c.fd = -1;
  if (c.doorbell_op != 0) loop_->cancel(c.doorbell_op);
  auto owned = std::move(it->second);
  conns_.erase(it);
  if (owned->ops > 0) closed_.emplace(conn_id, std::move(owned));
}

bool Server::poll() {
  const TimeNs now = monotonicNow();
  notifyWatchdog(now);
  if (metrics_) metrics_->tick(now, sched_, stats_, clients_);
  if (sleeping_) {
    for (auto& [id, c] : conns_) {
      if (c->segment) c->segment->ownSleepFlag().clear();
    }
    sleeping_ = false;
  }
  bool worked = collect(now);
  for (auto& [id, c] : conns_) {
    if (!c->segment || c->closing) continue;
    try {
      worked = ingest(*c, now) || worked;
    } catch (const std::exception& e) {  // costs this client its connection, not the daemon
      spdlog::error("client {} (pid {}): internal error in ingest: {}", id, c->cred.pid,
                    escapeForDisplay(e.what()));
      c->closing = true;
      drop_later_.push_back(id);
    }
  }
  for (const std::uint64_t id : drop_later_) dropConnection(id, "broke its submission ring");
  drop_later_.clear();
  sched_.expireDeadlines(now, done_);
  finishDone(done_);
  if (!batches_.empty()) expireBatches(now);
  if (dispatch(now)) {
    worked = true;
    collect(now);  // an inline executor has finished already
  }
  worked = flush() || worked;
  sched_.collectIdle(now, kIdleCollectBudget);
  if (shutting_down_ && shutdownStep(now)) loop_->stop();
  return worked;
}

bool Server::beforeSleep() {
  for (auto& [id, c] : conns_) {
    if (c->segment) c->segment->ownSleepFlag().announceSleep();
  }
  sleeping_ = true;
  for (auto& [id, c] : conns_) {
    if (!c->segment || c->closing) continue;
    const bool credit =
        c->outstanding + c->backlog.size() < c->segment->layout().geometry.completion_capacity;
    if (!c->backlog.empty() ||
        (credit && (!c->pending_rings.empty() || c->segment->readyBitmap().anySet()))) {
      return true;  // work appeared: poll clears the flags
    }
  }
  // Sleep until the next batch is due or a deadline passes, if sooner than anything else.
  TimeNs wake = std::min(sched_.nextDeadline(), next_watchdog_);
  // expireBatches looks every 10 ms at most: waking sooner would only spin.
  for (const auto& [id, b] : batches_) {
    wake = std::min(wake, std::max(b.deadline, next_batch_check_));
  }
  if (metrics_) wake = std::min(wake, metrics_->publishDueAt());
  for (std::size_t e = 0; e < executors_.size(); ++e) {
    if (executors_[e]->freeSlots() > 0)
      wake = std::min(wake, sched_.batchDueAt(static_cast<EndpointId>(e)));
  }
  if (wake != kNever) armTimer(std::max(wake, monotonicNow() + 1));
  return false;
}

void Server::armTimer(TimeNs at) {
  if (timer_at_ <= at) return;  // an earlier timer is already queued
  timer_at_ = at;
  loop_->timerAt(at, [this, at](int) {
    if (timer_at_ == at) timer_at_ = kNever;
  });
}

void Server::armExecutorWatch(std::size_t e) {
  loop_->pollIn(executors_[e]->completionFd(), [this, e](int res) {
    if (res >= 0 || res == -EINTR) armExecutorWatch(e);
  });
}

bool Server::ingest(Connection& c, TimeNs now) {
  const std::uint64_t capacity = c.segment->layout().geometry.completion_capacity;
  c.segment->readyBitmap().takeEach([&](std::uint32_t ring) {
    if (ring < c.rings.size() && !c.ring_pending[ring]) {
      c.ring_pending[ring] = true;
      c.pending_rings.push_back(ring);
    }
  });
  bool worked = false;
  for (std::size_t i = 0; i < c.pending_rings.size();) {
    const std::uint32_t ring = c.pending_rings[i];
    Ring& r = c.rings[ring];
    const std::uint64_t used = c.outstanding + c.backlog.size();
    if (used >= capacity) break;  // no room for more completions: wait for the client
    if (!r.consumer) {            // published into a ring it never opened: nothing to answer
      c.ring_pending[ring] = false;
      c.pending_rings[i] = c.pending_rings.back();
      c.pending_rings.pop_back();
      continue;
    }
    const std::size_t budget = std::min<std::uint64_t>(kRingBudget, capacity - used);
    const shm::DrainResult d = r.consumer->drain(
        budget, [&](const shm::SubmissionSlot& slot, std::span<const std::uint32_t> prompt) {
          admit(c, ring, slot, prompt, now);
        });
    worked = worked || d.popped > 0;
    if (d.stop == shm::PopResult::kCorrupt) {
      if (r.consumer->corruption() == shm::Corruption::kBadSlot) {
        shm::SubmissionSlot bad;
        r.consumer->peek(bad);
        ++stats_.bad_slots;
        spdlog::warn("client {} tenant '{}': request {} rejected: {}", c.id, r.name, bad.request_id,
                     shm::toString(r.consumer->slotCheck()));
        complete(c.id, completionFor(bad.request_id, bad.tag, Status::kInvalid), false);
        r.consumer->skipBadSlot();
        worked = true;
        continue;  // the same ring again
      }
      spdlog::warn("client {} tenant '{}': submission ring broken (bad sequence {}); dropping it",
                   c.id, r.name, r.consumer->badSequence());
      c.closing = true;  // dropped after this pass over the connections
      drop_later_.push_back(c.id);
      return true;
    }
    if (d.stop == shm::PopResult::kEmpty) {
      c.ring_pending[ring] = false;
      c.pending_rings[i] = c.pending_rings.back();
      c.pending_rings.pop_back();
    } else {
      ++i;  // budget used up: come back next pass, after the other rings
    }
  }
  return worked;
}

void Server::admit(Connection& c, std::uint32_t ring, const shm::SubmissionSlot& slot,
                   std::span<const std::uint32_t> prompt, TimeNs now) {
  ++stats_.submissions;
  auto reject = [&](Status s, TimeNs retry_after = 0) {
    if (metrics_) metrics_->rejected(c.rings[ring].tenant, slot.endpoint, s);
    shm::CompletionSlot out = completionFor(slot.request_id, slot.tag, s);
    out.retry_after_ns = retry_after;
    complete(c.id, out, false);
  };
  if (shutting_down_ || draining_) return reject(Status::kShuttingDown);
  if (c.rings[ring].revoked) return reject(Status::kUnauthorized);
  if (slot.endpoint >= executors_.size() || slot.deadline_ns < 0) return reject(Status::kInvalid);
  if (!c.endpoint_allowed[slot.endpoint]) return reject(Status::kUnauthorized);
  std::uint64_t id;
  if (!free_pending_.empty()) {
    id = free_pending_.back();
    free_pending_.pop_back();
  } else {
    id = pending_.size();
    pending_.emplace_back();
  }
  core::Request r;
  r.id = id;
  r.tenant = c.rings[ring].tenant;
  r.endpoint = slot.endpoint;
  r.input_tokens = slot.prompt_tokens;
  r.max_output_tokens = slot.max_output_tokens;
  r.priority = slot.priority;
  r.deadline = slot.deadline_ns == 0 ? kNever : slot.deadline_ns;
  r.owner = c.id;
  const core::Admission a = sched_.submit(r, now);
  if (a.status != Status::kOk) {
    free_pending_.push_back(id);
    return reject(a.status, a.retry_after);
  }
  if (metrics_) metrics_->admitted(r.tenant, r.endpoint);
  Pending& p = pending_[id];
  p.live = true;
  p.conn = c.id;
  p.request_id = slot.request_id;
  p.tag = slot.tag;
  p.handle = a.handle;
  p.endpoint = slot.endpoint;
  p.tenant = r.tenant;
  p.admitted = now;
  p.prompt.assign(prompt.begin(), prompt.end());
  ++c.outstanding;
}

bool Server::dispatch(TimeNs now) {
  bool worked = false;
  for (std::size_t e = 0; e < executors_.size(); ++e) {
    Executor& ex = *executors_[e];
    while (ex.freeSlots() > 0 && sched_.nextBatch(static_cast<EndpointId>(e), now, batch_, done_)) {
      ExecBatch eb;
      eb.id = next_batch_++;
      eb.endpoint = static_cast<EndpointId>(e);
      RunningBatch& running = batches_[eb.id];
      running.endpoint = eb.endpoint;
      const std::uint64_t timeout_ms = cfg_.endpoints[e].batch_timeout_ms;
      running.deadline =
          timeout_ms == 0 ? kNever : now + static_cast<TimeNs>(timeout_ms) * kNsPerMs;
      std::vector<std::uint64_t>& ids = running.ids;
      for (const core::Dispatched& d : batch_.requests) {
        Pending& p = pending_[d.id];
        p.dispatched = now;
        eb.requests.push_back({d.id, d.input_tokens, d.max_output_tokens});
        eb.tokens.insert(eb.tokens.end(), p.prompt.begin(), p.prompt.end());
        ids.push_back(d.id);
      }
      ex.submit(std::move(eb));
      ++in_flight_batches_;
      ++stats_.batches;
      worked = true;
    }
    finishDone(done_);
  }
  return worked;
}

bool Server::collect(TimeNs now) {
  bool worked = false;
  for (std::size_t e = 0; e < executors_.size(); ++e) {
    finished_.clear();
    executors_[e]->drain(finished_);
    for (BatchDone& b : finished_) {
      worked = true;
      --in_flight_batches_;
      auto bit = batches_.find(b.id);
      if (bit == batches_.end()) continue;
      std::uint64_t tokens = 0;
      if (!b.ok)
        spdlog::error("endpoint {}: batch {} failed: {}", cfg_.endpoints[e].name, b.id, b.error);
      const std::vector<std::uint64_t>& ids = bit->second.ids;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const std::uint64_t key = ids[i];
        Pending* pp = findPending(key);
        if (!pp) continue;
        Pending& p = *pp;
        const bool ok = b.ok && i < b.results.size() && b.results[i].key == key;
        const std::uint32_t out_tokens = ok ? b.results[i].output_tokens : 0;
        sched_.complete(p.handle, out_tokens, now);
        tokens += p.prompt.size() + out_tokens;
        shm::CompletionSlot s =
            completionFor(p.request_id, p.tag, ok ? Status::kOk : Status::kExecutorFailed);
        s.queue_wait_ns = static_cast<std::uint64_t>(p.dispatched - p.admitted);
        s.service_ns = static_cast<std::uint64_t>(now - p.dispatched);
        s.output_tokens = out_tokens;
        s.checksum = ok ? b.results[i].checksum : 0;
        if (metrics_) {
          metrics_->completed(p.tenant, p.endpoint, ok ? Status::kOk : Status::kExecutorFailed,
                              p.admitted, p.dispatched, now, p.prompt.size() + out_tokens);
        }
        const std::uint64_t conn = p.conn;
        releasePending(key);
        complete(conn, s, true);
      }
      sched_.batchServed(static_cast<EndpointId>(e), tokens, b.service_ns);
      batches_.erase(bit);
    }
  }
  return worked;
}

void Server::expireBatches(TimeNs now) {
  // Batches are few (executor slots): a scan now and then is enough.
  if (now < next_batch_check_) return;
  next_batch_check_ = now + 10 * kNsPerMs;
  for (auto it = batches_.begin(); it != batches_.end();) {
    RunningBatch& b = it->second;
    if (now < b.deadline) {
      ++it;
      continue;
    }
    const config::EndpointConfig& ec = cfg_.endpoints[b.endpoint];
    spdlog::error(
        "endpoint {}: batch {} still running after batch_timeout_ms = {}: its {} requests end "
        "EXECUTOR_FAILED; the executor slot stays taken until the batch returns",
        ec.name, it->first, ec.batch_timeout_ms, b.ids.size());
    for (const std::uint64_t key : b.ids) {
      Pending* p = findPending(key);
      if (!p) continue;
      sched_.complete(p->handle, 0, now);
      if (metrics_) {
        metrics_->completed(p->tenant, p->endpoint, Status::kExecutorFailed, p->admitted,
                            p->dispatched, now, p->prompt.size());
      }
      const shm::CompletionSlot slot =
          completionFor(p->request_id, p->tag, Status::kExecutorFailed);
      const std::uint64_t conn = p->conn;
      releasePending(key);
      complete(conn, slot, true);
    }
    it = batches_.erase(it);  // a late result finds no batch and is dropped
  }
}

void Server::finishDone(std::vector<core::Done>& done) {
  for (const core::Done& d : done) {
    Pending* p = findPending(d.id);
    if (!p) continue;
    if (metrics_) metrics_->ended(d.tenant, d.endpoint, d.status);
    const shm::CompletionSlot slot = completionFor(p->request_id, p->tag, d.status);
    const std::uint64_t conn = p->conn;
    releasePending(d.id);
    complete(conn, slot, true);
  }
  done.clear();
}

void Server::complete(std::uint64_t conn_id, shm::CompletionSlot slot, bool was_admitted) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end()) {
    ++stats_.completions_dropped;
    return;
  }
  Connection& c = *it->second;
  if (was_admitted && c.outstanding > 0) --c.outstanding;
  c.backlog.push_back(slot);
}

bool Server::flush() {
  bool worked = false;
  for (auto& [id, cp] : conns_) {
    Connection& c = *cp;
    if (c.backlog.empty() || !c.producer) continue;
    flush_buf_.assign(c.backlog.begin(), c.backlog.end());
    const std::size_t n = c.producer->tryPushBatch(flush_buf_);
    if (n == 0) continue;
    c.backlog.erase(c.backlog.begin(), c.backlog.begin() + static_cast<std::ptrdiff_t>(n));
    stats_.completions_delivered += n;
    worked = true;
    if (c.segment->peerSleepFlag().sleeping()) {
      loop_->write(c.completion_bell->fd(), &bell_value_, sizeof bell_value_, nullptr);
    }
  }
  return worked;
}

}  // namespace fairsched::daemon
