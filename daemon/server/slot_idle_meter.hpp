// How well the loop keeps an endpoint's executor fed: the time its slots
// spent serving batches, and the time a slot sat free while a batch was
// due (the loop was busy elsewhere, or waiting for a CPU). Their ratio is
// the executor's busy fraction while work was waiting for it — what a flood
// of other clients' submissions must not push down (fairsched-bench flood).
//
// A slot frees when its batch ends: its dispatch time plus the service time
// the executor measured (no later than when the loop collected it). A
// dispatch takes the slot that freed first; the batch it sends was due by
// `due` at the latest (Scheduler::dueBy: max_wait after its queue went
// non-empty), so the slot starved from the later of the two until the
// dispatch — never overcounted, undercounted by at most max_wait a batch.
// Slots that never ran a batch count as freed at their first dispatch
// (nothing is known of them before).
//
// Single-threaded (the loop's); O(slots) a dispatch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "daemon/core/types.hpp"

namespace fairsched::daemon {

class SlotIdleMeter {
 public:
  // A batch ended at `freed` after `service_ns` on its slot.
  void batchEnded(TimeNs freed, TimeNs service_ns) {
    free_since_.push_back(freed);
    busy_ns_ += static_cast<std::uint64_t>(std::max<TimeNs>(service_ns, 0));
  }
  // A batch due since `due` (kNever: not known) was dispatched at `now`.
  void dispatched(TimeNs now, TimeNs due) {
    TimeNs freed = now;
    if (!free_since_.empty()) {
      const auto first = std::min_element(free_since_.begin(), free_since_.end());
      freed = *first;
      free_since_.erase(first);
    }
    const TimeNs from = std::max(freed, std::min(due, now));
    if (now > from) starved_ns_ += static_cast<std::uint64_t>(now - from);
  }
  std::uint64_t busyNs() const { return busy_ns_; }
  std::uint64_t starvedNs() const { return starved_ns_; }

 private:
  std::vector<TimeNs> free_since_;
  std::uint64_t busy_ns_ = 0;
  std::uint64_t starved_ns_ = 0;
};

}  // namespace fairsched::daemon
