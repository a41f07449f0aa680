#include "daemon/core/prefix_cache.hpp"

namespace fairsched::core {

std::size_t BlockLru::matched(std::span<const std::uint64_t> chain) const {
  std::size_t n = 0;
  while (n < chain.size() && index_.count(chain[n]) != 0) ++n;
  return n;
}

void BlockLru::unlink(std::uint32_t n) {
  Node& node = nodes_[n];
  if (node.prev != kNil)
    nodes_[node.prev].next = node.next;
  else
    head_ = node.next;
  if (node.next != kNil)
    nodes_[node.next].prev = node.prev;
  else
    tail_ = node.prev;
  node.prev = node.next = kNil;
}

void BlockLru::pushFront(std::uint32_t n) {
  nodes_[n].prev = kNil;
  nodes_[n].next = head_;
  if (head_ != kNil) nodes_[head_].prev = n;
  head_ = n;
  if (tail_ == kNil) tail_ = n;
}

void BlockLru::evictOne(std::vector<std::uint64_t>* evicted) {
  const std::uint32_t n = tail_;
  if (evicted != nullptr) evicted->push_back(nodes_[n].hash);
  unlink(n);
  index_.erase(nodes_[n].hash);
  free_.push_back(n);
}

void BlockLru::touchOne(std::uint64_t hash) {
  auto [it, fresh] = index_.try_emplace(hash, kNil);
  if (!fresh) {
    unlink(it->second);
    pushFront(it->second);
    return;
  }
  std::uint32_t n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
  } else {
    n = static_cast<std::uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[n].hash = hash;
  it->second = n;
  pushFront(n);
}

void BlockLru::insert(std::span<const std::uint64_t> chain, std::vector<std::uint64_t>* evicted) {
  if (capacity_ == 0) return;
  // Last block first: the leading blocks end up the most recent.
  const std::size_t keep = chain.size() < capacity_ ? chain.size() : capacity_;
  for (std::size_t i = keep; i-- > 0;) touchOne(chain[i]);
  while (index_.size() > capacity_) evictOne(evicted);
}

std::size_t BlockLru::touch(std::span<const std::uint64_t> chain) {
  const std::size_t n = matched(chain);
  for (std::size_t i = n; i-- > 0;) touchOne(chain[i]);
  return n;
}

void BlockLru::erase(std::uint64_t hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return;
  unlink(it->second);
  free_.push_back(it->second);
  index_.erase(it);
}

void BlockLru::clear() {
  index_.clear();
  nodes_.clear();
  nodes_.shrink_to_fit();
  free_.clear();
  free_.shrink_to_fit();
  head_ = tail_ = kNil;
}

void BlockLru::setCapacity(std::size_t capacity_blocks) {
  capacity_ = capacity_blocks;
  while (index_.size() > capacity_) evictOne();
}

}  // namespace fairsched::core
