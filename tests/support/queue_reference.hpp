// What the tests of the core's request queues share (fifo_queue_test,
// tenant_queue_test): draining a queue, checking a run of pops, and the
// property that it pops in the order of a reference sorted by
// QueueKey::before. Any queue of QueueEntry
// with push, top, pop, empty and size will do. Header-only, for rapidcheck
// properties (RC_ASSERT).
#pragma once

#include <rapidcheck.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "daemon/core/tenant_queue.hpp"

namespace fairsched::testing {

// Pops everything and returns the seqs in pop order.
template <class Queue>
std::vector<std::uint64_t> drainSeqs(Queue& q) {
  std::vector<std::uint64_t> out;
  while (!q.empty()) {
    out.push_back(q.top().key.seq);
    q.pop();
  }
  return out;
}

// Pops `n` entries; true when there were that many and their seqs ran
// first, first + 1, ... in pop order.
template <class Queue>
bool popsInSeqOrder(Queue& q, std::uint64_t first, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    if (q.empty() || q.top().key.seq != first + i) return false;
    q.pop();
  }
  return true;
}

// Runs `ops` against `q` and a reference that sorts the live entries with
// QueueKey::before: every pop must return the reference's first entry, and
// the sizes must agree throughout; at the end both are drained the same way.
// An op with `pop` set pops (or, on an empty reference, checks `q` is empty);
// any other pushes `entry(op, n)`, n counting the pushes from 0.
template <class Queue, class Op, class Entry>
void checkAgainstSortedReference(Queue& q, const std::vector<Op>& ops, Entry entry) {
  std::vector<core::QueueEntry> ref;
  std::uint64_t pushes = 0;
  const auto byKey = [](const core::QueueEntry& a, const core::QueueEntry& b) {
    return a.key.before(b.key);
  };
  const auto popAndCompare = [&] {
    std::sort(ref.begin(), ref.end(), byKey);
    RC_ASSERT(!q.empty());
    RC_ASSERT(q.top().key.seq == ref.front().key.seq);
    RC_ASSERT(q.top().key.priority == ref.front().key.priority);
    RC_ASSERT(q.top().key.deadline == ref.front().key.deadline);
    RC_ASSERT(q.top().handle == ref.front().handle);
    q.pop();
    ref.erase(ref.begin());
  };
  for (const Op& op : ops) {
    if (op.pop) {
      if (ref.empty()) {
        RC_ASSERT(q.empty());
        continue;
      }
      popAndCompare();
    } else {
      const core::QueueEntry e = entry(op, pushes++);
      q.push(e);
      ref.push_back(e);
    }
    RC_ASSERT(q.size() == ref.size());
    RC_ASSERT(q.empty() == ref.empty());
  }
  while (!ref.empty()) popAndCompare();
  RC_ASSERT(q.empty());
}

}  // namespace fairsched::testing
