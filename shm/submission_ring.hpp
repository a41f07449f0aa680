// A submission ring: lock-free, many producers (threads of ONE client
// process), one consumer (the daemon), inline fixed-size cells, 64-bit
// positions that only grow.
//
// Protocol (Vyukov's bounded MPMC sequence scheme with one consumer). The
// cell of position p is cells[p % capacity]; its sequence says whose turn it
// is:
//   sequence == p      free for the producer of p (or claimed and being written)
//   sequence == p + 1  published by that producer; the daemon may read it
//   the daemon then stores p + capacity: free for the producer of p + capacity
// The word in the cell holds the sequence minus the cell's index
// (storedSequence): a zero-filled ring is then free for its first lap in
// every cell, so a fresh segment needs no write through its rings (layout 4;
// version 3 stored the sequence itself and wrote every cell at set-up).
// A producer claims p by a CAS of `reserve` from p to p + 1 after seeing
// sequence == p; it fails with "full" when the cell still holds the previous
// lap (sequence < p), i.e. when reserve == consumed + capacity. Producers
// finish out of order; the daemon takes positions strictly in order.
//
// Why one producer *process* per ring: a producer that dies after claiming p
// and before publishing it leaves sequence == p forever. The daemon then sees
// this ring as empty from p on — published positions after p stay unread —
// but nothing else: it never waits on one ring, so every other ring and every
// other client carry on. Threads of one process die together, so a producer
// dying mid-write means its whole client is gone; the daemon learns that from
// the socket and cancels the client with its segment. (tryPush has no
// cancellation points; a thread killed some other way wedges its own ring.)
//
// The consumer trusts nothing it reads. It reads `sequence` once, compares it
// with its own private position (it never reads `reserve`), copies the slot
// out word by word, reads no field twice, and checks the copy (checkSlot)
// before anyone uses it. Any sequence value other than p or p + 1, or a slot
// that fails checkSlot, can only come from a corrupt or hostile client: the
// consumer reports kCorrupt and stays corrupt (the daemon drops the client).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "shm/layout.hpp"

namespace fairsched::shm {

// Where one ring lives. The daemon builds it from its own Layout
// (Segment::submissionRing), tests over plain memory; nothing in it is read
// from shared memory.
struct SubmissionRingMemory {
  SubmissionRingControl* control = nullptr;
  SubmissionCell* cells = nullptr;  // `capacity` cells
  std::uint32_t capacity = 0;       // a power of two
  std::uint32_t* arena = nullptr;   // this ring's prompt region, arenaTokens() tokens
  std::uint32_t tokens_per_slot = 0;
  std::uint64_t* ready_word = nullptr;  // the ready-bitmap word holding this ring's bit, or null
  std::uint64_t ready_bit = 0;

  std::uint64_t arenaTokens() const { return std::uint64_t{capacity} * tokens_per_slot; }
};

// The word a cell at `index` holds for `sequence`, and back. Both sides
// translate every load and store of SubmissionCell::sequence through these.
constexpr std::uint64_t storedSequence(std::uint64_t sequence, std::uint64_t index) {
  return sequence - index;
}
constexpr std::uint64_t loadedSequence(std::uint64_t stored, std::uint64_t index) {
  return stored + index;
}

// Daemon, before the segment is handed over: positions start at `start`
// (tests start near 2^32 or 2^64 to cross the wrap). REQUIRES: the ring's
// memory is zero-filled (a fresh memfd, value-initialised cells). Writes
// only what is not zero at `start`: nothing at all from position 0, so a
// fresh segment's ring pages are not touched. Not concurrent with anything.
void initSubmissionRing(const SubmissionRingMemory& ring, std::uint64_t start);

// What checkSlot finds wrong with a copied-out slot. Semantic checks (does
// the endpoint exist, is the tenant allowed, is max_output_tokens sane) are
// the daemon's; these are the ones the memory layout itself needs.
enum class SlotCheck : std::uint8_t {
  kValid,
  kPromptOutOfArena,  // [prompt_offset, prompt_offset + arenaWords()) leaves the ring's region
  kFlagsSet,          // a flag outside kKnownSlotFlags
  kParamsTooLarge,    // params_bytes over kMaxParamsBytes
  kInlineOutOfCell,   // kSlotInline with arenaWords() over kInlineWords or a prompt_offset
  kBadPrefix,         // kSlotPrefix with no block hashes or more than kMaxSlotPrefixBlocks
};
std::string_view toString(SlotCheck check);

// Pure; safe on arbitrary bytes. `arena_tokens` is the ring's region size.
SlotCheck checkSlot(const SubmissionSlot& slot, std::uint64_t arena_tokens);

enum class PushResult : std::uint8_t {
  kOk,
  kFull,
  kPromptTooLarge,  // the prompt does not fit one slot's share of the arena
  kInvalidSlot,     // unknown flags, reserved set, parameters too large, or a
                    // counts-only slot given token ids
};

// The client's side. Any number of threads of the one client process may
// push concurrently; lock-free (a push retries its CAS only when another
// producer won it).
class SubmissionProducer {
 public:
  explicit SubmissionProducer(const SubmissionRingMemory& ring);

  // Publishes `slot` as given and marks the ring ready; false when the ring
  // is full. REQUIRES: checkSlot(slot, arenaTokens()) == kValid, not
  // kSlotInline (tryPushPrompt writes inline words), and the
  // prompt tokens it names are written and stay unchanged until the daemon
  // has released the slot (the caller runs its own arena allocator, and does
  // not mix it with tryPushPrompt on the same ring).
  bool tryPush(const SubmissionSlot& slot);

  // The arena scheme of layout version 1: the cell of position p owns the
  // arena tokens [(p % capacity) * tokens_per_slot, +tokens_per_slot), from
  // its claim until the daemon releases it, so no allocator state is shared.
  // Up to kInlineWords words go in the cell itself instead (kSlotInline).
  // Copies `prompt` and then `params` there, sets slot.prompt_offset,
  // prompt_tokens (unless the slot is kSlotCountsOnly, whose prompt_tokens is
  // the caller's count and whose `prompt` must be empty) and params_bytes,
  // publishes and marks the ring ready.
  PushResult tryPushPrompt(SubmissionSlot slot, std::span<const std::uint32_t> prompt,
                           std::span<const std::byte> params = {}) {
    return tryPushPrompt(slot, prompt, params, [](SubmissionSlot&) {});
  }

  // The same, calling before_publish(slot) once the cell is claimed, before
  // the prompt is copied into it and the slot published: what it sets in
  // the slot (but the fields the copy sets) is what the daemon reads.
  // Nothing is called when the push fails, so a caller can take a request
  // id there without spending one on a full ring. before_publish must not
  // fail, and should be quick (the ring's next positions wait for this
  // one). It runs before the copy so that its own atomic operations do not
  // wait for the cell's cache lines, which the daemon holds.
  template <class F>
  PushResult tryPushPrompt(const SubmissionSlot& request, std::span<const std::uint32_t> prompt,
                           std::span<const std::byte> params, F&& before_publish) {
    return tryPushPrompt(request, prompt, {}, params, std::forward<F>(before_publish));
  }

  // The same with the request's prefix identity (kSlotPrefix, at most
  // kMaxSlotPrefixBlocks hashes; none: the flag is cleared), written after
  // the prompt's ids.
  template <class F>
  PushResult tryPushPrompt(const SubmissionSlot& request, std::span<const std::uint32_t> prompt,
                           std::span<const std::uint64_t> prefix, std::span<const std::byte> params,
                           F&& before_publish) {
    if (const PushResult r = check(request, prompt, prefix, params); r != PushResult::kOk) {
      return r;
    }
    std::uint64_t pos = 0;
    SubmissionCell* cell = nullptr;
    if (!claim(pos, cell)) return PushResult::kFull;
    // Copied only now: a full lane costs no copy, and the caller's freshly
    // built slot has left the store buffer (claim's CAS drains it), so the
    // copy's wide loads do not wait on narrow stores.
    SubmissionSlot slot = request;
    before_publish(slot);
    fill(pos, cell, slot, prompt, prefix, params);
    publish(cell, pos, slot);
    return PushResult::kOk;
  }

  // Published-or-claimed minus consumed, clamped to [0, capacity]; a hint.
  std::uint64_t sizeApprox() const;

  std::uint64_t arenaTokens() const { return ring_.arenaTokens(); }

 private:
  PushResult check(const SubmissionSlot& slot, std::span<const std::uint32_t> prompt,
                   std::span<const std::uint64_t> prefix, std::span<const std::byte> params) const;
  bool claim(std::uint64_t& pos, SubmissionCell*& cell);
  // Copies prompt, prefix and params into the cell (kInlineWords at most)
  // or pos's arena region and sets the slot's kSlotInline and kSlotPrefix
  // flags, prompt_offset, prompt_tokens (unless counts-only) and params_bytes.
  void fill(std::uint64_t pos, SubmissionCell* cell, SubmissionSlot& slot,
            std::span<const std::uint32_t> prompt, std::span<const std::uint64_t> prefix,
            std::span<const std::byte> params);
  void publish(SubmissionCell* cell, std::uint64_t pos, const SubmissionSlot& slot);

  SubmissionRingMemory ring_;
  std::uint64_t mask_;
};

enum class PopResult : std::uint8_t {
  kEmpty,    // nothing published at the consumer's position (yet)
  kOk,       // a published, checked slot
  kCorrupt,  // a value the protocol cannot produce; sticky
};

// Why a consumer became corrupt.
enum class Corruption : std::uint8_t {
  kNone,
  kBadSequence,  // the cell's sequence was neither p nor p + 1
  kBadSlot,      // the slot failed checkSlot (slotCheck() says how)
};

struct DrainResult {
  std::size_t popped = 0;
  PopResult stop = PopResult::kEmpty;  // kOk: the budget ran out; more may be waiting
};

// The daemon's side: one thread, one consumer per ring. Its position is its
// own, private; shared memory is read only through peek().
class SubmissionConsumer {
 public:
  // `ring` must come from the daemon's own Layout; `start` is the position
  // initSubmissionRing() was given.
  SubmissionConsumer(const SubmissionRingMemory& ring, std::uint64_t start);

  // Copies the slot at the current position into `out` and checks it, without
  // releasing it. Repeated calls return the same copy until release(). On a
  // kCorrupt from a bad slot, `out` holds the copy (for the log).
  PopResult peek(SubmissionSlot& out);

  // Copies the arena words of the peeked slot (its prompt, then its
  // parameters) into `dst`, from the bounds of the checked private copy.
  // REQUIRES: peek() returned kOk and dst.size() >= its arenaWords().
  void copyPrompt(std::span<std::uint32_t> dst) const;

  // Hands the peeked cell and its prompt back to producers and advances.
  // REQUIRES: peek() returned kOk. Copy the prompt out first.
  void release();

  // After peek() returned kCorrupt for a bad slot (corruption() == kBadSlot):
  // hands the cell back unused and clears the corruption, so the ring goes on
  // and only that request is rejected (its request_id is in the copy peek()
  // gave). A bad sequence stays sticky: the ring itself is broken then.
  void skipBadSlot();

  // peek(), copy the prompt into `prompt` (resized), release().
  PopResult tryPop(SubmissionSlot& out, std::vector<std::uint32_t>& prompt);

  // Pops up to `max_items` (a fairness budget across rings), calling
  // sink(const SubmissionSlot&, std::span<const std::uint32_t> words) for
  // each; `words` (the slot's arenaWords(): prompt, then parameters) is a
  // private copy valid during the call.
  template <class Sink>
  DrainResult drain(std::size_t max_items, Sink&& sink) {
    DrainResult r;
    SubmissionSlot slot;
    while (r.popped < max_items) {
      r.stop = tryPop(slot, scratch_);
      if (r.stop != PopResult::kOk) return r;
      sink(static_cast<const SubmissionSlot&>(slot), std::span<const std::uint32_t>(scratch_));
      ++r.popped;
    }
    r.stop = PopResult::kOk;
    return r;
  }

  // A cheap look (one relaxed load of the cell's sequence) for a ring the
  // daemon polls directly: true when peek() may find something, or has.
  bool mayHaveItem() const;

  std::uint64_t position() const { return pos_; }
  bool corrupt() const { return corruption_ != Corruption::kNone; }
  Corruption corruption() const { return corruption_; }
  SlotCheck slotCheck() const { return slot_check_; }
  std::uint64_t badSequence() const { return bad_sequence_; }  // kBadSequence: what was read

 private:
  SubmissionRingMemory ring_;
  std::uint64_t mask_;
  std::uint64_t arena_tokens_;
  std::uint64_t pos_;
  bool peeked_ = false;
  SubmissionSlot peeked_slot_{};
  Corruption corruption_ = Corruption::kNone;
  SlotCheck slot_check_ = SlotCheck::kValid;
  std::uint64_t bad_sequence_ = 0;
  std::vector<std::uint32_t> scratch_;
};

}  // namespace fairsched::shm
