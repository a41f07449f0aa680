// The batches handed to in-daemon executors and not yet returned.
//
// Two counts differ on purpose: a batch is *tracked* while its requests
// still wait for its result, and *in flight* while the executor still holds
// it. A batch past batch_timeout_ms is given up (its requests end at once)
// but stays in flight until the executor returns it; a batch of a lost
// executor is given up and will never return. Shutdown waits for inFlight()
// to reach zero. Nodes of returned batches are kept, with their ids'
// capacity, so a dispatch allocates nothing in the steady state.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "daemon/core/types.hpp"

namespace fairsched::daemon {

struct RunningBatch {
  std::vector<std::uint64_t> ids;  // pending keys, in the executor's order
  EndpointId endpoint = 0;
  TimeNs deadline = kNever;  // batch_timeout_ms after dispatch
  TimeNs dispatched = 0;
};

class BatchTracker {
 public:
  // Starts tracking batch `id` (empty ids); not in flight until submitted().
  RunningBatch& open(std::uint64_t id);
  // The executor took batch `id`.
  void submitted() { ++in_flight_; }
  // Stops tracking `id` (returned, or refused by the executor); no-op when untracked.
  void retire(std::uint64_t id);
  // An executor returned batch `id`: no longer in flight. The tracked batch,
  // or null when it was given up; retire(id) once its requests are ended.
  RunningBatch* returned(std::uint64_t id);
  // Gives up every batch whose deadline passed: fn(id, batch) ends its
  // requests; it stays in flight until the executor returns it.
  template <typename Fn>
  void giveUpExpired(TimeNs now, Fn&& fn) {
    for (auto it = batches_.begin(); it != batches_.end();) {
      if (now < it->second.deadline) {
        ++it;
        continue;
      }
      fn(it->first, it->second);
      it = batches_.erase(it);
    }
  }
  // Gives up every batch of endpoint `e`, whose executor will never return
  // them: fn(id, batch) ends its requests; none of them is in flight after.
  template <typename Fn>
  void giveUpEndpoint(EndpointId e, Fn&& fn) {
    for (auto it = batches_.begin(); it != batches_.end();) {
      if (it->second.endpoint != e) {
        ++it;
        continue;
      }
      fn(it->first, it->second);
      if (in_flight_ > 0) --in_flight_;
      it = batches_.erase(it);
    }
  }
  // The daemon stops without waiting for what executors still hold.
  void forgetInFlight() { in_flight_ = 0; }
  std::uint64_t inFlight() const { return in_flight_; }
  std::size_t tracked() const { return batches_.size(); }
  // The soonest deadline of a tracked batch; kNever when none.
  TimeNs earliestDeadline() const;

 private:
  std::unordered_map<std::uint64_t, RunningBatch> batches_;
  std::vector<decltype(batches_)::node_type> spare_;
  std::uint64_t in_flight_ = 0;
};

}  // namespace fairsched::daemon
