// ClientCore::submit(): the hot path. Local checks against what the daemon
// announced, an entry in the PendingTable (and a mailbox for submitAndWait()),
// the push into the calling thread's lane, and the doorbell when the daemon
// sleeps.
// When accepted it has taken no lock (but await_mu_ for submitAndWait(), and
// the PendingTable's overflow mutex in the rare case of pending_table.hpp),
// allocated nothing and made no system call but the doorbell's; control_mu_
// only to reconnect while disconnected, and only if free.
#include <algorithm>
#include <optional>
#include <string>

#include "client_core.hpp"

namespace fairsched::client_detail {

Result<RequestId> ClientCore::submit(const SubmitRequest& req, const shm::EventFd* await_efd) {
  if (birth_.inherited()) return birth_.inheritedError("client");
  const std::uint32_t handle = req.tenant.index;
  std::shared_ptr<Session> s = current();
  if (!live(s)) {
    if (!tryReconnect()) return notConnected();
    s = current();
    if (!live(s)) return notConnected();
  }
  if (!tenants_.isOpen(handle)) {
    return Error{ErrorCode::kUnknownTenant, 0,
                 "not a tenant this client holds open (closed, refused on reconnect, or not "
                 "from openTenant())"};
  }
  const EndpointDescription* ep = s->findEndpoint(req.endpoint);
  if (ep == nullptr) {
    return Error{ErrorCode::kUnknownEndpoint, 0,
                 "the daemon has no endpoint '" + std::string(req.endpoint) + "'"};
  }
  if (req.params.size() > kMaxParamsBytes) {
    return Error{ErrorCode::kInvalidArgument, 0,
                 std::to_string(req.params.size()) + " bytes of params; at most " +
                     std::to_string(kMaxParamsBytes)};
  }
  if (req.prefix.size() > kMaxPrefixBlocks) {
    return Error{ErrorCode::kInvalidArgument, 0,
                 std::to_string(req.prefix.size()) + " prefix block hashes; at most " +
                     std::to_string(kMaxPrefixBlocks)};
  }
  if (req.prompt_token_count && !req.prompt.empty()) {
    return Error{ErrorCode::kInvalidArgument, 0,
                 "prompt_token_count (counts only) is set and prompt is not empty"};
  }
  const std::uint64_t prompt_tokens =
      req.prompt_token_count ? *req.prompt_token_count : req.prompt.size();
  const std::uint64_t words =
      req.prompt.size() + 2 * req.prefix.size() + (req.params.size() + 3) / 4;
  if (words > s->promptTokensPerSlot()) {
    return Error{ErrorCode::kPromptTooLarge, 0,
                 std::to_string(req.prompt.size()) + " prompt tokens, " +
                     std::to_string(req.prefix.size()) + " prefix hashes and " +
                     std::to_string(req.params.size()) + " bytes of params; a slot holds " +
                     std::to_string(s->promptTokensPerSlot()) + " words"};
  }
  if (ep->max_output_tokens != 0 && req.max_output_tokens > ep->max_output_tokens) {
    return Error{ErrorCode::kInvalidArgument, 0,
                 "max_output_tokens " + std::to_string(req.max_output_tokens) + " above '" +
                     ep->name + "' limit " + std::to_string(ep->max_output_tokens)};
  }
  if (ep->max_batch_tokens != 0 &&
      prompt_tokens + std::uint64_t{req.max_output_tokens} > ep->max_batch_tokens) {
    return Error{ErrorCode::kPromptTooLarge, 0,
                 "prompt + max_output_tokens exceed '" + ep->name + "' batch limit " +
                     std::to_string(ep->max_batch_tokens)};
  }

  std::int64_t deadline_ns = 0;
  std::optional<Clock::time_point> deadline = req.deadline;
  if (req.timeout) {
    const Clock::time_point t = deadlineAfter(*req.timeout);
    if (!deadline || t < *deadline) deadline = t;
  }
  if (deadline && *deadline != Clock::time_point::max()) {
    deadline_ns = std::max<std::int64_t>(
        1,
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline->time_since_epoch()).count());
  }

  shm::SubmissionSlot slot;
  slot.tag = req.tag;
  slot.deadline_ns = deadline_ns;
  slot.max_output_tokens = req.max_output_tokens;
  slot.priority = req.priority;
  slot.endpoint = ep->id;
  slot.tenant = handle;
  if (req.stream) slot.flags |= shm::kSlotStream;
  if (req.prompt_token_count) {
    slot.flags |= shm::kSlotCountsOnly;
    slot.prompt_tokens = *req.prompt_token_count;
  }
  // The id is taken and recorded once the ring has room (a full ring spends
  // no id and no table entry), before the daemon can see the slot.
  RequestId id = 0;
  // The thread's own lane; when it is full, the next ones with room (a
  // single-threaded caller gets every lane's room; its requests that spill
  // over may reach the daemon out of order with those before them).
  const std::size_t lanes = s->producers.size();
  std::uint16_t lane = s->lane();
  shm::PushResult pushed = shm::PushResult::kFull;
  for (std::size_t tried = 0; tried < lanes && pushed == shm::PushResult::kFull; ++tried) {
    if (tried > 0) lane = static_cast<std::uint16_t>((lane + 1) % lanes);
    pushed = s->producers[lane].tryPushPrompt(
        slot, req.prompt, req.prefix, req.params, [&](shm::SubmissionSlot& claimed) {
          id = next_id_.fetch_add(1, std::memory_order_relaxed);
          if (await_efd != nullptr) router_.openMailbox(id, await_efd->fd());
          pending_.insert(id, Pending{req.tag, s->generation, await_efd != nullptr, lane, handle});
          claimed.request_id = id;
        });
  }
  if (pushed != shm::PushResult::kOk) {
    if (pushed == shm::PushResult::kFull) {
      bump(counters_.ring_full);
      return Error{ErrorCode::kRingFull, 0, {}};
    }
    if (pushed == shm::PushResult::kPromptTooLarge) {
      return Error{ErrorCode::kPromptTooLarge, 0, "prompt does not fit a slot"};
    }
    return Error{ErrorCode::kInvalidArgument, 0, "slot rejected by the ring"};
  }
  // The daemon sleeps only after announcing it; fence, then look (doorbell.hpp).
  // The same fence orders the PendingTable insert before the load of
  // `alive` below, against handleLoss() (pending_table.hpp).
  if (s->ringIfAsleep()) bump(counters_.doorbell_rings);
  if (!s->alive.load(std::memory_order_acquire) && withdraw(id, await_efd != nullptr)) {
    // Lost (or shut down) while we pushed, and the loss handler did not see
    // our entry: no completion will come, so the caller hears it now.
    bump(counters_.ids_withdrawn);
    return closed() ? closedError() : daemonLost();
  }
  return id;
}

Result<void> ClientCore::cancel(RequestId id) {
  if (std::optional<Error> e = unusable()) return *e;
  const std::optional<Pending> p = pending_.find(id);
  if (!p) {
    return Error{ErrorCode::kInvalidArgument, 0,
                 "request " + std::to_string(id) + " is not outstanding (completed or unknown)"};
  }
  std::shared_ptr<Session> s = current();
  if (!live(s) || s->generation != p->generation) {
    // Submitted on a lost connection: it completes SHUTTING_DOWN by itself.
    return notConnected();
  }
  shm::SubmissionSlot slot;
  slot.request_id = id;
  slot.tenant = p->tenant;
  slot.flags = shm::kSlotCancel;
  // Behind the request in its lane, so the daemon never sees the cancel first.
  if (s->producers[p->lane].tryPushPrompt(slot, {}) != shm::PushResult::kOk) {
    bump(counters_.ring_full);
    return Error{ErrorCode::kRingFull, 0, {}};
  }
  if (s->ringIfAsleep()) bump(counters_.doorbell_rings);
  return {};
}

bool ClientCore::withdraw(RequestId id, bool awaited) {
  const bool was_pending = pending_.erase(id).has_value();
  if (awaited && was_pending) router_.closeMailbox(id);
  return was_pending;
}

}  // namespace fairsched::client_detail
