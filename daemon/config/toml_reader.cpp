#include "daemon/config/toml_reader.hpp"

#include <toml++/toml.h>
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

static_assert(TOML_LIB_MAJOR == 3,
              "toml_reader.hpp forward-declares toml::v3; update it for this toml++");

namespace fairsched::config {

namespace {

bool isBareKey(std::string_view k) {
  if (k.empty()) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

std::size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

std::string quote(std::string_view s) {
  return "'" + escaped(s) + "'";
}

std::string formatDouble(double v) {
  std::array<char, 64> buf{};
  const auto res = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), res.ptr);
}

std::string join(std::string_view path, std::string_view key) {
  std::string k = isBareKey(key) ? std::string(key) : "\"" + escaped(key) + "\"";
  if (path.empty()) return k;
  return std::string(path) + "." + k;
}

std::string indexed(std::string_view path, std::size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

std::string_view closestKey(std::string_view key, std::span<const std::string_view> known) {
  std::string_view best;
  std::size_t bestDistance = 3;
  for (std::string_view k : known) {
    const std::size_t d = editDistance(key, k);
    if (d < bestDistance) {
      bestDistance = d;
      best = k;
    }
  }
  return best;
}

std::uint32_t lineOf(const toml::node& n) {
  return static_cast<std::uint32_t>(n.source().begin.line);
}

std::string_view typeName(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::none:
      return "nothing";
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
  }
  return "unknown";
}

const toml::table* asTable(const toml::node& n) {
  return n.as_table();
}

const std::string* asString(const toml::node& n) {
  const auto* s = n.as_string();
  return s == nullptr ? nullptr : &s->get();
}

bool isInteger(const toml::node& n) {
  return n.is_integer();
}

const toml::node* findKey(const toml::table& t, std::string_view key) {
  return t.get(key);
}

std::size_t entryCount(const toml::table& t) {
  return t.size();
}

std::vector<TomlEntry> entriesInFileOrder(const toml::table& t) {
  std::vector<std::pair<const toml::key*, const toml::node*>> sorted;
  sorted.reserve(t.size());
  for (const auto& [k, v] : t) sorted.emplace_back(&k, &v);
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.first->source().begin;
    const auto& pb = b.first->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  std::vector<TomlEntry> out;
  out.reserve(sorted.size());
  for (const auto& [k, v] : sorted) {
    out.push_back({k->str(), static_cast<std::uint32_t>(k->source().begin.line), v});
  }
  return out;
}

bool TomlReader::fail(std::uint32_t line, std::string key, std::string message) {
  if (!error_) error_ = ConfigError{std::string(source_), line, std::move(key), std::move(message)};
  return false;
}

bool TomlReader::fail(const toml::node& n, std::string key, std::string message) {
  return fail(lineOf(n), std::move(key), std::move(message));
}

bool TomlReader::wrongType(const toml::node& n, const std::string& path,
                           std::string_view expected) {
  return fail(n, path, "expected " + std::string(expected) + ", got " + std::string(typeName(n)));
}

bool TomlReader::wrongElementType(const toml::node& element, const std::string& path,
                                  std::string_view expected) {
  return fail(element, path,
              "expected " + std::string(expected) + ", got an element of type " +
                  std::string(typeName(element)));
}

bool TomlReader::checkKeys(const toml::table& t, std::string_view path,
                           std::span<const std::string_view> known) {
  for (const TomlEntry& e : entriesInFileOrder(t)) {
    if (std::find(known.begin(), known.end(), e.key) != known.end()) continue;
    std::string message = "unknown key";
    const std::string_view best = closestKey(e.key, known);
    if (!best.empty()) message += " (did you mean '" + std::string(best) + "'?)";
    return fail(e.key_line, join(path, e.key), std::move(message));
  }
  return true;
}

const toml::table* TomlReader::readTable(const toml::node& n, const std::string& path) {
  const auto* t = n.as_table();
  if (t == nullptr) wrongType(n, path, "table");
  return t;
}

bool TomlReader::readArray(const toml::node& n, const std::string& path, std::string_view expected,
                           std::vector<const toml::node*>& out) {
  const auto* arr = n.as_array();
  if (arr == nullptr) return wrongType(n, path, expected);
  out.clear();
  out.reserve(arr->size());
  for (const toml::node& el : *arr) out.push_back(&el);
  return true;
}

bool TomlReader::readString(const toml::node& n, const std::string& path, std::string& out) {
  const auto* v = n.as_string();
  if (v == nullptr) return wrongType(n, path, "string");
  out = v->get();
  return true;
}

bool TomlReader::readBool(const toml::node& n, const std::string& path, bool& out) {
  const auto* v = n.as_boolean();
  if (v == nullptr) return wrongType(n, path, "boolean");
  out = v->get();
  return true;
}

bool TomlReader::readIntInRange(const toml::node& n, const std::string& path, std::uint64_t min,
                                std::uint64_t max, std::uint64_t& out) {
  const auto* v = n.as_integer();
  if (v == nullptr) return wrongType(n, path, "integer");
  const std::int64_t raw = v->get();
  if (raw < 0 || static_cast<std::uint64_t>(raw) < min) {
    if (min == 0) return fail(n, path, "must not be negative, got " + std::to_string(raw));
    return fail(n, path,
                "must be at least " + std::to_string(min) + ", got " + std::to_string(raw));
  }
  if (static_cast<std::uint64_t>(raw) > max) {
    return fail(n, path, "must be at most " + std::to_string(max) + ", got " + std::to_string(raw));
  }
  out = static_cast<std::uint64_t>(raw);
  return true;
}

bool TomlReader::readDouble(const toml::node& n, const std::string& path, double& out) {
  if (const auto* f = n.as_floating_point()) {
    out = f->get();
  } else if (const auto* i = n.as_integer()) {
    out = static_cast<double>(i->get());
  } else {
    return wrongType(n, path, "float");
  }
  return true;
}

bool TomlReader::readPositiveDouble(const toml::node& n, const std::string& path, double& out) {
  double v = 0;
  if (!readDouble(n, path, v)) return false;
  if (!std::isfinite(v) || v <= 0.0) {
    return fail(n, path, "must be positive and finite, got " + formatDouble(v));
  }
  out = v;
  return true;
}

bool TomlReader::readNonNegativeDouble(const toml::node& n, const std::string& path, double& out) {
  double v = 0;
  if (!readDouble(n, path, v)) return false;
  if (!std::isfinite(v) || v < 0.0) {
    return fail(n, path, "must be non-negative and finite, got " + formatDouble(v));
  }
  out = v;
  return true;
}

bool TomlReader::readStringArray(const toml::node& n, const std::string& path,
                                 std::vector<StringAt>& out) {
  std::vector<const toml::node*> elements;
  if (!readArray(n, path, "array of strings", elements)) return false;
  out.clear();
  for (const toml::node* el : elements) {
    const auto* s = el->as_string();
    if (s == nullptr) return wrongElementType(*el, path, "array of strings");
    out.push_back({s->get(), lineOf(*el)});
  }
  return true;
}

std::optional<ConfigError> withTomlRoot(std::string_view text, std::string_view source_name,
                                        const std::function<void(const toml::table&)>& read) {
  try {
    toml::table root;
    try {
      root = toml::parse(text, source_name);
    } catch (const toml::parse_error& e) {
      return ConfigError{std::string(source_name),
                         static_cast<std::uint32_t>(e.source().begin.line), "",
                         std::string(e.description())};
    }
    read(root);
    return std::nullopt;
  } catch (const std::exception& e) {
    return ConfigError{std::string(source_name), 0, "", std::string("cannot parse: ") + e.what()};
  }
}

}  // namespace fairsched::config
