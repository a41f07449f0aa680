// A request trace for `fairsched-bench replay`: JSON Lines, one request per
// line, {"t":s,"tenant":"..","endpoint":"..","input_tokens":N,
// "output_tokens":N} with optional "max_output_tokens" (what the request asks
// for, at least output_tokens — what it produces; default output_tokens),
// "priority" (integer), "deadline_ms" (relative to t) and "prefix" (the
// shared segments the prompt starts with: [{"id": "sys-3", "tokens": 2000},
// ...]; see PrefixSegment). Unknown fields are ignored; blank lines are
// skipped.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace fairsched::bench {

// A shared stretch at the start of a prompt: the same `id` is the same
// token content wherever it appears (a tenant's system prompt, a document,
// a conversation's earlier turns).
struct PrefixSegment {
  std::string id;
  std::uint32_t tokens = 0;
};

struct TraceRequest {
  double t = 0;  // seconds from the trace's origin
  std::string tenant;
  std::string endpoint;
  std::uint32_t input_tokens = 0;
  std::uint32_t output_tokens = 0;
  std::optional<std::uint32_t> max_output_tokens;
  std::int32_t priority = 0;
  std::optional<double> deadline_ms;  // relative to t
  // The prompt starts with these segments, in order; the rest of it is the
  // request's own. At most input_tokens in all.
  std::vector<PrefixSegment> prefix;
  std::size_t line = 0;  // 1-based line in the trace
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

// The prompt of request `index`, whose tokens the trace does not carry:
// token k of a segment is a hash of (its id, k), the same wherever the
// segment appears; token k of the request's own part a hash of (index, k).
// Its first min(input_tokens, `limit`) tokens; `shared_tokens` (if not
// null) gets how many tokens its shared segments hold.
std::vector<std::uint32_t> promptTokens(const TraceRequest& r, std::size_t index,
                                        std::size_t limit = SIZE_MAX,
                                        std::size_t* shared_tokens = nullptr);
// The block hash chain (include/fairsched/prefix_hash.hpp) of that prompt.
// At most `max_blocks` blocks; `shared_blocks` (if not null) gets how many
// of them lie wholly inside the shared segments.
std::vector<std::uint64_t> promptChain(const TraceRequest& r, std::size_t index,
                                       std::uint32_t block_tokens, std::size_t max_blocks,
                                       std::size_t* shared_blocks = nullptr);
TraceResult loadTraceFile(const std::string& path);

}  // namespace fairsched::bench
