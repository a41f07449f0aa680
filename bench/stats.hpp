// Small statistics shared by the scenarios' reports.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace fairsched::bench {

// The p-th percentile (0..100) of `v`, interpolated between ranks; 0 when empty.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(rank);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace fairsched::bench
