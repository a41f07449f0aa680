// Fleet accounts hammered at once, each from its own thread: what the fleet
// scenario's overshoot measurement and the fleet limiter's two-limiter test
// share. Header-only (the unit test links no benchmark library).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "daemon/core/fleet_gate.hpp"
#include "daemon/fleet/fleet_limiter.hpp"

namespace fairsched::bench {

// Takes cost 1 from each of `accounts` in its own thread for `run`
// (FleetLimiter's clock), sleeping `backoff` after each refusal, at most
// `max_tries` takes each: every admission's time, of all accounts together.
// `per_account` (if given) gets how many each admitted.
inline std::vector<TimeNs> hammerAccounts(const std::vector<core::FleetAccount*>& accounts,
                                          TimeNs run, std::chrono::microseconds backoff,
                                          std::uint64_t max_tries,
                                          std::vector<std::size_t>* per_account = nullptr) {
  std::vector<std::vector<TimeNs>> times(accounts.size());
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < accounts.size(); ++k) {
    threads.emplace_back([&, k] {
      const TimeNs end = daemon::monotonicNow() + run;
      for (std::uint64_t i = 0; i < max_tries; ++i) {
        const TimeNs t = daemon::monotonicNow();
        if (t >= end) break;
        if (accounts[k]->take(1, t).admitted) {
          times[k].push_back(t);
        } else {
          std::this_thread::sleep_for(backoff);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<TimeNs> all;
  if (per_account) per_account->clear();
  for (const std::vector<TimeNs>& t : times) {
    all.insert(all.end(), t.begin(), t.end());
    if (per_account) per_account->push_back(t.size());
  }
  return all;
}

}  // namespace fairsched::bench
