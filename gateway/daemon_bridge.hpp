// The gateway's side of fairschedd: a libfairsched client that submits each
// generation request as a counts-only request of its key's tenant (the
// request's params name the gateway instance and the exchange), and for
// each upstream replica (replica.hpp) a worker of the gateway's endpoint
// that is assigned those requests and states that replica's free sequences
// and tokens as its capacity — so the daemon's roomiest-worker choice
// balances the replicas.
//
// Contract. submit() registers an Exchange; the completion loop ends it
// with the daemon's final completion (Exchange::final), a worker loop hands
// it its assignment (Exchange::assignment, Exchange::replica) or aborts it
// (Exchange::aborted, the upstream call closed). Whoever runs the assigned
// exchange reports its tokens (emitTokens) and ends its assignment exactly
// once (finish). A lost worker connection aborts every exchange assigned
// through it and reconnects. The x-ratelimit-* bookkeeping
// (RateLimitHeaders) follows what is submitted and completed; its clock is
// the injected Env.
//
// Replicas. Each has a health loop (active checks) and takes the relay's
// reports of its calls (upstreamOk / upstreamFailed); an ejected replica
// states no capacity, so the daemon assigns it nothing — unless every
// replica is out, when all state their capacity again and callers get a
// fast 502 rather than a wait in the queue (Envoy's panic threshold). A
// call refused before anything was sent is taken over by another replica
// with room (takeOver), or waits for room on one that is up (roomLater). A
// reload (setUpstreams) adds replicas, changes
// their capacity, and drains the removed ones: no new work, their streams
// run to the end, then their workers detach.
//
// Threads. The bridge's loops (completions, workers, health, metrics,
// cancel retries) run on the first of the gateway's io_contexts, the
// bridge's thread; its public calls come from any gateway thread, for an
// exchange from that exchange's home (exchange.hpp). One lock (mu_) guards
// the libfairsched client and workers, the maps, the replicas' counts and
// health and the rate-limit bookkeeping; it is never held across a
// co_await, and what the daemon says of an exchange reaches it by a post
// to its home. setUpstreams, syncTenants, loadLimits, start, run and stop
// are the bridge's thread's. Nothing blocks but libfairsched's bounded
// control round trips (connecting, opening a tenant the first time).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <boost/asio/posix/stream_descriptor.hpp>

#include "daemon/env.hpp"
#include "fairsched/client.hpp"
#include "fairsched/worker.hpp"
#include "gateway/adaptive_mutex.hpp"
#include "gateway/coro.hpp"
#include "gateway/error_reply.hpp"
#include "gateway/exchange.hpp"
#include "gateway/gateway_config.hpp"
#include "gateway/rate_limit_headers.hpp"
#include "gateway/replica.hpp"

namespace fairsched::gateway {

class DaemonBridge {
 public:
  // `cfg` is the gateway's running config, read on the bridge's thread; it
  // outlives the bridge (a reload changes only what may change without a
  // restart). `threads`: the gateway's io_contexts, the bridge's first.
  DaemonBridge(std::vector<asio::io_context*> threads, const GatewayConfig& cfg, daemon::Env& env);

  // Connects the client, checks the endpoint, attaches a worker per
  // upstream. False (logged) when the gateway cannot serve.
  bool start();
  // Spawns the completion loop and each replica's worker and health loops.
  void run();
  // The worker and health loops end (the gateway is stopping).
  void stop();
  // The running config's upstreams changed (a reload): adds the new ones,
  // updates the capacity of those that stay, drains those gone.
  void setUpstreams();

  // Reads cfg.daemon_config for the limits the x-ratelimit-* headers advertise.
  void loadLimits();
  // Holds open the tenant of every configured key, and only those: opens the
  // missing ones in one pipelined batch per tier hint (a refusal is logged
  // and tried again at the key's next request), closes those no key names
  // any more (their queued requests end CANCELLED). At start and on reload.
  void syncTenants();

  // Why the gateway is not ready to serve ("" when it is).
  std::string_view unready() const;
  // Each upstream for /readyz: [{"name","url","state","running","ejections","why"}].
  std::string upstreamsJson() const;
  // No exchange submitted or assigned.
  bool idle() const;
  // The endpoint's max_output_tokens (0: none; known from start()).
  std::uint32_t maxOutputTokens() const { return max_output_tokens_; }

  // Submits `req` for `key` with a deadline of `timeout`: the exchange,
  // whose home is `home` (the caller's thread), or the caller's error.
  std::variant<std::shared_ptr<Exchange>, ErrorReply> submit(const Executor& home,
                                                             const ApiKeyConfig& key, Route route,
                                                             GenerateRequest req,
                                                             milliseconds timeout);
  // The caller hung up: cancels the request and closes its upstream call.
  void callerGone(Exchange& ex);

  // A call to `r` got an answer it could use / failed (`certain`: it never
  // reached the upstream: connect refused or timed out).
  void upstreamOk(Replica& r);
  void upstreamFailed(Replica& r, bool certain, std::string why);
  // The exchange's call could not reach its replica: another usable replica
  // with a free sequence runs it instead (counted there until it ends); null
  // when none has room.
  std::shared_ptr<Replica> takeOver(Exchange& ex);
  // No replica has room for a take-over now, but another one is up (full):
  // room will come.
  bool roomLater(const Exchange& ex) const;
  // A usable replica for a call that is not scheduled (GET /v1/models).
  std::shared_ptr<Replica> anyReplica() const;
  // The caller hung up: ends the assignment CANCELLED once the daemon has
  // taken the cancel callerGone() sent (its ABORT or the final completion
  // came; at most a second), so the daemon counts a cancel, not a worker
  // that gave up unasked (EXECUTOR_FAILED). The exchange outlives the wait.
  awaitable<void> finishCancelled(Exchange& ex, std::uint32_t output);
  // Ends the exchange's assignment (once; later calls do nothing). `input`:
  // the prompt tokens the upstream's usage counted (0: unknown), so the
  // daemon settles the estimate the request was submitted with.
  void finish(Exchange& ex, Status status, std::uint32_t output, std::string_view msg,
              std::uint32_t input = 0);
  // Counts `n` more output tokens of the exchange (capped at max_tokens)
  // and reports them: the first at once, later ones at most every
  // kReportEvery. What is not reported goes with the finish, whose output
  // tokens the daemon charges beyond those it heard. `finish_follows`: the
  // stream's last read; they are counted only (a stream whose tokens and
  // end came in one read costs one ring event, as a whole response does).
  void emitTokens(Exchange& ex, std::uint32_t n, bool finish_follows = false);
  // The x-ratelimit-* headers for the exchange's tenant now.
  std::vector<HttpHeader> limitHeaders(const Exchange& ex,
                                       std::optional<std::chrono::nanoseconds> retry_after = {});

 private:
  // What the bridge knows of an assigned exchange, under its lock (the
  // exchange's own fields are its home's).
  struct Assigned {
    std::shared_ptr<Exchange> ex;
    std::shared_ptr<Replica> replica;  // whose worker holds the assignment
    std::shared_ptr<Replica> via;      // whose upstream is called (another: taken over)
    std::uint64_t kv = 0;              // prompt + max output tokens reserved
  };

  // Below, "locked": called with mu_ held.
  bool daemonConnected() const;
  awaitable<void> completionLoop();
  // Cancels `id` at the daemon; when the lanes are full, again shortly
  // (`running`: before the queued ones).
  void cancel(RequestId id, bool running);  // locked
  awaitable<void> cancelRetryLoop();
  void onCompletion(Completion c);                                      // locked
  std::variant<Tenant, ErrorReply> tenantFor(const ApiKeyConfig& key);  // locked
  void syncTenantsLocked();

  std::shared_ptr<Replica> addReplica(const UpstreamConfig& u);  // locked
  bool connectWorker(Replica& r, bool first);                    // locked
  // Every replica's capacity as it stands (health and panic included). Locked.
  void stateCapacity();
  void stateCapacity(Replica& r, bool panic);
  bool anyUsable() const;
  void workerLost(Replica& r);       // locked
  void detachIfDrained(Replica& r);  // locked
  // The room of an exchange taken over by `r` is free again. Locked.
  static void release(Replica& r, std::uint64_t kv);
  awaitable<void> workerLoop(std::shared_ptr<Replica> r);
  awaitable<void> healthLoop(std::shared_ptr<Replica> r);
  awaitable<void> check(Replica& r);
  // GET `path` from the upstream's root within health_timeout_ms: why it
  // failed ("" when it answered below 500; its body in `body`).
  awaitable<std::string> getFromRoot(Replica& r, const std::string& path, std::string& body,
                                     std::size_t limit);
  // capacity = "auto": scrapes the engine's metrics and states the limit.
  awaitable<void> metricsLoop(std::shared_ptr<Replica> r);
  awaitable<void> scrape(Replica& r);
  void onWorkItem(const std::shared_ptr<Replica>& r, WorkItem& item);  // locked
  void endAssignment(                                                  // locked
      Replica& r, std::uint64_t id, std::uint64_t kv, Status status, std::uint32_t output,
      std::string_view message, std::uint32_t input = 0);
  // Emits the exchange's tokens not yet emitted (as far as the ring takes
  // them: the finish charges the rest). Locked.
  static void reportLocked(Exchange& ex, Worker& w);
  // How often a stream's tokens are emitted to the daemon after its first.
  static constexpr TimeNs kReportEvery = 5'000'000;

  std::vector<asio::io_context*> threads_;
  asio::io_context& io_;  // the bridge's thread
  const GatewayConfig& cfg_;
  const std::string endpoint_;  // cfg_.endpoint, read on any thread
  daemon::Env& env_;
  mutable AdaptiveMutex mu_;
  RateLimitHeaders limits_;
  std::optional<Client> client_;
  std::vector<std::shared_ptr<Replica>> replicas_;  // config order; drained ones leave
  std::unordered_map<std::string, Tenant> tenants_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Exchange>> by_serial_;
  std::unordered_map<std::uint64_t, Assigned> by_assignment_;
  std::uint64_t next_serial_ = 1;
  std::string instance_;  // the params prefix of this gateway's requests
  std::uint32_t max_output_tokens_ = 0;
  bool stopping_ = false;
  bool running_loops_ = false;  // run() was called: new replicas get their loops at once
  // Cancels that found every submission lane full, sent again in order
  // (the bridge's thread's timer `retry_` paces them).
  std::vector<RequestId> cancel_retry_;
  std::uint64_t retried_cancels_ = 0;  // in this burst, for its log line
  SteadyTimer retry_;                  // paces cancelRetryLoop
};

}  // namespace fairsched::gateway
