// fairschedd's lifecycle: building the server, the loop's poll and sleep,
// signals, reload, and the graceful stop. The control plane is in
// server_control.cpp, the request path in server_requests.cpp, the admin
// commands in server_admin.cpp.
#include "daemon/server/server.hpp"

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
#include "daemon/log.hpp"
#include "daemon/loop/make_event_loop.hpp"
#include "fairsched/name.hpp"

namespace fairsched::daemon {
namespace {

constexpr std::size_t kIdleCollectBudget = 64;  // idle tenants looked at per loop pass

}  // namespace

Result<std::unique_ptr<Server>> Server::create(const config::Config& cfg) {
  return create(cfg, makeExecutors);
}

Result<std::unique_ptr<Server>> Server::create(const config::Config& cfg,
                                               const MakeExecutors& make_executors,
                                               const Env& env) {
  // SIGTERM, SIGINT and SIGHUP arrive through a signalfd read by the loop.
  // Blocked first, so the executor threads started below inherit the mask and
  // the signal can only be taken by the signalfd.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  if (pthread_sigmask(SIG_BLOCK, &mask, nullptr) != 0) {
    return Error{Errc::kSystem, "pthread_sigmask failed"};
  }
  std::unique_ptr<Server> s(new Server(cfg, config::buildSchedulerSpec(cfg), env));
  if (cfg.fleet) {  // its thread inherits the signal mask set above
    auto fleet = fleet::makeFleetLimiter(*cfg.fleet);
    if (auto* error = std::get_if<std::string>(&fleet)) {
      return Error{Errc::kConfig, "fleet: " + *error};
    }
    s->fleet_ = std::get<std::unique_ptr<fleet::FleetLimiter>>(std::move(fleet));
    s->sched_.setFleetGate(s->fleet_.get());
    s->fleet_->start();
  }
  // Before anything is admitted, with the fleet gate in place (restored
  // tenant states open their fleet accounts like new ones).
  s->state_.open(cfg.daemon.state_dir, static_cast<TimeNs>(cfg.daemon.state_interval_s) * kNsPerSec,
                 s->sched_, env.now());
  s->signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (s->signal_fd_ < 0) return systemError("signalfd");
  std::string refused;
  auto loop = makeEventLoop(cfg.daemon.event_loop, 1024, &refused);
  if (!loop) return withContext("event loop", std::move(loop).error());
  s->loop_ = std::move(loop).value();
  if (!refused.empty()) {
    spdlog::warn(
        "io_uring is refused here ({}); serving with the epoll event loop. Set [daemon] "
        "event_loop = \"epoll\" to choose it and silence this warning",
        refused);
  }

  auto executors = make_executors(cfg);
  if (!executors) return std::move(executors).error();
  s->executors_ = std::move(executors).value();
  if (s->executors_.size() != cfg.endpoints.size()) {
    return Error{Errc::kInternal, "internal: " + std::to_string(s->executors_.size()) +
                                      " executors for " + std::to_string(cfg.endpoints.size()) +
                                      " endpoints"};
  }
  if (!cfg.metrics.listen.empty()) {
    auto m = Metrics::create(cfg, s->sched_);
    if (!m) return std::move(m).error();
    s->metrics_ = std::move(m).value();
    if (s->fleet_) s->metrics_->setFleet(s->fleet_.get());
    spdlog::info("metrics on {} (port {})", cfg.metrics.listen, s->metrics_->port());
  }
  if (Result<> r = s->listen(); !r) return std::move(r).error();

  return s;
}

Server::Server(const config::Config& cfg, core::SchedulerSpec spec, const Env& env)
    : env_(env),
      cfg_(cfg),
      rules_(cfg_),
      sched_(std::move(spec)),
      notifier_(makeSystemdNotifier()) {
  stats_.preemptions.assign(cfg_.endpoints.size(), 0);
  slot_meters_.resize(cfg_.endpoints.size());
  set_ups_ = SetUpQueue(cfg_.daemon.max_connects_per_s,
                        std::max<std::uint64_t>(1, cfg_.daemon.max_connects_per_s / 10));
}

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

Result<> Server::listen() {
  socket_path_ = cfg_.daemon.socket;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof addr.sun_path) {
    return Error{Errc::kConfig, "daemon.socket: path too long"};
  }
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  // Non-blocking: the epoll loop accepts only after readiness, and a
  // connection aborted in between must not block the loop.
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return systemError("socket");
  // A socket file left by a daemon that died is stale: replace it. Anything
  // else at that path is not ours to remove.
  struct stat st {};
  if (lstat(socket_path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Error{Errc::kConfig, socket_path_ + " exists and is not a socket"};
    }
    // A daemon killed a moment ago may still accept for a few milliseconds
    // (the kernel tears its io_uring down after the process is gone), so a
    // live socket is probed again for up to a second before it is another
    // daemon's.
    bool live = true;
    for (int attempt = 0; attempt < 50 && live; ++attempt) {
      if (attempt > 0) usleep(20'000);
      const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
      live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      if (probe >= 0) close(probe);
    }
    if (live) return Error{Errc::kUnavailable, socket_path_ + ": another daemon is serving on it"};
    unlink(socket_path_.c_str());
  }
  // The socket's directory: systemd's RuntimeDirectory= makes it; a daemon
  // started by hand makes the last level itself (0755), as the unit would.
  const std::string::size_type slash = socket_path_.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = socket_path_.substr(0, slash);
    if (mkdir(dir.c_str(), 0755) == 0) {
      spdlog::info("created the socket's directory {}", dir);
    } else if (errno != EEXIST) {
      const int err = errno;
      return Error{Errc::kConfig, "bind " + socket_path_ + ": its directory " + dir +
                                      " does not exist and cannot be created (" +
                                      std::strerror(err) +
                                      "): create it (under systemd, RuntimeDirectory=fairsched "
                                      "does), or set [daemon] socket to a path in a directory "
                                      "that exists"};
    }
  }
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return systemError("bind " + socket_path_);
  }
  if (chmod(socket_path_.c_str(), cfg_.daemon.socket_mode) != 0) {
    return systemError("chmod socket");
  }
  if (!cfg_.daemon.socket_group.empty()) {
    const group* g = getgrnam(cfg_.daemon.socket_group.c_str());
    if (!g) {
      return Error{Errc::kConfig,
                   "daemon.socket_group: no group '" + cfg_.daemon.socket_group + "'"};
    }
    if (chown(socket_path_.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
      return systemError("chown socket");
    }
  }
  if (::listen(listen_fd_, 128) != 0) return systemError("listen");
  return {};
}

int Server::run() {
  EventLoop::Hooks hooks;
  hooks.poll = [this] { return poll(); };
  hooks.idle_glance = [this] { return idleAtAGlance(); };
  hooks.before_sleep = [this] { return beforeSleep(); };
  hooks.spin_ns = static_cast<TimeNs>(cfg_.daemon.busy_poll_us) * kNsPerUs;
  loop_->setHooks(hooks);
  acceptNext();
  armSignals();
  for (std::size_t e = 0; e < executors_.size(); ++e) armExecutorWatch(e);
  spdlog::info("serving on {} ({} endpoints, policy {}, {} event loop)", socket_path_,
               executors_.size(), cfg_.daemon.policy == Policy::kFair ? "fair" : "fifo",
               loop_->name());
  // The socket was bound and listening before run(): clients can connect now.
  notifier_->ready("serving on " + socket_path_);
  started_at_ = env_.now();
  if (notifier_->watchdogInterval() > 0) next_watchdog_ = env_.now();
  const int rc = loop_->run();
  state_.saveNow(sched_, env_.now());
  if (rc == 0 && lost_executor_ != kNoExecutor) return EIO;
  return rc;
}

void Server::armSignals() {
  loop_->read(signal_fd_, signal_buf_, sizeof signal_buf_, [this](int res) {
    if (res < static_cast<int>(sizeof(signalfd_siginfo))) return;
    signalfd_siginfo info;
    std::memcpy(&info, signal_buf_, sizeof info);
    if (info.ssi_signo == SIGHUP) {
      if (!shutting_down_) (void)reload();  // reload() logs and reports its outcome
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
  shutdown_deadline_ = env_.now() + static_cast<TimeNs>(cfg_.daemon.shutdown_grace_ms) * kNsPerMs;
  if (listen_fd_ >= 0) {
    loop_->cancel(accept_op_);  // before the close: the number may be reused
    close(listen_fd_);
    listen_fd_ = -1;
    unlink(socket_path_.c_str());
  }
  // What is still in any ring is answered (SHUTTING_DOWN) while draining:
  // every connection is looked at from now on.
  for (Connection* c : conns_.withSegment()) activate(*c);
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
  // Requests running on workers likewise (an aborted one's completion is out).
  std::size_t on_workers = 0;
  if (workers_.running() > 0) {
    pending_.forEachLive(
        [&](std::uint64_t, const Pending& p) { on_workers += p.worker != 0 && !p.aborted; });
  }
  if ((batches_.inFlight() > 0 || on_workers > 0) && now >= hard_stop) {
    spdlog::error("{} batches and {} requests on workers still running at the hard stop",
                  batches_.inFlight(), on_workers);
    pending_.forEachLive([&](std::uint64_t key, const Pending&) {
      endRequest(key, Status::kShuttingDown, Ending::abandoned(), now);
    });
    batches_.forgetInFlight();
    on_workers = 0;
  }
  // Submissions still in the rings are answered (SHUTTING_DOWN) before the
  // daemon goes: ingest keeps draining them.
  bool rings_idle = true;
  for (const Connection* c : conns_.withSegment()) {
    if (!c->closing && c->lanesMayHaveWork()) rings_idle = false;
  }
  if (queued == 0 && batches_.inFlight() == 0 && on_workers == 0 &&
      (rings_idle || now >= hard_stop)) {
    flush();
    return true;
  }
  if (now < shutdown_deadline_)
    armTimer(shutdown_deadline_);
  else
    armTimer(hard_stop);
  return false;
}

Result<> Server::reload() {
  const std::string path = cfg_.source_path;
  notifier_->reloading("reloading " + (path.empty() ? std::string("<embedded config>") : path));
  auto fail = [&](Errc code, const std::string& why) {
    ++reloads_failed_;
    last_reload_error_ = why;
    spdlog::error("reload failed; still serving the previous config: {}", why);
    notifier_->ready("reload failed: " + why + "; " + statusLine());
    return Error{code, why};
  };
  if (path.empty()) {
    return fail(Errc::kUnavailable,
                "started without a config file (the embedded default): nothing to reload");
  }
  auto loaded = config::loadConfigFile(path);
  if (auto* err = loaded.errorOrNull()) {
    return fail(Errc::kConfig, err->toString());
  }
  config::Config next = std::move(loaded).value();
  if (const auto blockers = config::reloadBlockers(cfg_, next); !blockers.empty()) {
    std::string keys;
    for (const std::string& b : blockers) keys += (keys.empty() ? "" : ", ") + b;
    return fail(Errc::kConfig,
                path + ": " + keys + ": cannot change while running; restart fairschedd to apply");
  }
  if (auto err = sched_.reconfigure(config::buildSchedulerSpec(next)))
    return fail(Errc::kConfig, path + ": " + *err);
  // What the daemon remembers of each worker's prefix cache follows a new
  // cache_blocks at once (0: the worker's next statement sizes it).
  for (std::size_t e = 0; e < cfg_.endpoints.size(); ++e) {
    const std::uint64_t blocks = next.endpoints[e].worker.cache_blocks;
    if (blocks == cfg_.endpoints[e].worker.cache_blocks) continue;
    for (Connection* c : workers_.of(static_cast<EndpointId>(e))) {
      WorkerState& w = *c->worker;
      if (blocks != 0) w.cache.setCapacity(blocks);
      w.cache_sized = blocks != 0;
    }
  }
  cfg_ = std::move(next);
  state_.setInterval(static_cast<TimeNs>(cfg_.daemon.state_interval_s) * kNsPerSec);
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
  return {};
}

void Server::reapplyRules() {
  std::vector<std::uint64_t> revoked_workers;
  conns_.forEach([&](Connection& c) {
    if (c.closing) return;
    c.rule = rules_.match(c.cred.uid, c.cred.gid);
    if (!c.segment) return;
    if (c.worker) {
      const std::string& ep = cfg_.endpoints[c.worker->endpoint].name;
      if (!c.rule || !ClientRules::allowsWorker(*c.rule, ep)) {
        spdlog::warn("worker {} (uid {}): the config no longer lets it serve endpoint {}", c.id,
                     c.cred.uid, ep);
        revoked_workers.push_back(c.id);
      }
      return;
    }
    for (std::size_t e = 0; e < c.endpoint_allowed.size() && e < cfg_.endpoints.size(); ++e) {
      c.endpoint_allowed[e] =
          c.rule && ClientRules::allowsEndpoint(*c.rule, cfg_.endpoints[e].name);
    }
    c.tenants.forEachOpen([&](TenantHandles::Entry& e) {
      const std::string& name = sched_.tenants()[e.tenant].name;
      const bool allowed = c.rule && ClientRules::allowsTenant(*c.rule, name);
      if (!allowed && !e.revoked) {
        revokeTenant(c, e);
      } else if (allowed && e.revoked) {  // allowed again: the handle serves the tenant once more
        e.revoked = false;
        if (metrics_) metrics_->tenantOpened(e.tenant, name);
        spdlog::info("client {} (uid {}): tenant '{}' allowed again", c.id, c.cred.uid, name);
      }
    });
  });
  for (const std::uint64_t id : revoked_workers) {
    dropConnection(id, "is no longer allowed to serve its endpoint");
  }
}

void Server::revokeTenant(Connection& c, TenantHandles::Entry& e) {
  const std::size_t n = sched_.cancelOwner(c.id, Status::kUnauthorized, done_, e.tenant);
  finishDone(done_);  // counted under the tenant's label before its series closes
  if (metrics_) metrics_->tenantClosed(e.tenant);
  // The handle keeps its reference (the tenant stays known while the client
  // holds it), so being allowed again needs nothing but the flag.
  spdlog::warn(
      "client {} (uid {}): the config no longer allows tenant '{}': {} queued requests end "
      "UNAUTHORIZED, running ones finish",
      c.id, c.cred.uid, sched_.tenants()[e.tenant].name, n);
  e.revoked = true;
}

bool Server::idleAtAGlance() const {
  if (shutting_down_ || !done_.empty() || !drop_later_.empty() || !conns_.dirty().empty() ||
      batches_.tracked() > 0 || workers_.running() > 0) {
    return false;
  }
  for (std::size_t e = 0; e < executors_.size(); ++e) {
    if (sched_.queued(static_cast<EndpointId>(e)) > 0 ||
        executors_[e]->freeSlots() < executors_[e]->slots()) {
      return false;
    }
  }
  for (const Connection* c : conns_.active()) {
    if (c->closing || c->lanesMayHaveWork()) return false;
    if (c->worker && c->worker->events && c->worker->events->mayHaveItem()) return false;
  }
  return true;
}

bool Server::poll() {
  const TimeNs now = env_.now();
  notifyWatchdog(now);
  if (metrics_) metrics_->tick(now, sched_, stats_, clients_);
  bool worked = collect(now);
  // A slot the collection freed takes the work already queued before the
  // pass reads the rings: under a flood of submissions reading them takes
  // long, and the executor would sit idle meanwhile.
  if (dispatch(now)) {
    worked = true;
    collect(now);  // an inline executor has finished already
  }
  worked = serveWaitingHellos(now) || worked;
  // By index: dropping a connection in here is deferred (drop_later_), so
  // the array does not change under the loop.
  const std::vector<Connection*>& active = conns_.active();
  for (std::size_t i = 0; i < active.size(); ++i) {
    Connection* c = active[i];
    const std::uint64_t id = c->id;
    if (c->closing) continue;
    try {
      const bool found = c->worker ? ingestWorker(*c, now) : ingest(*c, now);
      if (found || !c->pending_rings.empty()) {
        c->last_work = now;
      } else if (now - c->last_work > kDemoteAfterNs && !c->worker) {
        conns_.queueDemote(*c);
      }
      worked = found || worked;
    } catch (const std::exception& e) {  // costs this client its connection, not the daemon
      spdlog::error("client {} (pid {}): internal error in ingest: {}", id, c->cred.pid,
                    escapeForDisplay(e.what()));
      dropLater(*c, "internal error in ingest");
    }
  }
  worked = conns_.demote() || worked;
  // The reason is each one's (dropLater); a bare entry broke its ring.
  for (const std::uint64_t id : drop_later_) dropConnection(id, "broke its ring");
  drop_later_.clear();
  sched_.expireDeadlines(now, done_);
  finishDone(done_);
  if (batches_.tracked() > 0) expireBatches(now);
  expireRunning(now);
  if (dispatch(now)) {
    worked = true;
    collect(now);  // an inline executor has finished already
  }
  worked = assignToWorkers(now) || worked;
  worked = flush() || worked;
  sched_.collectIdle(now, kIdleCollectBudget);
  state_.tick(sched_, now, stateActivity());
  if (shutting_down_ && shutdownStep(now)) loop_->stop();
  return worked;
}

bool Server::beforeSleep() {
  // Records the daemon holds itself (backlogs, aborts) keep it awake; only
  // connections that have some are dirty.
  for (const Connection* c : conns_.dirty()) {
    if (!c->closing && (!c->backlog.empty() || (c->worker && !c->worker->aborts.empty()))) {
      return true;
    }
  }
  // Every active connection's flag, one fence, then the re-check
  // (doorbell.hpp); the others' flags are set already. A connection with
  // something in its rings stays active; the daemon stays awake for it
  // when its completion ring has room for the answers.
  for (Connection* c : conns_.active()) {
    if (!c->closing) conns_.queueDemote(*c);
  }
  const TimeNs now = env_.now();
  // A connection that spent its rejection budget keeps its cells until the
  // budget is back: the loop sleeps until then rather than spin for it.
  TimeNs throttled_until = kNever;
  if (conns_.demote()) {
    for (const Connection* c : conns_.active()) {
      const bool credit =
          c->outstanding + c->backlog.size() < c->segment->layout().geometry.completion_capacity;
      if (c->closing || !credit || !c->lanesMayHaveWork()) continue;
      if (!c->reject_budget.allows(now)) {
        throttled_until = std::min(throttled_until, c->reject_budget.nextAt());
        continue;
      }
      for (Connection* a : conns_.active()) a->own_sleep.clear();
      return true;
    }
  }
  // Sleep until the next batch is due or a deadline passes, if sooner than anything else.
  TimeNs wake =
      std::min({sched_.nextDeadline(), next_watchdog_, throttled_until, set_ups_.nextAt()});
  // expireBatches looks every 10 ms at most: waking sooner would only spin.
  if (batches_.tracked() > 0) {
    wake = std::min(wake, std::max(batches_.earliestDeadline(), next_batch_check_));
  }
  if (metrics_) wake = std::min(wake, metrics_->publishDueAt());
  if (workers_.running() > 0) wake = std::min(wake, workers_.nextRunningCheck());
  wake = std::min(wake, state_.dueAt(env_.now(), stateActivity()));
  for (std::size_t e = 0; e < executors_.size(); ++e) {
    if (executors_[e]->freeSlots() > 0)
      wake = std::min(wake, sched_.batchDueAt(static_cast<EndpointId>(e)));
  }
  if (wake != kNever) armTimer(std::max(wake, env_.now() + 1));
  return false;
}

void Server::armTimer(TimeNs at) {
  if (timer_at_ <= at) return;  // an earlier timer is already queued
  timer_at_ = at;
  loop_->timerAt(at, [this, at](int) {
    if (timer_at_ == at) timer_at_ = kNever;
  });
}

}  // namespace fairsched::daemon
