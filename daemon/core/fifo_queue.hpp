// The naive baseline: one queue per endpoint ordered by priority, deadline and
// arrival, across all tenants — what a single priority queue gives (vLLM's
// priority mode, Triton's priority levels). fairsched runs it under policy
// `fifo` so the same daemon can show what fairness buys.
#pragma once

#include <vector>

#include "daemon/core/tenant_queue.hpp"

namespace fairsched::core {

class FifoQueue {
 public:
  void push(const QueueEntry& e);
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  const QueueEntry& top() const { return heap_.front(); }  // REQUIRES: !empty()
  void pop();
  void clear() { heap_.clear(); }

 private:
  std::vector<QueueEntry> heap_;  // binary min-heap by key
};

}  // namespace fairsched::core
