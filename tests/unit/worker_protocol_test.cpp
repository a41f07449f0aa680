// The worker protocol (shm/worker_protocol.hpp): every event and assignment
// through encode, the rings and decode; each malformed event and assignment
// refused; the payload sizes; the reference token stream; the worker's
// segment geometry. Also the layout-2 parts of the rings the protocol rides
// on: parameters and counts-only slots in the submission ring, and the
// reply-arena payload of the completion ring.
#include "shm/worker_protocol.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "shm/completion_ring.hpp"
#include "shm/submission_ring.hpp"

namespace fairsched::shm {
namespace {

// A submission ring over heap memory, its arena filled with a pattern so
// that anything the producer did not write stands out.
struct EventRing {
  static constexpr std::uint32_t kStale = 0xabababab;
  std::unique_ptr<SubmissionRingControl> control = std::make_unique<SubmissionRingControl>();
  std::vector<SubmissionCell> cells;
  std::vector<std::uint32_t> arena;
  SubmissionRingMemory mem;

  EventRing(std::uint32_t capacity, std::uint32_t tokens_per_slot)
      : cells(capacity), arena(std::size_t{capacity} * tokens_per_slot, kStale) {
    mem.control = control.get();
    mem.cells = cells.data();
    mem.capacity = capacity;
    mem.arena = arena.data();
    mem.tokens_per_slot = tokens_per_slot;
    initSubmissionRing(mem, 0);
  }
};

// A completion ring with a reply arena over heap memory.
struct ReplyRing {
  std::unique_ptr<CompletionControl> control = std::make_unique<CompletionControl>();
  std::unique_ptr<ClientControl> client = std::make_unique<ClientControl>();
  std::vector<CompletionCell> cells;
  std::vector<std::uint32_t> reply_arena;
  CompletionRingMemory mem;

  ReplyRing(std::uint32_t capacity, std::uint32_t reply_tokens_per_slot, std::uint64_t start = 0)
      : cells(capacity), reply_arena(std::size_t{capacity} * reply_tokens_per_slot, 0xcdcdcdcd) {
    mem.control = control.get();
    mem.cells = cells.data();
    mem.capacity = capacity;
    mem.client = client.get();
    mem.reply_arena = reply_arena.data();
    mem.reply_tokens_per_slot = reply_tokens_per_slot;
    initCompletionRing(mem, start);
  }
};

std::vector<std::byte> bytesOf(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// What the daemon gets for `event` published the way a worker publishes it:
// encoded, pushed with its token ids (or its message) through the ring, popped,
// checked and decoded.
struct Received {
  EventCheck check = EventCheck::kValid;
  WorkerEvent event;
  SubmissionSlot slot;
  std::vector<std::uint32_t> words;
};

Received throughRing(const WorkerEvent& event, std::span<const std::uint32_t> tokens,
                     std::span<const std::byte> message = {}) {
  EventRing ring(4, kWorkerTokensPerEvent + kMaxParamsBytes / 4);
  SubmissionProducer producer(ring.mem);
  SubmissionConsumer consumer(ring.mem, 0);
  Received r;
  EXPECT_EQ(producer.tryPushPrompt(encodeWorkerEvent(event), tokens, message), PushResult::kOk);
  EXPECT_EQ(consumer.tryPop(r.slot, r.words), PopResult::kOk);
  r.check = decodeWorkerEvent(r.slot, r.event);
  return r;
}

// ---- worker events: round trips ---------------------------------------------

TEST(WorkerEvent, CapacityRoundTripsEveryField) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kCapacity;
  e.free_sequences = 0xfffffffe;
  e.free_kv_tokens = 0x123456789abcdef0ULL;
  e.assignments_seen = std::numeric_limits<std::uint64_t>::max() - 3;
  const Received r = throughRing(e, {});
  ASSERT_EQ(r.check, EventCheck::kValid);
  EXPECT_EQ(r.event.kind, WorkerEventKind::kCapacity);
  EXPECT_EQ(r.event.free_sequences, e.free_sequences);
  EXPECT_EQ(r.event.free_kv_tokens, e.free_kv_tokens);
  EXPECT_EQ(r.event.assignments_seen, e.assignments_seen);
  EXPECT_EQ(r.event.assignment, 0u) << "CAPACITY names no assignment";
  EXPECT_TRUE(r.words.empty());
}

TEST(WorkerEvent, CapacityOfNothingFreeRoundTrips) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kCapacity;
  WorkerEvent out;
  ASSERT_EQ(decodeWorkerEvent(encodeWorkerEvent(e), out), EventCheck::kValid);
  EXPECT_EQ(out.kind, WorkerEventKind::kCapacity);
  EXPECT_EQ(out.free_sequences, 0u);
  EXPECT_EQ(out.free_kv_tokens, 0u);
  EXPECT_EQ(out.assignments_seen, 0u);
}

TEST(WorkerEvent, TokensRoundTripWithTheirIdsInTheArena) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kTokens;
  e.assignment = 0xfeedface00000007ULL;
  e.emit_ns = 1'234'567'890'123;
  const std::vector<std::uint32_t> ids = {7, 0, 0xffffffff, 42};
  const Received r = throughRing(e, ids);
  ASSERT_EQ(r.check, EventCheck::kValid);
  EXPECT_EQ(r.event.kind, WorkerEventKind::kTokens);
  EXPECT_EQ(r.event.assignment, e.assignment);
  EXPECT_EQ(r.event.emit_ns, e.emit_ns);
  EXPECT_EQ(r.slot.prompt_tokens, ids.size());
  EXPECT_EQ(r.words, ids);
}

TEST(WorkerEvent, TokensAtBothEndsOfTheCountAreValid) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kTokens;
  e.assignment = 3;
  const std::vector<std::uint32_t> one = {9};
  EXPECT_EQ(throughRing(e, one).check, EventCheck::kValid);
  std::vector<std::uint32_t> most(kWorkerTokensPerEvent);
  for (std::uint32_t i = 0; i < most.size(); ++i) most[i] = i * 3;
  const Received r = throughRing(e, most);
  EXPECT_EQ(r.check, EventCheck::kValid);
  EXPECT_EQ(r.words, most);
  e.emit_ns = 0;  // the clock's origin is a time like any other
  EXPECT_EQ(throughRing(e, one).check, EventCheck::kValid);
}

TEST(WorkerEvent, StepCarriesAssignmentAndTokenPerEntry) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kStep;
  e.emit_ns = 77;
  const std::vector<std::uint64_t> ids = {0xfeedface00000007ULL, 3, 0xffffffffffffffffULL};
  const std::vector<std::uint32_t> tokens = {9, 0xffffffff, 0};
  std::vector<std::uint32_t> words;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    words.push_back(static_cast<std::uint32_t>(ids[i]));
    words.push_back(static_cast<std::uint32_t>(ids[i] >> 32));
    words.push_back(tokens[i]);
  }
  const Received r = throughRing(e, words);
  ASSERT_EQ(r.check, EventCheck::kValid);
  EXPECT_EQ(r.event.kind, WorkerEventKind::kStep);
  EXPECT_EQ(r.event.emit_ns, 77);
  ASSERT_EQ(r.words.size(), 9u);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const StepWord t = decodeStepToken(r.words, i);
    EXPECT_EQ(t.assignment, ids[i]);
    EXPECT_EQ(t.token, tokens[i]);
  }
  // The most a record holds.
  std::vector<std::uint32_t> most(kWorkerStepTokensPerEvent * kStepWordsPerToken, 1);
  EXPECT_EQ(throughRing(e, most).check, EventCheck::kValid);
}

TEST(WorkerEvent, StepWithoutWholeEntriesOrWithOtherFieldsIsRefused) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kStep;
  SubmissionSlot s = encodeWorkerEvent(e);
  WorkerEvent out;
  for (const std::uint32_t words : {0u, 1u, 2u, 4u, 254u, 258u}) {
    s.prompt_tokens = words;
    EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kBadTokens) << words;
  }
  s.prompt_tokens = 3;
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kValid);
  SubmissionSlot named = s;
  named.request_id = 5;  // the assignments are in the entries
  EXPECT_EQ(decodeWorkerEvent(named, out), EventCheck::kBadFlags);
  SubmissionSlot with_params = s;
  with_params.params_bytes = 4;
  EXPECT_EQ(decodeWorkerEvent(with_params, out), EventCheck::kBadFlags);
  SubmissionSlot before = s;
  before.deadline_ns = -1;
  EXPECT_EQ(decodeWorkerEvent(before, out), EventCheck::kNegativeTime);
}

TEST(WorkerEvent, CacheEventsCarryTheirBlockHashesAndOperation) {
  const std::vector<std::uint64_t> hashes = {0xfeedface00000007ULL, 0, 0xffffffffffffffffULL};
  std::vector<std::uint32_t> words;
  for (const std::uint64_t h : hashes) {
    words.push_back(static_cast<std::uint32_t>(h));
    words.push_back(static_cast<std::uint32_t>(h >> 32));
  }
  for (const CacheOp op : {CacheOp::kStored, CacheOp::kRemoved}) {
    WorkerEvent e;
    e.kind = WorkerEventKind::kCache;
    e.cache_op = op;
    const Received r = throughRing(e, words);
    ASSERT_EQ(r.check, EventCheck::kValid);
    EXPECT_EQ(r.event.kind, WorkerEventKind::kCache);
    EXPECT_EQ(r.event.cache_op, op);
    ASSERT_EQ(r.words.size(), 6u);
    for (std::size_t i = 0; i < hashes.size(); ++i)
      EXPECT_EQ(decodeCacheBlock(r.words, i), hashes[i]);
    std::vector<std::uint32_t> most(kWorkerCacheBlocksPerEvent * kCacheWordsPerBlock, 1);
    EXPECT_EQ(throughRing(e, most).check, EventCheck::kValid);
  }
  WorkerEvent cleared;
  cleared.kind = WorkerEventKind::kCache;
  cleared.cache_op = CacheOp::kCleared;
  const Received r = throughRing(cleared, {});
  ASSERT_EQ(r.check, EventCheck::kValid);
  EXPECT_EQ(r.event.cache_op, CacheOp::kCleared);
}

TEST(WorkerEventRefused, CacheEventsWithAnUnknownOperationPartialHashesOrOtherFields) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kCache;
  SubmissionSlot s = encodeWorkerEvent(e);
  WorkerEvent out;
  for (const std::uint32_t words : {0u, 1u, 3u, 257u, 258u}) {
    s.prompt_tokens = words;
    EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kBadCache) << words;
  }
  s.prompt_tokens = 2;
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kValid);
  for (const std::uint64_t op : {0ULL, 4ULL, 0x100000001ULL}) {
    SubmissionSlot bad = s;
    bad.tag = op;
    EXPECT_EQ(decodeWorkerEvent(bad, out), EventCheck::kBadCache) << op;
  }
  SubmissionSlot cleared_with_words = s;
  cleared_with_words.tag = static_cast<std::uint64_t>(CacheOp::kCleared);
  EXPECT_EQ(decodeWorkerEvent(cleared_with_words, out), EventCheck::kBadCache);
  SubmissionSlot named = s;
  named.request_id = 5;
  EXPECT_EQ(decodeWorkerEvent(named, out), EventCheck::kBadFlags);
  SubmissionSlot timed = s;
  timed.deadline_ns = 1;
  EXPECT_EQ(decodeWorkerEvent(timed, out), EventCheck::kBadFlags);
}

TEST(WorkerEvent, FinishRoundTripsForEveryStatusAWorkerMayReport) {
  for (const Status st :
       {Status::kOk, Status::kCancelled, Status::kExecutorFailed, Status::kInvalid}) {
    WorkerEvent e;
    e.kind = WorkerEventKind::kFinish;
    e.assignment = 0x1'0000'0005ULL;
    e.status = st;
    e.output_tokens = 0xfffffff0;
    const Received r = throughRing(e, {});
    ASSERT_EQ(r.check, EventCheck::kValid) << toString(st);
    EXPECT_EQ(r.event.kind, WorkerEventKind::kFinish);
    EXPECT_EQ(r.event.assignment, e.assignment);
    EXPECT_EQ(r.event.status, st);
    EXPECT_EQ(r.event.output_tokens, e.output_tokens);
    EXPECT_EQ(r.event.message_bytes, 0u);
  }
}

TEST(WorkerEvent, FinishCarriesItsMessageInTheArena) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kFinish;
  e.assignment = 11;
  e.status = Status::kExecutorFailed;
  const std::vector<std::byte> msg = bytesOf("CUDA error: out of memory");  // 25 bytes
  const Received r = throughRing(e, {}, msg);
  ASSERT_EQ(r.check, EventCheck::kValid);
  EXPECT_EQ(r.event.message_bytes, msg.size());
  ASSERT_EQ(r.words.size(), (msg.size() + 3) / 4);
  EXPECT_EQ(std::memcmp(r.words.data(), msg.data(), msg.size()), 0);

  const std::vector<std::byte> longest(kMaxParamsBytes, std::byte{'x'});
  const Received l = throughRing(e, {}, longest);
  ASSERT_EQ(l.check, EventCheck::kValid);
  EXPECT_EQ(l.event.message_bytes, kMaxParamsBytes);
}

TEST(WorkerEvent, RefusedDecodeLeavesNothingOfThePreviousEvent) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kCapacity;
  e.free_sequences = 5;
  WorkerEvent out;
  ASSERT_EQ(decodeWorkerEvent(encodeWorkerEvent(e), out), EventCheck::kValid);
  SubmissionSlot bad;
  bad.endpoint = 99;
  EXPECT_EQ(decodeWorkerEvent(bad, out), EventCheck::kUnknownKind);
  EXPECT_EQ(out.free_sequences, 0u);
}

// ---- worker events: what is refused -----------------------------------------

SubmissionSlot validSlotOf(WorkerEventKind kind) {
  WorkerEvent e;
  e.kind = kind;
  e.assignment = 1;
  SubmissionSlot s = encodeWorkerEvent(e);
  if (kind == WorkerEventKind::kTokens) s.prompt_tokens = 1;
  if (kind == WorkerEventKind::kStep) s.prompt_tokens = kStepWordsPerToken;
  WorkerEvent out;
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kValid);
  return s;
}

// What decodeWorkerEvent says of a valid `kind` event with `change` made.
template <class Change>
EventCheck decodeChanged(WorkerEventKind kind, Change change) {
  SubmissionSlot s = validSlotOf(kind);
  change(s);
  WorkerEvent out;
  return decodeWorkerEvent(s, out);
}

// Each of `kinds`, valid but for `change`, decodes as `want`.
template <class Change>
void expectEachDecodesAs(std::initializer_list<WorkerEventKind> kinds, Change change,
                         EventCheck want) {
  for (const WorkerEventKind kind : kinds) {
    EXPECT_EQ(decodeChanged(kind, change), want) << "kind " << static_cast<int>(kind);
  }
}

constexpr WorkerEventKind kAllKinds[] = {WorkerEventKind::kCapacity, WorkerEventKind::kTokens,
                                         WorkerEventKind::kFinish, WorkerEventKind::kPreempted,
                                         WorkerEventKind::kStep};

TEST(WorkerEventRefused, UnknownKind) {
  for (const std::uint16_t kind : {0, 7, 8, 0x100, 0xffff}) {
    EXPECT_EQ(
        decodeChanged(WorkerEventKind::kCapacity, [&](SubmissionSlot& s) { s.endpoint = kind; }),
        EventCheck::kUnknownKind)
        << kind;
  }
}

TEST(WorkerEventRefused, AnySubmissionFlagOnAnyKind) {
  for (const WorkerEventKind kind : kAllKinds) {
    for (const std::uint16_t flag :
         {kSlotStream, kSlotCountsOnly, kSlotCancel, std::uint16_t{0x8000}}) {
      EXPECT_EQ(decodeChanged(kind, [&](SubmissionSlot& s) { s.flags = flag; }),
                EventCheck::kBadFlags)
          << "kind " << static_cast<int>(kind) << " flag " << flag;
    }
  }
}

TEST(WorkerEventRefused, ATenantHandleOnAnyKind) {
  for (const WorkerEventKind kind : kAllKinds) {
    EXPECT_EQ(decodeChanged(kind, [](SubmissionSlot& s) { s.tenant = 1; }), EventCheck::kBadFlags)
        << "kind " << static_cast<int>(kind);
  }
}

TEST(WorkerEventRefused, ParametersOnCapacityAndTokens) {
  expectEachDecodesAs(
      {WorkerEventKind::kCapacity, WorkerEventKind::kTokens, WorkerEventKind::kStep},
      [](SubmissionSlot& s) { s.params_bytes = 1; }, EventCheck::kBadFlags);
}

TEST(WorkerEventRefused, TokensWithoutTokensOrWithTooMany) {
  WorkerEvent out;
  SubmissionSlot s = validSlotOf(WorkerEventKind::kTokens);
  s.prompt_tokens = 0;
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kBadTokens);
  s.prompt_tokens = kWorkerTokensPerEvent + 1;
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kBadTokens);
  s.prompt_tokens = std::numeric_limits<std::uint32_t>::max();
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kBadTokens);
  s.prompt_tokens = kWorkerTokensPerEvent;
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kValid);
}

TEST(WorkerEventRefused, TokenIdsOnFinishAndCapacity) {
  expectEachDecodesAs(
      {WorkerEventKind::kCapacity, WorkerEventKind::kFinish},
      [](SubmissionSlot& s) { s.prompt_tokens = 1; }, EventCheck::kStrayTokens);
}

TEST(WorkerEventRefused, FinishWithAStatusAWorkerMayNotReport) {
  WorkerEvent out;
  for (std::uint32_t wire = 0; wire <= encodeStatus(Status::kSlowConsumer) + 1; ++wire) {
    SubmissionSlot s = validSlotOf(WorkerEventKind::kFinish);
    s.priority = static_cast<std::int32_t>(wire);
    const std::optional<Status> st = decodeStatus(wire);
    const bool allowed = st && (*st == Status::kOk || *st == Status::kCancelled ||
                                *st == Status::kExecutorFailed || *st == Status::kInvalid);
    EXPECT_EQ(decodeWorkerEvent(s, out), allowed ? EventCheck::kValid : EventCheck::kBadStatus)
        << "wire status " << wire;
  }
  SubmissionSlot s = validSlotOf(WorkerEventKind::kFinish);
  s.priority = std::numeric_limits<std::int32_t>::max();
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kBadStatus);
}

TEST(WorkerEventRefused, FinishWithANegativeStatus) {
  for (const std::int32_t prio : {-1, std::numeric_limits<std::int32_t>::min()}) {
    EXPECT_EQ(
        decodeChanged(WorkerEventKind::kFinish, [&](SubmissionSlot& s) { s.priority = prio; }),
        EventCheck::kBadStatus)
        << prio;
  }
}

TEST(WorkerEventRefused, TokensWithANegativeEmitTime) {
  for (const std::int64_t t : {std::int64_t{-1}, std::numeric_limits<std::int64_t>::min()}) {
    EXPECT_EQ(
        decodeChanged(WorkerEventKind::kTokens, [&](SubmissionSlot& s) { s.deadline_ns = t; }),
        EventCheck::kNegativeTime)
        << t;
  }
}

TEST(WorkerEventRefused, EveryCheckHasItsOwnDescription) {
  const EventCheck all[] = {EventCheck::kValid,        EventCheck::kUnknownKind,
                            EventCheck::kBadFlags,     EventCheck::kBadTokens,
                            EventCheck::kStrayTokens,  EventCheck::kBadStatus,
                            EventCheck::kNegativeTime, EventCheck::kBadCache};
  for (std::size_t i = 0; i < std::size(all); ++i) {
    EXPECT_NE(toString(all[i]), "unknown");
    for (std::size_t j = i + 1; j < std::size(all); ++j)
      EXPECT_NE(toString(all[i]), toString(all[j]));
  }
}

// ---- assignments --------------------------------------------------------------

AssignmentRecord sampleAssign() {
  AssignmentRecord a;
  a.kind = AssignmentKind::kAssign;
  a.assignment = 0xabcdef0123456789ULL;
  a.tenant = 0xfffffffe;
  a.priority = -7;
  a.deadline_ns = 9'000'000'000'000;
  a.prompt_tokens = 300;
  a.max_output_tokens = 2048;
  a.params_bytes = 13;
  return a;
}

void expectSameAssign(const AssignmentRecord& got, const AssignmentRecord& want) {
  EXPECT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.assignment, want.assignment);
  EXPECT_EQ(got.tenant, want.tenant);
  EXPECT_EQ(got.priority, want.priority);
  EXPECT_EQ(got.deadline_ns, want.deadline_ns);
  EXPECT_EQ(got.prompt_tokens, want.prompt_tokens);
  EXPECT_EQ(got.max_output_tokens, want.max_output_tokens);
  EXPECT_EQ(got.params_bytes, want.params_bytes);
  EXPECT_EQ(got.counts_only, want.counts_only);
  EXPECT_EQ(got.resume_tokens, want.resume_tokens);
}

TEST(Assignment, AssignRoundTripsEveryField) {
  const AssignmentRecord a = sampleAssign();
  EXPECT_EQ(a.payloadWords(), 300u + 4u);
  const std::optional<AssignmentRecord> got = decodeAssignment(encodeAssignment(a), 304);
  ASSERT_TRUE(got.has_value());
  expectSameAssign(*got, a);
}

TEST(Assignment, CountsOnlyAssignCarriesNoPromptWords) {
  AssignmentRecord a = sampleAssign();
  a.counts_only = true;
  a.prompt_tokens = 100000;  // a count only: far more than the payload could hold
  a.params_bytes = kMaxParamsBytes;
  EXPECT_EQ(a.payloadWords(), kMaxParamsBytes / 4);
  const std::optional<AssignmentRecord> got =
      decodeAssignment(encodeAssignment(a), kMaxParamsBytes / 4);
  ASSERT_TRUE(got.has_value());
  expectSameAssign(*got, a);
}

TEST(Assignment, ExtremePrioritiesDeadlinesAndResumedTokensRoundTrip) {
  for (const std::int32_t prio : {std::numeric_limits<std::int32_t>::min(), -1, 0,
                                  std::numeric_limits<std::int32_t>::max()}) {
    AssignmentRecord a = sampleAssign();
    a.priority = prio;
    a.deadline_ns = prio < 0 ? 0 : std::numeric_limits<std::int64_t>::max();
    a.resume_tokens = 17;
    a.tenant = prio == 0 ? 0 : std::numeric_limits<std::uint32_t>::max();
    const std::optional<AssignmentRecord> got =
        decodeAssignment(encodeAssignment(a), std::numeric_limits<std::uint32_t>::max());
    ASSERT_TRUE(got.has_value()) << prio;
    expectSameAssign(*got, a);
  }
}

TEST(Assignment, AbortRoundTripsItsAssignmentOnly) {
  AssignmentRecord a = sampleAssign();
  a.kind = AssignmentKind::kAbort;
  const CompletionSlot s = encodeAssignment(a);
  const std::optional<AssignmentRecord> got = decodeAssignment(s, 0);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->kind, AssignmentKind::kAbort);
  EXPECT_EQ(got->assignment, a.assignment);
  EXPECT_EQ(got->params_bytes, 0u);
  EXPECT_EQ(got->prompt_tokens, 0u);
  EXPECT_EQ(assignmentPayloadWords(s), 0u) << "an abort has no payload";
}

TEST(Assignment, PreemptRoundTripsItsAssignmentOnly) {
  AssignmentRecord a = sampleAssign();
  a.kind = AssignmentKind::kPreempt;
  const CompletionSlot s = encodeAssignment(a);
  const std::optional<AssignmentRecord> got = decodeAssignment(s, 0);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->kind, AssignmentKind::kPreempt);
  EXPECT_EQ(got->assignment, a.assignment);
  EXPECT_EQ(got->prompt_tokens, 0u);
  EXPECT_EQ(assignmentPayloadWords(s), 0u) << "a preempt has no payload";
}

TEST(WorkerEvent, FinishCarriesThePromptAsCounted) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kFinish;
  e.assignment = 5;
  e.output_tokens = 7;
  e.input_tokens = 4321;
  WorkerEvent out;
  SubmissionSlot s = encodeWorkerEvent(e);
  ASSERT_EQ(decodeWorkerEvent(s, out), EventCheck::kValid);
  EXPECT_EQ(out.input_tokens, 4321u);
  s.tag = std::uint64_t{1} << 32;
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kBadFlags);
}

TEST(WorkerEvent, PreemptedRoundTripsAndCarriesNothingElse) {
  WorkerEvent e;
  e.kind = WorkerEventKind::kPreempted;
  e.assignment = (std::uint64_t{3} << 32) | 17;
  e.output_tokens = 1234;
  WorkerEvent out;
  SubmissionSlot s = encodeWorkerEvent(e);
  ASSERT_EQ(decodeWorkerEvent(s, out), EventCheck::kValid);
  EXPECT_EQ(out.kind, WorkerEventKind::kPreempted);
  EXPECT_EQ(out.assignment, e.assignment);
  EXPECT_EQ(out.output_tokens, 1234u);
  s.prompt_tokens = 1;
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kStrayTokens);
  s.prompt_tokens = 0;
  s.params_bytes = 4;
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kBadFlags);
  s.params_bytes = 0;
  s.priority = 1;  // a status belongs to FINISH
  EXPECT_EQ(decodeWorkerEvent(s, out), EventCheck::kBadFlags);
}

TEST(Assignment, PayloadOverTheBudgetIsRefused) {
  const AssignmentRecord a = sampleAssign();
  const CompletionSlot s = encodeAssignment(a);
  EXPECT_TRUE(decodeAssignment(s, 304).has_value());
  EXPECT_FALSE(decodeAssignment(s, 303).has_value());
  EXPECT_FALSE(decodeAssignment(s, 0).has_value());
  // Resumed tokens count against the budget too.
  AssignmentRecord r = a;
  r.resume_tokens = 1;
  EXPECT_FALSE(decodeAssignment(encodeAssignment(r), 304).has_value());
  EXPECT_TRUE(decodeAssignment(encodeAssignment(r), 305).has_value());
}

TEST(Assignment, ParametersOverTheLimitAreRefusedWhateverTheBudget) {
  AssignmentRecord a = sampleAssign();
  a.params_bytes = kMaxParamsBytes + 1;
  EXPECT_FALSE(
      decodeAssignment(encodeAssignment(a), std::numeric_limits<std::uint32_t>::max()).has_value());
}

TEST(Assignment, UnknownKindsAreRefused) {
  CompletionSlot s = encodeAssignment(sampleAssign());
  // A client's completion and a stream chunk are not assignments.
  for (const std::uint32_t kind : {encodeStatus(Status::kOk), encodeStatus(Status::kCancelled),
                                   kStreamChunk, 0x1ffu, 0x203u, 0xffffffffu}) {
    s.status = kind;
    EXPECT_FALSE(decodeAssignment(s, std::numeric_limits<std::uint32_t>::max()).has_value())
        << kind;
    EXPECT_EQ(assignmentPayloadWords(s), 0u) << kind;
  }
}

TEST(Assignment, FieldsOutsideTheirRangeAreRefused) {
  const CompletionSlot good = encodeAssignment(sampleAssign());
  constexpr std::uint32_t kAll = std::numeric_limits<std::uint32_t>::max();
  ASSERT_TRUE(decodeAssignment(good, kAll).has_value());
  CompletionSlot s = good;
  s.tag = std::uint64_t{1} << 32;  // tenant
  EXPECT_FALSE(decodeAssignment(s, kAll).has_value());
  s = good;
  s.queue_wait_ns |= std::uint64_t{1} << 33;  // past params_bytes | counts_only << 32
  EXPECT_FALSE(decodeAssignment(s, kAll).has_value());
  s = good;
  s.service_ns = std::uint64_t{1} << 32;  // resume_tokens
  EXPECT_FALSE(decodeAssignment(s, kAll).has_value());
  s = good;
  s.checksum = std::uint64_t{1} << 32;  // priority
  EXPECT_FALSE(decodeAssignment(s, kAll).has_value());
  s = good;
  s.retry_after_ns = -1;  // deadline
  EXPECT_FALSE(decodeAssignment(s, kAll).has_value());
}

TEST(Assignment, PayloadWordsForAWorkersConsumer) {
  AssignmentRecord a = sampleAssign();
  EXPECT_EQ(assignmentPayloadWords(encodeAssignment(a)), 304u);
  a.counts_only = true;
  EXPECT_EQ(assignmentPayloadWords(encodeAssignment(a)), 4u);
  a.counts_only = false;
  a.params_bytes = 0;
  a.prompt_tokens = 0;
  EXPECT_EQ(assignmentPayloadWords(encodeAssignment(a)), 0u);
  // Up to 32 bits of words (the consumer clamps to its reply arena); a record
  // claiming more is malformed and has none.
  a.prompt_tokens = std::numeric_limits<std::uint32_t>::max();
  EXPECT_EQ(assignmentPayloadWords(encodeAssignment(a)), std::numeric_limits<std::uint32_t>::max());
  a.params_bytes = 1;
  EXPECT_EQ(assignmentPayloadWords(encodeAssignment(a)), 0u);
  a.params_bytes = 0;
  a.resume_tokens = 1;
  EXPECT_EQ(assignmentPayloadWords(encodeAssignment(a)), 0u);
  // A malformed record has none.
  CompletionSlot bad = encodeAssignment(sampleAssign());
  bad.retry_after_ns = -5;
  EXPECT_EQ(assignmentPayloadWords(bad), 0u);
}

TEST(Assignment, StreamPayloadIsTheChunksTokensOnly) {
  CompletionSlot s;
  s.status = kStreamChunk;
  s.output_tokens = 37;
  EXPECT_EQ(streamPayloadWords(s), 37u);
  s.output_tokens = 0;
  EXPECT_EQ(streamPayloadWords(s), 0u);
  s.status = encodeStatus(Status::kOk);  // a final completion: its count is not a payload
  s.output_tokens = 37;
  EXPECT_EQ(streamPayloadWords(s), 0u);
  s.status = static_cast<std::uint32_t>(AssignmentKind::kAssign);
  EXPECT_EQ(streamPayloadWords(s), 0u);
}

// ---- the reference token stream -----------------------------------------------

// The formula of docs/worker.md (Reference tokens) in 64-bit arithmetic, reduced at the end.
std::uint32_t expectedToken(const std::vector<std::uint32_t>& p, std::uint64_t j) {
  const std::uint64_t base = p.empty() ? 0 : p[j % p.size()];
  return static_cast<std::uint32_t>((base + j + 1) % (std::uint64_t{1} << 32));
}

TEST(ReferenceToken, FollowsThePromptCyclically) {
  const std::vector<std::uint32_t> p = {5, 10, 20};
  const std::uint32_t want[] = {6, 12, 23, 9, 15, 26, 12};
  for (std::uint32_t j = 0; j < std::size(want); ++j) {
    EXPECT_EQ(referenceToken(p, j), want[j]) << j;
    EXPECT_EQ(referenceToken(p, j), expectedToken(p, j)) << j;
  }
}

TEST(ReferenceToken, WrapsAt2To32) {
  const std::vector<std::uint32_t> p = {0xffffffff, 0xfffffffe};
  EXPECT_EQ(referenceToken(p, 0), 0u);  // 2^32 - 1 + 0 + 1
  EXPECT_EQ(referenceToken(p, 1), 0u);  // 2^32 - 2 + 1 + 1
  EXPECT_EQ(referenceToken(p, 2), 2u);
  const std::vector<std::uint32_t> one = {7};
  constexpr std::uint32_t kLast = std::numeric_limits<std::uint32_t>::max();
  EXPECT_EQ(referenceToken(one, kLast), 7u);  // 7 + 2^32 - 1 + 1
  EXPECT_EQ(referenceToken(one, kLast), expectedToken(one, kLast));
}

TEST(ReferenceToken, EmptyPromptCountsFromOne) {
  const std::vector<std::uint32_t> none;
  EXPECT_EQ(referenceToken(none, 0), 1u);
  EXPECT_EQ(referenceToken(none, 41), 42u);
  EXPECT_EQ(referenceToken(none, std::numeric_limits<std::uint32_t>::max()), 0u);
}

RC_GTEST_PROP(ReferenceToken, MatchesTheFormula, (std::vector<std::uint32_t> p, std::uint32_t j)) {
  RC_ASSERT(referenceToken(p, j) == expectedToken(p, j));
}

// ---- the worker's segment -------------------------------------------------------

TEST(WorkerGeometry, PassesComputeLayoutWithRoomForAPromptAndItsParameters) {
  for (const std::uint32_t assignments : {2u, 256u, 4096u}) {
    for (const std::uint32_t prompt : {1u, 8192u, 65536u}) {
      const Geometry g = workerGeometry(assignments, prompt);
      const Result<Layout> r = computeLayout(g, 4096);
      ASSERT_TRUE(r.ok()) << assignments << " x " << prompt << ": " << r.error().message;
      const Layout& l = r.value();
      // The header a worker gets back checks out.
      EXPECT_TRUE((checkHeader(makeHeader(l), l.total_size, 4096)).ok());
      EXPECT_EQ(g.ring_count, 1u);
      EXPECT_EQ(g.completion_capacity, assignments);
      // An assignment's payload: the longest prompt and the largest parameters.
      AssignmentRecord a;
      a.prompt_tokens = prompt;
      a.params_bytes = kMaxParamsBytes;
      EXPECT_EQ(g.reply_tokens_per_slot, a.payloadWords());
      // An event slot: the most tokens one TOKENS carries, or the longest message.
      EXPECT_GE(g.prompt_tokens_per_slot, kWorkerTokensPerEvent);
      EXPECT_GE(g.prompt_tokens_per_slot, kMaxParamsBytes / 4);
    }
  }
}

// ---- the submission ring: parameters and counts-only slots ---------------------

TEST(SubmissionRingParams, ParametersFollowThePromptAndThePadIsZeroed) {
  EventRing ring(4, 8);
  SubmissionProducer producer(ring.mem);
  SubmissionConsumer consumer(ring.mem, 0);
  const std::vector<std::uint32_t> prompt = {1, 2, 3};
  const std::vector<std::byte> params = bytesOf("\xa1\xa2\xa3\xa4\xa5");
  SubmissionSlot slot;
  slot.request_id = 77;
  ASSERT_EQ(producer.tryPushPrompt(slot, prompt, params), PushResult::kOk);
  SubmissionSlot out;
  std::vector<std::uint32_t> words;
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_EQ(out.request_id, 77u);
  EXPECT_EQ(out.prompt_tokens, 3u);
  EXPECT_EQ(out.params_bytes, 5u);
  EXPECT_EQ(out.arenaWords(), 5u);
  ASSERT_EQ(words.size(), 5u);
  EXPECT_EQ(std::vector<std::uint32_t>(words.begin(), words.begin() + 3), prompt);
  const auto* bytes = reinterpret_cast<const std::byte*>(words.data() + 3);
  EXPECT_EQ(std::memcmp(bytes, params.data(), params.size()), 0);
  for (std::size_t i = params.size(); i < 8; ++i) {
    EXPECT_EQ(bytes[i], std::byte{0}) << "pad byte " << i << " carries stale arena data";
  }
  // Nothing past the slot's words was written.
  EXPECT_EQ(ring.arena[5], EventRing::kStale);
}

TEST(SubmissionRingParams, WholeWordParametersAndParametersAlone) {
  EventRing ring(4, 8);
  SubmissionProducer producer(ring.mem);
  SubmissionConsumer consumer(ring.mem, 0);
  const std::vector<std::byte> params = bytesOf("12345678");
  ASSERT_EQ(producer.tryPushPrompt(SubmissionSlot{}, {}, params), PushResult::kOk);
  SubmissionSlot out;
  std::vector<std::uint32_t> words;
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_EQ(out.prompt_tokens, 0u);
  EXPECT_EQ(out.params_bytes, 8u);
  ASSERT_EQ(words.size(), 2u);
  EXPECT_EQ(std::memcmp(words.data(), params.data(), 8), 0);
  EXPECT_EQ(ring.arena[2], EventRing::kStale);
}

TEST(SubmissionRingParams, PromptAndParametersMustFitTheSlotsShare) {
  EventRing ring(4, 4);
  SubmissionProducer producer(ring.mem);
  const std::vector<std::uint32_t> prompt = {1, 2, 3};
  EXPECT_EQ(producer.tryPushPrompt(SubmissionSlot{}, prompt, bytesOf("abcd")), PushResult::kOk);
  EXPECT_EQ(producer.tryPushPrompt(SubmissionSlot{}, prompt, bytesOf("abcde")),
            PushResult::kPromptTooLarge)
      << "3 prompt words + 2 parameter words do not fit 4";
  EXPECT_EQ(producer.sizeApprox(), 1u) << "a refused push claims nothing";
}

TEST(SubmissionRingParams, ParametersOverTheLimitAreRefused) {
  EventRing ring(2, kMaxParamsBytes);
  SubmissionProducer producer(ring.mem);
  const std::vector<std::byte> too_many(kMaxParamsBytes + 1, std::byte{1});
  EXPECT_EQ(producer.tryPushPrompt(SubmissionSlot{}, {}, too_many), PushResult::kInvalidSlot);
  const std::vector<std::byte> most(kMaxParamsBytes, std::byte{1});
  EXPECT_EQ(producer.tryPushPrompt(SubmissionSlot{}, {}, most), PushResult::kOk);
}

TEST(SubmissionRingParams, CountsOnlySlotKeepsItsCountAndCarriesNoTokens) {
  EventRing ring(4, 4);
  SubmissionProducer producer(ring.mem);
  SubmissionConsumer consumer(ring.mem, 0);
  SubmissionSlot slot;
  slot.flags = kSlotCountsOnly | kSlotStream;
  slot.prompt_tokens = 100000;  // far more than the arena: it is a count
  const std::vector<std::byte> ref = bytesOf("body#42");
  ASSERT_EQ(producer.tryPushPrompt(slot, {}, ref), PushResult::kOk);
  SubmissionSlot out;
  std::vector<std::uint32_t> words;
  ASSERT_EQ(consumer.tryPop(out, words), PopResult::kOk);
  EXPECT_EQ(out.flags, kSlotCountsOnly | kSlotStream | kSlotInline) << "two words: in the cell";
  EXPECT_EQ(out.prompt_tokens, 100000u);
  EXPECT_EQ(out.promptWords(), 0u);
  EXPECT_EQ(out.params_bytes, ref.size());
  ASSERT_EQ(words.size(), 2u) << "the parameters only";
  EXPECT_EQ(std::memcmp(words.data(), ref.data(), ref.size()), 0);

  const std::vector<std::uint32_t> ids = {1};
  EXPECT_EQ(producer.tryPushPrompt(slot, ids), PushResult::kInvalidSlot)
      << "a counts-only slot given token ids";
}

TEST(SubmissionRingParams, CheckSlotBoundsParameters) {
  SubmissionSlot s;
  s.params_bytes = kMaxParamsBytes;
  EXPECT_EQ(checkSlot(s, kMaxParamsBytes / 4), SlotCheck::kValid);
  s.params_bytes = kMaxParamsBytes + 1;
  EXPECT_EQ(checkSlot(s, std::numeric_limits<std::uint64_t>::max()), SlotCheck::kParamsTooLarge);
  s.params_bytes = std::numeric_limits<std::uint32_t>::max();
  EXPECT_EQ(checkSlot(s, std::numeric_limits<std::uint64_t>::max()), SlotCheck::kParamsTooLarge);
}

TEST(SubmissionRingParams, CheckSlotCountsParameterWordsAgainstTheArena) {
  SubmissionSlot s;
  s.prompt_offset = 90;
  s.prompt_tokens = 8;
  s.params_bytes = 8;  // 2 words: exactly to the end of 100
  EXPECT_EQ(s.arenaWords(), 10u);
  EXPECT_EQ(checkSlot(s, 100), SlotCheck::kValid);
  s.params_bytes = 9;  // 3 words
  EXPECT_EQ(checkSlot(s, 100), SlotCheck::kPromptOutOfArena);
  // Counts-only: the count is not arena words, the parameters are.
  s.flags = kSlotCountsOnly;
  s.prompt_tokens = std::numeric_limits<std::uint32_t>::max();
  s.params_bytes = 40;
  EXPECT_EQ(checkSlot(s, 100), SlotCheck::kValid);
  s.params_bytes = 41;
  EXPECT_EQ(checkSlot(s, 100), SlotCheck::kPromptOutOfArena);
  s.flags = 0;
  s.params_bytes = 0;
  EXPECT_EQ(checkSlot(s, 100), SlotCheck::kPromptOutOfArena);
}

TEST(SubmissionRingParams, CheckSlotAcceptsEveryKnownFlagAndNothingElse) {
  SubmissionSlot s;
  for (const std::uint16_t f :
       {kSlotStream, kSlotCountsOnly, kSlotCancel, kSlotPrefix, kKnownSlotFlags}) {
    s.flags = f;
    // A prefix of one hash (two words) with kSlotPrefix: the flag needs one.
    s.params_bytes = (f & kSlotPrefix) != 0 ? std::uint32_t{1} << 16 : 0;
    EXPECT_EQ(checkSlot(s, 2), SlotCheck::kValid) << f;
  }
  s.params_bytes = 0;
  s.flags = static_cast<std::uint16_t>(kKnownSlotFlags + 1);
  EXPECT_EQ(checkSlot(s, 0), SlotCheck::kFlagsSet);
}

// ---- the completion ring: records with a reply-arena payload --------------------

TEST(CompletionRingPayload, WrittenRecordsAppearOnlyOncePublished) {
  ReplyRing ring(4, 8);
  CompletionProducer producer(ring.mem, 0);
  CompletionConsumer consumer(ring.mem);
  ASSERT_EQ(producer.freeSlots(2), 4u);
  const std::vector<std::uint32_t> first = {1, 2, 3};
  const std::vector<std::uint32_t> second = {4, 5, 6, 7, 8};
  CompletionSlot s1;
  s1.status = kStreamChunk;
  s1.output_tokens = 3;
  CompletionSlot s2 = s1;
  s2.output_tokens = 5;
  producer.write(s1, first);
  producer.write(s2, second);
  EXPECT_EQ(consumer.available(), 0u) << "written, not published";
  producer.publish();
  EXPECT_EQ(consumer.available(), 2u);
  CompletionSlot out;
  std::vector<std::uint32_t> payload;
  ASSERT_TRUE(consumer.tryPop(out, payload, streamPayloadWords));
  EXPECT_EQ(out, s1);
  EXPECT_EQ(payload, first);
  ASSERT_TRUE(consumer.tryPop(out, payload, streamPayloadWords));
  EXPECT_EQ(payload, second);
  EXPECT_FALSE(consumer.tryPop(out, payload, streamPayloadWords));
}

TEST(CompletionRingPayload, AnAssignmentAndItsPromptAndParametersReachTheWorker) {
  ReplyRing ring(2, 16);
  CompletionProducer producer(ring.mem, 0);
  CompletionConsumer consumer(ring.mem);
  AssignmentRecord a = sampleAssign();
  a.prompt_tokens = 3;
  a.params_bytes = 6;
  std::vector<std::uint32_t> payload = {100, 200, 300};
  const std::vector<std::byte> params = bytesOf("top_p1");
  payload.resize(payload.size() + 2, 0);
  std::memcpy(payload.data() + 3, params.data(), params.size());
  producer.write(encodeAssignment(a), payload);
  AssignmentRecord abort;
  abort.kind = AssignmentKind::kAbort;
  abort.assignment = 5;
  producer.write(encodeAssignment(abort), {});
  producer.publish();

  CompletionSlot out;
  std::vector<std::uint32_t> got;
  ASSERT_TRUE(consumer.tryPop(out, got, assignmentPayloadWords));
  const std::optional<AssignmentRecord> d = decodeAssignment(out, 16);
  ASSERT_TRUE(d.has_value());
  expectSameAssign(*d, a);
  EXPECT_EQ(got, payload);
  ASSERT_TRUE(consumer.tryPop(out, got, assignmentPayloadWords));
  EXPECT_TRUE(got.empty()) << "the abort's cell still holds stale words: none are copied";
  EXPECT_EQ(decodeAssignment(out, 16)->kind, AssignmentKind::kAbort);
}

TEST(CompletionRingPayload, PayloadIsClampedToTheCellsShareOnBothSides) {
  ReplyRing ring(2, 4);
  CompletionProducer producer(ring.mem, 0);
  CompletionConsumer consumer(ring.mem);
  const std::vector<std::uint32_t> long_payload = {1, 2, 3, 4, 5, 6, 7};
  CompletionSlot s;
  s.status = kStreamChunk;
  s.output_tokens = 7;  // claims more than the cell holds
  producer.write(s, long_payload);
  producer.write(s, std::vector<std::uint32_t>{9, 9, 9, 9});
  producer.publish();
  // The second cell's share is untouched by the first record's overflow.
  EXPECT_EQ(ring.reply_arena[4], 9u);
  CompletionSlot out;
  std::vector<std::uint32_t> got;
  ASSERT_TRUE(consumer.tryPop(out, got, streamPayloadWords));
  EXPECT_EQ(got, (std::vector<std::uint32_t>{1, 2, 3, 4}));
  ASSERT_TRUE(consumer.tryPop(out, got, streamPayloadWords));
  EXPECT_EQ(got, (std::vector<std::uint32_t>{9, 9, 9, 9}));
}

TEST(CompletionRingPayload, EachCellKeepsItsOwnShareAcrossLapsAndThe64BitWrap) {
  const std::uint64_t start = std::numeric_limits<std::uint64_t>::max() - 5;
  ReplyRing ring(4, 3, start);
  CompletionProducer producer(ring.mem, start);
  CompletionConsumer consumer(ring.mem);
  std::uint32_t next = 0;
  std::uint32_t expect = 0;
  CompletionSlot out;
  std::vector<std::uint32_t> got;
  for (int round = 0; round < 5; ++round) {
    const std::uint64_t room = producer.freeSlots(4);
    for (std::uint64_t i = 0; i < room; ++i, ++next) {
      CompletionSlot s;
      s.status = kStreamChunk;
      s.request_id = next;
      s.output_tokens = 1 + next % 3;
      const std::vector<std::uint32_t> p = {next * 10, next * 10 + 1, next * 10 + 2};
      producer.write(s, std::span(p).first(s.output_tokens));
    }
    producer.publish();
    for (int i = 0; i < 3; ++i, ++expect) {
      ASSERT_TRUE(consumer.tryPop(out, got, streamPayloadWords));
      ASSERT_EQ(out.request_id, expect);
      ASSERT_EQ(got.size(), 1 + expect % 3);
      for (std::uint32_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], expect * 10 + k);
    }
  }
  EXPECT_FALSE(consumer.broken());
  EXPECT_EQ(consumer.position(), start + 15);
  EXPECT_LT(consumer.position(), start) << "crossed 2^64";
}

}  // namespace
}  // namespace fairsched::shm
