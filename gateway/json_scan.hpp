// JsonScan: a strict reader of one JSON text (RFC 8259) that builds
// nothing. The gateway passes bodies on as they are and needs a few of
// their fields (a response's usage, a stream chunk's text, a request's
// counts): it walks the text once, skipping what it does not need, where a
// document parse would allocate every object, key and string of it.
//
// Strict as a parser: structure, string escapes (a \u high surrogate must
// be followed by its low one), UTF-8 in strings (no overlong forms, no
// surrogates, nothing past U+10FFFF), control characters, numbers, and
// nothing but whitespace after the value (end()). Containers nest at most
// kMaxDepth deep. The first error stops it: every call after returns false
// (or Type::kBad) and ok() is false.
//
// Use: peek() says what the next value is; read it with string(),
// number(), literal() or skip(), or enter it: enterObject() then
// nextMember(key) until it returns false (the closing '}' read), or
// enterArray() then nextItem() likewise. A member's key is its raw text
// between the quotes; keyIs() compares it decoded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fairsched::gateway {

class JsonScan {
 public:
  enum class Type : std::uint8_t { kObject, kArray, kString, kNumber, kLiteral, kBad };
  static constexpr int kMaxDepth = 512;

  explicit JsonScan(std::string_view text) : s_(text) {}

  // The next value's type (whitespace skipped), kBad at the end or after an error.
  Type peek() {
    if (!ok_) return Type::kBad;
    ws();
    if (i_ >= s_.size()) return Type::kBad;
    const char c = s_[i_];
    if (c == '{') return Type::kObject;
    if (c == '[') return Type::kArray;
    if (c == '"') return Type::kString;
    if (c == '-' || (c >= '0' && c <= '9')) return Type::kNumber;
    if (c == 't' || c == 'f' || c == 'n') return Type::kLiteral;
    return Type::kBad;
  }
  bool enterObject();
  // The next member's key (raw: between the quotes, escapes as written),
  // its ':' read; false at the closing '}' (read) or on an error.
  bool nextMember(std::string_view& key);
  bool enterArray();
  // True when another item follows (its ',' read); false at ']' (read) or on an error.
  bool nextItem();
  // A string value: its raw text between the quotes.
  bool string(std::string_view& raw);
  // A number value as written.
  bool number(std::string_view& text);
  // true, false or null, as written.
  bool literal(std::string_view& text);
  // Any one value, checked as strictly as the rest.
  bool skip();
  // Only whitespace is left, and nothing failed.
  bool end();
  bool ok() const { return ok_; }
  // Where the next byte is read (after a call: just past what it read).
  std::size_t pos() const { return i_; }
  // The whole text.
  std::string_view text() const { return s_; }

  // A raw string's text, escapes decoded (the raw text needs none when it
  // has no backslash).
  static std::string decode(std::string_view raw);
  // A raw key or string equals `plain` (which has no character to escape).
  static bool keyIs(std::string_view raw, std::string_view plain);
  // A number's text as an unsigned integer: digits only, within 64 bits.
  static std::optional<std::uint64_t> unsignedValue(std::string_view number);
  // As a signed integer: an optional '-' and digits, within int64.
  static std::optional<std::int64_t> integerValue(std::string_view number);

 private:
  bool fail() {
    ok_ = false;
    return false;
  }
  void ws() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
      ++i_;
    }
  }
  bool scanString(std::string_view& raw);
  bool enter(Type container);
  // Past the ',' before the next entry: true; at `close` (read): false.
  bool nextEntry(char close);
  bool closeContainer(char close);

  std::string_view s_;
  std::size_t i_ = 0;
  int depth_ = 0;
  bool first_ = false;  // just inside a container: no ',' before its first entry
  bool ok_ = true;
};

}  // namespace fairsched::gateway
