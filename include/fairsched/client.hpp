// libfairsched: how a serving process talks to fairschedd.
//
//   auto client = fairsched::Client::connect({.socket_path = "/run/fairsched/fairsched.sock",
//                                             .client_name = "frontend-7"});
//   auto acme = client->openTenant("acme");
//   auto id = client->submit({.tenant = *acme, .endpoint = "chat", .prompt = tokens,
//                             .max_output_tokens = 256, .tag = my_tag});
//   client->wait(std::chrono::seconds(1));
//   client->poll(completions);
//
// Transport: one AF_UNIX SOCK_SEQPACKET control connection (Hello,
// OpenTenant, CloseTenant), one shared-memory segment from the daemon with a
// few submission lanes shared by every tenant (each request names its
// tenant's handle) and one completion ring, and two eventfds
// (shm/control_protocol.hpp, docs/shm-layout.md). docs/client.md is the guide.
//
// Threading. Every method may be called from any number of threads at once,
// except that the destructor (and move) REQUIRES that no other call is in
// progress; shutdown() is how another thread ends calls that block. In detail:
//   submit()       lock-free on the ring (many producers); the library's own
//                  bookkeeping of outstanding requests takes one of 16 sharded
//                  mutexes for a hash-map insert (no system call under it).
//                  It rings the daemon's doorbell only when the daemon has
//                  said it sleeps.
//   poll()         takes the completion ring's consumer mutex; concurrent
//                  pollers take turns, each completion goes to exactly one.
//   wait()         blocks without holding any lock; several threads may wait
//                  at once, and each completion batch wakes at least one.
//   openTenant(s)(), closeTenant(), reconnects: serialised on the control
//                  connection's mutex.
//
// Every request that submit() accepted gets exactly one Completion, from the
// daemon or — when the daemon goes away first — made up by the library with
// status SHUTTING_DOWN and `local` set. A request submit() rejected gets none.
//
// fork(): a child inherits the Client but not the connection. Every call in
// the child fails with kNotConnected (connected() is false, poll() returns
// nothing) and destroying it there only releases the child's copies of the
// mappings and descriptors: the parent's connection is not touched, whatever
// the child does. A child connects its own Client.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fairsched/error.hpp"
#include "fairsched/export.hpp"
#include "fairsched/http.hpp"
#include "fairsched/request.hpp"
#include "fairsched/retry.hpp"

namespace fairsched {

namespace client_detail {
class ClientCore;  // the implementation; not exported
}

struct ReconnectPolicy {
  // When the connection is lost, later submit(), openTenant(), wait() and
  // reconnect() calls try to connect again: a fresh Hello, then every tenant
  // opened before is opened again (Tenant handles stay valid). Requests in
  // flight at the loss are not resubmitted: they completed SHUTTING_DOWN.
  bool enabled = false;
  // Attempts are spaced by an exponential backoff from initial_delay to
  // max_delay; the first comes right after the loss is noticed.
  std::chrono::nanoseconds initial_delay = std::chrono::milliseconds(100);
  std::chrono::nanoseconds max_delay = std::chrono::seconds(5);
};

struct ClientOptions {
  std::string socket_path = "/run/fairsched/fairsched.sock";
  std::string client_name;  // informational, sent in Hello; at most 63 bytes
  // connect() plus the Hello round trip.
  std::chrono::nanoseconds connect_timeout = std::chrono::seconds(5);
  // One OpenTenant round trip.
  std::chrono::nanoseconds control_timeout = std::chrono::seconds(5);
  // How long wait() busy-polls the completion ring before it sleeps on the
  // eventfd (see shm/doorbell.hpp); 0 sleeps at once.
  std::chrono::nanoseconds spin = std::chrono::microseconds(20);
  ReconnectPolicy reconnect;
};

// An endpoint as the daemon announced it in its HelloReply.
struct EndpointDescription {
  std::string name;
  std::uint16_t id = 0;
  std::uint32_t max_output_tokens = 0;  // 0: no limit announced
  std::uint32_t max_batch_tokens = 0;   // prompt + max output may not exceed it; 0: no limit
};

// Counters since connect(); relaxed, for tests and metrics.
struct ClientStats {
  std::uint64_t submitted = 0;          // accepted by submit()
  std::uint64_t completed = 0;          // completions handed out (daemon and local)
  std::uint64_t local_completions = 0;  // SHUTTING_DOWN made up after a loss
  std::uint64_t ring_full = 0;          // submit() calls that found the ring full
  std::uint64_t doorbell_rings = 0;     // times submit() woke the sleeping daemon
  std::uint64_t connections_lost = 0;
  std::uint64_t reconnects = 0;           // successful reconnections
  std::uint64_t unknown_completions = 0;  // completions for no outstanding request (dropped)
  std::uint64_t abandoned = 0;            // completions of submitAndWait calls that timed out
};

class FAIRSCHED_API Client {
 public:
  // Connects, says Hello, maps the segment. Errors: kInvalidArgument (a NUL in the path, path or
  // name too long), kConnectFailed, kTimedOut, kUnauthorized (the daemon's
  // reason in the message), kVersionMismatch, kShuttingDown, kRefused,
  // kProtocol, kSystem. The reconnect policy only applies once connected.
  static Result<Client> connect(ClientOptions options);

  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  ~Client();

  // Opens `name` (at most 63 bytes) on the daemon, or returns the handle
  // already opened for it (the tier of the first open stays). `tier` is a
  // hint the daemon honours only for clients allowed to assign tiers.
  // Errors: kInvalidArgument, kUnauthorized, kNoCapacity, kShuttingDown,
  // kRefused, kTimedOut, kProtocol, kNotConnected, kDaemonLost.
  // A connection holds up to the daemon's [daemon] max_tenants_per_connection
  // tenants open at once (65,536 by default); kNoCapacity beyond.
  Result<Tenant> openTenant(std::string_view name,
                            std::optional<std::string_view> tier = std::nullopt);

  // Opens many tenants in one pipelined exchange (over 100,000 a second on
  // one connection): one result per name, in order, each as openTenant()
  // would return it. A connection-wide error (kDaemonLost, kTimedOut, ...)
  // is the result of every name of the batch that was sent, and the
  // connection is dropped (which of them the daemon took is unknown; with a
  // reconnect policy the next call opens the registered tenants again).
  std::vector<Result<Tenant>> openTenants(std::span<const std::string_view> names,
                                          std::optional<std::string_view> tier = std::nullopt);

  // Releases a tenant: the daemon ends its queued requests CANCELLED (running
  // ones finish; requests still on their way end CANCELLED too), and the
  // handle is no longer valid for submit() (kUnknownTenant). Opening the name
  // again gives a new handle. While disconnected it only forgets the tenant;
  // if the exchange fails (timeout, lost daemon) the connection is dropped,
  // which releases the tenant in the daemon too. Errors: kUnknownTenant (not
  // open), kRefused (the daemon says it is not open).
  Result<void> closeTenant(Tenant tenant);
  // Closes many in one pipelined exchange: one result per tenant, in order.
  std::vector<Result<void>> closeTenants(std::span<const Tenant> tenants);

  // Writes the request into its tenant's ring and returns its id; the result
  // arrives later as a Completion. Never blocks, except that with a reconnect
  // policy a call made while disconnected may first try to reconnect
  // (bounded by connect_timeout). Errors: kRingFull (back off: poll, wait or
  // retry later), kPromptTooLarge, kInvalidArgument (max_output_tokens above
  // the endpoint's limit), kUnknownTenant, kUnknownEndpoint, kNotConnected,
  // kDaemonLost (lost while submitting; no completion will come).
  Result<RequestId> submit(const SubmitRequest& request);

  // Withdraws request `id`: queued, it ends CANCELLED at once; running on a
  // worker, the worker is told to abort it and it ends CANCELLED with the
  // tokens produced so far (output_tokens); running in an in-daemon
  // executor, it finishes as it would have. Either way exactly one final
  // completion still comes. Never blocks. Errors: kInvalidArgument (not
  // outstanding: already completed, or not this client's), kRingFull (try
  // again), kNotConnected (the connection it was submitted on is gone; it
  // completes SHUTTING_DOWN by itself).
  Result<void> cancel(RequestId id);

  // Appends up to `max` completions to `out` and returns how many; never
  // blocks. Completions the library made up after a loss come first. With
  // SubmitRequest::stream, a request's token chunks (Completion::partial)
  // come in order before its final completion.
  std::size_t poll(std::vector<Completion>& out, std::size_t max = SIZE_MAX);

  // Blocks until poll() has something, or `timeout` (negative: forever):
  // spins for options.spin, then sleeps on the completion eventfd with the
  // daemon's sleep/wake protocol. Errors: kTimedOut; kDaemonLost when the
  // connection was lost before or during this call (its outstanding
  // requests are ready to poll() as SHUTTING_DOWN); kNotConnected when
  // there is no connection and nothing to poll (after one reconnect attempt
  // when the policy allows and one is due); kSystem.
  Result<void> wait(std::chrono::nanoseconds timeout);

  // For epoll/asio: a descriptor that becomes readable when poll() may have
  // something or the connection was lost. It is an epoll instance holding
  // the completion eventfd, the control socket and an internal eventfd, so it
  // stays the same across reconnects. Only read readiness is meaningful; do
  // not read from it; spurious readiness (e.g. a control reply for another
  // thread) is possible. Use it as: prepareToBlock(); if true, block until
  // the fd is readable; then poll() — and again.
  int completionFd() const;

  // Call before every blocking wait on completionFd(). The first call
  // switches the client to "descriptor mode" for good: it keeps its sleep
  // flag set, so the daemon signals every completion batch (one eventfd write
  // each) and no thread's wake-up can be missed. Each call drains the
  // eventfd and re-checks. true: block now; false: completions (or a loss)
  // are already there, poll() first. Errors: kNotConnected (after one
  // reconnect attempt when the policy allows and one is due).
  Result<bool> prepareToBlock();

  // Submits and blocks until this request's completion (or `timeout`;
  // negative: forever). Other threads may poll()/wait() meanwhile: whoever
  // takes this request's completion off the ring hands it to this thread,
  // and completions of other requests that this thread takes off go to
  // poll(). On kTimedOut the request stays with the daemon and its
  // completion is dropped when it arrives (stats().abandoned).
  Result<Completion> submitAndWait(const SubmitRequest& request, std::chrono::nanoseconds timeout);

  // Tries to connect now when disconnected (regardless of the reconnect
  // policy's delay). OK when connected afterwards.
  Result<void> reconnect();

  // Ends the connection for good, as shutdown(2) before close(2): the daemon
  // cancels what it holds for this client, the requests outstanding complete
  // SHUTTING_DOWN (local), calls blocked in wait(), submitAndWait() or a
  // control round trip return at once, and every later call fails with
  // kNotConnected ("the client is closed"; poll() hands out what is left).
  // Unlike the destructor, it may be called from any thread while other
  // calls are in progress; destroy the Client once they have returned.
  // Idempotent; does nothing in a child of fork().
  void shutdown();

  bool connected() const;
  // The daemon's endpoints of the current connection (empty when none).
  std::vector<EndpointDescription> endpoints() const;
  std::uint64_t clientId() const;  // the daemon's id for this connection; 0 when none
  // Accepted requests whose completion poll() has not handed out yet.
  std::size_t outstanding() const;
  ClientStats stats() const;
  // The budget submitWithRetry() uses when given none: ratio 0.1, 10 tokens.
  RetryBudget& retryBudget();

 private:
  explicit Client(std::unique_ptr<client_detail::ClientCore> impl);
  std::unique_ptr<client_detail::ClientCore> impl_;
};

}  // namespace fairsched
