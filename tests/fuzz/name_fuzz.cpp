// libFuzzer target for the name rule (fairsched/name.hpp) that guards every
// name a peer sends: whatever the bytes, nameError accepts exactly the names
// of 1 to 63 bytes from the allowed alphabet, its message and
// escapeForDisplay's output carry only printable ASCII (no control byte, no
// invalid UTF-8 can reach a log, a table or JSON), and escaping is
// reversible, so two different names never display alike.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fairsched/name.hpp"

namespace {

bool printableAscii(std::string_view s) {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) return false;
  }
  return true;
}

// Undoes escapeForDisplay.
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] == 'x') {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 2, 2)), nullptr, 16)));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  bool follows = size >= 1 && size <= fairsched::kMaxNameBytes;
  for (const char c : name) follows = follows && fairsched::isNameChar(c);
  const auto err = fairsched::nameError(name);
  check(follows == !err.has_value());
  if (err) check(printableAscii(*err));
  const std::string shown = fairsched::escapeForDisplay(name);
  check(printableAscii(shown));
  check(shown.find('"') == std::string::npos);
  check(unescape(shown) == name);
  if (follows) check(shown == name);  // a valid name displays as itself
  return 0;
}
