// libFuzzer target: the worker protocol's two decoders on arbitrary bytes.
// The input becomes either (a) a SubmissionSlot as a worker's event ring
// holds it, checked by checkSlot() and decoded by decodeWorkerEvent() (the
// daemon's side, on memory a worker writes), or (b) a CompletionSlot and a
// payload budget decoded by decodeAssignment() (the worker's side). Besides
// the sanitizers, it checks what a valid decode promises, and that encoding a
// decoded record and decoding it again gives the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "fuzz_input.hpp"
#include "shm/layout.hpp"
#include "shm/submission_ring.hpp"
#include "shm/worker_protocol.hpp"

namespace {

using namespace fairsched::shm;
using fairsched::Status;
using fairsched::fuzz::Bytes;
using fairsched::fuzz::require;

bool sameEvent(const WorkerEvent& a, const WorkerEvent& b) {
  return a.kind == b.kind && a.assignment == b.assignment && a.free_sequences == b.free_sequences &&
         a.free_kv_tokens == b.free_kv_tokens && a.assignments_seen == b.assignments_seen &&
         a.emit_ns == b.emit_ns && a.status == b.status && a.output_tokens == b.output_tokens &&
         a.input_tokens == b.input_tokens && a.message_bytes == b.message_bytes &&
         a.cache_op == b.cache_op;
}

bool sameAssignment(const AssignmentRecord& a, const AssignmentRecord& b) {
  return a.kind == b.kind && a.assignment == b.assignment && a.tenant == b.tenant &&
         a.priority == b.priority && a.deadline_ns == b.deadline_ns &&
         a.prompt_tokens == b.prompt_tokens && a.max_output_tokens == b.max_output_tokens &&
         a.params_bytes == b.params_bytes && a.counts_only == b.counts_only &&
         a.resume_tokens == b.resume_tokens;
}

void fuzzEvent(Bytes& in) {
  const SubmissionSlot slot = in.record<SubmissionSlot>();
  // The event ring's region of a worker's segment, or an arbitrary size.
  const Geometry g = workerGeometry(256, 8192);
  const std::uint64_t arena_tokens =
      in.take(1) % 2 == 0 ? std::uint64_t{g.ring_capacity} * g.prompt_tokens_per_slot : in.take(8);
  const SlotCheck slot_check = checkSlot(slot, arena_tokens);
  if (slot_check == SlotCheck::kValid && slot.inlined()) {
    require(slot.prompt_offset == 0 && slot.arenaWords() <= kInlineWords);
  } else if (slot_check == SlotCheck::kValid) {
    require(slot.prompt_offset <= arena_tokens);
    require(slot.arenaWords() <= arena_tokens - slot.prompt_offset);
  }

  WorkerEvent e;
  const EventCheck check = decodeWorkerEvent(slot, e);
  if (check != EventCheck::kValid) {
    require(sameEvent(e, WorkerEvent{}));  // nothing of a refused record leaks out
    require(toString(check) != toString(EventCheck::kValid));
    return;
  }
  require((slot.flags & ~kSlotInline) == 0);  // the ring's own flag only
  require(slot.tenant == 0);                  // a worker event names no tenant
  switch (e.kind) {
    case WorkerEventKind::kCapacity:
      require(slot.prompt_tokens == 0 && slot.params_bytes == 0);
      require(e.assignments_seen == slot.request_id && e.free_kv_tokens == slot.tag &&
              e.free_sequences == slot.max_output_tokens);
      break;
    case WorkerEventKind::kTokens:
      require(slot.prompt_tokens >= 1 && slot.prompt_tokens <= kWorkerTokensPerEvent);
      require(slot.params_bytes == 0);
      require(e.emit_ns >= 0);
      require(e.assignment == slot.request_id);
      // A checked TOKENS record's ids are exactly its arena words.
      if (slot_check == SlotCheck::kValid) require(slot.arenaWords() == slot.prompt_tokens);
      break;
    case WorkerEventKind::kFinish:
      require(slot.prompt_tokens == 0);
      require(e.status == Status::kOk || e.status == Status::kCancelled ||
              e.status == Status::kExecutorFailed || e.status == Status::kInvalid);
      require(e.message_bytes == slot.params_bytes);
      require(e.input_tokens == slot.tag);
      if (slot_check == SlotCheck::kValid) require(e.message_bytes <= kMaxParamsBytes);
      break;
    case WorkerEventKind::kStep:
      // Whole (assignment, token) entries, at most the record's arena.
      require(slot.prompt_tokens >= kStepWordsPerToken &&
              slot.prompt_tokens <= kWorkerTokensPerEvent);
      require(slot.prompt_tokens % kStepWordsPerToken == 0);
      require(slot.params_bytes == 0 && slot.request_id == 0 && slot.tag == 0 &&
              slot.max_output_tokens == 0 && slot.priority == 0);
      require(e.emit_ns >= 0 && e.emit_ns == slot.deadline_ns);
      if (slot_check == SlotCheck::kValid) require(slot.arenaWords() == slot.prompt_tokens);
      break;
    case WorkerEventKind::kCache:
      // A known operation; whole hashes (none when cleared), at most the
      // record's arena; nothing else set.
      require(e.cache_op == CacheOp::kStored || e.cache_op == CacheOp::kRemoved ||
              e.cache_op == CacheOp::kCleared);
      require(static_cast<std::uint64_t>(e.cache_op) == slot.tag);
      require(slot.prompt_tokens % kCacheWordsPerBlock == 0 &&
              slot.prompt_tokens <= kWorkerTokensPerEvent);
      require((e.cache_op == CacheOp::kCleared) == (slot.prompt_tokens == 0));
      require(slot.params_bytes == 0 && slot.request_id == 0 && slot.max_output_tokens == 0 &&
              slot.priority == 0 && slot.deadline_ns == 0);
      if (slot_check == SlotCheck::kValid) require(slot.arenaWords() == slot.prompt_tokens);
      break;
    case WorkerEventKind::kPreempted:
      require(slot.prompt_tokens == 0 && slot.params_bytes == 0 && slot.priority == 0 &&
              slot.tag == 0);
      require(e.assignment == slot.request_id && e.output_tokens == slot.max_output_tokens);
      break;
    default:
      require(false);
  }

  // Encode it again as a worker would (the ring fills in the arena counts)
  // and decode: the same event.
  SubmissionSlot again = encodeWorkerEvent(e);
  if (e.kind == WorkerEventKind::kTokens || e.kind == WorkerEventKind::kStep ||
      e.kind == WorkerEventKind::kCache) {
    again.prompt_tokens = slot.prompt_tokens;
  }
  if (e.kind == WorkerEventKind::kFinish) again.params_bytes = e.message_bytes;
  WorkerEvent e2;
  require(decodeWorkerEvent(again, e2) == EventCheck::kValid);
  require(sameEvent(e, e2));
}

void fuzzAssignment(Bytes& in) {
  const CompletionSlot slot = in.record<CompletionSlot>();
  const auto budget = static_cast<std::uint32_t>(in.take(4));
  const std::optional<AssignmentRecord> a = decodeAssignment(slot, budget);
  const std::optional<AssignmentRecord> unbounded = decodeAssignment(slot, UINT32_MAX);
  const std::uint32_t words = assignmentPayloadWords(slot);
  if (!a) {
    // Refused only for its payload, or refused whatever the budget.
    require(!unbounded || unbounded->payloadWords() > budget);
    if (!unbounded) require(words == 0);
    return;
  }
  require(unbounded && sameAssignment(*a, *unbounded));
  require(slot.request_id == a->assignment);
  if (a->kind == AssignmentKind::kAbort || a->kind == AssignmentKind::kPreempt) {
    require(slot.status == static_cast<std::uint32_t>(a->kind));
    require(words == 0);
  } else {
    require(a->kind == AssignmentKind::kAssign);
    require(a->params_bytes <= kMaxParamsBytes);
    require(a->payloadWords() <= budget);
    require(words == a->payloadWords());
    require(a->deadline_ns >= 0);
    // Every word decode reads comes back the same (ttft_us is not read).
    CompletionSlot expect = slot;
    expect.ttft_us = 0;
    const CompletionSlot re = encodeAssignment(*a);
    require(std::memcmp(&re, &expect, sizeof(re)) == 0);
  }
  const std::optional<AssignmentRecord> again = decodeAssignment(encodeAssignment(*a), budget);
  require(again && sameAssignment(*a, *again));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes in{data, size};
  if (in.take(1) % 2 == 0) {
    fuzzEvent(in);
  } else {
    fuzzAssignment(in);
  }
  return 0;
}
