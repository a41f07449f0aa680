// The priority selector inside one tenant: higher priority first, then the
// earliest deadline, then the earliest arrival.
//
// Most traffic arrives in key order (same priority, no deadline, growing
// arrival sequence), so entries that sort after the current tail go to a FIFO
// in O(1); the others go to a binary heap. The head is the smaller of the two
// fronts, so the order is exact either way.
//
// The FIFO is a ring whose first kInline entries live inside the object: a
// tenant with a short queue — the common case with many tenants — has its
// head in the same cache lines as the rest of its state.
//
// Entries are not removed from the middle: the owner invalidates a request
// elsewhere (cancelled, expired) and skips it when it reaches the head.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/core/types.hpp"

namespace fairsched::core {

struct QueueKey {
  std::int32_t priority = 0;  // higher first
  TimeNs deadline = kNever;   // earlier first
  std::uint64_t seq = 0;      // arrival order, unique

  // True when *this is served before o.
  bool before(const QueueKey& o) const {
    if (priority != o.priority) return priority > o.priority;
    if (deadline != o.deadline) return deadline < o.deadline;
    return seq < o.seq;
  }
};

struct QueueEntry {
  QueueKey key;
  std::uint64_t handle = 0;  // the owner's reference to the request
  std::uint32_t input_tokens = 0;
  std::uint32_t max_output_tokens = 0;
};

class TenantQueue {
 public:
  static constexpr std::uint32_t kInline = 2;  // a power of two

  TenantQueue() = default;
  TenantQueue(const TenantQueue& o);
  TenantQueue& operator=(const TenantQueue& o);
  TenantQueue(TenantQueue&&) noexcept = default;
  TenantQueue& operator=(TenantQueue&&) noexcept = default;

  void push(const QueueEntry& e);
  bool empty() const { return size_ == 0 && heap_.empty(); }
  std::size_t size() const { return size_ + heap_.size(); }
  // REQUIRES: !empty().
  const QueueEntry& top() const;
  // The FIFO's entry `k` places behind its front, or null (a hint for
  // prefetching: the heap's entries may come first).
  const QueueEntry* fifoAhead(std::uint32_t k) const {
    return k < size_ ? &ring()[(head_ + k) & (capacity_ - 1)] : nullptr;
  }
  // True when every entry is in the FIFO (fifoAhead(k) is then the k-th in order).
  bool fifoOnly() const { return heap_.empty(); }
  void pop();
  void clear();

 private:
  QueueEntry* ring() { return spill_ ? spill_.get() : inline_; }
  const QueueEntry* ring() const { return spill_ ? spill_.get() : inline_; }
  const QueueEntry& front() const { return ring()[head_ & (capacity_ - 1)]; }
  const QueueEntry& back() const { return ring()[(head_ + size_ - 1) & (capacity_ - 1)]; }
  bool heapFirst() const {
    return size_ == 0 || (!heap_.empty() && heap_.front().key.before(front().key));
  }
  void grow();
  struct HeapCmp {
    bool operator()(const QueueEntry& a, const QueueEntry& b) const { return b.key.before(a.key); }
  };

  // The FIFO ring, sorted: each push sorts after the previous tail.
  std::uint32_t head_ = 0;
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = kInline;  // a power of two
  QueueEntry inline_[kInline];
  std::unique_ptr<QueueEntry[]> spill_;  // the ring once it outgrows inline_
  std::vector<QueueEntry> heap_;         // min-heap by key
};

}  // namespace fairsched::core
