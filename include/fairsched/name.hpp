// The one rule for names — tenants, tiers, endpoints, client rules and the
// client name a process sends in Hello — shared by the config parser, the
// client library, the daemon's control plane and every output. Names end up
// in logs, fairschedctl tables, JSON, Prometheus labels and Redis keys, so a
// name is plain printable ASCII from a small alphabet: it can carry no
// control byte, no white space, no quote and no invalid UTF-8 by
// construction. Self-contained: needs only the standard library.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace fairsched {

// At most this many bytes (the control protocol's fields hold 63 + NUL).
inline constexpr std::size_t kMaxNameBytes = 63;
// Endpoint names are shorter: the Hello reply lists up to 64 of them.
inline constexpr std::size_t kMaxEndpointNameBytes = 31;

// The rule in words, for error messages and docs.
inline constexpr std::string_view kNameRule =
    "a name is 1 to 63 characters, each an ASCII letter, a digit or one of . _ - : @ / +";

// True for the bytes a name may hold.
constexpr bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == ':' || c == '@' || c == '/' || c == '+';
}

// `s` made safe to print whatever a peer sent: printable ASCII is kept
// except the backslash and the double quote, every other byte becomes \xNN.
// The result can go into a log line, a table cell or a JSON string as it is.
inline std::string escapeForDisplay(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\' && c != '"') {
      out.push_back(c);
    } else {
      out += "\\x";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    }
  }
  return out;
}

// nullopt when `name` follows the rule (with `max_bytes` as its length
// bound); otherwise what is wrong with it, naming the first bad byte.
inline std::optional<std::string> nameError(std::string_view name,
                                            std::size_t max_bytes = kMaxNameBytes) {
  if (name.empty()) return std::string("name must not be empty");
  if (name.size() > max_bytes) {
    return "name \"" + escapeForDisplay(name.substr(0, 16)) + "...\" is " +
           std::to_string(name.size()) + " bytes, longer than " + std::to_string(max_bytes);
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (isNameChar(name[i])) continue;
    return "name \"" + escapeForDisplay(name) + "\": '" + escapeForDisplay(name.substr(i, 1)) +
           "' at byte " + std::to_string(i) + " is not allowed (" + std::string(kNameRule) + ")";
  }
  return std::nullopt;
}

}  // namespace fairsched
