// The worker protocol: how an engine process (docs/worker.md) takes the
// requests fairschedd chooses and streams their tokens back, over a segment
// of the ordinary layout (shm/layout.hpp) used the other way round.
//
//   worker                                        fairschedd
//   Hello{role = worker, endpoint} ─────────────▶ SO_PEERCRED → a rule whose `workers`
//                                                 names the endpoint
//        ◀── HelloReply + SCM_RIGHTS[segment, doorbell, wake-up eventfd]
//   event ring (submission ring 0, worker-written, UNTRUSTED):
//     CAPACITY{free sequences, free KV tokens, assignments seen}
//     TOKENS{assignment, emit time, token ids in the ring's arena}
//     STEP{emit time, (assignment, token id) pairs in the arena}: one token
//          of each of several sequences, as an engine step produces them
//     FINISH{assignment, status, output tokens, [prompt tokens counted], message}
//   assignment ring (the completion ring, daemon-written, read-only to the worker):
//     ASSIGN{assignment, tenant, priority, deadline, max output tokens,
//            prompt token ids and parameters in the reply arena}
//     ABORT{assignment}          answered by FINISH{CANCELLED}
//     PREEMPT{assignment}        answered by PREEMPTED{assignment, generated}
//                                (or FINISH, when it ended first)
//   event ring, on a PREEMPT: PREEMPTED{assignment, output tokens generated,
//     every one of them emitted before} — the sequence stopped and its KV
//     was freed; the daemon requeues the request, and whichever worker gets
//     it next receives ASSIGN with resume_tokens: the ids generated so far
//     follow the prompt, the engine recomputes them and goes on from there.
//
// Capacity is pulled: the daemon assigns a request only when the worker's
// last CAPACITY leaves room for it (one sequence, and prompt + max output
// tokens of KV), so nothing waits in front of the engine. A CAPACITY record
// says what was free after the worker had taken `assignments_seen`
// assignments; the daemon subtracts what it assigned since, so the two sides
// never race.
//
// Every record is one SubmissionSlot / CompletionSlot; the field mapping is
// private to worker_protocol.cpp. decodeWorkerEvent() is the only reader of
// worker-written records: it checks every field, and a record it refuses
// drops that worker (its requests end or are requeued), never the daemon.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "fairsched/status.hpp"
#include "shm/layout.hpp"

namespace fairsched::shm {

// HelloMessage::role.
enum class PeerRole : std::uint32_t { kClient = 0, kWorker = 1 };

enum class WorkerEventKind : std::uint16_t {
  kCapacity = 1,
  kTokens = 2,
  kFinish = 3,
  kPreempted = 4,  // a sequence given back on PREEMPT, after emitting what it generated
  kStep = 5,       // one token of each of several assignments (an engine step), in one record
  kCache = 6,      // KV blocks stored in / removed from the engine's prefix cache, or all cleared
};

// What a kCache event says of the engine's prefix cache (the shape of vLLM's
// KV events: BlockStored, BlockRemoved, AllBlocksCleared).
enum class CacheOp : std::uint8_t { kStored = 1, kRemoved = 2, kCleared = 3 };

struct WorkerEvent {
  WorkerEventKind kind = WorkerEventKind::kCapacity;
  std::uint64_t assignment = 0;  // kTokens, kFinish
  // kCapacity
  std::uint32_t free_sequences = 0;
  std::uint64_t free_kv_tokens = 0;
  std::uint64_t assignments_seen = 0;
  // kTokens: the token ids are the record's arena words; kStep: the arena
  // holds kStepWordsPerToken words per token: the assignment's low and high
  // 32 bits, then the token id (decodeStepToken).
  std::int64_t emit_ns = 0;  // CLOCK_MONOTONIC
  // kFinish
  Status status = Status::kOk;  // kOk, kCancelled (abort acknowledged), kExecutorFailed, kInvalid
  std::uint32_t output_tokens = 0;  // kFinish, kPreempted: generated in all
  std::uint32_t input_tokens = 0;   // kFinish: the prompt as the engine counted it; 0 = as assigned
  std::uint32_t message_bytes = 0;  // an error message in the arena words (escaped when shown)
  // kCache: the operation; the arena holds kCacheWordsPerBlock words per
  // block hash (low, then high 32 bits; decodeCacheBlock), none for kCleared.
  // kStored names a run of a prefix chain, leading block first.
  CacheOp cache_op = CacheOp::kStored;
};

// Most token ids one TOKENS record carries (the event ring's arena words per slot).
inline constexpr std::uint32_t kWorkerTokensPerEvent = 256;
// A STEP record's words per token, and the most tokens it carries.
inline constexpr std::uint32_t kStepWordsPerToken = 3;
inline constexpr std::uint32_t kWorkerStepTokensPerEvent =
    kWorkerTokensPerEvent / kStepWordsPerToken;

// A kCache record's words per block hash, and the most hashes it carries.
inline constexpr std::uint32_t kCacheWordsPerBlock = 2;
inline constexpr std::uint32_t kWorkerCacheBlocksPerEvent =
    kWorkerTokensPerEvent / kCacheWordsPerBlock;
// Hash i of a kCache record's words (REQUIRES: i < words.size() / kCacheWordsPerBlock).
inline std::uint64_t decodeCacheBlock(std::span<const std::uint32_t> words, std::size_t i) {
  const std::size_t at = i * kCacheWordsPerBlock;
  return std::uint64_t{words[at]} | (std::uint64_t{words[at + 1]} << 32);
}

struct StepWord {
  std::uint64_t assignment = 0;
  std::uint32_t token = 0;
};
// Entry i of a STEP record's words (REQUIRES: i < words.size() / kStepWordsPerToken).
inline StepWord decodeStepToken(std::span<const std::uint32_t> words, std::size_t i) {
  const std::size_t at = i * kStepWordsPerToken;
  return {std::uint64_t{words[at]} | (std::uint64_t{words[at + 1]} << 32), words[at + 2]};
}

enum class EventCheck : std::uint8_t {
  kValid,
  kUnknownKind,
  kBadFlags,      // submission flags, or parameters where the kind has none
  kBadTokens,     // kTokens without tokens or with more than kWorkerTokensPerEvent; kStep
                  // without whole (assignment, token) entries
  kStrayTokens,   // token ids on a record that carries none
  kBadStatus,     // kFinish with a status a worker may not report
  kNegativeTime,  // kTokens with emit_ns < 0
  kBadCache,      // kCache with an unknown operation, or hashes it does not carry as said
};
std::string_view toString(EventCheck check);

// The slot a worker publishes for `event` (arena words: the token ids, or
// the message, which the caller writes through tryPushPrompt).
SubmissionSlot encodeWorkerEvent(const WorkerEvent& event);

// Decodes a slot copied out of a worker's event ring (already checkSlot'ed
// by the ring). Pure; safe on arbitrary bytes.
EventCheck decodeWorkerEvent(const SubmissionSlot& slot, WorkerEvent& out);

enum class AssignmentKind : std::uint32_t { kAssign = 0x200, kAbort = 0x201, kPreempt = 0x202 };

struct AssignmentRecord {
  AssignmentKind kind = AssignmentKind::kAssign;
  std::uint64_t assignment = 0;
  std::uint32_t tenant = 0;  // the daemon's tenant id (stable while the tenant is active)
  std::int32_t priority = 0;
  std::int64_t deadline_ns = 0;  // absolute CLOCK_MONOTONIC; 0 = none
  std::uint32_t prompt_tokens = 0;
  std::uint32_t max_output_tokens = 0;
  std::uint32_t params_bytes = 0;
  bool counts_only = false;  // no token ids: the parameters reference the body
  // Tokens this request generated before it was preempted (a resumed
  // sequence); their ids follow the prompt in the payload.
  std::uint32_t resume_tokens = 0;

  // Payload words: prompt ids (none when counts_only), resumed ids, parameters.
  std::uint64_t payloadWords() const {
    return (counts_only ? 0 : std::uint64_t{prompt_tokens}) + resume_tokens +
           (std::uint64_t{params_bytes} + 3) / 4;
  }
};

CompletionSlot encodeAssignment(const AssignmentRecord& a);
// The worker's check of a record the daemon wrote (it trusts the daemon,
// but a record from another build must not index past its payload):
// nullopt when malformed or when its payload would exceed `payload_words`.
std::optional<AssignmentRecord> decodeAssignment(const CompletionSlot& slot,
                                                 std::uint32_t payload_words);
// PayloadWords for a worker's CompletionConsumer::tryPop.
std::uint32_t assignmentPayloadWords(const CompletionSlot& slot);
// PayloadWords for a client's: a stream chunk's tokens, nothing otherwise.
std::uint32_t streamPayloadWords(const CompletionSlot& slot);

// The geometry of a worker's segment: one event ring; an assignment ring of
// at least `assignments` cells (the next power of two) whose payload holds
// a prompt of `max_prompt_words` words and kMaxParamsBytes of parameters.
Geometry workerGeometry(std::uint32_t assignments, std::uint32_t max_prompt_words);

// The reference token stream (docs/worker.md): output token j of a request
// whose prompt is p (n > 0 tokens) is (p[j % n] + j + 1) mod 2^32; with an
// empty prompt (a counts-only request), j + 1. The reference worker emits
// it, and any client can check that no token reached the wrong request.
inline std::uint32_t referenceToken(std::span<const std::uint32_t> prompt, std::uint32_t j) {
  const std::uint32_t base = prompt.empty() ? 0 : prompt[j % prompt.size()];
  return base + j + 1;
}

}  // namespace fairsched::shm
