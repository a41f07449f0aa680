#include "shm/completion_ring.hpp"

#include <cassert>

#include <algorithm>
#include <cstring>

#include "shm/shared_word.hpp"

namespace fairsched::shm {

using std::memory_order_acquire;
using std::memory_order_relaxed;
using std::memory_order_release;

void initCompletionRing(const CompletionRingMemory& ring, std::uint64_t start) {
  sharedStore(ring.control->completion_write, start, memory_order_relaxed);
  sharedStore(ring.client->completion_read, start, memory_order_relaxed);
}

// ---- producer (daemon) --------------------------------------------------

CompletionProducer::CompletionProducer(const CompletionRingMemory& ring, std::uint64_t start)
    : ring_(ring), mask_(ring.capacity - 1), write_(start), published_(start), read_cache_(start) {}

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
  std::uint64_t words[kCompletionSlotWords];
  std::memcpy(words, &slot, sizeof(words));
  CompletionCell& cell = ring_.cells[pos & mask_];
  // Relaxed: ordered by the release store of completion_write that follows.
  for (std::size_t i = 0; i < kCompletionSlotWords; ++i) {
    sharedStore(cell.words[i], words[i], memory_order_relaxed);
  }
}

void CompletionProducer::writeCell(const CompletionSlot& slot) {
  storeCell(write_, slot);
  ++write_;
}

void CompletionProducer::amend(std::uint64_t pos, const CompletionSlot& slot, std::uint32_t at,
                               std::span<const std::uint32_t> more) {
  assert(pos >= published_ && pos < write_);
  assert(at + more.size() <= ring_.reply_tokens_per_slot);
  if (!more.empty()) {
    // Plain stores, as in write(): the cell is not published yet.
    std::memcpy(ring_.reply_arena + (pos & mask_) * ring_.reply_tokens_per_slot + at, more.data(),
                more.size() * sizeof(std::uint32_t));
  }
  storeCell(pos, slot);
}

void CompletionProducer::write(const CompletionSlot& slot, std::span<const std::uint32_t> payload) {
  if (!payload.empty()) {
    const std::size_t n = std::min<std::size_t>(payload.size(), ring_.reply_tokens_per_slot);
    // Plain stores: the cell is free (the client's read index passed it), and
    // the release store in publish() orders them before the client's reads.
    std::memcpy(ring_.reply_arena + (write_ & mask_) * ring_.reply_tokens_per_slot, payload.data(),
                n * sizeof(std::uint32_t));
  }
  writeCell(slot);
}

void CompletionProducer::publish() {
  // Release: the client's acquire load of the write index sees every cell.
  sharedStore(ring_.control->completion_write, write_, memory_order_release);
  published_ = write_;
}

bool CompletionProducer::tryPush(const CompletionSlot& slot) {
  if (freeSlots(1) == 0) return false;
  writeCell(slot);
  // Release: the client's acquire load of the write index sees the cell.
  sharedStore(ring_.control->completion_write, write_, memory_order_release);
  published_ = write_;
  return true;
}

std::size_t CompletionProducer::tryPushBatch(std::span<const CompletionSlot> slots) {
  if (slots.empty()) return 0;
  const std::uint64_t room = freeSlots(slots.size());
  const std::size_t n = room < slots.size() ? static_cast<std::size_t>(room) : slots.size();
  if (n == 0) return 0;
  for (std::size_t i = 0; i < n; ++i) writeCell(slots[i]);
  // Release: the client's acquire load of the write index sees all n cells.
  sharedStore(ring_.control->completion_write, write_, memory_order_release);
  published_ = write_;
  return n;
}

// ---- consumer (client) --------------------------------------------------

CompletionConsumer::CompletionConsumer(const CompletionRingMemory& ring)
    : ring_(ring),
      mask_(ring.capacity - 1),
      read_(sharedLoad(ring.client->completion_read, memory_order_relaxed)),
      write_cache_(read_) {}

std::uint64_t CompletionConsumer::available() {
  if (broken_) return 0;
  if (write_cache_ != read_) return write_cache_ - read_;
  // Acquire: pairs with the daemon's release store; the cells up to it are visible.
  const std::uint64_t write = sharedLoad(ring_.control->completion_write, memory_order_acquire);
  if (write - read_ > ring_.capacity) {
    broken_ = true;
    return 0;
  }
  write_cache_ = write;
  return write_cache_ - read_;
}

void CompletionConsumer::readCell(CompletionSlot& out) const {
  const CompletionCell& cell = ring_.cells[read_ & mask_];
  std::uint64_t words[kCompletionSlotWords];
  for (std::size_t i = 0; i < kCompletionSlotWords; ++i) {
    words[i] = sharedLoad(cell.words[i], memory_order_relaxed);
  }
  std::memcpy(&out, words, sizeof(words));
}

bool CompletionConsumer::tryPop(CompletionSlot& out, std::vector<std::uint32_t>& payload,
                                PayloadWords payload_words) {
  if (available() == 0) return false;
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
  if (available() == 0) return false;
  readCell(out);
  ++read_;
  // Release: our reads of the cell happen before the daemon, whose acquire
  // load sees this index, overwrites it.
  sharedStore(ring_.client->completion_read, read_, memory_order_release);
  return true;
}

}  // namespace fairsched::shm
