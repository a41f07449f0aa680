#include "daemon/server/batch_tracker.hpp"

#include <algorithm>

namespace fairsched::daemon {

RunningBatch& BatchTracker::open(std::uint64_t id) {
  if (spare_.empty()) {
    RunningBatch& b = batches_[id];
    b.ids.clear();
    return b;
  }
  auto node = std::move(spare_.back());
  spare_.pop_back();
  node.key() = id;
  node.mapped().ids.clear();
  node.mapped().deadline = kNever;
  return batches_.insert(std::move(node)).position->second;
}

void BatchTracker::retire(std::uint64_t id) {
  auto it = batches_.find(id);
  if (it == batches_.end()) return;
  // Bounded by the most batches ever in flight at once (executor slots).
  spare_.push_back(batches_.extract(it));
}

RunningBatch* BatchTracker::returned(std::uint64_t id) {
  if (in_flight_ > 0) --in_flight_;
  auto it = batches_.find(id);
  return it == batches_.end() ? nullptr : &it->second;
}

TimeNs BatchTracker::earliestDeadline() const {
  TimeNs at = kNever;
  for (const auto& [id, b] : batches_) at = std::min(at, b.deadline);
  return at;
}

}  // namespace fairsched::daemon
