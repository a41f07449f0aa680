#include "daemon/core/fifo_queue.hpp"

#include <algorithm>

namespace fairsched::core {
namespace {
struct After {
  bool operator()(const QueueEntry& a, const QueueEntry& b) const { return b.key.before(a.key); }
};
}  // namespace

void FifoQueue::push(const QueueEntry& e) {
  heap_.push_back(e);
  std::push_heap(heap_.begin(), heap_.end(), After{});
}

void FifoQueue::pop() {
  std::pop_heap(heap_.begin(), heap_.end(), After{});
  heap_.pop_back();
}

}  // namespace fairsched::core
