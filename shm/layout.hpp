// The fixed, versioned layout of one client's shared-memory segment.
//
// One segment per client connection. The daemon creates it as a memfd, sizes
// it, seals its size (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), initialises
// it and passes the fd to the client over the unix socket. It has two
// page-aligned parts:
//
//   (a) client-writable, offset 0, writable_size bytes (mapped read-write by both):
//       SegmentHeader              written by the daemon before the hand-over;
//                                  the client re-validates it, the daemon never
//                                  reads it back (it keeps its own Layout)
//       ClientControl              the client's completion read index and its
//                                  "sleeping" flag
//       ready bitmap               one bit per submission ring, set by producers
//       ring_count submission rings (lanes: any tenant's requests; a
//                                  producer thread keeps to one), each a
//                                  SubmissionRingControl and ring_capacity
//                                  SubmissionCells
//       prompt arena               ring_count regions of ring_capacity *
//                                  prompt_tokens_per_slot uint32 tokens
//   (b) daemon-written, offset daemon_offset, daemon_size bytes (read-write in
//       the daemon, READ-ONLY in the client):
//       CompletionControl          the daemon's "sleeping" flag
//       completion_capacity CompletionCells, each published by its own lap
//                                  mark (completion_ring.hpp)
//       reply arena                completion_capacity regions of
//                                  reply_tokens_per_slot uint32 words: the
//                                  payload of the cell of the same index
//                                  (streamed tokens for a client; the prompt
//                                  and parameters of an assignment for a worker)
//
// Only indices and plain records live here: no pointers, allocators or
// mutexes. Fields that both sides touch concurrently are accessed through
// shm/shared_word.hpp; each such field says below which memory order its
// accesses use and what that makes visible to whom. docs/shm-layout.md has
// the offsets table and the threat model.
//
// Why F_SEAL_WRITE is not used: it forbids every write to the file, the
// daemon's included, and cannot even be added while a writable shared mapping
// exists — both sides must write their part. (F_SEAL_FUTURE_WRITE would seal
// the whole file too, the client's writable part included.) So the client's
// read-only mapping of part (b) protects a well-meaning client from its own
// stray writes; a hostile client can still map the fd read-write and scribble
// on part (b). That only hurts itself: the daemon never reads anything back
// from part (b), and everything it reads from part (a) is bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shm/error.hpp"

namespace fairsched::shm {

// "FSCHEDS1" as a big-endian number.
inline constexpr std::uint64_t kMagic = 0x4653434845445331ULL;
inline constexpr std::uint32_t kLayoutVersion = 5;  // 5: sleep flags count epochs
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::uint64_t kHeaderBytes = 256;  // room reserved for SegmentHeader

// Limits every geometry must respect; both computeLayout() (the daemon) and
// checkHeader() (the client) enforce them.
inline constexpr std::uint32_t kMaxRings = 256;
inline constexpr std::uint32_t kMinRingCapacity = 2;
inline constexpr std::uint32_t kMaxRingCapacity = 1U << 16;
inline constexpr std::uint32_t kMaxPromptTokensPerSlot = 1U << 20;
inline constexpr std::uint32_t kMinCompletionCapacity = 2;
inline constexpr std::uint32_t kMaxCompletionCapacity = 1U << 20;
inline constexpr std::uint32_t kMaxReplyTokensPerSlot = 1U << 20;
// The opaque parameters a submission may carry (sampling settings, model
// name, a proxy's reference to the body it keeps): at most this many bytes.
inline constexpr std::uint32_t kMaxParamsBytes = 4096;
inline constexpr std::uint64_t kMaxSegmentBytes = 1ULL << 32;

// What the daemon chooses for a connection; everything else is derived.
struct Geometry {
  std::uint32_t ring_count = 8;                 // submission rings (lanes), shared by all tenants
  std::uint32_t ring_capacity = 256;            // slots per submission ring, a power of two
  std::uint32_t prompt_tokens_per_slot = 8192;  // arena tokens per slot (see SubmissionCell)
  std::uint32_t completion_capacity = 2048;     // slots of the completion ring, a power of two
  std::uint32_t reply_tokens_per_slot = 0;      // reply-arena words per completion cell; 0 = none

  friend bool operator==(const Geometry&, const Geometry&) = default;
};

// Submission flags (SubmissionSlot::flags).
// Relay the tokens a worker generates to the client as they come (stream
// chunks in the completion ring, before the final completion).
inline constexpr std::uint16_t kSlotStream = 1;
// prompt_tokens is a count only: the arena holds no token ids (a proxy that
// keeps the request body itself; its reference travels in the parameters).
inline constexpr std::uint16_t kSlotCountsOnly = 2;
// Not a request: withdraw the request `request_id` of this client (queued:
// it ends CANCELLED; running on a worker: the worker is told to abort it).
inline constexpr std::uint16_t kSlotCancel = 4;
// The slot's words (prompt, then parameters) are in its cell's second cache
// line (SubmissionCell::inline_words), not in the arena: prompt_offset is 0
// and arenaWords() is at most kInlineWords.
inline constexpr std::uint16_t kSlotInline = 8;
// The request's prefix identity travels with it (routing = "prefix",
// include/fairsched/prefix_hash.hpp): prefixBlocks() block hashes, two words
// each (low, then high 32 bits), after the prompt's ids and before the
// parameters. Their count is the high 16 bits of params_bytes, the
// parameters' bytes its low 16 (a slot without the flag reads params_bytes
// whole, so older clients are unchanged).
inline constexpr std::uint16_t kSlotPrefix = 16;
inline constexpr std::uint16_t kKnownSlotFlags =
    kSlotStream | kSlotCountsOnly | kSlotCancel | kSlotInline | kSlotPrefix;
// Most block hashes one submission carries (with kSlotPrefix, at least one).
inline constexpr std::uint32_t kMaxSlotPrefixBlocks = 1024;
// Words a submission cell carries inline.
inline constexpr std::uint32_t kInlineWords = 16;

// One submission as a client wrote it: 56 bytes, seven 64-bit words. The
// ring it came through names its client; `tenant` is the handle of one of
// that client's open tenants (shm/tenant_handle.hpp), which the daemon looks
// up in its own table for the connection.
//
// The arena words at prompt_offset hold the prompt's token ids (none with
// kSlotCountsOnly), then its prefix hashes (kSlotPrefix), then paramsBytes()
// bytes of opaque parameters padded to a whole word: arenaWords() in all. With kSlotInline the same
// words are in the cell itself.
struct SubmissionSlot {
  std::uint64_t request_id = 0;     // the client's id, echoed in the completion
  std::uint64_t tag = 0;            // opaque to the daemon, echoed in the completion
  std::int64_t deadline_ns = 0;     // absolute CLOCK_MONOTONIC time; 0 = none
  std::uint64_t prompt_offset = 0;  // first word, as an index into the ring's arena region
  std::uint32_t prompt_tokens = 0;  // prompt length in tokens
  std::uint32_t max_output_tokens = 0;
  std::int32_t priority = 0;       // higher first, within the tenant
  std::uint16_t endpoint = 0;      // the daemon's endpoint id
  std::uint16_t flags = 0;         // kSlot* bits; others must be 0
  std::uint32_t params_bytes = 0;  // at most kMaxParamsBytes (see kSlotPrefix)
  std::uint32_t tenant = 0;        // the tenant's handle on this connection; 0 in worker events

  std::uint32_t paramsBytes() const {
    return (flags & kSlotPrefix) != 0 ? params_bytes & 0xffffu : params_bytes;
  }
  std::uint32_t prefixBlocks() const { return (flags & kSlotPrefix) != 0 ? params_bytes >> 16 : 0; }
  // Arena words the slot uses at prompt_offset (no overflow: all are 32-bit).
  std::uint64_t promptWords() const { return (flags & kSlotCountsOnly) ? 0 : prompt_tokens; }
  std::uint64_t prefixWords() const { return 2 * std::uint64_t{prefixBlocks()}; }
  std::uint64_t arenaWords() const {
    return promptWords() + prefixWords() + (std::uint64_t{paramsBytes()} + 3) / 4;
  }
  bool inlined() const { return (flags & kSlotInline) != 0; }

  friend bool operator==(const SubmissionSlot&, const SubmissionSlot&) = default;
};
inline constexpr std::size_t kSubmissionSlotWords = 7;
static_assert(sizeof(SubmissionSlot) == kSubmissionSlotWords * 8);
static_assert(std::is_trivially_copyable_v<SubmissionSlot>);

// CompletionSlot::status of a stream chunk: not a Status, a record kind.
// The chunk's output_tokens token ids are the cell's reply-arena payload;
// queue_wait_ns holds the index of its first token in the request's output,
// service_ns the CLOCK_MONOTONIC time the worker emitted it.
inline constexpr std::uint32_t kStreamChunk = 0x100;

// One completion as the daemon wrote it: 64 bytes, eight 64-bit words. Also
// a stream chunk (status kStreamChunk), and in a worker's segment an
// assignment record (shm/worker_protocol.hpp).
struct CompletionSlot {
  std::uint64_t request_id = 0;     // from the submission
  std::uint64_t tag = 0;            // from the submission
  std::int64_t retry_after_ns = 0;  // RATE_LIMITED: wait this long after publication; else 0
  std::uint64_t queue_wait_ns = 0;  // admission to dispatch
  std::uint64_t service_ns = 0;     // dispatch to completion
  std::uint64_t checksum = 0;       // the executor's per-request result checksum
  // A fairsched::Status value (see completion_ring.hpp), kStreamChunk or an
  // assignment kind: below 2^16, as the ring keeps its lap mark in the
  // upper half of this word in the cell.
  std::uint32_t status = 0;
  std::uint32_t output_tokens = 0;
  std::uint32_t input_tokens = 0;  // prompt tokens served (worker endpoints; else 0)
  std::uint32_t ttft_us = 0;       // dispatch to first token, µs (worker endpoints; else 0)

  friend bool operator==(const CompletionSlot&, const CompletionSlot&) = default;
};
inline constexpr std::size_t kCompletionSlotWords = 8;
static_assert(sizeof(CompletionSlot) == kCompletionSlotWords * 8);
static_assert(std::is_trivially_copyable_v<CompletionSlot>);

// A submission ring slot: two cache lines, the slot's words in the first and
// a short prompt in the second (kSlotInline), so a short request touches no
// arena page: its two lines are adjacent, and the daemon's loads of both
// start together. Positions are 64-bit and only grow; the cell of position p
// is cells[p % capacity]. See submission_ring.hpp for the protocol.
struct alignas(kCacheLine) SubmissionCell {
  // p: free for the producer of position p. p + 1: published by that
  // producer (release store; the daemon's acquire load then sees the words
  // and the prompt). p + capacity: released by the daemon (release store;
  // the producer's acquire load then orders its writes after the daemon's
  // reads of the words and the prompt).
  std::uint64_t sequence;
  // A SubmissionSlot. Relaxed word stores by the producer, relaxed word loads
  // by the daemon: ordered by `sequence`, and never torn or read twice.
  std::uint64_t words[kSubmissionSlotWords];
  // kSlotInline: the slot's arenaWords() words, from the first. Plain
  // stores by the producer before its release of `sequence`, one plain copy
  // by the daemon after its acquire of it, as for the arena.
  alignas(kCacheLine) std::uint32_t inline_words[kInlineWords];
};
static_assert(sizeof(SubmissionCell) == 2 * kCacheLine);
static_assert(sizeof(std::uint32_t) * kInlineWords == kCacheLine);

// Per-ring positions, head and tail on separate cache lines.
struct alignas(kCacheLine) SubmissionRingControl {
  // Next position a producer claims. Producers only: relaxed CAS (the cell's
  // `sequence` carries all ordering). The daemon never reads it.
  std::uint64_t reserve;
  std::uint8_t pad0[kCacheLine - 8];
  // The daemon's read position, for producers' occupancy estimates only:
  // relaxed store and loads, nothing is ordered by it; never read by the daemon.
  std::uint64_t consumed;
  std::uint8_t pad1[kCacheLine - 8];
};
static_assert(sizeof(SubmissionRingControl) == 2 * kCacheLine);

// Client-writable control words.
struct alignas(kCacheLine) ClientControl {
  // The client's position in the completion ring. Release store by the
  // client after copying a completion out; acquire load by the daemon, so the
  // daemon overwrites a cell only after the client's reads of it. The daemon
  // bounds-checks every value it loads (completion_ring.hpp).
  std::uint64_t completion_read;
  std::uint8_t pad0[kCacheLine - 8];
  // Odd while the client sleeps on its completion eventfd (a new value each
  // sleep: doorbell.hpp's epochs). Client: store, then seq_cst fence, then
  // re-check the ring; daemon: publish, then seq_cst fence, then load.
  std::uint32_t client_sleeping;
  std::uint8_t pad1[kCacheLine - 4];
};
static_assert(sizeof(ClientControl) == 2 * kCacheLine);

// Daemon-written control words (part (b), read-only in the client).
struct alignas(kCacheLine) CompletionControl {
  // Odd while the daemon sleeps on the client's doorbell (a new value each
  // sleep: doorbell.hpp's epochs, so a client rings once a sleep). Daemon:
  // store, then seq_cst fence, then re-check the ready bitmap; client: mark
  // the bitmap, then seq_cst fence, then load.
  std::uint32_t daemon_sleeping;
  std::uint8_t pad0[kCacheLine - 4];
};
static_assert(sizeof(CompletionControl) == kCacheLine);

// A completion ring slot: one cache line, a CompletionSlot's words. Written
// by the daemon only; published by the release store of its word 6 with the
// lap's mark in bits 16-31 (completion_ring.hpp), which the client polls.
struct alignas(kCacheLine) CompletionCell {
  std::uint64_t words[kCompletionSlotWords];
};
static_assert(sizeof(CompletionCell) == kCacheLine);

// The header at offset 0. All of it is derived from the geometry by
// computeLayout(); the client recomputes it and compares every field.
struct SegmentHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_size;  // sizeof(SegmentHeader)
  std::uint64_t page_size;
  std::uint64_t total_size;  // the memfd's size
  std::uint32_t ring_count;
  std::uint32_t ring_capacity;
  std::uint32_t prompt_tokens_per_slot;
  std::uint32_t completion_capacity;
  std::uint32_t submission_cell_size;
  std::uint32_t completion_cell_size;
  std::uint64_t client_control_offset;
  std::uint64_t ready_bitmap_offset;
  std::uint64_t rings_offset;
  std::uint64_t ring_stride;
  std::uint64_t arena_offset;
  std::uint64_t arena_ring_bytes;
  std::uint64_t writable_size;
  std::uint64_t daemon_offset;
  std::uint64_t completion_control_offset;
  std::uint64_t completion_cells_offset;
  std::uint64_t daemon_size;
  std::uint32_t reply_tokens_per_slot;
  std::uint32_t reserved;
  std::uint64_t reply_arena_offset;
};
static_assert(sizeof(SegmentHeader) == 160);
static_assert(sizeof(SegmentHeader) <= kHeaderBytes);
static_assert(std::is_trivially_copyable_v<SegmentHeader>);

// Where everything is, in bytes from the start of the segment. The daemon
// computes it once per connection and keeps it; it never reads it back from
// the segment.
struct Layout {
  Geometry geometry;
  std::uint64_t page_size = 0;
  // part (a)
  std::uint64_t client_control_offset = 0;
  std::uint64_t ready_bitmap_offset = 0;
  std::uint32_t ready_bitmap_words = 0;
  std::uint64_t rings_offset = 0;
  std::uint64_t ring_stride = 0;  // a SubmissionRingControl, then ring_capacity cells
  std::uint64_t arena_offset = 0;
  std::uint64_t arena_ring_bytes = 0;  // one ring's prompt region
  std::uint64_t writable_size = 0;
  // part (b)
  std::uint64_t daemon_offset = 0;  // == writable_size
  std::uint64_t completion_control_offset = 0;
  std::uint64_t completion_cells_offset = 0;
  std::uint64_t reply_arena_offset = 0;  // completion_capacity * reply_tokens_per_slot words
  std::uint64_t daemon_size = 0;
  std::uint64_t total_size = 0;

  std::uint64_t ringOffset(std::uint32_t ring) const { return rings_offset + ring * ring_stride; }
  std::uint64_t arenaRegionOffset(std::uint32_t ring) const {
    return arena_offset + ring * arena_ring_bytes;
  }
  // Tokens in one ring's prompt region.
  std::uint64_t arenaRegionTokens() const {
    return std::uint64_t{geometry.ring_capacity} * geometry.prompt_tokens_per_slot;
  }
};

// Validates `geometry` against the limits and lays it out for `page_size`
// (a power of two, at least 4096). kInvalidGeometry says which limit failed.
Result<Layout> computeLayout(const Geometry& geometry, std::uint64_t page_size);

// The header the daemon writes for `layout`.
SegmentHeader makeHeader(const Layout& layout);

// The client's check of a header copied out of a segment of `file_size`
// bytes: magic, version, page size, geometry limits, every derived field, and
// the total size against the file. Returns the recomputed Layout; never
// trusts a field it has not checked.
Result<Layout> checkHeader(const SegmentHeader& header, std::uint64_t file_size,
                           std::uint64_t page_size);

}  // namespace fairsched::shm
