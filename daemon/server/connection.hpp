// One peer of fairschedd's control socket and what the daemon holds for it:
// its credentials and rule, and once past hello its shared-memory segment,
// eventfds, submission lanes and open tenants (clients) or event ring
// (workers), the
// completions not yet in its ring, and the io_uring operations queued on
// its buffers. Plain data: ConnectionSet owns connections and keeps the
// lists the loop walks; Server's parts act on them.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/core/prefix_cache.hpp"
#include "daemon/core/types.hpp"
#include "daemon/loop/event_loop.hpp"
#include "daemon/server/reject_budget.hpp"
#include "daemon/server/tenant_handles.hpp"
#include "shm/control_protocol.hpp"
#include "shm/doorbell.hpp"
#include "shm/segment.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched::daemon {

// A connection of fairschedd in the worker role (server_workers.cpp): an
// engine serving `endpoint`, with what it last said it could take. At
// namespace scope so that it is default-constructible where it is declared.
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
  // Prefix routing: what its engine holds, as the daemon knows it — the
  // blocks it was sent (approximate), or from the KV events it reports
  // (exact, from its first one on). Gone with the worker.
  core::BlockLru cache;
  bool cache_events = false;        // it reports KV events
  bool cache_sized = false;         // sized by its first CAPACITY
  std::uint64_t cache_reports = 0;  // KV events it sent
  std::uint64_t prefix_blocks = 0;  // blocks of the chains it was assigned
  std::uint64_t prefix_hits = 0;    // of those, held there when assigned
  // What the daemon may still assign: its statement less what it was given since.
  std::uint32_t freeSequences() const {
    const std::uint64_t since = assigned - seen;
    return since >= free_sequences ? 0 : static_cast<std::uint32_t>(free_sequences - since);
  }
  std::uint64_t freeKvTokens() const {
    return unseen_token_sum >= free_kv_tokens ? 0 : free_kv_tokens - unseen_token_sum;
  }
};

// A record waiting for room in a client's completion ring, with a stream
// chunk's token ids (slot.output_tokens of them; a chunk may still grow
// while it waits: Server::relayTokens).
struct Outgoing {
  shm::CompletionSlot slot;
  std::vector<std::uint32_t> tokens;
};

struct Connection {
  std::uint64_t id = 0;
  int fd = -1;
  ucred cred{};
  const config::ClientRule* rule = nullptr;
  std::vector<bool> endpoint_allowed;
  std::optional<shm::Segment> segment;
  // A Hello waiting for its uid's set-up budget (Server::set_ups_).
  std::optional<shm::HelloMessage> waiting_hello;
  std::optional<shm::EventFd> doorbell;         // the client writes, we read
  std::optional<shm::EventFd> completion_bell;  // we write, the client reads
  std::optional<shm::CompletionProducer> producer;
  // The segment's words the loop's passes touch, resolved once (ConnectionSet::attach).
  shm::ReadyBitmap bitmap;
  shm::SleepFlag own_sleep;       // "the daemon sleeps", for this client
  shm::PeerSleepFlag peer_sleep;  // "the client sleeps"
  // Its places in ConnectionSet's lists (withSegment, dirty, active).
  std::size_t shm_index = SIZE_MAX;
  bool dirty = false;
  bool active = false;   // its rings are looked at every pass
  TimeNs last_work = 0;  // when a pass last found something in its rings
  // A client's submission lanes (every ring of its segment, read from hello
  // on) and the tenants it holds open; a cell's tenant handle is looked up
  // in `tenants`.
  std::vector<shm::SubmissionConsumer> lanes;
  TenantHandles tenants;
  std::vector<std::uint32_t> pending_rings;  // rings taken from the bitmap, not yet drained dry
  // Rejections this connection may still cause; spent, its lanes wait.
  RejectBudget reject_budget;
  std::vector<bool> ring_pending;
  // Lanes polled directly instead of through the ready bitmap, at most
  // kMaxHotLanes: ones a pass found work in. Their bits stay set, so their
  // producers skip the bitmap write and the daemon the bitmap's line
  // (ready_bitmap.hpp); a demotion cools them before the connection leaves
  // the active list.
  static constexpr std::size_t kMaxHotLanes = 8;
  std::vector<std::uint32_t> hot_lanes;
  std::vector<std::uint64_t> hot_bits;  // hot_lanes as a mask per bitmap word

  // `ring` is to be drained (once in pending_rings).
  void pendLane(std::uint32_t ring) {
    if (ring_pending[ring]) return;
    ring_pending[ring] = true;
    pending_rings.push_back(ring);
  }
  // A drain found work in `ring`: poll it directly from now on, if room.
  void heatLane(std::uint32_t ring);
  // Back to the bitmap for every hot lane: their bits cleared (seq_cst),
  // then each looked at once; one with something in it is pended.
  void coolLanes();
  // Something to drain: pending rings, a bit outside the hot lanes, or a hot
  // lane with a published cell.
  bool lanesMayHaveWork() const;
  std::deque<Outgoing> backlog;       // completions and stream chunks not yet in the ring
  std::uint64_t backlog_popped = 0;   // records that left the front of `backlog` so far
  std::size_t backlog_chunks = 0;     // stream chunks in `backlog`
  bool unpublished = false;           // records written into the ring, not yet published (flush())
  std::uint64_t outstanding = 0;      // admitted, not yet completed
  std::optional<WorkerState> worker;  // the worker role
  bool closing = false;               // being dropped: nothing more is sent to it
  std::string drop_reason;            // why, when dropped after a pass (Server::dropLater)
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

}  // namespace fairsched::daemon
