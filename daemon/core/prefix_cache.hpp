// What one worker's engine holds of prompt prefixes, as block hashes
// (include/fairsched/prefix_hash.hpp), LRU-bounded by the engine's cache
// size in blocks.
//
// Two uses. Approximate: the daemon records the chains it sends to a worker
// that cannot say what it caches (an HTTP upstream), bounded by the cache
// size the worker states — the engine evicts in some LRU-like order, so
// this is an estimate, as llm-d's approximate prefix scorer is. Exact: an
// engine that reports its cache (blocks stored, removed, all cleared: the
// shape of vLLM's KV events) drives insert()/erase()/clear() directly. The
// replay model's engines keep their own cache with it too.
//
// Eviction order follows the engines: a chain is touched from its last
// block to its first, so a prompt's leading blocks are the last of it to
// go (evicting a chain's first block would make the rest unreachable).
//
// Memory: capacity × (one 24-byte node + one hash-map entry), allocated as
// blocks arrive; clear() gives it back. Pure, single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace fairsched::core {

class BlockLru {
 public:
  explicit BlockLru(std::size_t capacity_blocks = 0) : capacity_(capacity_blocks) {}

  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return index_.size(); }

  // How many leading blocks of `chain` are held (0 .. chain.size()).
  std::size_t matched(std::span<const std::uint64_t> chain) const;
  // Holds every block of `chain` (touching those already held), evicting
  // the least recently used beyond the capacity (appended to `evicted`
  // when given: an engine reports them as removed).
  void insert(std::span<const std::uint64_t> chain, std::vector<std::uint64_t>* evicted = nullptr);
  // Touches the leading blocks of `chain` it holds (a cache hit refreshes
  // them); returns how many.
  std::size_t touch(std::span<const std::uint64_t> chain);
  // The engine dropped one block / everything.
  void erase(std::uint64_t hash);
  void clear();
  // A different capacity (a worker restated it); evicts down to it.
  void setCapacity(std::size_t capacity_blocks);

 private:
  static constexpr std::uint32_t kNil = UINT32_MAX;
  struct Node {
    std::uint64_t hash = 0;
    std::uint32_t prev = kNil;  // towards the most recent
    std::uint32_t next = kNil;  // towards the least recent
  };
  void unlink(std::uint32_t n);
  void pushFront(std::uint32_t n);
  void touchOne(std::uint64_t hash);
  void evictOne(std::vector<std::uint64_t>* evicted = nullptr);

  std::size_t capacity_;
  std::vector<Node> nodes_;
  std::vector<std::uint32_t> free_;
  std::unordered_map<std::uint64_t, std::uint32_t> index_;
  std::uint32_t head_ = kNil;  // most recent
  std::uint32_t tail_ = kNil;  // least recent
};

}  // namespace fairsched::core
