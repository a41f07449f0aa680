// One rate limit: "cost unit × amount × window", e.g. "600 requests/minute"
// or "2M tokens/minute". Parsed from the strings operators write in TOML.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "daemon/core/types.hpp"
#include "fairsched/error.hpp"

namespace fairsched::core {

enum class LimitUnit : std::uint8_t {
  kRequests,  // each request costs 1
  kTokens,  // each request costs input + max output tokens (refunded down to actual at completion)
};

// Where a limit is counted: by this daemon alone, or across every daemon that
// shares the fleet backend (see daemon/core/fleet_gate.hpp).
enum class LimitScope : std::uint8_t { kHost, kFleet };

struct LimitSpec {
  LimitUnit unit = LimitUnit::kRequests;
  std::uint64_t amount = 0;  // cost admitted in any window of `window_ns`; never 0 once parsed
  TimeNs window_ns = 0;      // > 0
  LimitScope scope = LimitScope::kHost;

  // Two specs with the same unit and window are the same limit: a more specific
  // level (tier, tenant) replaces the value (and the scope) of a less specific one.
  bool sameSlot(const LimitSpec& o) const { return unit == o.unit && window_ns == o.window_ns; }
  bool operator==(const LimitSpec&) const = default;
};

// Windows: second, minute, hour, day, month (= 30 days), each optionally
// plural, or a count with a suffix: "90s", "15m", "12h", "7d".
// Amounts: a positive integer, '_' allowed as separator, optional k/M/G suffix
// (×1e3, ×1e6, ×1e9). Grammar: "<amount> <unit>/<window>", where unit is
// "request(s)" or "token(s)"; white space around tokens is free.
// "unlimited" is handled by the config layer (it removes an inherited limit).
struct LimitParseError {
  std::string message;  // e.g. "unknown unit 'minite'"
};
fairsched::Result<LimitSpec, LimitParseError> parseLimitSpec(std::string_view text);

// "600 requests/minute" — the canonical spelling, parseable again.
std::string toString(const LimitSpec& spec);

}  // namespace fairsched::core
