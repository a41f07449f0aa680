#include "shm/submission_ring.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "shm/ready_bitmap.hpp"
#include "shm/shared_word.hpp"

namespace fairsched::shm {

using std::memory_order_acquire;
using std::memory_order_relaxed;
using std::memory_order_release;

void initSubmissionRing(const SubmissionRingMemory& ring, std::uint64_t start) {
  if (start == 0) return;  // zero-filled: every cell is free for its first lap
  const std::uint64_t mask = ring.capacity - 1;
  sharedStore(ring.control->reserve, start, memory_order_relaxed);
  sharedStore(ring.control->consumed, start, memory_order_relaxed);
  for (std::uint64_t i = 0; i < ring.capacity; ++i) {
    // The position in [start, start + capacity) whose cell is i.
    const std::uint64_t pos = start + ((i - start) & mask);
    sharedStore(ring.cells[i].sequence, storedSequence(pos, i), memory_order_relaxed);
  }
}

std::string_view toString(SlotCheck check) {
  switch (check) {
    case SlotCheck::kValid:
      return "valid";
    case SlotCheck::kPromptOutOfArena:
      return "prompt outside the ring's arena region";
    case SlotCheck::kFlagsSet:
      return "unknown flags set";
    case SlotCheck::kParamsTooLarge:
      return "parameters over kMaxParamsBytes";
    case SlotCheck::kInlineOutOfCell:
      return "inline words beyond the cell, or an inline slot with a prompt offset";
    case SlotCheck::kBadPrefix:
      return "a prefix of no block hashes or of more than kMaxSlotPrefixBlocks";
  }
  return "unknown";
}

SlotCheck checkSlot(const SubmissionSlot& slot, std::uint64_t arena_tokens) {
  if ((slot.flags & ~kKnownSlotFlags) != 0) return SlotCheck::kFlagsSet;
  if (slot.paramsBytes() > kMaxParamsBytes) return SlotCheck::kParamsTooLarge;
  if ((slot.flags & kSlotPrefix) != 0 &&
      (slot.prefixBlocks() == 0 || slot.prefixBlocks() > kMaxSlotPrefixBlocks)) {
    return SlotCheck::kBadPrefix;
  }
  if (slot.inlined()) {
    if (slot.prompt_offset != 0 || slot.arenaWords() > kInlineWords)
      return SlotCheck::kInlineOutOfCell;
    return SlotCheck::kValid;
  }
  // Written so that no sum can overflow: offset <= size, then count <= size -
  // offset (arenaWords() is at most 2^32 + 2^30).
  if (slot.prompt_offset > arena_tokens || slot.arenaWords() > arena_tokens - slot.prompt_offset) {
    return SlotCheck::kPromptOutOfArena;
  }
  return SlotCheck::kValid;
}

// ---- producer -----------------------------------------------------------

SubmissionProducer::SubmissionProducer(const SubmissionRingMemory& ring)
    : ring_(ring), mask_(ring.capacity - 1) {}

bool SubmissionProducer::claim(std::uint64_t& pos, SubmissionCell*& cell) {
  // Relaxed: `reserve` only hands out positions; the cell's sequence orders the data.
  pos = sharedLoad(ring_.control->reserve, memory_order_relaxed);
  for (;;) {
    cell = &ring_.cells[pos & mask_];
    // Acquire: pairs with the daemon's release of the previous lap, so our
    // writes to the cell and its prompt come after its reads of them.
    const std::uint64_t seq =
        loadedSequence(sharedLoad(cell->sequence, memory_order_acquire), pos & mask_);
    const auto diff = static_cast<std::int64_t>(seq - pos);
    if (diff == 0) {
      if (sharedCompareExchangeWeak(ring_.control->reserve, pos, pos + 1, memory_order_relaxed,
                                    memory_order_relaxed)) {
        return true;
      }
      // Another producer took pos; the failed CAS loaded the current reserve.
    } else if (diff < 0) {
      return false;  // the previous lap is not consumed yet: reserve == consumed + capacity
    } else {
      pos = sharedLoad(ring_.control->reserve, memory_order_relaxed);
    }
  }
}

void SubmissionProducer::publish(SubmissionCell* cell, std::uint64_t pos,
                                 const SubmissionSlot& slot) {
  std::uint64_t words[kSubmissionSlotWords];
  std::memcpy(words, &slot, sizeof(words));
  for (std::size_t i = 0; i < kSubmissionSlotWords; ++i) {
    sharedStore(cell->words[i], words[i], memory_order_relaxed);
  }
  // Release: the daemon's acquire load of p + 1 sees the words and the prompt.
  sharedStore(cell->sequence, storedSequence(pos + 1, pos & mask_), memory_order_release);
  // The next cell's lines, which the daemon wrote last (its release of the
  // lap before), start moving here now: markBit()'s fence waits for every
  // store before it, and a store to a line still on the daemon's core is the
  // slowest of them.
  SubmissionCell& next = ring_.cells[(pos + 1) & mask_];
  prefetchForWrite(&next.sequence);
  prefetchForWrite(&next.inline_words);
  // The ready bit, unless it is set already (ready_bitmap.hpp).
  if (ring_.ready_word != nullptr) markBit(*ring_.ready_word, ring_.ready_bit);
}

bool SubmissionProducer::tryPush(const SubmissionSlot& slot) {
  assert(checkSlot(slot, ring_.arenaTokens()) == SlotCheck::kValid && !slot.inlined());
  std::uint64_t pos = 0;
  SubmissionCell* cell = nullptr;
  if (!claim(pos, cell)) return false;
  publish(cell, pos, slot);
  return true;
}

PushResult SubmissionProducer::check(const SubmissionSlot& slot,
                                     std::span<const std::uint32_t> prompt,
                                     std::span<const std::uint64_t> prefix,
                                     std::span<const std::byte> params) const {
  if ((slot.flags & ~kKnownSlotFlags) != 0 || params.size() > kMaxParamsBytes ||
      prefix.size() > kMaxSlotPrefixBlocks) {
    return PushResult::kInvalidSlot;
  }
  if ((slot.flags & kSlotCountsOnly) != 0 && !prompt.empty()) return PushResult::kInvalidSlot;
  const std::uint64_t words = prompt.size() + 2 * prefix.size() + (params.size() + 3) / 4;
  if (words > ring_.tokens_per_slot) return PushResult::kPromptTooLarge;
  return PushResult::kOk;
}

void SubmissionProducer::fill(std::uint64_t pos, SubmissionCell* cell, SubmissionSlot& slot,
                              std::span<const std::uint32_t> prompt,
                              std::span<const std::uint64_t> prefix,
                              std::span<const std::byte> params) {
  const std::uint64_t words = prompt.size() + 2 * prefix.size() + (params.size() + 3) / 4;
  // A short request's words go in the cell's second line: no arena page to
  // touch on either side.
  const bool in_cell = words > 0 && words <= kInlineWords;
  const std::uint64_t offset = in_cell ? 0 : (pos & mask_) * ring_.tokens_per_slot;
  std::uint32_t* at = in_cell ? cell->inline_words : ring_.arena + offset;
  slot.flags = static_cast<std::uint16_t>(in_cell ? (slot.flags | kSlotInline)
                                                  : (slot.flags & ~kSlotInline));
  if (!prompt.empty()) std::memcpy(at, prompt.data(), prompt.size_bytes());
  std::uint32_t* hashes = at + prompt.size();
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    hashes[2 * i] = static_cast<std::uint32_t>(prefix[i]);
    hashes[2 * i + 1] = static_cast<std::uint32_t>(prefix[i] >> 32);
  }
  if (!params.empty()) {
    std::byte* p = reinterpret_cast<std::byte*>(hashes + 2 * prefix.size());
    std::memcpy(p, params.data(), params.size());
    // Zero the pad of the last word: nothing stale crosses to the daemon.
    std::memset(p + params.size(), 0, (4 - params.size() % 4) % 4);
  }
  slot.prompt_offset = offset;
  if ((slot.flags & kSlotCountsOnly) == 0)
    slot.prompt_tokens = static_cast<std::uint32_t>(prompt.size());
  slot.params_bytes = static_cast<std::uint32_t>(params.size());
  slot.flags = static_cast<std::uint16_t>(prefix.empty() ? (slot.flags & ~kSlotPrefix)
                                                         : (slot.flags | kSlotPrefix));
  if (!prefix.empty()) slot.params_bytes |= static_cast<std::uint32_t>(prefix.size()) << 16;
}

std::uint64_t SubmissionProducer::sizeApprox() const {
  // Relaxed: an estimate; nothing is ordered by it.
  const std::uint64_t consumed = sharedLoad(ring_.control->consumed, memory_order_relaxed);
  const std::uint64_t reserve = sharedLoad(ring_.control->reserve, memory_order_relaxed);
  const auto diff = static_cast<std::int64_t>(reserve - consumed);
  if (diff < 0) return 0;
  return std::min<std::uint64_t>(static_cast<std::uint64_t>(diff), ring_.capacity);
}

// ---- consumer -----------------------------------------------------------

SubmissionConsumer::SubmissionConsumer(const SubmissionRingMemory& ring, std::uint64_t start)
    : ring_(ring), mask_(ring.capacity - 1), arena_tokens_(ring.arenaTokens()), pos_(start) {}

PopResult SubmissionConsumer::peek(SubmissionSlot& out) {
  if (corrupt()) {
    if (corruption_ == Corruption::kBadSlot) out = peeked_slot_;
    return PopResult::kCorrupt;
  }
  if (peeked_) {
    out = peeked_slot_;
    return PopResult::kOk;
  }
  SubmissionCell& cell = ring_.cells[pos_ & mask_];  // in bounds: our position, our mask
  // Acquire: pairs with the producer's release of p + 1; the words and the prompt are visible.
  const std::uint64_t seq =
      loadedSequence(sharedLoad(cell.sequence, memory_order_acquire), pos_ & mask_);
  if (seq == pos_) return PopResult::kEmpty;
  if (seq != pos_ + 1) {
    corruption_ = Corruption::kBadSequence;
    bad_sequence_ = seq;
    return PopResult::kCorrupt;
  }
  // The next cell's lines start moving now: in a burst the producer has
  // published it already, and its miss overlaps this one's work.
  const SubmissionCell& next = ring_.cells[(pos_ + 1) & mask_];
  __builtin_prefetch(&next.sequence, 0, 3);
  __builtin_prefetch(&next.inline_words, 0, 3);
  std::uint64_t words[kSubmissionSlotWords];
  for (std::size_t i = 0; i < kSubmissionSlotWords; ++i) {
    words[i] = sharedLoad(cell.words[i], memory_order_relaxed);
  }
  std::memcpy(&peeked_slot_, words, sizeof(words));
  out = peeked_slot_;
  slot_check_ = checkSlot(peeked_slot_, arena_tokens_);
  if (slot_check_ != SlotCheck::kValid) {
    corruption_ = Corruption::kBadSlot;
    return PopResult::kCorrupt;
  }
  peeked_ = true;
  return PopResult::kOk;
}

bool SubmissionConsumer::mayHaveItem() const {
  if (peeked_ || corrupt()) return true;
  // Relaxed: a hint; peek() reads the sequence again with acquire.
  return loadedSequence(sharedLoad(ring_.cells[pos_ & mask_].sequence, memory_order_relaxed),
                        pos_ & mask_) != pos_;
}

void SubmissionConsumer::copyPrompt(std::span<std::uint32_t> dst) const {
  assert(peeked_);
  const std::uint64_t words = peeked_slot_.arenaWords();
  assert(dst.size() >= words);
  if (words == 0) return;
  // Bounds come from the checked private copy. The tokens themselves are
  // arbitrary values; whoever uses them validates them (vocabulary size).
  const std::uint32_t* from = peeked_slot_.inlined() ? ring_.cells[pos_ & mask_].inline_words
                                                     : ring_.arena + peeked_slot_.prompt_offset;
  std::memcpy(dst.data(), from, static_cast<std::size_t>(words) * sizeof(std::uint32_t));
}

void SubmissionConsumer::release() {
  assert(peeked_);
  SubmissionCell& cell = ring_.cells[pos_ & mask_];
  // Release: our reads of the words and the prompt happen before the
  // producer of the next lap, whose acquire load sees this value, writes them.
  sharedStore(cell.sequence, storedSequence(pos_ + ring_.capacity, pos_ & mask_),
              memory_order_release);
  ++pos_;
  peeked_ = false;
  // Relaxed: only producers' occupancy estimates read it.
  sharedStore(ring_.control->consumed, pos_, memory_order_relaxed);
}

void SubmissionConsumer::skipBadSlot() {
  assert(corruption_ == Corruption::kBadSlot);
  corruption_ = Corruption::kNone;
  slot_check_ = SlotCheck::kValid;
  peeked_ = true;
  release();
}

PopResult SubmissionConsumer::tryPop(SubmissionSlot& out, std::vector<std::uint32_t>& prompt) {
  const PopResult r = peek(out);
  if (r != PopResult::kOk) return r;
  prompt.resize(static_cast<std::size_t>(out.arenaWords()));
  copyPrompt(prompt);
  release();
  return PopResult::kOk;
}

}  // namespace fairsched::shm
