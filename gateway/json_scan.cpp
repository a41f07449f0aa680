#include "gateway/json_scan.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

namespace fairsched::gateway {

namespace {

bool isDigit(char c) {
  return c >= '0' && c <= '9';
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Four hex digits at s[i..i+4), or -1.
int hex4(std::string_view s, std::size_t i) {
  if (i + 4 > s.size()) return -1;
  int v = 0;
  for (std::size_t k = 0; k < 4; ++k) {
    const int h = hexValue(s[i + k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// The length of the well-formed UTF-8 sequence at s[i] (a lead byte of
// 0x80 or more), or 0 (RFC 3629's table: no overlong forms, no surrogates,
// nothing past U+10FFFF).
std::size_t utf8Length(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) -> unsigned {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u;
  };
  const auto cont = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return at(k) >= lo && at(k) <= hi;
  };
  const unsigned c = at(0);
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

// Characters a string may hold as they are with nothing to check: ASCII
// from 0x20, except '"' and '\\'.
constexpr auto kPlain = [] {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x80; ++c) t[c] = c != '"' && c != '\\';
  return t;
}();

void appendUtf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

bool JsonScan::enter(Type container) {
  if (peek() != container || depth_ >= kMaxDepth) return fail();
  ++i_;
  ++depth_;
  first_ = true;
  return true;
}

bool JsonScan::enterObject() {
  return enter(Type::kObject);
}
bool JsonScan::enterArray() {
  return enter(Type::kArray);
}

bool JsonScan::closeContainer(char close) {
  if (s_[i_] != close || depth_ == 0) return fail();
  ++i_;
  --depth_;
  first_ = false;  // the container was a value of the one around it
  return false;
}

bool JsonScan::nextEntry(char close) {
  if (!ok_) return false;
  ws();
  if (i_ >= s_.size()) return fail();
  if (s_[i_] == close) return closeContainer(close);
  if (!first_) {
    if (s_[i_] != ',') return fail();
    ++i_;
    ws();
  }
  first_ = false;
  return true;
}

bool JsonScan::nextMember(std::string_view& key) {
  if (!nextEntry('}')) return false;
  if (i_ >= s_.size() || s_[i_] != '"') return fail();
  ++i_;
  if (!scanString(key)) return false;
  ws();
  if (i_ >= s_.size() || s_[i_] != ':') return fail();
  ++i_;
  return true;
}

bool JsonScan::nextItem() {
  return nextEntry(']');
}

bool JsonScan::scanString(std::string_view& raw) {
  const std::size_t start = i_;
  const std::size_t n = s_.size();
  while (i_ < n) {
    // A run of characters that need no look: printable ASCII but '"' and '\\'.
    while (i_ < n && kPlain[static_cast<unsigned char>(s_[i_])]) ++i_;
    if (i_ >= n) break;
    const auto c = static_cast<unsigned char>(s_[i_]);
    if (c == '"') {
      raw = s_.substr(start, i_ - start);
      ++i_;
      return true;
    }
    if (c == '\\') {
      if (i_ + 1 >= n) return fail();
      const char e = s_[i_ + 1];
      if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
          e == 't') {
        i_ += 2;
        continue;
      }
      if (e != 'u') return fail();
      const int cp = hex4(s_, i_ + 2);
      if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return fail();  // a lone low surrogate
      i_ += 6;
      if (cp >= 0xD800 && cp <= 0xDBFF) {  // its low surrogate must follow
        if (i_ + 1 >= n || s_[i_] != '\\' || s_[i_ + 1] != 'u') return fail();
        const int lo = hex4(s_, i_ + 2);
        if (lo < 0xDC00 || lo > 0xDFFF) return fail();
        i_ += 6;
      }
      continue;
    }
    if (c < 0x20) return fail();
    if (c < 0x80) {
      ++i_;
      continue;
    }
    const std::size_t len = utf8Length(s_, i_);
    if (len == 0) return fail();
    i_ += len;
  }
  return fail();
}

bool JsonScan::string(std::string_view& raw) {
  if (peek() != Type::kString) return fail();
  ++i_;
  return scanString(raw);
}

bool JsonScan::number(std::string_view& text) {
  if (peek() != Type::kNumber) return fail();
  const std::size_t start = i_;
  const std::size_t n = s_.size();
  if (s_[i_] == '-') ++i_;
  if (i_ >= n) return fail();
  if (s_[i_] == '0') {
    ++i_;
  } else if (isDigit(s_[i_])) {
    while (i_ < n && isDigit(s_[i_])) ++i_;
  } else {
    return fail();
  }
  if (i_ < n && s_[i_] == '.') {
    ++i_;
    if (i_ >= n || !isDigit(s_[i_])) return fail();
    while (i_ < n && isDigit(s_[i_])) ++i_;
  }
  if (i_ < n && (s_[i_] == 'e' || s_[i_] == 'E')) {
    ++i_;
    if (i_ < n && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
    if (i_ >= n || !isDigit(s_[i_])) return fail();
    while (i_ < n && isDigit(s_[i_])) ++i_;
  }
  text = s_.substr(start, i_ - start);
  return true;
}

bool JsonScan::literal(std::string_view& text) {
  if (peek() != Type::kLiteral) return fail();
  const char c = s_[i_];
  const std::string_view word = c == 't' ? "true" : c == 'f' ? "false" : "null";
  if (s_.substr(i_, word.size()) != word) return fail();
  text = s_.substr(i_, word.size());
  i_ += word.size();
  return true;
}

bool JsonScan::skip() {
  std::string_view v;
  switch (peek()) {
    case Type::kObject:
      if (!enterObject()) return false;
      while (nextMember(v)) {
        if (!skip()) return false;
      }
      return ok_;
    case Type::kArray:
      if (!enterArray()) return false;
      while (nextItem()) {
        if (!skip()) return false;
      }
      return ok_;
    case Type::kString:
      return string(v);
    case Type::kNumber:
      return number(v);
    case Type::kLiteral:
      return literal(v);
    case Type::kBad:
      break;
  }
  return fail();
}

bool JsonScan::end() {
  if (!ok_) return false;
  ws();
  return i_ == s_.size() && depth_ == 0;
}

std::string JsonScan::decode(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (c != '\\' || i + 1 >= raw.size()) {
      out += c;
      continue;
    }
    const char e = raw[++i];
    switch (e) {
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        auto cp = static_cast<std::uint32_t>(std::max(0, hex4(raw, i + 1)));
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && i + 2 < raw.size() && raw[i + 1] == '\\' &&
            raw[i + 2] == 'u') {
          const int lo = hex4(raw, i + 3);
          if (lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (static_cast<std::uint32_t>(lo) - 0xDC00);
            i += 6;
          }
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        out += e;
        break;  // " \ /
    }
  }
  return out;
}

bool JsonScan::keyIs(std::string_view raw, std::string_view plain) {
  // Most keys that differ differ in their first character (an escape
  // there stands for something else).
  if (!raw.empty() && !plain.empty() && raw[0] != plain[0] && raw[0] != '\\') return false;
  // An escape is longer than what it stands for: a raw text as long as
  // `plain` matches only as is, a shorter one never.
  if (raw.size() <= plain.size()) return raw == plain;
  return raw.find('\\') != std::string_view::npos && decode(raw) == plain;
}

std::optional<std::uint64_t> JsonScan::unsignedValue(std::string_view number) {
  if (number.empty()) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : number) {
    if (!isDigit(c)) return std::nullopt;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

std::optional<std::int64_t> JsonScan::integerValue(std::string_view number) {
  const bool negative = !number.empty() && number.front() == '-';
  const std::optional<std::uint64_t> m = unsignedValue(negative ? number.substr(1) : number);
  if (!m) return std::nullopt;
  if (negative) {
    if (*m > std::uint64_t{INT64_MAX} + 1) return std::nullopt;
    return *m == std::uint64_t{INT64_MAX} + 1 ? INT64_MIN : -static_cast<std::int64_t>(*m);
  }
  if (*m > std::uint64_t{INT64_MAX}) return std::nullopt;
  return static_cast<std::int64_t>(*m);
}

}  // namespace fairsched::gateway
