// A request trace for `fairsched-bench replay`: JSON Lines, one request per
// line, {"t":s,"tenant":"..","endpoint":"..","input_tokens":N,
// "output_tokens":N} with optional "max_output_tokens" (what the request asks
// for, at least output_tokens — what it produces; default output_tokens),
// "priority" (integer) and "deadline_ms" (relative to t). Unknown fields are
// ignored; blank lines are skipped.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace fairsched::bench {

struct TraceRequest {
  double t = 0;  // seconds from the trace's origin
  std::string tenant;
  std::string endpoint;
  std::uint32_t input_tokens = 0;
  std::uint32_t output_tokens = 0;
  std::optional<std::uint32_t> max_output_tokens;
  std::int32_t priority = 0;
  std::optional<double> deadline_ms;  // relative to t
  std::size_t line = 0;               // 1-based line in the trace
};

struct TraceError {
  std::size_t line = 0;  // 0: not tied to a line (e.g. the file cannot be opened)
  std::string field;     // empty when the line as a whole is wrong
  std::string message;
  std::string toString() const;  // "line 12: input_tokens: must be a non-negative integer"
};

using TraceResult = std::variant<std::vector<TraceRequest>, TraceError>;

// The requests in line order (not sorted by t). Stops at the first error.
TraceResult parseTrace(std::istream& in);
TraceResult loadTraceFile(const std::string& path);

}  // namespace fairsched::bench
