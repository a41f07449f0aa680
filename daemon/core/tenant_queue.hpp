// The priority selector inside one tenant: higher priority first, then the
// earliest deadline, then the earliest arrival.
//
// Most traffic arrives in key order (same priority, no deadline, growing
// arrival sequence), so entries that sort after the current tail go to a FIFO
// in O(1); the others go to a binary heap. The head is the smaller of the two
// fronts, so the order is exact either way.
//
// Entries are not removed from the middle: the owner invalidates a request
// elsewhere (cancelled, expired) and skips it when it reaches the head.
#pragma once

#include <cstdint>
#include <deque>
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
};

class TenantQueue {
 public:
  void push(const QueueEntry& e);
  bool empty() const { return fifo_.empty() && heap_.empty(); }
  std::size_t size() const { return fifo_.size() + heap_.size(); }
  // REQUIRES: !empty().
  const QueueEntry& top() const;
  void pop();
  void clear();

 private:
  bool heapFirst() const {
    return fifo_.empty() || (!heap_.empty() && heap_.front().key.before(fifo_.front().key));
  }
  struct HeapCmp {
    bool operator()(const QueueEntry& a, const QueueEntry& b) const { return b.key.before(a.key); }
  };

  std::deque<QueueEntry> fifo_;   // sorted: each push_back sorts after the previous tail
  std::vector<QueueEntry> heap_;  // min-heap by key
};

}  // namespace fairsched::core
