// The first CR or LF in a span of bytes, found with two memchr scans.
//
// std::string_view::find_first_of("\r\n") looks each byte up in the set
// with its own memchr call: a call per byte of an SSE stream or a header.
#pragma once

#include <cstddef>
#include <cstring>
#include <string_view>

namespace fairsched::gateway {

// The index of the first '\r' or '\n' at or after `from`, or npos.
inline std::size_t findLineBreak(std::string_view s, std::size_t from = 0) {
  if (from >= s.size()) return std::string_view::npos;
  const char* begin = s.data() + from;
  const std::size_t n = s.size() - from;
  const auto* lf = static_cast<const char*>(std::memchr(begin, '\n', n));
  const std::size_t before_lf = lf == nullptr ? n : static_cast<std::size_t>(lf - begin);
  if (const auto* cr = static_cast<const char*>(std::memchr(begin, '\r', before_lf))) {
    return from + static_cast<std::size_t>(cr - begin);
  }
  return lf == nullptr ? std::string_view::npos : from + before_lf;
}

}  // namespace fairsched::gateway
