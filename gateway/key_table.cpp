#include "gateway/key_table.hpp"

#include "gateway/sha256.hpp"

namespace fairsched::gateway {

KeyTable::KeyTable(const std::vector<ApiKeyConfig>& keys) {
  for (const ApiKeyConfig& k : keys) by_digest_.emplace(k.sha256, k);
}

const ApiKeyConfig* KeyTable::find(std::string_view presented_key) const {
  if (presented_key.empty()) return nullptr;
  const auto it = by_digest_.find(sha256Hex(presented_key));
  return it == by_digest_.end() ? nullptr : &it->second;
}

std::optional<std::string_view> bearerToken(std::string_view v) {
  constexpr std::string_view kScheme = "bearer";
  if (v.size() <= kScheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    const char c = v[i] >= 'A' && v[i] <= 'Z' ? static_cast<char>(v[i] - 'A' + 'a') : v[i];
    if (c != kScheme[i]) return std::nullopt;
  }
  v.remove_prefix(kScheme.size());
  if (v.front() != ' ' && v.front() != '\t') return std::nullopt;
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  if (v.empty()) return std::nullopt;
  return v;
}

}  // namespace fairsched::gateway
