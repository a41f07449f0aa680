// Backlog throttle of one endpoint: rejects a request at once (OVERLOADED)
// when its estimated queueing delay — the work ahead of it divided by the
// measured service rate — exceeds the endpoint's latency target. Better an
// immediate, explicit "no" the caller can route elsewhere than a request that
// waits past any useful deadline.
//
// The service rate is an exponential moving average of the work the executor
// completes per second of batch service time, times the executor's
// parallelism (streams or threads). Work is counted in tokens (input + max
// output, the same units as the work ahead). Until the first batch has been
// measured there is no estimate, and nothing is rejected.
#pragma once

#include <cstdint>

#include "daemon/core/types.hpp"

namespace fairsched::core {

class BacklogThrottle {
 public:
  // target_ns == 0 disables the throttle.
  BacklogThrottle(TimeNs target_ns = 0, std::uint32_t parallelism = 1, double alpha = 0.2)
      : target_ns_(target_ns), parallelism_(parallelism == 0 ? 1 : parallelism), alpha_(alpha) {}

  // A batch of `tokens` took `service_ns` on one executor slot.
  void onBatchDone(std::uint64_t tokens, TimeNs service_ns);

  // Estimated wait behind `work_ahead` tokens; 0 while nothing was measured.
  TimeNs estimatedDelay(std::uint64_t work_ahead) const;

  // True when a request with `work_ahead` tokens in front of it should be admitted.
  bool admits(std::uint64_t work_ahead) const {
    return target_ns_ == 0 || estimatedDelay(work_ahead) <= target_ns_;
  }

  double tokensPerSecond() const { return rate_; }
  // A restart: the rate measured by the last run, until batches say otherwise.
  void restoreRate(double tokens_per_s) {
    if (tokens_per_s > 0 && tokens_per_s < 1e18) rate_ = tokens_per_s;
  }
  TimeNs target() const { return target_ns_; }

 private:
  TimeNs target_ns_;
  std::uint32_t parallelism_;
  double alpha_;
  double rate_ = 0.0;  // tokens per second across all slots; 0 = not measured
};

}  // namespace fairsched::core
