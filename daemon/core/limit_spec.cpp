#include "daemon/core/limit_spec.hpp"

#include <array>
#include <limits>
#include <optional>

namespace fairsched::core {
namespace {

constexpr TimeNs kNsPerMinute = 60 * kNsPerSec;
constexpr TimeNs kNsPerHour = 60 * kNsPerMinute;
constexpr TimeNs kNsPerDay = 24 * kNsPerHour;
constexpr TimeNs kNsPerMonth = 30 * kNsPerDay;

struct NamedWindow {
  std::string_view singular;
  TimeNs ns;
};
constexpr std::array<NamedWindow, 5> kNamedWindows{{
    {"month", kNsPerMonth},
    {"day", kNsPerDay},
    {"hour", kNsPerHour},
    {"minute", kNsPerMinute},
    {"second", kNsPerSec},
}};

struct SuffixWindow {
  char suffix;
  TimeNs ns;
};
// Largest first: toString spells a window in the largest unit that divides it.
constexpr std::array<SuffixWindow, 4> kSuffixWindows{{
    {'d', kNsPerDay},
    {'h', kNsPerHour},
    {'m', kNsPerMinute},
    {'s', kNsPerSec},
}};

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool isDigit(char c) {
  return c >= '0' && c <= '9';
}
bool isAlpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A cursor over the text; every helper leaves it after what it consumed.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text) {}

  void skipSpace() {
    while (pos_ < text_.size() && isSpace(text_[pos_])) ++pos_;
  }
  bool atEnd() const { return pos_ >= text_.size(); }
  char peek() const { return atEnd() ? '\0' : text_[pos_]; }
  void advance() { ++pos_; }
  std::string_view rest() const { return text_.substr(pos_); }

  // Consumes characters while `pred` holds and returns them.
  template <typename Pred>
  std::string_view takeWhile(Pred pred) {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && pred(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
};

// The next "word" for an error message: everything up to white space or '/'.
std::string_view nextWord(std::string_view s) {
  std::size_t n = 0;
  while (n < s.size() && !isSpace(s[n]) && s[n] != '/') ++n;
  return s.substr(0, n);
}

// Digits with '_' allowed only between two digits. Returns nullopt on a
// malformed digit string; sets `overflow` when the value exceeds uint64.
std::optional<std::uint64_t> parseDigits(std::string_view digits, bool& overflow) {
  overflow = false;
  if (digits.empty() || !isDigit(digits.front()) || !isDigit(digits.back())) return std::nullopt;
  std::uint64_t value = 0;
  char prev = '\0';
  for (char c : digits) {
    if (c == '_') {
      if (prev == '_') return std::nullopt;
      prev = c;
      continue;
    }
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
      overflow = true;
    } else {
      value = value * 10 + d;
    }
    prev = c;
  }
  return value;
}

LimitParseError err(std::string message) {
  return LimitParseError{std::move(message)};
}

fairsched::Result<TimeNs, LimitParseError> parseWindow(std::string_view word) {
  for (const auto& w : kNamedWindows) {
    if (word == w.singular) return w.ns;
    if (word.size() == w.singular.size() + 1 && word.substr(0, w.singular.size()) == w.singular &&
        word.back() == 's') {
      return w.ns;
    }
  }
  // "<N>s", "<N>m", "<N>h", "<N>d"
  if (word.size() >= 2 && isDigit(word.front())) {
    const char suffix = word.back();
    const std::string_view digits = word.substr(0, word.size() - 1);
    for (const auto& w : kSuffixWindows) {
      if (suffix != w.suffix) continue;
      bool overflow = false;
      const auto count = parseDigits(digits, overflow);
      if (!count) break;
      if (*count == 0) return err("window must be longer than zero");
      if (overflow ||
          *count > static_cast<std::uint64_t>(std::numeric_limits<TimeNs>::max() / w.ns)) {
        return err("window '" + std::string(word) + "' is too long");
      }
      return static_cast<TimeNs>(*count) * w.ns;
    }
  }
  return err("unknown unit '" + std::string(word) + "'");
}

}  // namespace

fairsched::Result<LimitSpec, LimitParseError> parseLimitSpec(std::string_view text) {
  Cursor cur(text);
  cur.skipSpace();
  if (cur.atEnd()) return err("empty limit; expected '<amount> <unit>/<window>'");

  // Amount: digits and '_', then an optional k/M/G multiplier.
  const std::string_view afterSpace = cur.rest();
  const std::string_view digits = cur.takeWhile([](char c) { return isDigit(c) || c == '_'; });
  if (digits.empty()) {
    return err("expected an amount, got '" + std::string(nextWord(afterSpace)) + "'");
  }
  bool overflow = false;
  const auto base = parseDigits(digits, overflow);
  if (!base) return err("invalid amount '" + std::string(digits) + "'");
  std::uint64_t multiplier = 1;
  switch (cur.peek()) {
    case 'k':
      multiplier = 1'000;
      cur.advance();
      break;
    case 'M':
      multiplier = 1'000'000;
      cur.advance();
      break;
    case 'G':
      multiplier = 1'000'000'000;
      cur.advance();
      break;
    default:
      break;
  }
  if (cur.peek() == '.' || cur.peek() == ',') {
    return err("invalid amount '" + std::string(nextWord(afterSpace)) + "': use a whole number");
  }
  if (overflow || *base > std::numeric_limits<std::uint64_t>::max() / multiplier) {
    const std::string_view amountText = afterSpace.substr(0, afterSpace.size() - cur.rest().size());
    return err("amount '" + std::string(amountText) + "' is too large");
  }
  const std::uint64_t amount = *base * multiplier;
  if (amount == 0) return err("amount must be positive");

  // Cost unit.
  cur.skipSpace();
  const std::string_view unitWord = cur.takeWhile([](char c) { return !isSpace(c) && c != '/'; });
  LimitSpec spec;
  spec.amount = amount;
  if (unitWord.empty()) return err("expected a unit (requests or tokens) after the amount");
  if (unitWord == "request" || unitWord == "requests") {
    spec.unit = LimitUnit::kRequests;
  } else if (unitWord == "token" || unitWord == "tokens") {
    spec.unit = LimitUnit::kTokens;
  } else {
    return err("unknown unit '" + std::string(unitWord) + "'");
  }

  cur.skipSpace();
  if (cur.peek() != '/') return err("missing '/' between the unit and the window");
  cur.advance();
  cur.skipSpace();

  const std::string_view windowWord =
      cur.takeWhile([](char c) { return isDigit(c) || isAlpha(c) || c == '_'; });
  if (windowWord.empty()) {
    if (cur.atEnd()) return err("missing window after '/'");
    return err("unknown unit '" + std::string(nextWord(cur.rest())) + "'");
  }
  auto window = parseWindow(windowWord);
  if (!window.ok()) return std::move(window).error();
  spec.window_ns = window.value();

  cur.skipSpace();
  if (!cur.atEnd()) return err("unexpected '" + std::string(cur.rest()) + "' after the window");
  return spec;
}

std::string toString(const LimitSpec& spec) {
  std::string out;
  if (spec.amount != 0 && spec.amount % 1'000'000'000 == 0) {
    out = std::to_string(spec.amount / 1'000'000'000) + "G";
  } else if (spec.amount != 0 && spec.amount % 1'000'000 == 0) {
    out = std::to_string(spec.amount / 1'000'000) + "M";
  } else {
    out = std::to_string(spec.amount);
  }
  const bool one = spec.amount == 1;
  out += spec.unit == LimitUnit::kRequests ? (one ? " request/" : " requests/")
                                           : (one ? " token/" : " tokens/");
  for (const auto& w : kNamedWindows) {
    if (spec.window_ns == w.ns) return out + std::string(w.singular);
  }
  for (const auto& w : kSuffixWindows) {
    if (spec.window_ns > 0 && spec.window_ns % w.ns == 0) {
      return out + std::to_string(spec.window_ns / w.ns) + w.suffix;
    }
  }
  // Not a whole number of seconds: never produced by parseLimitSpec, and not
  // parseable back; spelled out so a log still says what it is.
  return out + std::to_string(spec.window_ns) + "ns";
}

}  // namespace fairsched::core
