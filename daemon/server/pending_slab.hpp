// The requests the daemon has admitted and still owes something: a
// completion, or (for one aborted on a worker) the worker's acknowledgement.
// Entries live in a slab indexed by the core request id (the key), so the
// hot path neither hashes nor allocates: a reused entry keeps the capacity
// of its prompt and generated buffers.
//
// Contract: reserve() hands out a key whose entry is not live; the caller
// either gives it back (unreserve) or makes it live (emplace), which resets
// every field to its default (reset() cannot miss one: it assigns a
// default-constructed entry) except the buffers' capacity and `gen`.
// release() ends an entry: not live, `gen` bumped so that an assignment id
// naming the old use never matches again, key free for reuse. The slab does
// not decide when a request ends; Server::endRequest does.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/core/types.hpp"
#include "shm/layout.hpp"

namespace fairsched::daemon {

struct Pending {
  bool live = false;
  std::uint64_t conn = 0;
  std::uint64_t request_id = 0;
  std::uint64_t tag = 0;
  std::uint64_t handle = 0;  // the core's handle (core::Handle)
  EndpointId endpoint = 0;
  TenantId tenant = kNoTenant;
  TimeNs admitted = 0;
  TimeNs dispatched = 0;  // 0: never handed to an executor or worker
  // Arena words: the prompt's token ids (none when counts_only), then the
  // parameters (params_bytes bytes).
  std::vector<std::uint32_t> prompt;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t params_bytes = 0;
  bool counts_only = false;
  bool stream = false;  // the client wants the tokens
  // Worker endpoints (server_workers.cpp).
  std::uint32_t gen = 0;     // bumped at every release: assignment ids never repeat
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
  Status aborted_as = Status::kOk;  // aborted: the status its completion carried
  // Preemption (endpoints with it on): the ids streamed so far, for the
  // ASSIGN that resumes it; `streamed` when it was last assigned; when a
  // PREEMPT was sent (0: none outstanding).
  std::vector<std::uint32_t> generated;
  std::uint32_t streamed_at_dispatch = 0;
  TimeNs preempt_asked = 0;
  // Its stream chunk still open to more tokens (Server::relayTokens): a
  // record written into the client's ring and not yet published, or one in
  // the client's backlog (an absolute position there: Connection::backlog_popped
  // counts what left its front).
  enum class ChunkAt : std::uint8_t { kNone, kRing, kBacklog };
  ChunkAt chunk_at = ChunkAt::kNone;
  std::uint64_t chunk_pos = 0;
  shm::CompletionSlot chunk;  // kRing: the record as written

  // Every field back to its default but `gen`; the buffers keep their capacity.
  void reset();
};

class PendingSlab {
 public:
  // A key whose entry is not live: from the free list, else a new entry.
  std::uint64_t reserve();
  // Gives back a reserved key that did not become live.
  void unreserve(std::uint64_t key) { free_.push_back(key); }
  // Makes reserved `key` live with a reset entry.
  Pending& emplace(std::uint64_t key);
  // The live entry of `key` (aborted ones included), or null.
  Pending* find(std::uint64_t key) {
    return key < entries_.size() && entries_[key].live ? &entries_[key] : nullptr;
  }
  // The entry of a key known to be live.
  Pending& operator[](std::uint64_t key) { return entries_[key]; }
  const Pending& operator[](std::uint64_t key) const { return entries_[key]; }
  // Ends the entry of live `key`: not live, gen bumped, key free.
  void release(std::uint64_t key);
  // Keys ever handed out: every live key is below it.
  std::uint64_t size() const { return entries_.size(); }
  // The assignment id a worker is given for live `key`: gen and key, so
  // that an id of an earlier use of the key never matches.
  std::uint64_t assignmentId(std::uint64_t key) const {
    return (std::uint64_t{entries_[key].gen} << 32) | key;
  }
  // The live entry an assignment id names, or null (stale or unknown).
  Pending* byAssignment(std::uint64_t assignment);
  // Calls fn(key, entry) for every live entry, in key order.
  template <typename Fn>
  void forEachLive(Fn&& fn) {
    for (std::uint64_t key = 0; key < entries_.size(); ++key) {
      if (entries_[key].live) fn(key, entries_[key]);
    }
  }

 private:
  std::vector<Pending> entries_;
  std::vector<std::uint64_t> free_;
};

}  // namespace fairsched::daemon
