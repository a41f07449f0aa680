// Small statistics shared by the scenarios' reports.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace fairsched::bench {

// The p-th percentile (0..100) of `sorted` (ascending), interpolated between
// ranks; 0 when empty. The one percentile every scenario reports.
inline double percentileOfSorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(rank);
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

// The same of `v` in any order.
inline double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return percentileOfSorted(v, p);
}

// The most cost admitted in any window [t, t + window) of admissions given
// as (time, cost), in any order: sorted, then two pointers. What a rate
// limit promises never to exceed.
inline double maxInWindow(std::vector<std::pair<double, double>> admissions, double window) {
  std::sort(admissions.begin(), admissions.end());
  double best = 0, sum = 0;
  std::size_t lo = 0;
  for (std::size_t hi = 0; hi < admissions.size(); ++hi) {
    sum += admissions[hi].second;
    while (admissions[hi].first - admissions[lo].first >= window) sum -= admissions[lo++].second;
    best = std::max(best, sum);
  }
  return best;
}

// The most events in any window [t, t + window) of `times` (any order): the
// same scan with every cost 1, on integer times (nanoseconds) kept exact.
template <class Time>
std::size_t maxCountInWindow(std::vector<Time> times, Time window) {
  std::sort(times.begin(), times.end());
  std::size_t best = 0;
  for (std::size_t lo = 0, hi = 0; hi < times.size(); ++hi) {
    while (times[hi] - times[lo] >= window) ++lo;
    best = std::max(best, hi - lo + 1);
  }
  return best;
}

}  // namespace fairsched::bench
