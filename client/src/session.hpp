// One connection to the daemon: the control socket, the shared-memory
// segment, the two eventfds, and what the HelloReply said. A reconnect makes
// a new Session; the old one lives on (unmapped last) until no thread holds
// a reference to it.
//
// Thread-safety: everything set by open() is immutable afterwards. The
// producers are shared by every submitting thread (the ring is
// multi-producer; each thread keeps to one lane, lane()). `consumer` is
// guarded by `consumer_mu`; the sleep count by `sleep_mu`; `alive` is
// atomic. The socket is read only under the Client's control mutex.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "control_channel.hpp"
#include "fairsched/client.hpp"
#include "shm/segment.hpp"

namespace fairsched::client_detail {

// OpenTenant/CloseTenant messages a client keeps in flight before it reads
// their replies: well under what a unix socket buffers.
inline constexpr std::size_t kTenantCallWindow = 64;

// One OpenTenant or CloseTenant of a batch (Session::tenantCalls()).
struct TenantCall {
  bool close = false;
  std::string_view name;  // open: the tenant; close: for messages only
  std::string_view tier;  // open: the hint, may be empty
  std::uint32_t handle = 0;
  // Filled in: OK, or why the daemon refused this one.
  std::optional<Error> error;
};

// The ErrorCode for a ControlStatus the daemon answered with.
ErrorCode errorForControlStatus(std::uint32_t status);

class Session {
 public:
  // connect(), Hello, then the HelloReply's descriptors: attach the segment
  // (kFdSegment), the daemon's doorbell (kFdDaemonDoorbell) and the
  // completion eventfd (kFdCompletionBell). `seq` is the Hello's sequence
  // number. Errors: see Client::connect.
  // `worker_endpoint` non-empty: attach in the worker role to that endpoint.
  static Result<std::shared_ptr<Session>> open(const ClientOptions& options,
                                               std::uint64_t generation, std::uint32_t seq,
                                               std::string_view worker_endpoint = {});

  // Sends each call's OpenTenant/CloseTenant, at most kTenantCallWindow
  // ahead of the replies, and records each reply's refusal (kUnauthorized,
  // kNoCapacity, kShuttingDown, kRefused) in its call. REQUIRES: the caller
  // holds the Client's control mutex. `seq` is advanced past the messages
  // sent. Errors, for the connection (calls not answered yet have no
  // outcome): kTimedOut (`timeout` without a reply), kDaemonLost,
  // kVersionMismatch, kProtocol.
  Result<void> tenantCalls(std::span<TenantCall> calls, std::uint32_t& seq,
                           std::chrono::nanoseconds timeout);

  // The submission lane of the calling thread: threads are spread over the
  // lanes in the order they first submit, and each keeps to its lane while
  // it has room, so one thread's submissions reach the daemon in its order
  // (submit() spills over to the next lanes when it is full).
  std::uint16_t lane() const;

  const EndpointDescription* findEndpoint(std::string_view name) const;

  // The client's sleep flag is shared by every thread that blocks on this
  // session (wait(), submitAndWait(), a prepareToBlock() announcement): it
  // is set while at least one of them is about to block, and each entry is
  // followed by a seq_cst fence before that thread's re-check
  // (shm/doorbell.hpp).
  void enterSleep();
  void leaveSleep();
  // prepareToBlock(): one announcement that lasts as long as the session.
  // Idempotent.
  void arm();

  std::uint32_t laneCount() const { return segment_.layout().geometry.ring_count; }
  std::uint32_t promptTokensPerSlot() const {
    return segment_.layout().geometry.prompt_tokens_per_slot;
  }

  const std::uint64_t generation;

 private:
  // Declared first: everything below is derived from them.
  shm::UniqueFd sock_;
  shm::Segment segment_;
  shm::SleepFlag own_sleeping_;
  std::atomic<std::uint32_t> rung_epoch_{0};  // the daemon's sleep we last rang in

 public:
  const int sock;  // owned by sock_
  std::uint64_t client_id = 0;
  std::uint32_t max_tenants = 0;  // tenants this connection may hold open
  std::vector<EndpointDescription> endpoints;

  shm::EventFd doorbell;  // the daemon's: written when daemon_sleeping says it sleeps
  shm::EventFd bell;      // ours: the daemon writes it when we said we sleep
  shm::PeerSleepFlag daemon_sleeping;
  std::vector<shm::SubmissionProducer> producers;  // one per lane
  // After publishing: rings the doorbell if the daemon sleeps, once per
  // sleep of it (doorbell.hpp's epochs). True when it rang.
  bool ringIfAsleep() {
    if (!daemon_sleeping.shouldRing(rung_epoch_)) return false;
    doorbell.signal();
    return true;
  }
  // Cleared once, by whoever notices the loss first (ClientCore::handleLoss).
  std::atomic<bool> alive{true};

  std::mutex consumer_mu;
  shm::CompletionConsumer consumer;         // guarded by consumer_mu
  std::vector<std::uint32_t> chunk_tokens;  // a stream chunk's tokens; guarded by consumer_mu
  // Output tokens streamed so far, per request with a chunk taken off this
  // ring and no final completion yet: what a completion made up after a
  // loss reports. Guarded by consumer_mu.
  std::unordered_map<RequestId, std::uint32_t> streamed;

 private:
  Session(std::uint64_t gen, shm::UniqueFd sock, shm::Segment segment, shm::EventFd doorbell,
          shm::EventFd bell);
  void enterLocked();
  void leaveLocked();

  std::mutex sleep_mu_;
  int sleepers_ = 0;    // guarded by sleep_mu_
  bool armed_ = false;  // guarded by sleep_mu_
};

}  // namespace fairsched::client_detail
