// Reading typed values out of a parsed toml++ document, for the config
// parser. A TomlReader records the first error as a ConfigError (file, line,
// key path, message); every read returns false once it failed, so callers
// write `if (!r.readX(...)) return false;` and the first error is the one
// reported. Messages quote user text with quote(), so they stay one printable
// line whatever the file holds.
//
// toml++ is only forward-declared here (it is heavy): toml_reader.cpp and
// parse_config.cpp include it, the section parsers see nodes only through
// this interface. Nodes and tables are borrowed from the document, which must
// outlive every pointer taken from it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/config.hpp"

// toml_reader.cpp checks that these match the toml++ it is built with.
namespace toml {
inline namespace v3 {
class node;
class table;
}  // namespace v3
}  // namespace toml

namespace fairsched::config {

// --- text for error messages and key paths -----------------------------------

// Control bytes as \xNN, so a message stays one printable line.
std::string escaped(std::string_view s);

// Parses `text` as TOML and hands the root table to `read`. A syntax error
// comes back as a ConfigError naming `source_name` and the line; an
// exception thrown by `read` as one naming the source.
std::optional<ConfigError> withTomlRoot(std::string_view text, std::string_view source_name,
                                        const std::function<void(const toml::table&)>& read);
// User text in an error message: 'text', escaped.
std::string quote(std::string_view s);
// The shortest text that reads back as `v`.
std::string formatDouble(double v);
// Dotted key path `path.key`; a key TOML would need to quote is quoted.
std::string join(std::string_view path, std::string_view key);
// `path[i]`, for the elements of an array of tables.
std::string indexed(std::string_view path, std::size_t i);
// The entry of `known` closest to `key` by edit distance, if one is at most 2
// edits away; among equally close ones, the first. Empty when none is.
std::string_view closestKey(std::string_view key, std::span<const std::string_view> known);

// --- the document ------------------------------------------------------------

// One entry of a table: its key, the line the key is on, and its value.
struct TomlEntry {
  std::string_view key;
  std::uint32_t key_line = 0;
  const toml::node* value = nullptr;
};

// A string element of an array, with its line.
struct StringAt {
  std::string text;
  std::uint32_t line = 0;
};

template <typename E>
struct EnumName {
  std::string_view name;
  E value;
};

std::uint32_t lineOf(const toml::node& n);
// "string", "integer", "table", ... for "expected X, got Y" messages.
std::string_view typeName(const toml::node& n);
// nullptr when `n` is not of that type; no error recorded.
const toml::table* asTable(const toml::node& n);
const std::string* asString(const toml::node& n);
bool isInteger(const toml::node& n);
// The value under `key`, or nullptr.
const toml::node* findKey(const toml::table& t, std::string_view key);
std::size_t entryCount(const toml::table& t);
// The entries in file order (toml++ iterates a table sorted by key).
std::vector<TomlEntry> entriesInFileOrder(const toml::table& t);

class TomlReader {
 public:
  // `source` names the document in errors (a path or "<string>"); it must
  // outlive the reader.
  explicit TomlReader(std::string_view source) : source_(source) {}

  // Records the error unless one is recorded already; always returns false,
  // so callers can `return fail(...)`.
  bool fail(std::uint32_t line, std::string key, std::string message);
  bool fail(const toml::node& n, std::string key, std::string message);
  // "expected <expected>, got <type of n>".
  bool wrongType(const toml::node& n, const std::string& path, std::string_view expected);
  // "expected <expected>, got an element of type <type of element>".
  bool wrongElementType(const toml::node& element, const std::string& path,
                        std::string_view expected);

  // The first error, if any was recorded.
  const std::optional<ConfigError>& error() const { return error_; }

  // Every key of `t` must be one of `known`; the first other one in file
  // order is the error, with a did-you-mean when one is close.
  bool checkKeys(const toml::table& t, std::string_view path,
                 std::span<const std::string_view> known);

  // nullptr (and the error recorded) when `n` is not a table.
  const toml::table* readTable(const toml::node& n, const std::string& path);
  // The elements of an array; `expected` names what was wanted in the
  // error when `n` is not an array.
  bool readArray(const toml::node& n, const std::string& path, std::string_view expected,
                 std::vector<const toml::node*>& out);

  // Each read leaves `out` unchanged on a type error.
  bool readString(const toml::node& n, const std::string& path, std::string& out);
  bool readBool(const toml::node& n, const std::string& path, bool& out);
  bool readIntInRange(const toml::node& n, const std::string& path, std::uint64_t min,
                      std::uint64_t max, std::uint64_t& out);
  // An integer in [min, max], max clipped to what T holds.
  template <typename T>
  bool readInt(const toml::node& n, const std::string& path, std::uint64_t min, T& out,
               std::uint64_t max = std::numeric_limits<std::uint64_t>::max());
  // A float; an integer is accepted too ("weight = 2").
  bool readDouble(const toml::node& n, const std::string& path, double& out);
  bool readPositiveDouble(const toml::node& n, const std::string& path, double& out);
  bool readNonNegativeDouble(const toml::node& n, const std::string& path, double& out);
  // A string that must be one of `names`.
  template <typename E, std::size_t N>
  bool readEnum(const toml::node& n, const std::string& path, const EnumName<E> (&names)[N],
                E& out);
  // An array of strings, each with its line; `out` is replaced.
  bool readStringArray(const toml::node& n, const std::string& path, std::vector<StringAt>& out);

 private:
  std::string_view source_;
  std::optional<ConfigError> error_;
};

template <typename T>
bool TomlReader::readInt(const toml::node& n, const std::string& path, std::uint64_t min, T& out,
                         std::uint64_t max) {
  std::uint64_t v = 0;
  if (!readIntInRange(n, path, min, std::min<std::uint64_t>(max, std::numeric_limits<T>::max()),
                      v)) {
    return false;
  }
  out = static_cast<T>(v);
  return true;
}

template <typename E, std::size_t N>
bool TomlReader::readEnum(const toml::node& n, const std::string& path,
                          const EnumName<E> (&names)[N], E& out) {
  std::string s;
  if (!readString(n, path, s)) return false;
  std::string expected;
  for (const EnumName<E>& e : names) {
    if (s == e.name) {
      out = e.value;
      return true;
    }
    if (!expected.empty()) expected += "|";
    expected += e.name;
  }
  return fail(n, path, "expected one of " + expected + ", got " + quote(s));
}

}  // namespace fairsched::config
