// fairschedd's serving side: the control socket, one shared-memory segment
// per client connection, ingest from the submission rings, the scheduling
// core, the executors and completions back to the clients — all on one
// io_uring event loop thread (executors run batches on threads of their own).
//
// Per loop iteration (poll): take the ready bitmaps and drain each ready ring
// within a per-ring budget (so one tenant's full ring cannot delay another's),
// copy each slot out and validate it, admit it through the core; expire
// deadlines; while an executor has a free slot, form the next batch (late
// binding); collect finished batches; publish completions and ring a client's
// eventfd only when it said it sleeps. The loop spins while there is work and
// then sleeps in io_uring (doorbells, the socket, executor eventfds, timers
// for max_wait and deadlines).
//
// Every request gets exactly one completion: admitted ones when they finish,
// are withdrawn or expire; rejected ones at once. Completions of a client that
// is gone are dropped; its queued requests are cancelled so they never reach
// an executor. A client never has more requests outstanding than its
// completion ring holds (ingest pauses for it), so a completion always has
// somewhere to go.
//
// Every admitted request ends in one place, endRequest() (see Ending).
//
// Server keeps the loop's order (poll, before-sleep) and the decisions; its
// state lives in parts with their own contracts and tests: ConnectionSet
// (connections and the active/dirty lists the passes walk), PendingSlab
// (admitted requests), BatchTracker (batches on in-daemon executors),
// WorkerPool (attached engines and their room). Its methods are split by
// job: server.cpp (lifecycle: create, poll/sleep, signals, reload, graceful
// stop), server_control.cpp (accept, Hello, OpenTenant, replies, dropping a
// peer), server_requests.cpp (ingest, admit, dispatch, collect, endRequest,
// completions), server_workers.cpp (the worker role), server_admin.cpp
// (fairschedctl's commands and their JSON). Executors come from
// executor_factory.hpp or the caller.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/core/scheduler.hpp"
#include "daemon/env.hpp"
#include "daemon/error.hpp"
#include "daemon/exec/executor.hpp"
#include "daemon/exec/executor_factory.hpp"
#include "daemon/fleet/fleet_limiter.hpp"
#include "daemon/loop/event_loop.hpp"
#include "daemon/metrics/metrics.hpp"
#include "daemon/server/batch_tracker.hpp"
#include "daemon/server/client_rules.hpp"
#include "daemon/server/connection_set.hpp"
#include "daemon/server/notifier.hpp"
#include "daemon/server/pending_slab.hpp"
#include "daemon/server/server_stats.hpp"
#include "daemon/server/set_up_queue.hpp"
#include "daemon/server/slot_idle_meter.hpp"
#include "daemon/server/state_store.hpp"
#include "daemon/server/worker_pool.hpp"
#include "shm/control_protocol.hpp"
#include "shm/doorbell.hpp"
#include "shm/segment.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched::daemon {

// How a request ends, for Server::endRequest — the one place an admitted
// request ends. Every admitted request ends exactly once: its client gets
// one completion (or, when the client is gone, the completion is counted
// as dropped), the metrics count it once, the core is charged for what ran,
// and its pending entry is released.
struct Ending {
  enum class Kind : std::uint8_t {
    // The core ended it while queued (core::Done: cancel, deadline,
    // revocation, shutdown); it never ran, the core has settled it.
    kQueued,
    // An executor or a worker finished it, or gave up on it: the core is
    // charged `output_tokens`. For one aborted earlier only this charge and
    // the release are left (its completion went out at the abort).
    kRan,
    // Running on a worker and ended now (cancel, deadline, timeout, slow
    // consumer, client gone): the completion goes out at once with the
    // tokens streamed so far; the entry lives on, marked aborted, until the
    // worker acknowledges (then kRan settles the core's account).
    kAbortedOnWorker,
    // The daemon stops past its hard stop: nothing is charged.
    kAbandoned,
  };
  Kind kind = Kind::kQueued;
  std::uint32_t output_tokens = 0;  // kRan
  std::uint64_t checksum = 0;       // kRan by an in-daemon executor

  static Ending queued() { return {Kind::kQueued}; }
  static Ending ran(std::uint32_t output_tokens, std::uint64_t checksum = 0) {
    return {Kind::kRan, output_tokens, checksum};
  }
  static Ending abortedOnWorker() { return {Kind::kAbortedOnWorker}; }
  static Ending abandoned() { return {Kind::kAbandoned}; }
};

class Server {
 public:
  // Binds the socket and starts the executors (makeExecutors). The error says
  // what failed; its code is the failing part's (kInternal when
  // make_executors breaks its contract).
  static Result<std::unique_ptr<Server>> create(const config::Config& cfg);
  // The same with the executors from `make_executors`, called once after the
  // daemon's signals are blocked (tests inject failing executors this way).
  // It must return one executor per endpoint, in config order.
  // `env` is the clock the server reads (it must outlive the server).
  static Result<std::unique_ptr<Server>> create(const config::Config& cfg,
                                                const MakeExecutors& make_executors,
                                                const Env& env = Env::real());
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves until SIGTERM/SIGINT (SIGHUP reloads the config); then admits
  // nothing more (new submissions end SHUTTING_DOWN), keeps serving what is
  // queued for up to shutdown_grace_ms, ends what is left SHUTTING_DOWN, lets
  // running batches finish, delivers every completion and returns 0. An
  // executor that reports fatal() starts the same stop; run() then returns
  // EIO. Nonzero (an errno) on a fatal loop error too.
  int run();
  // Loop thread only (e.g. from a test hook); a signal does the same.
  void beginShutdown();

  // Re-read the config file the daemon was started with and apply it between
  // two loop iterations (SIGHUP and `fairschedctl reload` call this). A file
  // that does not parse or validate, or that changes what only a restart can
  // (reloadBlockers), changes nothing: the daemon keeps its config and the
  // error is returned, logged and sent as STATUS=. Otherwise limits, weights,
  // quanta, tiers, tenants and client rules apply at once; no queued or
  // in-flight request is lost. A connection whose rule no longer allows one
  // of its tenants loses that tenant: its queued requests end UNAUTHORIZED
  // at once (they are not drained), running ones finish, and new ones on
  // that ring end UNAUTHORIZED until a later reload allows it again.
  // Errors: kConfig (the file, or a change that needs a restart),
  // kUnavailable (started without a config file).
  Result<> reload();

  // daemon.log_level of a reloaded config is ignored (--log-level was given).
  void pinLogLevel() { log_level_pinned_ = true; }

  const ServerStats& stats() const { return stats_; }
  const std::string& socketPath() const { return socket_path_; }
  // Null when [metrics] listen is empty. Loop thread only (see metrics.hpp).
  Metrics* metrics() { return metrics_.get(); }
  // Fleet limits ([fleet]); null without one. Its stats() are safe from any thread.
  const fleet::FleetLimiter* fleet() const { return fleet_.get(); }

 private:
  Server(const config::Config& cfg, core::SchedulerSpec spec, const Env& env);
  static shm::CompletionSlot completionFor(std::uint64_t request_id, std::uint64_t tag,
                                           Status status);
  Result<> listen();
  void acceptNext();
  void onAccept(int fd);
  void receiveNext(Connection& c);
  void onMessage(std::uint64_t conn_id, int bytes);
  void handleHello(Connection& c, const shm::HelloMessage& m);
  // A well-formed first Hello: served now, or queued while its uid's set-up
  // budget is spent (set_ups_).
  void onHello(Connection& c, const shm::HelloMessage& m, TimeNs now);
  // Serves the queued Hellos whose uid's budget is back; true when any was.
  bool serveWaitingHellos(TimeNs now);
  void handleOpenTenant(Connection& c, const shm::OpenTenantMessage& m);
  void handleCloseTenant(Connection& c, const shm::CloseTenantMessage& m);
  // A reply to a peer that may be gone: false (and the peer dropped) when
  // it cannot be sent.
  bool replyOrDrop(Connection& c, std::span<const std::byte> bytes);
  // Appends endpoint `e` to a HelloReply's list.
  void describeEndpoint(shm::HelloReplyMessage& reply, std::size_t e) const;
  // Sends the successful HelloReply with the segment and eventfds, then
  // watches the peer's doorbell. False (the peer dropped) when it cannot.
  bool sendWelcome(Connection& c, shm::HelloReplyMessage& reply, const char* text);
  // server_admin.cpp: fairschedctl's commands.
  void handleAdmin(Connection& c, const shm::AdminRequestMessage& m);
  void serveAdmin(Connection& c, const shm::AdminRequestMessage& m);  // may throw
  void sendAdmin(Connection& c, std::uint32_t seq, shm::ControlStatus status,
                 const std::string& json);
  void pumpOutbox(Connection& c);
  std::string statusJson() const;
  // Rows of `only` (a tenant name) when it is not empty.
  std::string tenantsJson(std::uint32_t limit, std::string_view only);
  // After a reload: each connection's rule, endpoints and tenants again.
  void reapplyRules();
  // A reload took `e`'s tenant from client `c`: its queued requests end
  // UNAUTHORIZED, and so do later submissions until it is allowed again.
  void revokeTenant(Connection& c, TenantHandles::Entry& e);
  bool sendReply(Connection& c, std::span<const std::byte> bytes, const int* fds, int nfds);
  void armDoorbell(Connection& c);
  // Closes connection `conn_id` now, logging `why` (or the reason dropLater()
  // recorded, which takes precedence): its requests end or are requeued.
  void dropConnection(std::uint64_t conn_id, const char* why);
  // Marks `c` closing and drops it for `why` once the pass over the
  // connections is over (drop_later_): the active list must not change under it.
  void dropLater(Connection& c, std::string why);

  bool poll();
  // True when a pass could find nothing to do but what time brings: no
  // records to publish, nothing queued, running or in the rings. A few
  // loads of lines the clients write, no clock (the loop's idle_glance).
  bool idleAtAGlance() const;
  // One step of a graceful stop; true when nothing is left to finish.
  bool shutdownStep(TimeNs now);
  bool beforeSleep();
  bool ingest(Connection& c, TimeNs now);
  void admit(Connection& c, const shm::SubmissionSlot& slot, std::span<const std::uint32_t> prompt,
             TimeNs now);
  bool dispatch(TimeNs now);
  bool collect(TimeNs now);
  // server_workers.cpp: the worker role.
  void handleWorkerHello(Connection& c, const shm::HelloMessage& m, shm::HelloReplyMessage& reply,
                         std::string_view name);
  bool ingestWorker(Connection& c, TimeNs now);
  // Logs why worker `c` breaks the protocol and drops it after this pass.
  bool dropWorker(Connection& c, std::string why);
  // Empty, or the rule of the protocol the event breaks (the worker is dropped for it).
  std::string onWorkerEvent(Connection& c, const shm::WorkerEvent& ev,
                            std::span<const std::uint32_t> words, TimeNs now);
  // `tokens` of `assignment` from worker `c` (a TOKENS record, or an entry
  // of a STEP record): charged, relayed. Empty, or the rule they break.
  std::string onTokens(Connection& c, std::uint64_t assignment,
                       std::span<const std::uint32_t> tokens, std::int64_t emit_ns, TimeNs now);
  // The request's first output token came now (its time to first token).
  void noteFirstToken(Pending& p, TimeNs now);
  bool assignToWorkers(TimeNs now);
  // routing = "prefix" (server_assign.cpp): one request at a time, each to
  // the worker core::chooseWorker names.
  bool assignByPrefix(EndpointId e, TimeNs now);
  // Writes the assignment of `d` to worker `wc`'s ring (unpublished).
  void assignOne(Connection& wc, const core::Dispatched& d, TimeNs now);
  void publishAssignments(Connection& wc);
  // At admission, under routing = "prefix": the request's block hashes —
  // those it carries (kSlotPrefix), or those of its prompt ids — kept by
  // the core (Scheduler::setPrefix). `words`: the slot's arena words.
  void notePrefix(const Pending& p, const shm::SubmissionSlot& slot,
                  std::span<const std::uint32_t> words);
  // A worker's KV event (kCache): its prefix cache as it reports it.
  void onCacheEvent(WorkerState& w, shm::CacheOp op, std::span<const std::uint32_t> words);
  std::vector<std::uint64_t> cache_chain_;
  std::vector<Connection*> route_workers_;
  std::vector<Connection*> route_touched_;  // assigned to this pass, not yet published
  std::vector<core::RouteCandidate> route_;
  // Ends request `key` on its worker now with `why` (its completion goes
  // out at once with the tokens streamed so far) and tells the worker to
  // abort; the entry lives on until the worker acknowledges.
  void abortRunning(std::uint64_t key, Status why, TimeNs now);
  // The worker connection `c` is going (`why`): what it ran ends or is requeued.
  void workerLost(Connection& c, std::string_view why, TimeNs now);
  // The client `c` is going: what it has running on workers is aborted.
  void abortClientRequests(const Connection& c, TimeNs now);
  // A client's cancel(request_id) (a kSlotCancel slot).
  void cancelRequest(Connection& c, std::uint64_t request_id, TimeNs now);
  // Requests running on workers past their deadline or batch_timeout_ms.
  void expireRunning(TimeNs now);
  // Queues a stream chunk of request `p` for its client; false when the
  // client's buffer is full (the request then ends SLOW_CONSUMER).
  bool relayTokens(Pending& p, std::span<const std::uint32_t> tokens, TimeNs emit_ns);
  // The live pending entry an assignment id names, if `worker` holds it.
  Pending* assignedTo(std::uint64_t assignment, std::uint64_t worker);
  bool isWorkerEndpoint(std::size_t e) const {
    return cfg_.endpoints[e].executor == config::ExecutorKind::kWorker;
  }
  std::vector<core::Scheduler::Running> preempt_running_;
  std::vector<std::uint64_t> preempt_keys_;
  std::vector<std::uint32_t> resume_payload_;
  // Asks a worker of endpoint `e` to give back the sequence the core names,
  // when its waiting request fits nowhere.
  void maybePreempt(EndpointId e, TimeNs now);
  // A PREEMPTED event: the request goes back to its tenant's queue. Empty,
  // or the rule it breaks.
  std::string onPreempted(Connection& c, const shm::WorkerEvent& ev, TimeNs now);
  // The one place an admitted request ends: see Ending.
  void endRequest(std::uint64_t key, Status status, Ending how, TimeNs now);
  // Ends each request the core finished (core::Done) and empties `done`.
  void finishDone(std::vector<core::Done>& done);
  // Hands a record to client `conn_id`: into its completion ring, or its
  // backlog when the ring is full; dropped (counted) when the client is
  // gone or going. `was_admitted`: it settles one of its outstanding requests.
  void complete(std::uint64_t conn_id, shm::CompletionSlot slot, bool was_admitted);
  bool flush();
  void armTimer(TimeNs at);
  void armExecutorWatch(std::size_t e);
  void armSignals();
  // STATUS= for the supervisor: clients, queued, in flight.
  std::string statusLine() const;
  void notifyWatchdog(TimeNs now);

  const Env& env_;
  config::Config cfg_;
  ClientRules rules_;
  core::Scheduler sched_;
  std::unique_ptr<EventLoop> loop_;
  std::vector<std::unique_ptr<Executor>> executors_;  // per endpoint
  std::string socket_path_;
  int listen_fd_ = -1;
  EventLoop::OpId accept_op_ = 0;
  int signal_fd_ = -1;
  std::uint64_t signal_buf_[16] = {};
  ConnectionSet conns_;
  SetUpQueue set_ups_;  // Hellos waiting for their uid's set-up budget
  // A connection whose rings stayed empty this long leaves the active list.
  static constexpr TimeNs kDemoteAfterNs = 2 * kNsPerMs;
  void activate(Connection& c) { conns_.activate(c, env_.now()); }
  void markDirty(Connection& c) { conns_.markDirty(c); }
  // Gives `c` a new segment of `geometry`, its two eventfds and its
  // completion producer, and attaches it; false (logged) when the kernel
  // refuses one of them.
  bool openSegment(Connection& c, const shm::Geometry& geometry);
  std::vector<Connection*> flushing_, published_;  // flush()'s, reused
  PendingSlab pending_;                            // by core request id
  std::vector<std::uint64_t> drop_later_;
  BatchTracker batches_;
  std::vector<SlotIdleMeter> slot_meters_;  // per endpoint: executor busy vs starved
  ExecBatch exec_batch_;  // dispatch's, reused (an inline executor leaves its buffers)
  // Ends the requests of batches past batch_timeout_ms (EXECUTOR_FAILED).
  void expireBatches(TimeNs now);
  // Executor `e` reported fatal(): its running requests end EXECUTOR_FAILED
  // and the daemon stops (run() then returns non-zero).
  void executorLost(std::size_t e, TimeNs now);
  static constexpr std::size_t kNoExecutor = ~std::size_t{0};
  std::size_t lost_executor_ = kNoExecutor;  // the endpoint whose executor is lost
  std::string lost_executor_error_;
  // Ends each still-pending request of `ids` EXECUTOR_FAILED, charged as run.
  void failRequests(const std::vector<std::uint64_t>& ids, TimeNs now);
  TimeNs next_batch_check_ = 0;
  std::uint64_t next_batch_ = 1;
  TimeNs timer_at_ = kNever;
  EventLoop::OpId timer_op_ = 0;
  bool shutting_down_ = false;
  bool draining_ = false;
  std::size_t clients_ = 0;        // connections past hello (admin peers are not clients)
  bool log_level_pinned_ = false;  // fairschedctl drain: admit nothing new, finish the rest
  TimeNs started_at_ = 0;
  std::uint64_t reloads_ok_ = 0;
  std::uint64_t reloads_failed_ = 0;
  std::string last_reload_error_;
  TimeNs shutdown_deadline_ = kNever;
  const std::uint64_t bell_value_ = 1;
  core::Batch batch_;
  std::vector<core::Done> done_;
  std::vector<BatchDone> finished_;
  std::vector<shm::CompletionSlot> flush_buf_;
  std::vector<std::uint32_t> event_words_;
  ServerStats stats_;
  WorkerPool workers_{cfg_, stats_};  // after cfg_ and stats_, which it reads
  std::unique_ptr<Notifier> notifier_;
  std::unique_ptr<Metrics> metrics_;  // null: no metrics endpoint
  TimeNs next_watchdog_ = kNever;
  // Limit windows and learned estimates across restarts ([daemon] state_dir).
  StateStore state_;
  // Counts up with anything that changes what state_ would write.
  std::uint64_t stateActivity() const {
    return stats_.submissions + stats_.completions_delivered + reloads_ok_;
  }
  // Declared last: destroyed (stopped, leases given back) before the rest.
  std::unique_ptr<fleet::FleetLimiter> fleet_;
};

}  // namespace fairsched::daemon
