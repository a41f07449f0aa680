#include "daemon/core/tenant_queue.hpp"

#include <algorithm>

namespace fairsched::core {

void TenantQueue::push(const QueueEntry& e) {
  if (fifo_.empty() || fifo_.back().key.before(e.key)) {
    fifo_.push_back(e);
  } else {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), HeapCmp{});
  }
}

const QueueEntry& TenantQueue::top() const { return heapFirst() ? heap_.front() : fifo_.front(); }

void TenantQueue::pop() {
  if (heapFirst()) {
    std::pop_heap(heap_.begin(), heap_.end(), HeapCmp{});
    heap_.pop_back();
  } else {
    fifo_.pop_front();
  }
}

void TenantQueue::clear() {
  fifo_.clear();
  heap_.clear();
}

}  // namespace fairsched::core
