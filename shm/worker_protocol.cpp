#include "shm/worker_protocol.hpp"

#include <algorithm>
#include <bit>

namespace fairsched::shm {

// Field mapping of a worker event onto a SubmissionSlot:
//   endpoint          the kind
//   request_id        kTokens/kFinish/kPreempted: the assignment; kCapacity: assignments_seen
//   tag               kCapacity: free KV tokens; kFinish: prompt tokens counted (0 = as assigned)
//   max_output_tokens kCapacity: free sequences; kFinish/kPreempted: output tokens
//   priority          kFinish: the encoded status
//   deadline_ns       kTokens, kStep: emit time
//   prompt_tokens     kTokens: token ids in the arena; kStep: its words in the arena
//   params_bytes      kFinish: message bytes in the arena
//   tag               kCache: the operation (CacheOp)
//   prompt_tokens     kCache: its words in the arena (kCacheWordsPerBlock per hash)
// flags (but kSlotInline, which the ring sets for a short payload) and tenant stay 0.

std::string_view toString(EventCheck check) {
  switch (check) {
    case EventCheck::kValid:
      return "valid";
    case EventCheck::kUnknownKind:
      return "unknown event kind";
    case EventCheck::kBadFlags:
      return "flags, a tenant or parameters on a worker event";
    case EventCheck::kBadTokens:
      return "a TOKENS or STEP event without tokens, with too many, or with a partial entry";
    case EventCheck::kStrayTokens:
      return "token ids on an event that carries none";
    case EventCheck::kBadStatus:
      return "a FINISH status a worker may not report";
    case EventCheck::kNegativeTime:
      return "a negative emit time";
    case EventCheck::kBadCache:
      return "a KV cache event with an unknown operation, or without whole block hashes";
  }
  return "unknown";
}

SubmissionSlot encodeWorkerEvent(const WorkerEvent& e) {
  SubmissionSlot s;
  s.endpoint = static_cast<std::uint16_t>(e.kind);
  switch (e.kind) {
    case WorkerEventKind::kCapacity:
      s.request_id = e.assignments_seen;
      s.tag = e.free_kv_tokens;
      s.max_output_tokens = e.free_sequences;
      break;
    case WorkerEventKind::kTokens:
      s.request_id = e.assignment;
      s.deadline_ns = e.emit_ns;
      break;
    case WorkerEventKind::kStep:
      s.deadline_ns = e.emit_ns;
      break;
    case WorkerEventKind::kFinish:
      s.request_id = e.assignment;
      s.max_output_tokens = e.output_tokens;
      s.priority = static_cast<std::int32_t>(encodeStatus(e.status));
      s.tag = e.input_tokens;
      break;
    case WorkerEventKind::kPreempted:
      s.request_id = e.assignment;
      s.max_output_tokens = e.output_tokens;
      break;
    case WorkerEventKind::kCache:
      s.tag = static_cast<std::uint64_t>(e.cache_op);
      break;
  }
  return s;
}

EventCheck decodeWorkerEvent(const SubmissionSlot& s, WorkerEvent& out) {
  out = WorkerEvent{};
  if ((s.flags & ~kSlotInline) != 0 || s.tenant != 0) return EventCheck::kBadFlags;
  switch (s.endpoint) {
    case static_cast<std::uint16_t>(WorkerEventKind::kCapacity):
      if (s.prompt_tokens != 0) return EventCheck::kStrayTokens;
      if (s.params_bytes != 0) return EventCheck::kBadFlags;
      out.kind = WorkerEventKind::kCapacity;
      out.assignments_seen = s.request_id;
      out.free_kv_tokens = s.tag;
      out.free_sequences = s.max_output_tokens;
      return EventCheck::kValid;
    case static_cast<std::uint16_t>(WorkerEventKind::kTokens):
      if (s.params_bytes != 0) return EventCheck::kBadFlags;
      if (s.prompt_tokens == 0 || s.prompt_tokens > kWorkerTokensPerEvent) {
        return EventCheck::kBadTokens;
      }
      if (s.deadline_ns < 0) return EventCheck::kNegativeTime;
      out.kind = WorkerEventKind::kTokens;
      out.assignment = s.request_id;
      out.emit_ns = s.deadline_ns;
      return EventCheck::kValid;
    case static_cast<std::uint16_t>(WorkerEventKind::kStep):
      if (s.params_bytes != 0 || s.request_id != 0 || s.tag != 0 || s.max_output_tokens != 0 ||
          s.priority != 0) {
        return EventCheck::kBadFlags;
      }
      if (s.prompt_tokens == 0 || s.prompt_tokens > kWorkerTokensPerEvent ||
          s.prompt_tokens % kStepWordsPerToken != 0) {
        return EventCheck::kBadTokens;
      }
      if (s.deadline_ns < 0) return EventCheck::kNegativeTime;
      out.kind = WorkerEventKind::kStep;
      out.emit_ns = s.deadline_ns;
      return EventCheck::kValid;
    case static_cast<std::uint16_t>(WorkerEventKind::kFinish): {
      if (s.prompt_tokens != 0) return EventCheck::kStrayTokens;
      if (s.priority < 0) return EventCheck::kBadStatus;
      if (s.tag > UINT32_MAX) return EventCheck::kBadFlags;
      const std::optional<Status> st = decodeStatus(static_cast<std::uint32_t>(s.priority));
      if (!st || (*st != Status::kOk && *st != Status::kCancelled &&
                  *st != Status::kExecutorFailed && *st != Status::kInvalid)) {
        return EventCheck::kBadStatus;
      }
      out.kind = WorkerEventKind::kFinish;
      out.assignment = s.request_id;
      out.status = *st;
      out.output_tokens = s.max_output_tokens;
      out.input_tokens = static_cast<std::uint32_t>(s.tag);
      out.message_bytes = s.params_bytes;
      return EventCheck::kValid;
    }
    case static_cast<std::uint16_t>(WorkerEventKind::kPreempted):
      if (s.prompt_tokens != 0) return EventCheck::kStrayTokens;
      if (s.params_bytes != 0 || s.priority != 0 || s.tag != 0) return EventCheck::kBadFlags;
      out.kind = WorkerEventKind::kPreempted;
      out.assignment = s.request_id;
      out.output_tokens = s.max_output_tokens;
      return EventCheck::kValid;
    case static_cast<std::uint16_t>(WorkerEventKind::kCache): {
      if (s.params_bytes != 0 || s.request_id != 0 || s.max_output_tokens != 0 || s.priority != 0 ||
          s.deadline_ns != 0) {
        return EventCheck::kBadFlags;
      }
      const bool cleared = s.tag == static_cast<std::uint64_t>(CacheOp::kCleared);
      if (s.tag != static_cast<std::uint64_t>(CacheOp::kStored) &&
          s.tag != static_cast<std::uint64_t>(CacheOp::kRemoved) && !cleared) {
        return EventCheck::kBadCache;
      }
      if (cleared ? s.prompt_tokens != 0
                  : s.prompt_tokens == 0 || s.prompt_tokens > kWorkerTokensPerEvent ||
                        s.prompt_tokens % kCacheWordsPerBlock != 0) {
        return EventCheck::kBadCache;
      }
      out.kind = WorkerEventKind::kCache;
      out.cache_op = static_cast<CacheOp>(s.tag);
      return EventCheck::kValid;
    }
    default:
      return EventCheck::kUnknownKind;
  }
}

// Field mapping of an assignment onto a CompletionSlot:
//   status            the kind
//   request_id        the assignment
//   tag               tenant id
//   retry_after_ns    deadline (0 = none)
//   queue_wait_ns     params_bytes | counts_only << 32
//   service_ns        resume_tokens
//   checksum          priority (as uint32)
//   output_tokens     max output tokens
//   input_tokens      prompt tokens

CompletionSlot encodeAssignment(const AssignmentRecord& a) {
  CompletionSlot s;
  s.status = static_cast<std::uint32_t>(a.kind);
  s.request_id = a.assignment;
  if (a.kind != AssignmentKind::kAssign) return s;
  s.tag = a.tenant;
  s.retry_after_ns = a.deadline_ns;
  s.queue_wait_ns = std::uint64_t{a.params_bytes} | (std::uint64_t{a.counts_only} << 32);
  s.service_ns = a.resume_tokens;
  s.checksum = std::bit_cast<std::uint32_t>(a.priority);
  s.output_tokens = a.max_output_tokens;
  s.input_tokens = a.prompt_tokens;
  return s;
}

std::optional<AssignmentRecord> decodeAssignment(const CompletionSlot& s,
                                                 std::uint32_t payload_words) {
  AssignmentRecord a;
  a.assignment = s.request_id;
  if (s.status == static_cast<std::uint32_t>(AssignmentKind::kAbort) ||
      s.status == static_cast<std::uint32_t>(AssignmentKind::kPreempt)) {
    a.kind = static_cast<AssignmentKind>(s.status);
    return a;
  }
  if (s.status != static_cast<std::uint32_t>(AssignmentKind::kAssign)) return std::nullopt;
  if (s.tag > UINT32_MAX || (s.queue_wait_ns >> 33) != 0 || s.service_ns > UINT32_MAX ||
      s.checksum > UINT32_MAX || s.retry_after_ns < 0) {
    return std::nullopt;
  }
  a.tenant = static_cast<std::uint32_t>(s.tag);
  a.deadline_ns = s.retry_after_ns;
  a.params_bytes = static_cast<std::uint32_t>(s.queue_wait_ns & 0xffffffffu);
  a.counts_only = (s.queue_wait_ns >> 32) != 0;
  a.resume_tokens = static_cast<std::uint32_t>(s.service_ns);
  a.priority = std::bit_cast<std::int32_t>(static_cast<std::uint32_t>(s.checksum));
  a.max_output_tokens = s.output_tokens;
  a.prompt_tokens = s.input_tokens;
  if (a.params_bytes > kMaxParamsBytes || a.payloadWords() > payload_words) return std::nullopt;
  return a;
}

std::uint32_t assignmentPayloadWords(const CompletionSlot& s) {
  const std::optional<AssignmentRecord> a = decodeAssignment(s, UINT32_MAX);
  if (!a || a->kind != AssignmentKind::kAssign) return 0;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(a->payloadWords(), UINT32_MAX));
}

std::uint32_t streamPayloadWords(const CompletionSlot& s) {
  return s.status == kStreamChunk ? s.output_tokens : 0;
}

Geometry workerGeometry(std::uint32_t assignments, std::uint32_t max_prompt_words) {
  Geometry g;
  g.ring_count = 1;
  g.ring_capacity = 1024;
  g.prompt_tokens_per_slot = std::max(kWorkerTokensPerEvent, (kMaxParamsBytes + 3) / 4);
  g.completion_capacity = std::bit_ceil(std::max<std::uint32_t>(assignments, 2));
  g.reply_tokens_per_slot = max_prompt_words + (kMaxParamsBytes + 3) / 4;
  return g;
}

}  // namespace fairsched::shm
