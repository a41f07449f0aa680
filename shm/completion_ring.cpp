#include "shm/completion_ring.hpp"

#include <cassert>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>

#include "shm/shared_word.hpp"

namespace fairsched::shm {

using std::memory_order_acquire;
using std::memory_order_relaxed;
using std::memory_order_release;

namespace {

// The cell word that carries the lap mark: status in its low 16 bits, the
// mark in the next 16, output_tokens in the high 32.
constexpr std::size_t kMarkWord = offsetof(CompletionSlot, status) / 8;
static_assert(offsetof(CompletionSlot, status) % 8 == 0);
static_assert(offsetof(CompletionSlot, output_tokens) == offsetof(CompletionSlot, status) + 4);
constexpr unsigned kMarkShift = 16;
constexpr std::uint64_t kMarkMask = std::uint64_t{0xffff} << kMarkShift;

unsigned lapShift(std::uint32_t capacity) {
  return static_cast<unsigned>(std::countr_zero(capacity));
}

// The mark of a cell holding position `pos`: its lap plus one, in 16 bits, in
// place. Consecutive laps differ (modulo 2^16, and across the 64-bit wrap: a
// lap count of 2^(64 - shift) is a multiple of 2^16), and the first lap from
// position 0 is 1, not the 0 of a fresh segment.
std::uint64_t markOf(std::uint64_t pos, unsigned shift) {
  return std::uint64_t{static_cast<std::uint16_t>((pos >> shift) + 1)} << kMarkShift;
}

}  // namespace

void initCompletionRing(const CompletionRingMemory& ring, std::uint64_t start) {
  // Each cell starts with the mark of the lap before the first position it
  // will hold, so no cell reads as published. From position 0 that mark is
  // 0, as a zero-filled ring already is: no page is touched.
  if (start == 0) return;
  sharedStore(ring.client->completion_read, start, memory_order_relaxed);
  const unsigned shift = lapShift(ring.capacity);
  for (std::uint64_t k = 0; k < ring.capacity; ++k) {
    const std::uint64_t pos = start + k;
    const std::uint64_t stale = markOf(pos - ring.capacity, shift);
    std::uint64_t& word = ring.cells[pos & (ring.capacity - 1)].words[kMarkWord];
    if (sharedLoad(word, memory_order_relaxed) != stale)
      sharedStore(word, stale, memory_order_relaxed);
  }
}

// ---- producer (daemon) --------------------------------------------------

CompletionProducer::CompletionProducer(const CompletionRingMemory& ring, std::uint64_t start)
    : ring_(ring),
      mask_(ring.capacity - 1),
      shift_(lapShift(ring.capacity)),
      write_(start),
      published_(start),
      read_cache_(start) {}

std::uint64_t CompletionProducer::freeSlots(std::uint64_t wanted) {
  // Invariant: write_ - capacity <= read_cache_ <= write_.
  std::uint64_t used = write_ - read_cache_;
  if (ring_.capacity - used >= wanted) return ring_.capacity - used;
  // Acquire: pairs with the client's release store, so its reads of the cells
  // it has passed happen before we overwrite them. Loaded once, then checked.
  const std::uint64_t read = sharedLoad(ring_.client->completion_read, memory_order_acquire);
  used = write_ - read;  // modulo 2^64: an index ahead of write_ wraps to a huge value
  if (used > ring_.capacity) {
    // Garbage: keep the last valid index; the cells it freed are still free.
    read_index_valid_ = false;
    return ring_.capacity - (write_ - read_cache_);
  }
  read_index_valid_ = true;
  read_cache_ = read;
  return ring_.capacity - used;
}

bool CompletionProducer::checkReadIndex() {
  (void)freeSlots(UINT64_MAX);  // more than any ring has: always loads
  return read_index_valid_;
}

void CompletionProducer::storeCell(std::uint64_t pos, const CompletionSlot& slot) {
  assert(slot.status <= 0xffff);  // every value the layout defines is
  std::uint64_t words[kCompletionSlotWords];
  std::memcpy(words, &slot, sizeof(words));
  words[kMarkWord] = (words[kMarkWord] & ~kMarkMask) | markOf(pos, shift_);
  CompletionCell& cell = ring_.cells[pos & mask_];
  // Relaxed: ordered by the release store of the mark, last.
  for (std::size_t i = 0; i < kCompletionSlotWords; ++i) {
    if (i != kMarkWord) sharedStore(cell.words[i], words[i], memory_order_relaxed);
  }
  // Release: the client's acquire load of the mark sees the other words and
  // the payload written before them.
  sharedStore(cell.words[kMarkWord], words[kMarkWord], memory_order_release);
}

void CompletionProducer::copyPayload(std::uint64_t pos, std::uint32_t at,
                                     std::span<const std::uint32_t> words) {
  if (words.empty()) return;
  // Plain stores: the cell is free (the client's read index passed it) and
  // unpublished; the release store of its mark orders them before the
  // client's reads. The client never polls the arena, so these lines do not
  // bounce.
  std::memcpy(ring_.reply_arena + (pos & mask_) * ring_.reply_tokens_per_slot + at, words.data(),
              words.size() * sizeof(std::uint32_t));
}

void CompletionProducer::write(const CompletionSlot& slot, std::span<const std::uint32_t> payload) {
  copyPayload(write_, 0,
              payload.first(std::min<std::size_t>(payload.size(), ring_.reply_tokens_per_slot)));
  // Held records are bounded: a burst publishes as it goes, and a
  // connection's copy stays a few KiB.
  if (staged_.size() == kMaxStaged) publish();
  staged_.push_back(slot);
  ++write_;
}

void CompletionProducer::amend(std::uint64_t pos, const CompletionSlot& slot, std::uint32_t at,
                               std::span<const std::uint32_t> more) {
  assert(pos >= published_ && pos < write_);
  assert(at + more.size() <= ring_.reply_tokens_per_slot);
  copyPayload(pos, at, more);
  staged_[static_cast<std::size_t>(pos - published_)] = slot;
}

void CompletionProducer::publish() {
  // The cells are written only now, each in one go with its mark last: the
  // client polls its next cell's line, and a cell written early and marked
  // later would cost the daemon that line twice.
  for (const CompletionSlot& slot : staged_) storeCell(published_++, slot);
  staged_.clear();
}

bool CompletionProducer::tryPush(const CompletionSlot& slot) {
  assert(published_ == write_);
  if (freeSlots(1) == 0) return false;
  storeCell(write_++, slot);
  published_ = write_;
  return true;
}

std::size_t CompletionProducer::tryPushBatch(std::span<const CompletionSlot> slots) {
  if (slots.empty()) return 0;
  const std::uint64_t room = freeSlots(slots.size());
  const std::size_t n = room < slots.size() ? static_cast<std::size_t>(room) : slots.size();
  if (n == 0) return 0;
  assert(published_ == write_);
  for (std::size_t i = 0; i < n; ++i) storeCell(write_++, slots[i]);
  published_ = write_;
  return n;
}

// ---- consumer (client) --------------------------------------------------

CompletionConsumer::CompletionConsumer(const CompletionRingMemory& ring)
    : ring_(ring),
      mask_(ring.capacity - 1),
      shift_(lapShift(ring.capacity)),
      read_(sharedLoad(ring.client->completion_read, memory_order_relaxed)) {}

bool CompletionConsumer::publishedAt(std::uint64_t pos) {
  if (broken_) return false;
  // Acquire: pairs with the daemon's release store of the mark; the cell's
  // other words and its payload are visible.
  const std::uint64_t mark =
      sharedLoad(ring_.cells[pos & mask_].words[kMarkWord], memory_order_acquire) & kMarkMask;
  if (mark == markOf(pos, shift_)) return true;
  // Anything but the lap before is no state of this ring.
  if (mark != markOf(pos - ring_.capacity, shift_)) broken_ = true;
  return false;
}

std::uint64_t CompletionConsumer::available() {
  std::uint64_t n = 0;
  while (n < ring_.capacity && publishedAt(read_ + n)) ++n;
  return n;
}

void CompletionConsumer::readCell(CompletionSlot& out) const {
  const CompletionCell& cell = ring_.cells[read_ & mask_];
  std::uint64_t words[kCompletionSlotWords];
  for (std::size_t i = 0; i < kCompletionSlotWords; ++i) {
    words[i] = sharedLoad(cell.words[i], memory_order_relaxed);
  }
  words[kMarkWord] &= ~kMarkMask;  // the ring's, not the record's
  std::memcpy(&out, words, sizeof(words));
}

bool CompletionConsumer::tryPop(CompletionSlot& out, std::vector<std::uint32_t>& payload,
                                PayloadWords payload_words) {
  if (!hasNext()) return false;
  readCell(out);
  const std::size_t n = std::min<std::size_t>(payload_words(out), ring_.reply_tokens_per_slot);
  payload.resize(n);
  if (n > 0) {
    std::memcpy(payload.data(), ring_.reply_arena + (read_ & mask_) * ring_.reply_tokens_per_slot,
                n * sizeof(std::uint32_t));
  }
  ++read_;
  // Release: our reads of the cell and its payload happen before the daemon
  // overwrites them.
  sharedStore(ring_.client->completion_read, read_, memory_order_release);
  return true;
}

bool CompletionConsumer::tryPop(CompletionSlot& out) {
  if (!hasNext()) return false;
  readCell(out);
  ++read_;
  // Release: our reads of the cell happen before the daemon, whose acquire
  // load sees this index, overwrites it.
  sharedStore(ring_.client->completion_read, read_, memory_order_release);
  return true;
}

}  // namespace fairsched::shm
