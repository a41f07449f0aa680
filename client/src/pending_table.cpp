#include "pending_table.hpp"

#include <algorithm>

namespace fairsched::client_detail {

void PendingTable::insert(RequestId id, const Pending& pending) {
  Shard& s = shard(id);
  std::lock_guard lk(s.mu);
  s.map.insert_or_assign(id, pending);
}

std::optional<Pending> PendingTable::erase(RequestId id) {
  Shard& s = shard(id);
  std::lock_guard lk(s.mu);
  auto it = s.map.find(id);
  if (it == s.map.end()) return std::nullopt;
  Pending p = it->second;
  s.map.erase(it);
  return p;
}

std::optional<Pending> PendingTable::find(RequestId id) {
  Shard& s = shard(id);
  std::lock_guard lk(s.mu);
  auto it = s.map.find(id);
  if (it == s.map.end()) return std::nullopt;
  return it->second;
}

std::vector<std::pair<RequestId, Pending>> PendingTable::takeGeneration(std::uint64_t generation) {
  std::vector<std::pair<RequestId, Pending>> out;
  for (Shard& s : shards_) {
    std::lock_guard lk(s.mu);
    for (auto it = s.map.begin(); it != s.map.end();) {
      if (it->second.generation == generation) {
        out.emplace_back(*it);
        it = s.map.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

std::size_t PendingTable::size() const {
  std::size_t n = 0;
  for (const Shard& s : shards_) {
    std::lock_guard lk(s.mu);
    n += s.map.size();
  }
  return n;
}

}  // namespace fairsched::client_detail
