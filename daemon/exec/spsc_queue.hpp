// A bounded single-producer single-consumer queue between two threads of the
// daemon (the event loop and an executor thread). Positions only grow; the
// queue is full when tail - head == capacity.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

namespace fairsched::daemon {

template <class T>
class SpscQueue {
 public:
  // REQUIRES: capacity is a power of two.
  explicit SpscQueue(std::size_t capacity) : mask_(capacity - 1), cells_(new T[capacity]) {}

  // Producer only. False when full.
  bool push(T&& v) {
    const std::size_t tail = tail_.load(std::memory_order_relaxed);
    // acquire: the consumer's move-out of this cell happened before its head store.
    if (tail - head_.load(std::memory_order_acquire) > mask_) return false;
    cells_[tail & mask_] = std::move(v);
    // release: the cell's contents are visible to a consumer that sees the new tail.
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  // Consumer only.
  std::optional<T> pop() {
    const std::size_t head = head_.load(std::memory_order_relaxed);
    // acquire: pairs with push's release; the cell is fully written.
    if (head == tail_.load(std::memory_order_acquire)) return std::nullopt;
    std::optional<T> v(std::move(cells_[head & mask_]));
    // release: the producer may reuse the cell once it sees the new head.
    head_.store(head + 1, std::memory_order_release);
    return v;
  }

  bool empty() const {
    return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
  }

 private:
  const std::size_t mask_;
  std::unique_ptr<T[]> cells_;
  alignas(64) std::atomic<std::size_t> head_{0};  // written by the consumer
  alignas(64) std::atomic<std::size_t> tail_{0};  // written by the producer
};

}  // namespace fairsched::daemon
