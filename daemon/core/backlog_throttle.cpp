#include "daemon/core/backlog_throttle.hpp"

namespace fairsched::core {

void BacklogThrottle::onBatchDone(std::uint64_t tokens, TimeNs service_ns) {
  if (tokens == 0 || service_ns <= 0) return;
  const double sample = static_cast<double>(tokens) * static_cast<double>(kNsPerSec) /
                        static_cast<double>(service_ns) * parallelism_;
  rate_ = rate_ == 0.0 ? sample : rate_ + alpha_ * (sample - rate_);
}

TimeNs BacklogThrottle::estimatedDelay(std::uint64_t work_ahead) const {
  if (rate_ <= 0.0) return 0;
  const double ns = static_cast<double>(work_ahead) / rate_ * static_cast<double>(kNsPerSec);
  return ns >= 9.0e18 ? kNever : static_cast<TimeNs>(ns);
}

}  // namespace fairsched::core
