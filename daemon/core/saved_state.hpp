// What the scheduler has learned about one tenant on one endpoint, in a form
// that outlives the process: the daemon writes it to its state file and
// reads it back at the next start (daemon/server/state_store.hpp), so a
// restart hands no tenant a fresh day or month of quota.
//
// Times are ages (how long before the snapshot), never clock readings: the
// monotonic clock of the next run starts elsewhere, and the time that passed
// between the two runs is added to every age when the state is restored.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/core/limit_spec.hpp"
#include "daemon/core/types.hpp"

namespace fairsched::core {

// One counted bucket of a limit's sliding window (sliding_window.hpp).
struct SavedBucket {
  std::uint64_t cost = 0;
  TimeNs age = 0;  // how long before the snapshot its last admission was
};

// The counted buckets of one local limit, oldest first:
// SavedTenantState::buckets[first, first + count).
struct SavedWindow {
  LimitUnit unit = LimitUnit::kRequests;
  TimeNs window_ns = 0;
  std::uint32_t first = 0;
  std::uint32_t count = 0;
};

struct SavedTenantState {
  TenantId tenant = kNoTenant;    // which tenant (Scheduler::saveStates fills it)
  double expected_output = -1.0;  // the adaptive cost model's estimate; < 0: none
  double service = 0.0;           // fairness service per unit of weight; 0: none kept
  std::vector<SavedWindow> windows;
  std::vector<SavedBucket> buckets;

  void clear() {
    tenant = kNoTenant;
    expected_output = -1.0;
    service = 0.0;
    windows.clear();
    buckets.clear();
  }
  // Nothing worth keeping.
  bool empty() const { return windows.empty() && expected_output < 0 && service <= 0; }
};

// Receives the saved states of one endpoint, one at a time.
class SavedStateSink {
 public:
  virtual ~SavedStateSink() = default;
  virtual void add(const SavedTenantState& s) = 0;
};

}  // namespace fairsched::core
