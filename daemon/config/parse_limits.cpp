#include "daemon/config/parse_limits.hpp"

#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <variant>

#include "daemon/config/key_table.hpp"

namespace fairsched::config {

namespace {

using core::LimitSpec;

constexpr std::string_view kUnlimited = "unlimited";

// Two limits in one list may not share a slot.
using SlotKey = std::pair<core::LimitUnit, TimeNs>;
SlotKey slotOf(const LimitSpec& s) {
  return {s.unit, s.window_ns};
}

// One element of a limit list, before its text is parsed.
struct LimitItem {
  std::string raw;
  std::uint32_t line = 0;
  core::LimitScope scope = core::LimitScope::kHost;
};

constexpr EnumName<core::LimitScope> kScopes[] = {{"host", core::LimitScope::kHost},
                                                  {"fleet", core::LimitScope::kFleet}};

bool readScope(ParseContext& ctx, const toml::node& n, const std::string& path, LimitItem& item) {
  if (!ctx.readEnum(n, path, kScopes, item.scope)) return false;
  if (item.scope == core::LimitScope::kFleet && !ctx.config().fleet) {
    return ctx.fail(n, path, "scope = \"fleet\" needs a [fleet] table (the shared backend)");
  }
  return true;
}

// The inline-table form of a list element: { limit = "...", scope = "..." }.
constexpr KeyRule<LimitItem> kLimitItemKeys[] = {
    {"limit", stringKey<&LimitItem::raw>, requiredKey},
    {"scope", readScope},
};

bool readLimitItems(ParseContext& ctx, const toml::node& n, const std::string& path,
                    std::vector<LimitItem>& out) {
  std::vector<const toml::node*> elements;
  if (!ctx.readArray(n, path, "array of strings", elements)) return false;
  for (const toml::node* el : elements) {
    if (const std::string* str = asString(*el)) {
      out.push_back({*str, lineOf(*el), core::LimitScope::kHost});
      continue;
    }
    if (asTable(*el) == nullptr) return ctx.wrongElementType(*el, path, "array of strings");
    LimitItem item;
    item.line = lineOf(*el);
    if (!readKeys(ctx, *el, path, kLimitItemKeys, item)) return false;
    out.push_back(std::move(item));
  }
  return true;
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

bool readLimitList(ParseContext& ctx, const toml::node& n, const std::string& path,
                   const std::vector<LimitSpec>& inherited, std::vector<LimitSpec>& out) {
  std::vector<LimitItem> items;
  if (!readLimitItems(ctx, n, path, items)) return false;
  out.clear();
  std::map<SlotKey, std::string> written;  // slot -> the text that set it, for duplicate messages
  bool removeAll = false;                  // a bare "unlimited" was given
  for (const auto& [raw, line, scope] : items) {
    const std::string_view text = trimmed(raw);
    LimitSpec spec;
    const bool unlimited = text.substr(0, kUnlimited.size()) == kUnlimited &&
                           (text.size() == kUnlimited.size() || text[kUnlimited.size()] == ' ' ||
                            text[kUnlimited.size()] == '\t');
    if (unlimited && text.size() == kUnlimited.size()) {
      if (removeAll) return ctx.fail(line, path, "duplicate limit 'unlimited'");
      removeAll = true;
      continue;
    }
    if (unlimited) {
      std::string_view rest = text.substr(kUnlimited.size());
      while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
      if (rest.empty() || (rest.front() >= '0' && rest.front() <= '9')) {
        return ctx.fail(line, path,
                        "expected 'unlimited' or 'unlimited <unit>/<window>', got " + quote(raw));
      }
      auto parsed = core::parseLimitSpec("1 " + std::string(rest));
      if (auto* e = parsed.errorOrNull()) return ctx.fail(line, path, e->message);
      spec = parsed.value();
      spec.amount = 0;
    } else {
      auto parsed = core::parseLimitSpec(text);
      if (auto* e = parsed.errorOrNull()) return ctx.fail(line, path, e->message);
      spec = parsed.value();
    }
    spec.scope = scope;
    const auto [it, inserted] = written.emplace(slotOf(spec), raw);
    if (!inserted) {
      return ctx.fail(line, path,
                      "duplicate limit: " + quote(raw) + " has the same unit and window as " +
                          quote(it->second));
    }
    out.push_back(spec);
  }
  if (removeAll) {
    for (const LimitSpec& inh : inherited) {
      if (!written.emplace(slotOf(inh), "").second) continue;
      LimitSpec removed = inh;
      removed.amount = 0;
      out.push_back(removed);
    }
  }
  return true;
}

bool readLimitTable(ParseContext& ctx, const toml::node& n, const std::string& path,
                    const InheritedLimits& inheritedFor, std::vector<EndpointLimits>& out) {
  const toml::table* t = ctx.readTable(n, path);
  if (t == nullptr) return false;
  for (const TomlEntry& e : entriesInFileOrder(*t)) {
    const std::string name(e.key);
    const std::string keyPath = join(path, name);
    const EndpointConfig* ep = ctx.findEndpoint(name);
    if (ep == nullptr) return ctx.fail(e.key_line, keyPath, "unknown endpoint " + quote(name));
    EndpointLimits el;
    el.endpoint = name;
    if (!readLimitList(ctx, *e.value, keyPath, inheritedFor(*ep), el.limits)) return false;
    out.push_back(std::move(el));
  }
  return true;
}

std::vector<LimitSpec> endpointAndTierLimits(const EndpointConfig& endpoint,
                                             const TierConfig& tier) {
  std::vector<LimitSpec> inherited = endpoint.limits;
  std::set<SlotKey> slots;
  for (const LimitSpec& s : inherited) slots.insert(slotOf(s));
  for (const EndpointLimits& el : tier.limits) {
    if (el.endpoint != endpoint.name) continue;
    for (const LimitSpec& s : el.limits) {
      if (slots.insert(slotOf(s)).second) inherited.push_back(s);
    }
  }
  return inherited;
}

}  // namespace fairsched::config
