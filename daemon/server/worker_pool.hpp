// The engines attached as workers, by endpoint, and what the daemon knows
// of their room: which worker takes the next request, how many more each
// may be given, how many requests run on workers, and the preemption
// bookkeeping (at most one PREEMPT outstanding per endpoint). The pool
// keeps the worker counts of ServerStats (workers, running_on_workers).
//
// It decides nothing about requests: Server's worker role
// (server_workers.cpp) assigns, aborts and ends them. Loop thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/core/types.hpp"
#include "daemon/server/connection.hpp"
#include "daemon/server/server_stats.hpp"

namespace fairsched::daemon {

class WorkerPool {
 public:
  static constexpr std::uint64_t kNoPreempt = UINT64_MAX;

  // `cfg` (the endpoints' max_sequences) and `stats` are read and updated
  // in place: both must outlive the pool, and a reload may change cfg.
  WorkerPool(const config::Config& cfg, ServerStats& stats);

  // `c` (its `worker` set) serves its endpoint from now on.
  void attach(Connection& c);
  // `c` serves no more (it is going); its running requests are the caller's.
  void detach(const Connection& c);

  // How many more requests worker `c` may be given now: its statement, the
  // endpoint's max_sequences and room in its assignment ring.
  std::uint32_t sequencesFor(Connection& c) const;
  // The same without loading the worker's read index (what status shows):
  // its ring's room as the daemon last saw it. Never more than
  // max_sequences, whatever the worker stated.
  std::uint32_t sequencesShown(const Connection& c) const;
  // The worker of endpoint `e` with the most room that can take one more
  // request (most free KV tokens, then sequences): if the next fair choice
  // does not fit there, it fits nowhere now. Null when none can.
  Connection* roomiest(EndpointId e) const;
  // Endpoint `e`'s workers, in attach order (closing ones included).
  const std::vector<Connection*>& of(EndpointId e) const { return by_endpoint_[e]; }
  // Sequences the endpoint's workers may still be given, all together
  // (sequencesFor each, those with no free KV tokens counted as none).
  std::uint32_t freeSequences(EndpointId e) const;

  // A request started / stopped running on a worker of endpoint `e`.
  void started(EndpointId e);
  void stopped(EndpointId e);
  std::size_t running() const { return running_; }

  // The pending key of endpoint `e`'s outstanding PREEMPT, or kNoPreempt.
  std::uint64_t& preemptOutstanding(EndpointId e) { return preempt_outstanding_[e]; }
  // Whether endpoint `e` looks for a sequence to preempt now (at most every
  // `interval`); true moves its next look on.
  bool preemptCheckDue(EndpointId e, TimeNs now, TimeNs interval);
  // Whether running requests are looked at now (every 10 ms at most); true
  // moves the next look on. nextRunningCheck(): when, for the loop's timer.
  bool runningCheckDue(TimeNs now);
  TimeNs nextRunningCheck() const { return next_running_check_; }

 private:
  const config::Config& cfg_;
  ServerStats& stats_;
  std::vector<std::vector<Connection*>> by_endpoint_;  // in attach order
  std::size_t running_ = 0;
  TimeNs next_running_check_ = 0;
  std::vector<std::uint64_t> preempt_outstanding_;
  std::vector<TimeNs> next_preempt_check_;
};

}  // namespace fairsched::daemon
