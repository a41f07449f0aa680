// The client's record of requests submitted and not yet completed, so that
// each gets exactly one completion: the daemon's, or one the library makes up
// when the connection is lost.
//
// Thread-safety: any thread, any method. 16 shards by request id, each a
// mutex around a hash map; a critical section is one map operation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fairsched/request.hpp"

namespace fairsched::client_detail {

struct Pending {
  std::uint64_t tag = 0;
  std::uint64_t generation = 0;  // the Session it was submitted on
  bool awaited = false;          // a submitAndWait() caller wants it
  std::uint32_t tenant = 0;      // the client's tenant index (cancel() finds its ring)
};

class PendingTable {
 public:
  void insert(RequestId id, const Pending& pending);
  // The entry, removed; nullopt when there is none (already completed).
  std::optional<Pending> erase(RequestId id);
  // A copy of the entry, left in place; nullopt when there is none.
  std::optional<Pending> find(RequestId id);
  // Removes and returns every entry of `generation`, in request id order.
  std::vector<std::pair<RequestId, Pending>> takeGeneration(std::uint64_t generation);
  std::size_t size() const;

 private:
  static constexpr std::size_t kShards = 16;
  struct alignas(64) Shard {
    mutable std::mutex mu;
    std::unordered_map<RequestId, Pending> map;  // guarded by mu
  };
  Shard& shard(RequestId id) { return shards_[id % kShards]; }

  std::array<Shard, kShards> shards_;
};

}  // namespace fairsched::client_detail
