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
// The class is split by job: server.cpp (lifecycle: create, poll/sleep,
// signals, reload, graceful stop), server_control.cpp (accept, Hello,
// OpenTenant, replies, dropping a peer), server_requests.cpp (ingest, admit,
// dispatch, collect, completions), server_admin.cpp (fairschedctl's commands
// and their JSON). Executors come from executor_factory.hpp or the caller.
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
#include "daemon/error.hpp"
#include "daemon/exec/executor.hpp"
#include "daemon/exec/executor_factory.hpp"
#include "daemon/fleet/fleet_limiter.hpp"
#include "daemon/loop/event_loop.hpp"
#include "daemon/metrics/metrics.hpp"
#include "daemon/server/client_rules.hpp"
#include "daemon/server/notifier.hpp"
#include "daemon/server/server_stats.hpp"
#include "shm/control_protocol.hpp"
#include "shm/doorbell.hpp"
#include "shm/segment.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched::daemon {

// A connection of fairschedd in the worker role (server_workers.cpp): an
// engine serving `endpoint`, with what it last said it could take. At
// namespace scope: a class nested in Server with default member
// initializers could not be default-constructed inside Server.
struct WorkerState {
  EndpointId endpoint = 0;
  std::string name;
  std::optional<shm::SubmissionConsumer> events;  // its event ring (ring 0)
  std::uint64_t assigned = 0;                     // assignments written so far
  // Its last CAPACITY: free after it had taken `seen` assignments.
  std::uint64_t seen = 0;
  std::uint32_t free_sequences = 0;
  std::uint64_t free_kv_tokens = 0;
  // Tokens (prompt + max output) of every assignment after `seen`, oldest first.
  std::deque<std::uint64_t> unseen_tokens;
  std::uint64_t unseen_token_sum = 0;
  std::uint32_t running = 0;               // assigned, not finished
  std::uint64_t tokens = 0;                // output tokens it streamed
  std::uint64_t finished = 0;              // requests it finished
  std::deque<shm::CompletionSlot> aborts;  // ABORT and PREEMPT records not yet in its ring
  bool ignores_preempt = false;            // left a PREEMPT unanswered: not asked again
  // What the daemon may still assign: its statement less what it was given since.
  std::uint32_t freeSequences() const {
    const std::uint64_t since = assigned - seen;
    return since >= free_sequences ? 0 : static_cast<std::uint32_t>(free_sequences - since);
  }
  std::uint64_t freeKvTokens() const {
    return unseen_token_sum >= free_kv_tokens ? 0 : free_kv_tokens - unseen_token_sum;
  }
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
  static Result<std::unique_ptr<Server>> create(const config::Config& cfg,
                                                const MakeExecutors& make_executors);
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
  struct Ring {
    TenantId tenant = kNoTenant;  // kNoTenant while revoked
    std::string name;
    std::optional<shm::SubmissionConsumer> consumer;
    std::string tier_hint;  // as the client asked at open (a name: ids change on reload)
    bool revoked =
        false;  // a reload took the tenant from this client: submissions end UNAUTHORIZED
  };
  // A record waiting for room in a client's completion ring; a stream
  // chunk's token ids are backlog_tokens[tokens_at, + slot.output_tokens).
  struct Outgoing {
    shm::CompletionSlot slot;
    std::size_t tokens_at = 0;
  };
  struct Connection {
    std::uint64_t id = 0;
    int fd = -1;
    ucred cred{};
    const config::ClientRule* rule = nullptr;
    std::vector<bool> endpoint_allowed;
    std::optional<shm::Segment> segment;
    std::optional<shm::EventFd> doorbell;         // the client writes, we read
    std::optional<shm::EventFd> completion_bell;  // we write, the client reads
    std::optional<shm::CompletionProducer> producer;
    // The segment's words the loop's passes touch, resolved once (attachSegment()).
    shm::ReadyBitmap bitmap;
    shm::SleepFlag own_sleep;          // "the daemon sleeps", for this client
    shm::PeerSleepFlag peer_sleep;     // "the client sleeps"
    std::size_t shm_index = SIZE_MAX;  // in shm_conns_
    bool dirty = false;                // in dirty_
    bool active = false;               // in active_: its rings are looked at every pass
    TimeNs last_work = 0;              // when a pass last found something in its rings
    std::vector<Ring> rings;
    std::vector<std::uint32_t> pending_rings;  // taken from the bitmap, not yet drained dry
    std::vector<bool> ring_pending;
    std::deque<Outgoing> backlog;               // completions and stream chunks not yet in the ring
    std::vector<std::uint32_t> backlog_tokens;  // stream chunks' token ids, see Outgoing
    std::size_t backlog_chunks = 0;             // stream chunks in `backlog`
    bool unpublished = false;       // records written into the ring, not yet published (flush())
    std::uint64_t outstanding = 0;  // admitted, not yet completed
    std::optional<WorkerState> worker;  // the worker role
    bool closing = false;
    // io_uring operations queued on this connection's buffers; a closed
    // connection is freed only when the last one has completed.
    int ops = 0;
    EventLoop::OpId doorbell_op = 0;
    EventLoop::OpId recv_op = 0;  // the queued recvmsg
    EventLoop::OpId out_op = 0;   // the pollOut queued while admin replies wait
    // Receive buffers for the queued recvmsg.
    alignas(8) std::byte buf[512];
    iovec iov{};
    msghdr msg{};
    std::uint64_t doorbell_buf = 0;
    // Admin replies not yet taken by the socket; sent when it has room.
    std::deque<std::vector<std::byte>> outbox;
    bool out_armed = false;
  };
  // An admitted request the daemon still owes a completion. Kept in a slab
  // indexed by the core request id (its own slot number), so the hot path
  // neither hashes nor allocates: a reused slot keeps its prompt buffer.
  struct Pending {
    bool live = false;
    std::uint64_t conn = 0;
    std::uint64_t request_id = 0;
    std::uint64_t tag = 0;
    core::Handle handle = 0;
    EndpointId endpoint = 0;
    TenantId tenant = kNoTenant;
    TimeNs admitted = 0;
    TimeNs dispatched = 0;
    // Arena words: the prompt's token ids (none when counts_only), then the
    // parameters (params_bytes bytes).
    std::vector<std::uint32_t> prompt;
    std::uint32_t prompt_tokens = 0;
    std::uint32_t params_bytes = 0;
    bool counts_only = false;
    bool stream = false;  // the client wants the tokens
    // Worker endpoints (server_workers.cpp).
    std::uint32_t gen = 0;     // bumped at every reuse: assignment ids never repeat
    std::uint64_t worker = 0;  // the worker's connection while assigned; 0 = none
    std::uint32_t max_output_tokens = 0;
    std::int32_t priority = 0;
    TimeNs deadline = kNever;
    std::uint32_t streamed = 0;  // output tokens the worker reported so far
    TimeNs first_token = 0;
    // Ended early (cancel, deadline, timeout, slow consumer, client gone):
    // its completion is sent, the abort is on its way to the worker, and the
    // entry lives on until the worker acknowledges it, so that what the
    // worker still sends for it is recognised.
    bool aborted = false;
    // Preemption (endpoints with it on): the ids streamed so far, for the
    // ASSIGN that resumes it; `streamed` when it was last assigned; when a
    // PREEMPT was sent (0: none outstanding).
    std::vector<std::uint32_t> generated;
    std::uint32_t streamed_at_dispatch = 0;
    TimeNs preempt_asked = 0;
  };

  Server(const config::Config& cfg, core::SchedulerSpec spec);
  static shm::CompletionSlot completionFor(std::uint64_t request_id, std::uint64_t tag,
                                           Status status);
  Result<> listen();
  void acceptNext();
  void onAccept(int fd);
  void receiveNext(Connection& c);
  void onMessage(std::uint64_t conn_id, int bytes);
  void handleHello(Connection& c, const shm::HelloMessage& m);
  void handleOpenTenant(Connection& c, const shm::OpenTenantMessage& m);
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
  void revokeRing(Connection& c, Ring& r);
  bool sendReply(Connection& c, std::span<const std::byte> bytes, const int* fds, int nfds);
  void armDoorbell(Connection& c);
  void dropConnection(std::uint64_t conn_id, const char* why);
  // An operation of connection `id` completed: the live connection, or null
  // when it is closed (and then freed once its last operation is done).
  Connection* opDone(std::uint64_t id);

  bool poll();
  // One step of a graceful stop; true when nothing is left to finish.
  bool shutdownStep(TimeNs now);
  bool beforeSleep();
  bool ingest(Connection& c, TimeNs now);
  void admit(Connection& c, std::uint32_t ring, const shm::SubmissionSlot& slot,
             std::span<const std::uint32_t> prompt, TimeNs now);
  bool dispatch(TimeNs now);
  bool collect(TimeNs now);
  // server_workers.cpp: the worker role.
  void handleWorkerHello(Connection& c, const shm::HelloMessage& m, shm::HelloReplyMessage& reply,
                         std::string_view name);
  bool ingestWorker(Connection& c, TimeNs now);
  // False: the event breaks the protocol (the worker is dropped).
  bool onWorkerEvent(Connection& c, const shm::WorkerEvent& ev,
                     std::span<const std::uint32_t> words, TimeNs now);
  bool assignToWorkers(TimeNs now);
  // The worker `c` with the most room on endpoint `e` that can take one more
  // request; null when none.
  Connection* roomiestWorker(EndpointId e);
  // How many more requests worker `c` may be given now: its statement, the
  // endpoint's max_sequences and room in its assignment ring.
  std::uint32_t sequencesFor(Connection& c);
  // Ends request `key` on its worker now with `why` (its completion goes
  // out at once with the tokens streamed so far) and tells the worker to
  // abort; the entry lives on until the worker acknowledges.
  void abortRunning(std::uint64_t key, Status why, TimeNs now);
  // The worker connection `c` is going: what it ran ends or is requeued.
  void workerLost(Connection& c, TimeNs now);
  // The client `c` is going: what it has running on workers is aborted.
  void abortClientRequests(const Connection& c, TimeNs now);
  // A client's cancel(request_id) (a kSlotCancel slot).
  void cancelRequest(Connection& c, std::uint64_t request_id, TimeNs now);
  // Requests running on workers past their deadline or batch_timeout_ms.
  void expireRunning(TimeNs now);
  // The final completion of worker request `key`, and the core's account of it.
  void finishWorkerRequest(std::uint64_t key, Status status, std::uint32_t output_tokens,
                           TimeNs now);
  // Queues a stream chunk of request `p` for its client; false when the
  // client's buffer is full (the request then ends SLOW_CONSUMER).
  bool relayTokens(Pending& p, std::span<const std::uint32_t> tokens, TimeNs emit_ns);
  std::uint64_t assignmentId(std::uint64_t key) const {
    return (std::uint64_t{pending_[key].gen} << 32) | key;
  }
  // The live pending entry an assignment id names, if `worker` holds it.
  Pending* assignedTo(std::uint64_t assignment, std::uint64_t worker);
  bool isWorkerEndpoint(std::size_t e) const {
    return cfg_.endpoints[e].executor == config::ExecutorKind::kWorker;
  }
  std::size_t running_on_workers_ = 0;
  TimeNs next_running_check_ = 0;
  // Preemption (server_workers.cpp): at most one PREEMPT outstanding per
  // endpoint; the pending key it names, or kNoPreempt.
  static constexpr std::uint64_t kNoPreempt = UINT64_MAX;
  std::vector<std::uint64_t> preempt_outstanding_;
  std::vector<TimeNs> next_preempt_check_;
  std::vector<core::Scheduler::Running> preempt_running_;
  std::vector<std::uint64_t> preempt_keys_;
  std::vector<std::uint32_t> resume_payload_;
  // Asks a worker of endpoint `e` to give back the sequence the core names,
  // when its waiting request fits nowhere.
  void maybePreempt(EndpointId e, TimeNs now);
  // A PREEMPTED event: the request goes back to its tenant's queue.
  bool onPreempted(Connection& c, const shm::WorkerEvent& ev, TimeNs now);
  void finishDone(std::vector<core::Done>& done);
  void complete(std::uint64_t conn_id, shm::CompletionSlot slot, bool was_admitted);
  bool flush();
  void armTimer(TimeNs at);
  void armExecutorWatch(std::size_t e);
  void armSignals();
  // STATUS= for the supervisor: clients, queued, in flight.
  std::string statusLine() const;
  void notifyWatchdog(TimeNs now);

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
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> conns_;
  // The connections with a segment, dense: the loop's per-pass scans (sleep
  // flags, ready bitmaps) run over this array, not over conns_.
  std::vector<Connection*> shm_conns_;
  // Connections with completion records written but not published, or held
  // in a backlog, or worker aborts waiting: the only ones flush() visits.
  std::vector<Connection*> dirty_, flushing_;
  void markDirty(Connection& c) {
    if (c.dirty) return;
    c.dirty = true;
    dirty_.push_back(&c);
  }
  // The connections whose rings every pass looks at (ingest). The others
  // have their "daemon sleeps" flag set, so their clients ring the doorbell
  // after publishing, which activates them again (armDoorbell): a pass costs
  // what the busy connections cost, not what every connection costs. A
  // connection leaves when the daemon goes to sleep, or when its rings have
  // been idle for kDemoteAfterNs, after a re-check behind a fence
  // (demote()).
  std::vector<Connection*> active_;
  std::vector<Connection*> demoting_;  // poll()'s, reused
  static constexpr TimeNs kDemoteAfterNs = 2 * kNsPerMs;
  void activate(Connection& c);
  // Sets the flags of demoting_'s connections, one fence, and takes off
  // active_ those whose rings are still empty; true when one was not.
  bool demote();
  // `c` has its segment: resolves its words and lists it in shm_conns_.
  void attachSegment(Connection& c);
  // Takes `c` off shm_conns_ and dirty_ (dropConnection()).
  void detachConnection(Connection& c);
  std::vector<Connection*> published_;                                     // flush()'s, reused
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> closed_;  // ops still queued
  std::vector<Pending> pending_;                                           // by core request id
  std::vector<std::uint64_t> free_pending_;
  Pending* findPending(std::uint64_t id) {
    return id < pending_.size() && pending_[id].live ? &pending_[id] : nullptr;
  }
  void releasePending(std::uint64_t id) {
    Pending& p = pending_[id];
    if (p.worker != 0 && running_on_workers_ > 0) {
      --running_on_workers_;
      --stats_.running_on_workers[p.endpoint];
    }
    p.live = false;
    p.worker = 0;
    p.aborted = false;
    ++p.gen;
    free_pending_.push_back(id);
  }
  std::vector<std::uint64_t> drop_later_;
  struct RunningBatch {
    std::vector<std::uint64_t> ids;  // request ids (pending_ keys)
    EndpointId endpoint = 0;
    TimeNs deadline = kNever;  // batch_timeout_ms after dispatch
  };
  std::unordered_map<std::uint64_t, RunningBatch> batches_;  // by batch id
  // Nodes of batches_ that finished, kept with their ids' capacity so that a
  // dispatch allocates nothing: takeBatchNode() / retireBatch().
  std::vector<decltype(batches_)::node_type> spare_batches_;
  RunningBatch& newBatch(std::uint64_t id);
  void retireBatch(decltype(batches_)::iterator it);
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
  std::uint64_t next_conn_ = 1;
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
  std::uint64_t in_flight_batches_ = 0;
  const std::uint64_t bell_value_ = 1;
  core::Batch batch_;
  std::vector<core::Done> done_;
  std::vector<BatchDone> finished_;
  std::vector<shm::CompletionSlot> flush_buf_;
  std::vector<std::uint32_t> event_words_;
  ServerStats stats_;
  std::unique_ptr<Notifier> notifier_;
  std::unique_ptr<Metrics> metrics_;  // null: no metrics endpoint
  TimeNs next_watchdog_ = kNever;
  // Declared last: destroyed (stopped, leases given back) before the rest.
  std::unique_ptr<fleet::FleetLimiter> fleet_;
};

}  // namespace fairsched::daemon
