// One table per config section: each row names a key once and says how to
// read it. readKeys() walks a TOML table with it, so the same rows drive the
// "unknown key (did you mean ...)" check and the reading; adding a key to a
// section is one row.
//
//   constexpr KeyRule<CpuExecutorConfig> kCpuKeys[] = {
//       {"per_batch_us", nonNegativeDoubleKey<&CpuExecutorConfig::per_batch_us>},
//       {"threads", intKey<&CpuExecutorConfig::threads, 1>},
//   };
//
// Rows are read in table order, whatever the order in the file, and reading
// stops at the first error: a row may depend on the rows above it (the
// metrics listen address on allow_non_loopback), and which error a file with
// several gets reported is fixed by the order. The order is also the
// tie-break between equally close did-you-mean suggestions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/parse_context.hpp"

namespace fairsched::config {

template <typename T>
struct KeyRule {
  // Reads into `out`; false after recording an error in `ctx`.
  using Step = bool (*)(ParseContext& ctx, const toml::node& node, const std::string& path, T& out);

  // The key; kTableCheck for a row that checks the table instead of reading a
  // key (it runs `read` with the table and the table's path at its place in
  // the order).
  std::string_view key;
  // The key is present: `node` is its value, `path` the key's dotted path.
  Step read = nullptr;
  // The key is absent: `node` is the table, `path` the key's dotted path.
  // nullptr keeps the default in `out`; requiredKey makes the key required.
  Step absent = nullptr;
};

inline constexpr std::string_view kTableCheck{};

// Reads every key of the table `table` by `rules`. An entry of the table that
// no rule names is an error.
// REQUIRES: `table` is a table (readTable() said so).
template <typename T>
bool readKeys(ParseContext& ctx, const toml::node& table, const std::string& path,
              std::span<const KeyRule<T>> rules, T& out) {
  const toml::table& t = *asTable(table);
  std::vector<std::string_view> known;
  known.reserve(rules.size());
  for (const KeyRule<T>& r : rules) {
    if (r.key != kTableCheck) known.push_back(r.key);
  }
  if (!ctx.checkKeys(t, path, known)) return false;
  for (const KeyRule<T>& r : rules) {
    if (r.key == kTableCheck) {
      if (!r.read(ctx, table, path, out)) return false;
    } else if (const toml::node* value = findKey(t, r.key)) {
      if (!r.read(ctx, *value, join(path, r.key), out)) return false;
    } else if (r.absent != nullptr) {
      if (!r.absent(ctx, table, join(path, r.key), out)) return false;
    }
  }
  return true;
}

template <typename T, std::size_t N>
bool readKeys(ParseContext& ctx, const toml::node& table, const std::string& path,
              const KeyRule<T> (&rules)[N], T& out) {
  return readKeys(ctx, table, path, std::span<const KeyRule<T>>(rules), out);
}

// readTable() and then readKeys().
template <typename T, std::size_t N>
bool readTableKeys(ParseContext& ctx, const toml::node& n, const std::string& path,
                   const KeyRule<T> (&rules)[N], T& out) {
  return ctx.readTable(n, path) != nullptr && readKeys(ctx, n, path, rules, out);
}

// --- rows for common kinds of key --------------------------------------------
// Each reads the value into the member `kMember` of the section's struct; a
// std::optional member gets a value.

namespace key_table_detail {
template <typename M>
struct Member;
template <typename C, typename V>
struct Member<V C::*> {
  using Class = C;
  using Value = V;
};
template <typename V>
struct Unwrap {
  using Type = V;
};
template <typename V>
struct Unwrap<std::optional<V>> {
  using Type = V;
};
}  // namespace key_table_detail

template <auto kMember>
using MemberClass = typename key_table_detail::Member<decltype(kMember)>::Class;
// The member's type, or T for a std::optional<T> member.
template <auto kMember>
using MemberValue = typename key_table_detail::Unwrap<
    typename key_table_detail::Member<decltype(kMember)>::Value>::Type;

template <typename T>
bool requiredKey(ParseContext& ctx, const toml::node& table, const std::string& path, T&) {
  return ctx.fail(table, path, "missing required key");
}

// An integer in [kMin, kMax]; kMax is clipped to what the member holds.
template <auto kMember, std::uint64_t kMin = 0,
          std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max()>
bool intKey(ParseContext& ctx, const toml::node& n, const std::string& path,
            MemberClass<kMember>& out) {
  MemberValue<kMember> v{};
  if (!ctx.readInt(n, path, kMin, v, kMax)) return false;
  out.*kMember = v;
  return true;
}

template <auto kMember>
bool positiveDoubleKey(ParseContext& ctx, const toml::node& n, const std::string& path,
                       MemberClass<kMember>& out) {
  double v = 0;
  if (!ctx.readPositiveDouble(n, path, v)) return false;
  out.*kMember = v;
  return true;
}

template <auto kMember>
bool nonNegativeDoubleKey(ParseContext& ctx, const toml::node& n, const std::string& path,
                          MemberClass<kMember>& out) {
  double v = 0;
  if (!ctx.readNonNegativeDouble(n, path, v)) return false;
  out.*kMember = v;
  return true;
}

template <auto kMember>
bool stringKey(ParseContext& ctx, const toml::node& n, const std::string& path,
               MemberClass<kMember>& out) {
  return ctx.readString(n, path, out.*kMember);
}

template <auto kMember>
bool boolKey(ParseContext& ctx, const toml::node& n, const std::string& path,
             MemberClass<kMember>& out) {
  return ctx.readBool(n, path, out.*kMember);
}

// One of `kNames` (an array of EnumName).
template <auto kMember, const auto& kNames>
bool enumKey(ParseContext& ctx, const toml::node& n, const std::string& path,
             MemberClass<kMember>& out) {
  MemberValue<kMember> v{};
  if (!ctx.readEnum(n, path, kNames, v)) return false;
  out.*kMember = v;
  return true;
}

// A sub-table read by its own rules `kRules` into the member.
template <auto kMember, const auto& kRules>
bool tableKey(ParseContext& ctx, const toml::node& n, const std::string& path,
              MemberClass<kMember>& out) {
  return readTableKeys(ctx, n, path, kRules, out.*kMember);
}

}  // namespace fairsched::config
