// The client's record of requests submitted and not yet completed, so that
// each gets exactly one completion: the daemon's, or one the library makes up
// when the connection is lost.
//
// The hot path takes no lock and allocates nothing: a slab of kSlots entries
// indexed by request id (ids are handed out in order, so the requests
// outstanding at once sit in distinct entries unless one outlives the next
// kSlots submissions). An entry is claimed with one compare-and-swap of its
// key (free -> busy), filled, and published by storing the id; a completion
// claims it back (id -> busy), copies it and frees it. An id whose entry is
// still held by an older request goes to a mutex-guarded overflow map, which
// is looked at only while it holds something.
//
// Thread-safety: any thread, any method. For handleLoss(): an insert()
// followed by a seq_cst fence and a load of the session's `alive` flag, and
// takeGeneration() (which begins with a seq_cst fence) after the flag was
// cleared, never both miss the entry.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fairsched/request.hpp"
#include "shm/shared_word.hpp"

namespace fairsched::client_detail {

struct Pending {
  std::uint64_t tag = 0;
  std::uint64_t generation = 0;  // the Session it was submitted on
  bool awaited = false;          // a submitAndWait() caller wants it
  std::uint16_t lane = 0;        // where it went: cancel() follows it there
  std::uint32_t tenant = 0;      // the tenant's handle
};

class PendingTable {
 public:
  // A power of two; 32 bytes each (1 MiB, its pages touched as ids reach
  // them). More than a client can have outstanding at once on the daemon's
  // segment (16,384 completion cells and 2,048 lane cells), so a burst that
  // fills both never spills into the overflow map.
  static constexpr std::size_t kSlots = 32768;

  PendingTable();
  ~PendingTable();
  PendingTable(const PendingTable&) = delete;
  PendingTable& operator=(const PendingTable&) = delete;

  // REQUIRES: id != 0, not inserted before.
  void insert(RequestId id, const Pending& pending) {
    Entry& e = entry(id);
    std::uint64_t expected = kFree;
    if (!shm::sharedCompareExchange(e.key, expected, kBusy, std::memory_order_acquire,
                                    std::memory_order_relaxed)) {
      insertOverflow(id, pending);
      return;
    }
    write(e, pending);
    shm::sharedStore(e.key, id, std::memory_order_release);
  }

  // The entry, removed; nullopt when there is none (already completed).
  std::optional<Pending> erase(RequestId id) {
    Entry& e = entry(id);
    std::uint64_t expected = id;
    if (shm::sharedCompareExchange(e.key, expected, kBusy, std::memory_order_acquire,
                                   std::memory_order_relaxed)) {
      const Pending p = read(e);
      shm::sharedStore(e.key, kFree, std::memory_order_release);
      return p;
    }
    return eraseOverflow(id);
  }

  // A copy of the entry, left in place; nullopt when there is none.
  std::optional<Pending> find(RequestId id);
  // Removes and returns every entry of `generation`, in request id order.
  std::vector<std::pair<RequestId, Pending>> takeGeneration(std::uint64_t generation);
  std::size_t size() const;

 private:
  static constexpr std::uint64_t kFree = 0;
  static constexpr std::uint64_t kBusy = ~std::uint64_t{0};  // being filled or taken

  // Plain words reached through std::atomic_ref (shm/shared_word.hpp): the
  // slab is one zeroed allocation whose pages stay untouched until used.
  struct alignas(32) Entry {
    std::uint64_t key;         // kFree, kBusy, or the id it holds
    std::uint64_t tag;         // the fields: written only while key == kBusy
    std::uint64_t generation;  //   by the thread that set it
    std::uint64_t meta;        // tenant | awaited << 32 | lane << 40
  };

  Entry& entry(RequestId id) { return slab_[id & (kSlots - 1)]; }

  static void write(Entry& e, const Pending& p) {
    shm::sharedStore(e.tag, p.tag, std::memory_order_relaxed);
    shm::sharedStore(e.generation, p.generation, std::memory_order_relaxed);
    shm::sharedStore(
        e.meta,
        std::uint64_t{p.tenant} | (std::uint64_t{p.awaited} << 32) | (std::uint64_t{p.lane} << 40),
        std::memory_order_relaxed);
  }
  // Acquire loads (plain loads on x86), so find()'s re-check of the key
  // cannot be read before them.
  static Pending read(const Entry& e) {
    Pending p;
    p.tag = shm::sharedLoad(e.tag, std::memory_order_acquire);
    p.generation = shm::sharedLoad(e.generation, std::memory_order_acquire);
    const std::uint64_t meta = shm::sharedLoad(e.meta, std::memory_order_acquire);
    p.tenant = static_cast<std::uint32_t>(meta);
    p.awaited = ((meta >> 32) & 1) != 0;
    p.lane = static_cast<std::uint16_t>(meta >> 40);
    return p;
  }

  void insertOverflow(RequestId id, const Pending& pending);
  std::optional<Pending> eraseOverflow(RequestId id);

  struct FreeSlab {
    void operator()(Entry* p) const noexcept;
  };
  std::unique_ptr<Entry[], FreeSlab> slab_;

  // Ids whose slab entry was taken. overflow_size_ lets the hot path skip
  // the mutex while the map is empty (an id is inserted before anything can
  // ask for it, and the asker learned of it through a release/acquire chain).
  mutable std::mutex overflow_mu_;
  std::unordered_map<RequestId, Pending> overflow_;  // guarded by overflow_mu_
  std::atomic<std::size_t> overflow_size_{0};
};

}  // namespace fairsched::client_detail
