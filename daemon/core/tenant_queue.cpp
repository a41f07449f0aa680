#include "daemon/core/tenant_queue.hpp"

#include <algorithm>

namespace fairsched::core {

TenantQueue::TenantQueue(const TenantQueue& o) {
  *this = o;
}

TenantQueue& TenantQueue::operator=(const TenantQueue& o) {
  if (this == &o) return *this;
  capacity_ = o.capacity_;
  spill_.reset();
  if (o.spill_) spill_ = std::make_unique<QueueEntry[]>(capacity_);
  std::copy(o.ring(), o.ring() + capacity_, ring());
  head_ = o.head_;
  size_ = o.size_;
  heap_ = o.heap_;
  return *this;
}

void TenantQueue::grow() {
  const std::uint32_t cap = capacity_ * 2;
  auto bigger = std::make_unique<QueueEntry[]>(cap);
  for (std::uint32_t i = 0; i < size_; ++i) bigger[i] = ring()[(head_ + i) & (capacity_ - 1)];
  spill_ = std::move(bigger);
  capacity_ = cap;
  head_ = 0;
}

void TenantQueue::push(const QueueEntry& e) {
  if (size_ == 0 || back().key.before(e.key)) {
    if (size_ == capacity_) grow();
    ring()[(head_ + size_) & (capacity_ - 1)] = e;
    ++size_;
  } else {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), HeapCmp{});
  }
}

const QueueEntry& TenantQueue::top() const {
  return heapFirst() ? heap_.front() : front();
}

void TenantQueue::pop() {
  if (heapFirst()) {
    std::pop_heap(heap_.begin(), heap_.end(), HeapCmp{});
    heap_.pop_back();
  } else {
    ++head_;
    --size_;
  }
}

void TenantQueue::clear() {
  head_ = size_ = 0;
  capacity_ = kInline;
  spill_.reset();
  heap_.clear();
}

}  // namespace fairsched::core
