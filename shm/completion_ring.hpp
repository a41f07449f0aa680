// The completion ring: single producer (the daemon), single consumer (the
// client), 64-bit positions that only grow, full when
// write == read + capacity.
//
// Each cell carries its own publication: a 16-bit lap mark in the word of
// its status (bits 16-31; status itself is below 2^16). The daemon writes a
// cell's other words, then stores the mark of the position's lap with
// release; the client polls the mark of its next cell with acquire, so a
// completion costs the client one cache line, and the daemon's store of the
// cell is the only one the client waits for. A mark that is neither the
// expected lap's nor the lap before's is no state of this ring: the consumer
// reports broken(). No write index is shared.
//
// The cells live in part (b) of the segment (read-only in the client). The
// client's read index lives in part (a), where the client can write anything
// into it, so the daemon bounds-checks every value it loads: a read index is
// in range when write - capacity <= read <= write (modulo 2^64). An
// out-of-range index is treated as "this client's ring is full" — the daemon
// writes nothing until the index is sane again, and readIndexValid() lets it
// log and drop the client. Clamping instead would overwrite completions the
// client has not read; treating it as full can only stall that one client,
// which has broken its own ring. The daemon's write position is private and
// never read back from shared memory.
//
// Every submitted request gets exactly one completion, so the daemon must
// never be left holding one it cannot place: it keeps the number of a
// client's requests in flight (taken from its rings, not yet completed) at
// most the ring's free space, pausing ingest for that client otherwise
// (see docs/shm-layout.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "fairsched/status.hpp"
#include "shm/layout.hpp"

namespace fairsched::shm {

// CompletionSlot::status carries fairsched::Status encoded by
// fairsched::encodeStatus (fairsched/status.hpp).
using fairsched::decodeStatus;
using fairsched::encodeStatus;

struct CompletionRingMemory {
  CompletionControl* control = nullptr;  // part (b): read-only mapping in the client
  CompletionCell* cells = nullptr;       // part (b), `capacity` cells, each with its lap mark
  std::uint32_t capacity = 0;            // a power of two
  ClientControl* client = nullptr;       // part (a): the client's read index
  std::uint32_t* reply_arena = nullptr;  // part (b): capacity * reply_tokens_per_slot words
  std::uint32_t reply_tokens_per_slot = 0;
};

// How many reply-arena words a record carries: the consumer asks it of each
// record it pops (the result is clamped to reply_tokens_per_slot).
using PayloadWords = std::uint32_t (*)(const CompletionSlot&);

// Daemon, before the segment is handed over: the read index starts at
// `start`, and every cell gets the mark of the lap before the first position
// it will hold. REQUIRES: from 0, a zero-filled ring (a fresh memfd), which
// already is all of that: nothing is read or written, no page touched.
void initCompletionRing(const CompletionRingMemory& ring, std::uint64_t start);

// The daemon's side; one thread.
class CompletionProducer {
 public:
  // `ring` must come from the daemon's own Layout; `start` as given to
  // initCompletionRing().
  CompletionProducer(const CompletionRingMemory& ring, std::uint64_t start);

  // Writes and publishes one completion. False when the ring is full or the
  // client's read index is out of range (see readIndexValid()).
  // REQUIRES (here and in tryPushBatch): nothing written and unpublished;
  // every slot's status below 2^16.
  bool tryPush(const CompletionSlot& slot);

  // Writes and publishes as many of `slots` as fit; returns how many.
  std::size_t tryPushBatch(std::span<const CompletionSlot> slots);

  // Takes one record for the next cell and writes its reply-arena payload
  // (at most reply_tokens_per_slot words) without publishing it; publish()
  // writes the cells of every record taken so far, in order, each with its
  // mark last. Until then the records are kept here (the client polls the
  // cell's line: a cell written now and marked later would bounce twice),
  // at most kMaxStaged of them: the write that would hold one more
  // publishes those first (published() says what the client may see).
  // REQUIRES: freeSlots() counted a free cell for it.
  void write(const CompletionSlot& slot, std::span<const std::uint32_t> payload);
  void publish();
  // Rewrites the record at position `pos`, written since the last publish(),
  // with `slot`, and copies `more` into its payload from word `at` on (a
  // stream chunk that grows before the client can see it: its cell is not
  // written until publish(), so the client never sees it half made).
  // REQUIRES: published() <= pos < written(), at + more.size() <=
  // reply_tokens_per_slot.
  void amend(std::uint64_t pos, const CompletionSlot& slot, std::uint32_t at,
             std::span<const std::uint32_t> more);

  // Free cells, after loading the client's read index when the cached one
  // shows less than `wanted` free.
  std::uint64_t freeSlots(std::uint64_t wanted = 1);

  // Free cells by the client's read index as last loaded and found valid:
  // at most what freeSlots() would say now. Loads nothing.
  std::uint64_t knownFreeSlots() const { return ring_.capacity - (write_ - read_cache_); }
  // Loads the client's read index now; false when it is out of range (then
  // readIndexValid() is false too, and the last valid one is kept).
  bool checkReadIndex();
  // False when the last load of the client's read index was out of range.
  bool readIndexValid() const { return read_index_valid_; }
  std::uint64_t written() const { return write_; }
  std::uint64_t published() const { return published_; }

 private:
  // Stores `slot` into the cell of `pos`, then pos's lap mark (release).
  void storeCell(std::uint64_t pos, const CompletionSlot& slot);
  // Copies `words` into the reply-arena share of `pos` from word `at`.
  void copyPayload(std::uint64_t pos, std::uint32_t at, std::span<const std::uint32_t> words);

  CompletionRingMemory ring_;
  std::uint64_t mask_;
  unsigned shift_;            // log2(capacity): a position's lap is pos >> shift_
  std::uint64_t write_;       // private: never read back from shared memory
  std::uint64_t published_;   // positions below it carry their lap's mark
  std::uint64_t read_cache_;  // the client's read index as last validated
  // The records of positions published_ .. write_ - 1, not in their cells
  // yet; at most kMaxStaged.
  static constexpr std::size_t kMaxStaged = 64;
  std::vector<CompletionSlot> staged_;
  bool read_index_valid_ = true;
};

// The client's side: one consumer at a time (the client library serialises
// its threads). Trusts the daemon, but still checks each mark it loads.
class CompletionConsumer {
 public:
  // Starts at the read index the daemon initialised.
  explicit CompletionConsumer(const CompletionRingMemory& ring);

  // Copies the next completion into `out` and hands the cell back; false when
  // there is none (or its cell's mark is of no lap near: broken()).
  bool tryPop(CompletionSlot& out);
  // The same, and the record's reply-arena payload (payload_words(out) words,
  // at most reply_tokens_per_slot) copied into `payload` before the cell is
  // handed back.
  bool tryPop(CompletionSlot& out, std::vector<std::uint32_t>& payload, PayloadWords payload_words);

  // Whether the next completion is published: one acquire load of its
  // cell's mark, the line a pop then reads.
  bool hasNext() { return publishedAt(read_); }
  // Completions published and not yet popped: a look at each cell in turn.
  std::uint64_t available();

  bool broken() const { return broken_; }
  std::uint64_t position() const { return read_; }

 private:
  // Whether the cell of `pos` (at most a lap ahead of read_) holds pos;
  // a foreign mark sets broken_.
  bool publishedAt(std::uint64_t pos);
  // Copies the cell at read_ into `out`, without the mark (relaxed loads:
  // hasNext()'s acquire of the mark ordered them after the daemon's writes).
  void readCell(CompletionSlot& out) const;

  CompletionRingMemory ring_;
  std::uint64_t mask_;
  unsigned shift_;
  std::uint64_t read_;
  bool broken_ = false;
};

}  // namespace fairsched::shm
