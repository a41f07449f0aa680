// Connection set-ups shared fairly: a budget of Hellos per client uid.
//
// Serving a Hello (a segment, two eventfds, the welcome with its
// descriptors) is the loop's work for a new client, tens of microseconds of
// the one thread every tenant waits on. A process that connects in a loop —
// a crash-looping frontend, a script per request, a fork storm — would
// otherwise take as much of the loop as it asks for. So each uid has a
// budget of set-ups: `per_s` a second, in bursts of `burst` (the generic
// cell rate algorithm of RejectBudget, the same idea as the rejection
// budget for submissions). A Hello past it is not refused: it waits here,
// in arrival order within its uid, and is served in a later pass when the
// uid's budget is back — its client's connect() just takes longer — while
// the loop serves everyone else in between. Other uids' Hellos do not wait
// behind it.
//
// Memory: one entry per uid that has a Hello waiting or a budget not yet
// full again (forgotten by prune()); each waiting Hello is its connection's
// own. Pure: time is passed in; the loop's thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "daemon/core/types.hpp"
#include "daemon/server/reject_budget.hpp"

namespace fairsched::daemon {

class SetUpQueue {
 public:
  // per_s 0: no budget (every Hello is served at once).
  explicit SetUpQueue(std::uint64_t per_s = 0, std::uint64_t burst = 1)
      : per_s_(per_s), burst_(burst) {}

  // A Hello from `uid` on connection `conn` at `now`: true when it may be
  // served now (the budget is spent for it); false when it waits (queued).
  bool admit(std::uint64_t conn, uid_t uid, TimeNs now);
  // The waiting connections whose uid's budget is back at `now`, in arrival
  // order within each uid; the budget is spent for each and they leave the
  // queue.
  std::vector<std::uint64_t> takeReady(TimeNs now);
  // A waiting connection went away before it was served.
  void forget(std::uint64_t conn, uid_t uid);
  // When takeReady() will have something; kNever when nothing waits.
  TimeNs nextAt() const;
  std::size_t waiting() const { return waiting_; }
  std::size_t uidsKept() const { return uids_.size(); }
  // Drops the entries of uids with nothing waiting and a full budget.
  void prune(TimeNs now);

 private:
  struct Uid {
    RejectBudget budget;
    std::deque<std::uint64_t> waiting;
  };
  Uid& entry(uid_t uid);
  static constexpr std::size_t kPruneAbove = 64;  // uids kept before admit() prunes

  std::uint64_t per_s_ = 0;
  std::uint64_t burst_ = 1;
  std::unordered_map<uid_t, Uid> uids_;
  std::size_t waiting_ = 0;
};

}  // namespace fairsched::daemon
