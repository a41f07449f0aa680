#include "pending_table.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace fairsched::client_detail {

PendingTable::PendingTable() {
  // calloc: zeroed (every key kFree), and large enough to come from fresh
  // pages that cost nothing until an entry on them is first used.
  void* p = std::calloc(kSlots, sizeof(Entry));
  if (p == nullptr) throw std::bad_alloc();
  slab_.reset(static_cast<Entry*>(p));
}

PendingTable::~PendingTable() = default;

void PendingTable::FreeSlab::operator()(Entry* p) const noexcept {
  std::free(p);
}

void PendingTable::insertOverflow(RequestId id, const Pending& pending) {
  std::lock_guard lk(overflow_mu_);
  overflow_.insert_or_assign(id, pending);
  overflow_size_.store(overflow_.size(), std::memory_order_release);
}

std::optional<Pending> PendingTable::eraseOverflow(RequestId id) {
  if (overflow_size_.load(std::memory_order_acquire) == 0) return std::nullopt;
  std::lock_guard lk(overflow_mu_);
  auto it = overflow_.find(id);
  if (it == overflow_.end()) return std::nullopt;
  Pending p = it->second;
  overflow_.erase(it);
  overflow_size_.store(overflow_.size(), std::memory_order_release);
  return p;
}

std::optional<Pending> PendingTable::find(RequestId id) {
  const Entry& e = entry(id);
  if (shm::sharedLoad(e.key, std::memory_order_acquire) == id) {
    const Pending p = read(e);
    // A seqlock's re-check (read()'s loads are acquire, so this one comes
    // after them): the id is never inserted again, so if the key still holds
    // it, nobody took or refilled the entry while it was read.
    if (shm::sharedLoad(e.key, std::memory_order_relaxed) == id) return p;
    return std::nullopt;  // completed meanwhile
  }
  if (overflow_size_.load(std::memory_order_acquire) == 0) return std::nullopt;
  std::lock_guard lk(overflow_mu_);
  auto it = overflow_.find(id);
  if (it == overflow_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::pair<RequestId, Pending>> PendingTable::takeGeneration(std::uint64_t generation) {
  shm::seqCstFence();  // see the header: pairs with submit()'s fence
  std::vector<std::pair<RequestId, Pending>> out;
  for (std::size_t i = 0; i < kSlots; ++i) {
    Entry& e = slab_[i];
    std::uint64_t key = shm::sharedLoad(e.key, std::memory_order_acquire);
    if (key == kFree || key == kBusy) continue;  // busy: its inserter or completer sees to it
    if (shm::sharedLoad(e.generation, std::memory_order_relaxed) != generation) continue;
    const RequestId id = key;
    if (std::optional<Pending> p = erase(id)) out.emplace_back(id, *p);
  }
  if (overflow_size_.load(std::memory_order_acquire) != 0) {
    std::lock_guard lk(overflow_mu_);
    for (auto it = overflow_.begin(); it != overflow_.end();) {
      if (it->second.generation == generation) {
        out.emplace_back(*it);
        it = overflow_.erase(it);
      } else {
        ++it;
      }
    }
    overflow_size_.store(overflow_.size(), std::memory_order_release);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

std::size_t PendingTable::size() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < kSlots; ++i) {
    const std::uint64_t key = shm::sharedLoad(slab_[i].key, std::memory_order_relaxed);
    n += key != kFree && key != kBusy;
  }
  std::lock_guard lk(overflow_mu_);
  return n + overflow_.size();
}

}  // namespace fairsched::client_detail
