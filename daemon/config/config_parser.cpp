// TOML → Config. toml++ throws on syntax errors; that exception is caught in
// parseConfig and turned into a ConfigError with its line. Everything after
// the syntax check is a walk over the document that stops at the first error.
#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <istream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "daemon/config/config.hpp"
#include "fairsched/name.hpp"

namespace fairsched::config {
namespace {

using core::LimitSpec;

// Durations are converted to TimeNs by the daemon; these caps keep that
// conversion from overflowing.
constexpr std::uint64_t kMaxSeconds = std::numeric_limits<TimeNs>::max() / kNsPerSec;
constexpr std::uint64_t kMaxMillis = std::numeric_limits<TimeNs>::max() / kNsPerMs;
constexpr std::uint64_t kMaxMicros = std::numeric_limits<TimeNs>::max() / kNsPerUs;
constexpr std::size_t kMaxIds = std::numeric_limits<std::uint16_t>::max();  // TierId, EndpointId
// Beyond this the bound on the number of series stops meaning anything.
constexpr std::uint64_t kMaxTenantSeries = 100000;

constexpr std::string_view kWildcard = "*";
constexpr std::string_view kUnlimited = "unlimited";

std::uint32_t lineOf(const toml::source_region& r) {
  return static_cast<std::uint32_t>(r.begin.line);
}
std::uint32_t lineOf(const toml::node& n) {
  return lineOf(n.source());
}

std::string_view typeName(toml::node_type t) {
  switch (t) {
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

// Control bytes as \xNN, so a message stays one printable line.
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

// User text in an error message.
std::string quote(std::string_view s) {
  return "'" + escaped(s) + "'";
}

std::string formatDouble(double v) {
  std::array<char, 64> buf{};
  const auto res = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), res.ptr);
}

bool isBareKey(std::string_view k) {
  if (k.empty()) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// Dotted key path; keys that TOML would need to quote are quoted.
std::string join(std::string_view path, std::string_view key) {
  std::string k = isBareKey(key) ? std::string(key) : "\"" + escaped(key) + "\"";
  if (path.empty()) return k;
  return std::string(path) + "." + k;
}

std::string indexed(std::string_view path, std::size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
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

// Table entries in file order (toml::table iterates sorted by key).
struct Entry {
  const toml::key* key;
  const toml::node* node;
};
std::vector<Entry> inFileOrder(const toml::table& t) {
  std::vector<Entry> out;
  out.reserve(t.size());
  for (const auto& [k, v] : t) out.push_back({&k, &v});
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    const auto& pa = a.key->source().begin;
    const auto& pb = b.key->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return out;
}

enum class Lookup : std::uint8_t { kFound, kNotFound, kFailed };

// getpwnam_r / getgrnam_r with a buffer that grows on ERANGE.
// Returns the id through `id`, or the errno through `err` on kFailed.
template <typename Record, typename Fn, typename IdOf>
Lookup lookupId(const std::string& name, Fn fn, IdOf idOf, int sysconfName, std::uint32_t& id,
                int& err) {
  long hint = sysconf(sysconfName);
  std::size_t size = hint > 0 ? static_cast<std::size_t>(hint) : 1024;
  for (;;) {
    std::vector<char> buf(size);
    Record rec{};
    Record* result = nullptr;
    const int rc = fn(name.c_str(), &rec, buf.data(), buf.size(), &result);
    if (rc == ERANGE && size < (1u << 24)) {
      size *= 2;
      continue;
    }
    if (rc != 0) {
      err = rc;
      return Lookup::kFailed;
    }
    if (result == nullptr) return Lookup::kNotFound;
    id = static_cast<std::uint32_t>(idOf(rec));
    return Lookup::kFound;
  }
}

Lookup lookupUser(const std::string& name, std::uint32_t& uid, int& err) {
  return lookupId<passwd>(
      name, getpwnam_r, [](const passwd& p) { return p.pw_uid; }, _SC_GETPW_R_SIZE_MAX, uid, err);
}

Lookup lookupGroup(const std::string& name, std::uint32_t& gid, int& err) {
  return lookupId<group>(
      name, getgrnam_r, [](const group& g) { return g.gr_gid; }, _SC_GETGR_R_SIZE_MAX, gid, err);
}

// Appends each value once, keeping first-seen order.
template <typename T>
class AppendOnce {
 public:
  explicit AppendOnce(std::vector<T>& out) : out_(out), seen_(out.begin(), out.end()) {}
  void add(const T& v) {
    if (seen_.insert(v).second) out_.push_back(v);
  }

 private:
  std::vector<T>& out_;
  std::set<T> seen_;
};

using SlotKey = std::pair<core::LimitUnit, TimeNs>;
SlotKey slotOf(const LimitSpec& s) {
  return {s.unit, s.window_ns};
}

template <typename E>
struct EnumName {
  std::string_view name;
  E value;
};

class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source) {}

  // REQUIRES: `root` is the whole parsed document.
  ConfigResult run(const toml::table& root) {
    if (!parseRoot(root)) return std::move(*error_);
    return std::move(cfg_);
  }

 private:
  // Records the first error; always returns false so callers can
  // `return fail(...)`.
  bool fail(std::uint32_t line, std::string key, std::string message) {
    if (!error_)
      error_ = ConfigError{std::string(source_), line, std::move(key), std::move(message)};
    return false;
  }
  bool fail(const toml::node& n, std::string key, std::string message) {
    return fail(lineOf(n), std::move(key), std::move(message));
  }
  bool wrongType(const toml::node& n, const std::string& path, std::string_view expected) {
    return fail(n, path,
                "expected " + std::string(expected) + ", got " + std::string(typeName(n.type())));
  }

  // Every key of `t` must be in `allowed`; the first unknown one (in file
  // order) is the error.
  bool checkKeys(const toml::table& t, std::string_view path,
                 std::initializer_list<std::string_view> allowed) {
    for (const Entry& e : inFileOrder(t)) {
      const std::string_view k = e.key->str();
      if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
      std::string message = "unknown key";
      std::string_view best;
      std::size_t bestDistance = 3;
      for (std::string_view a : allowed) {
        const std::size_t d = editDistance(k, a);
        if (d < bestDistance) {
          bestDistance = d;
          best = a;
        }
      }
      if (!best.empty()) message += " (did you mean '" + std::string(best) + "'?)";
      return fail(lineOf(e.key->source()), join(path, k), std::move(message));
    }
    return true;
  }

  bool readString(const toml::node& n, const std::string& path, std::string& out) {
    const auto* v = n.as_string();
    if (v == nullptr) return wrongType(n, path, "string");
    out = v->get();
    return true;
  }

  bool readBool(const toml::node& n, const std::string& path, bool& out) {
    const auto* v = n.as_boolean();
    if (v == nullptr) return wrongType(n, path, "boolean");
    out = v->get();
    return true;
  }

  bool readIntInRange(const toml::node& n, const std::string& path, std::uint64_t min,
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
      return fail(n, path,
                  "must be at most " + std::to_string(max) + ", got " + std::to_string(raw));
    }
    out = static_cast<std::uint64_t>(raw);
    return true;
  }

  template <typename T>
  bool readInt(const toml::node& n, const std::string& path, std::uint64_t min, T& out,
               std::uint64_t max = static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
    std::uint64_t v = 0;
    if (!readIntInRange(n, path, min, std::min<std::uint64_t>(max, std::numeric_limits<T>::max()),
                        v)) {
      return false;
    }
    out = static_cast<T>(v);
    return true;
  }

  // Floats; an integer is accepted too ("weight = 2").
  bool readDouble(const toml::node& n, const std::string& path, double& out) {
    if (const auto* f = n.as_floating_point()) {
      out = f->get();
    } else if (const auto* i = n.as_integer()) {
      out = static_cast<double>(i->get());
    } else {
      return wrongType(n, path, "float");
    }
    return true;
  }

  bool readPositiveDouble(const toml::node& n, const std::string& path, double& out) {
    if (!readDouble(n, path, out)) return false;
    if (!std::isfinite(out) || out <= 0.0) {
      return fail(n, path, "must be positive and finite, got " + formatDouble(out));
    }
    return true;
  }

  bool readNonNegativeDouble(const toml::node& n, const std::string& path, double& out) {
    if (!readDouble(n, path, out)) return false;
    if (!std::isfinite(out) || out < 0.0) {
      return fail(n, path, "must be non-negative and finite, got " + formatDouble(out));
    }
    return true;
  }

  template <typename E>
  bool readEnum(const toml::node& n, const std::string& path,
                std::initializer_list<EnumName<E>> names, E& out) {
    std::string s;
    if (!readString(n, path, s)) return false;
    std::string expected;
    for (const auto& e : names) {
      if (s == e.name) {
        out = e.value;
        return true;
      }
      if (!expected.empty()) expected += "|";
      expected += e.name;
    }
    return fail(n, path, "expected one of " + expected + ", got " + quote(s));
  }

  const toml::table* readTable(const toml::node& n, const std::string& path) {
    const auto* t = n.as_table();
    if (t == nullptr) wrongType(n, path, "table");
    return t;
  }

  // Names of tiers, endpoints, tenants and clients follow fairsched/name.hpp's
  // rule (they appear in logs, metrics and fairschedctl output), and "*"
  // means "every" in client rules.
  bool checkName(std::uint32_t line, const std::string& path, std::string_view name,
                 std::size_t max_bytes = kMaxNameBytes) {
    if (name == kWildcard) return fail(line, path, "'*' is reserved (it means 'every')");
    if (auto err = nameError(name, max_bytes)) return fail(line, path, *err);
    return true;
  }

  // Array of strings, each with its line.
  bool readStringArray(const toml::node& n, const std::string& path,
                       std::vector<std::pair<std::string, std::uint32_t>>& out) {
    const auto* arr = n.as_array();
    if (arr == nullptr) return wrongType(n, path, "array of strings");
    out.clear();
    for (const toml::node& el : *arr) {
      const auto* s = el.as_string();
      if (s == nullptr) {
        return fail(el, path,
                    "expected array of strings, got an element of type " +
                        std::string(typeName(el.type())));
      }
      out.emplace_back(s->get(), lineOf(el));
    }
    return true;
  }

  // --- limits --------------------------------------------------------------

  // One level's limit list for one endpoint. `inherited` are the limits of the
  // less specific levels; a bare "unlimited" removes every one of them by
  // adding an amount-0 entry for its slot. "unlimited <unit>/<window>" removes
  // one slot. Amount 0 never comes out of parseLimitSpec, so it can only mean
  // "no limit for this slot".
  struct LimitItem {
    std::string raw;
    std::uint32_t line = 0;
    core::LimitScope scope = core::LimitScope::kHost;
  };

  // A limit list's elements: strings, or inline tables
  // `{ limit = "<limit>", scope = "host" | "fleet" }`.
  bool readLimitItems(const toml::node& n, const std::string& path, std::vector<LimitItem>& out) {
    const auto* arr = n.as_array();
    if (arr == nullptr) return wrongType(n, path, "array of strings");
    for (const toml::node& el : *arr) {
      if (const auto* str = el.as_string()) {
        out.push_back({str->get(), lineOf(el), core::LimitScope::kHost});
        continue;
      }
      const auto* t = el.as_table();
      if (t == nullptr) {
        return fail(el, path,
                    "expected array of strings, got an element of type " +
                        std::string(typeName(el.type())));
      }
      if (!checkKeys(*t, path, {"limit", "scope"})) return false;
      LimitItem item;
      item.line = lineOf(el);
      const auto* limit = t->get("limit");
      if (limit == nullptr) return fail(el, join(path, "limit"), "missing required key");
      if (!readString(*limit, join(path, "limit"), item.raw)) return false;
      if (const auto* scope = t->get("scope")) {
        if (!readEnum<core::LimitScope>(
                *scope, join(path, "scope"),
                {{"host", core::LimitScope::kHost}, {"fleet", core::LimitScope::kFleet}},
                item.scope)) {
          return false;
        }
        if (item.scope == core::LimitScope::kFleet && !cfg_.fleet) {
          return fail(*scope, join(path, "scope"),
                      "scope = \"fleet\" needs a [fleet] table (the shared backend)");
        }
      }
      out.push_back(std::move(item));
    }
    return true;
  }

  bool readLimitList(const toml::node& n, const std::string& path,
                     const std::vector<LimitSpec>& inherited, std::vector<LimitSpec>& out) {
    std::vector<LimitItem> items;
    if (!readLimitItems(n, path, items)) return false;
    out.clear();
    std::map<SlotKey, std::string> written;  // slot -> the text that set it, for duplicate messages
    bool removeAll = false;                  // a bare "unlimited" was given
    for (const auto& [raw, line, scope] : items) {
      std::string_view text = raw;
      while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
      while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
      LimitSpec spec;
      const bool unlimited = text.substr(0, kUnlimited.size()) == kUnlimited &&
                             (text.size() == kUnlimited.size() || text[kUnlimited.size()] == ' ' ||
                              text[kUnlimited.size()] == '\t');
      if (unlimited && text.size() == kUnlimited.size()) {
        if (removeAll) return fail(line, path, "duplicate limit 'unlimited'");
        removeAll = true;
        continue;
      }
      if (unlimited) {
        std::string_view rest = text.substr(kUnlimited.size());
        while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
          rest.remove_prefix(1);
        if (rest.empty() || (rest.front() >= '0' && rest.front() <= '9')) {
          return fail(line, path,
                      "expected 'unlimited' or 'unlimited <unit>/<window>', got " + quote(raw));
        }
        auto parsed = core::parseLimitSpec("1 " + std::string(rest));
        if (auto* e = std::get_if<core::LimitParseError>(&parsed))
          return fail(line, path, e->message);
        spec = std::get<LimitSpec>(parsed);
        spec.amount = 0;
      } else {
        auto parsed = core::parseLimitSpec(text);
        if (auto* e = std::get_if<core::LimitParseError>(&parsed))
          return fail(line, path, e->message);
        spec = std::get<LimitSpec>(parsed);
      }
      spec.scope = scope;
      const auto [it, inserted] = written.emplace(slotOf(spec), raw);
      if (!inserted) {
        return fail(line, path,
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

  // A `limits` table keyed by endpoint name. `inheritedFor` gives the limits
  // of the less specific levels for an endpoint.
  template <typename InheritedFor>
  bool readLimitTable(const toml::node& n, const std::string& path, InheritedFor inheritedFor,
                      std::vector<EndpointLimits>& out) {
    const toml::table* t = readTable(n, path);
    if (t == nullptr) return false;
    for (const Entry& e : inFileOrder(*t)) {
      const std::string name(e.key->str());
      const std::string keyPath = join(path, name);
      const EndpointConfig* ep = findEndpoint(name);
      if (ep == nullptr)
        return fail(lineOf(e.key->source()), keyPath, "unknown endpoint " + quote(name));
      EndpointLimits el;
      el.endpoint = name;
      if (!readLimitList(*e.node, keyPath, inheritedFor(*ep), el.limits)) return false;
      out.push_back(std::move(el));
    }
    return true;
  }

  // --- sections --------------------------------------------------------------

  bool parseRoot(const toml::table& root) {
    if (!checkKeys(
            root, "",
            {"default_tier", "daemon", "metrics", "fleet", "tiers", "endpoints", "tenants",
             "clients"})) {
      return false;
    }
    if (const auto* n = root.get("daemon")) {
      const toml::table* t = readTable(*n, "daemon");
      if (t == nullptr || !parseDaemon(*t)) return false;
    }
    if (const auto* n = root.get("metrics")) {
      const toml::table* t = readTable(*n, "metrics");
      if (t == nullptr || !parseMetrics(*t)) return false;
    }
    // [fleet] before every limit list: a fleet-scoped limit needs it.
    if (const auto* n = root.get("fleet")) {
      const toml::table* t = readTable(*n, "fleet");
      if (t == nullptr || !parseFleet(*t)) return false;
    }
    // Endpoints before tiers and tenants: their limit tables name endpoints.
    const toml::node* endpoints = root.get("endpoints");
    if (endpoints == nullptr) return fail(0, "endpoints", "at least one endpoint is required");
    if (!parseEndpoints(*endpoints)) return false;
    const toml::node* tiers = root.get("tiers");
    if (tiers == nullptr) return fail(0, "tiers", "at least one tier is required");
    if (!parseTiers(*tiers)) return false;
    if (const auto* n = root.get("default_tier")) {
      if (!readString(*n, "default_tier", cfg_.default_tier)) return false;
      if (findTier(cfg_.default_tier) == nullptr) {
        return fail(*n, "default_tier", "unknown tier " + quote(cfg_.default_tier));
      }
    } else {
      cfg_.default_tier = cfg_.tiers.back().name;
    }
    if (const auto* n = root.get("tenants")) {
      if (!parseTenants(*n)) return false;
    }
    if (const auto* n = root.get("clients")) {
      if (!parseClients(*n)) return false;
    }
    return true;
  }

  bool parseDaemon(const toml::table& t) {
    if (!checkKeys(t, "daemon",
                   {"socket", "socket_mode", "socket_group", "log_level", "policy",
                    "tenant_idle_timeout_s", "shutdown_grace_ms"})) {
      return false;
    }
    DaemonConfig& d = cfg_.daemon;
    if (const auto* n = t.get("socket")) {
      if (!readString(*n, "daemon.socket", d.socket)) return false;
      if (d.socket.empty()) return fail(*n, "daemon.socket", "must not be empty");
      // sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
      if (d.socket.size() > 107) {
        return fail(*n, "daemon.socket",
                    "path is " + std::to_string(d.socket.size()) +
                        " bytes; a unix socket path holds at most 107");
      }
      if (d.socket.find('\0') != std::string::npos) {
        return fail(*n, "daemon.socket", "path must not contain a NUL byte");
      }
    }
    if (const auto* n = t.get("socket_mode")) {
      if (n->as_string() == nullptr) {
        return fail(*n, "daemon.socket_mode",
                    "expected string, got " + std::string(typeName(n->type())) +
                        " (write the mode as octal digits in quotes, e.g. \"0660\")");
      }
      const std::string& s = n->as_string()->get();
      const bool octal = !s.empty() && s.size() <= 4 && std::all_of(s.begin(), s.end(), [](char c) {
        return c >= '0' && c <= '7';
      });
      if (!octal) {
        return fail(*n, "daemon.socket_mode",
                    "expected octal digits like \"0660\", got " + quote(s));
      }
      d.socket_mode = 0;
      for (char c : s) d.socket_mode = d.socket_mode * 8 + static_cast<std::uint32_t>(c - '0');
    }
    if (const auto* n = t.get("socket_group")) {
      if (!readString(*n, "daemon.socket_group", d.socket_group)) return false;
    }
    if (const auto* n = t.get("log_level")) {
      if (!readString(*n, "daemon.log_level", d.log_level)) return false;
      static constexpr std::array<std::string_view, 7> kLevels{"trace", "debug",    "info", "warn",
                                                               "error", "critical", "off"};
      if (std::find(kLevels.begin(), kLevels.end(), d.log_level) == kLevels.end()) {
        return fail(
            *n, "daemon.log_level",
            "expected one of trace|debug|info|warn|error|critical|off, got " + quote(d.log_level));
      }
    }
    if (const auto* n = t.get("policy")) {
      if (!readEnum<Policy>(*n, "daemon.policy", {{"fair", Policy::kFair}, {"fifo", Policy::kFifo}},
                            d.policy)) {
        return false;
      }
    }
    if (const auto* n = t.get("tenant_idle_timeout_s")) {
      if (!readInt(*n, "daemon.tenant_idle_timeout_s", 0, d.tenant_idle_timeout_s, kMaxSeconds))
        return false;
    }
    if (const auto* n = t.get("shutdown_grace_ms")) {
      if (!readInt(*n, "daemon.shutdown_grace_ms", 0, d.shutdown_grace_ms, kMaxMillis))
        return false;
    }
    return true;
  }

  bool parseMetrics(const toml::table& t) {
    if (!checkKeys(t, "metrics", {"listen", "max_tenant_series", "allow_non_loopback"}))
      return false;
    MetricsConfig& m = cfg_.metrics;
    if (const auto* n = t.get("max_tenant_series")) {
      if (!readInt(*n, "metrics.max_tenant_series", 0, m.max_tenant_series, kMaxTenantSeries))
        return false;
    }
    // Read before `listen`, whose check depends on it wherever it is written.
    if (const auto* n = t.get("allow_non_loopback")) {
      if (!readBool(*n, "metrics.allow_non_loopback", m.allow_non_loopback)) return false;
    }
    if (const auto* n = t.get("listen")) {
      if (!readString(*n, "metrics.listen", m.listen)) return false;
      if (!m.listen.empty() && !checkListen(*n, m.listen, m.allow_non_loopback)) return false;
    }
    return true;
  }

  // "IPV4:PORT", "[IPV6]:PORT" or "localhost:PORT"; no other host names, so
  // what the endpoint binds never depends on a resolver.
  bool checkListen(const toml::node& n, const std::string& listen, bool allow_non_loopback) {
    static constexpr std::string_view kKey = "metrics.listen";
    const std::string expected =
        "expected HOST:PORT with an IP address or localhost (e.g. \"127.0.0.1:9464\" or "
        "\"[::1]:9464\"), got " +
        quote(listen);
    const std::size_t colon = listen.rfind(':');
    if (colon == std::string::npos || colon == 0) return fail(n, std::string(kKey), expected);
    std::string host = listen.substr(0, colon);
    const std::string port = listen.substr(colon + 1);
    bool v6 = false;
    if (host.front() == '[') {
      if (host.size() < 3 || host.back() != ']') return fail(n, std::string(kKey), expected);
      host = host.substr(1, host.size() - 2);
      v6 = true;
    }
    std::uint32_t portValue = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), portValue);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() ||
        portValue > 65535) {
      return fail(n, std::string(kKey),
                  "port must be a number from 0 to 65535, got " + quote(port));
    }
    bool loopback = false;
    if (!v6 && host == "localhost") {
      loopback = true;
    } else if (in_addr a4{}; !v6 && inet_pton(AF_INET, host.c_str(), &a4) == 1) {
      loopback = (ntohl(a4.s_addr) >> 24) == 127;
    } else if (in6_addr a6{}; v6 && inet_pton(AF_INET6, host.c_str(), &a6) == 1) {
      loopback = IN6_IS_ADDR_LOOPBACK(&a6);
    } else {
      return fail(n, std::string(kKey), expected);
    }
    if (!loopback && !allow_non_loopback) {
      return fail(n, std::string(kKey),
                  quote(host) +
                      " is not a loopback address; the metrics name every tenant, so set "
                      "metrics.allow_non_loopback = true to serve them beyond this host");
    }
    return true;
  }

  bool parseFleet(const toml::table& t) {
    if (!checkKeys(t, "fleet",
                   {"backend", "url", "connect_timeout_ms", "command_timeout_ms", "lease", "hosts",
                    "on_backend_error", "key_prefix"})) {
      return false;
    }
    FleetConfig f;
    f.source_line = lineOf(t);
    if (const auto* n = t.get("backend")) {
      std::string backend;
      if (!readString(*n, "fleet.backend", backend)) return false;
      if (backend != "redis") {
        return fail(*n, "fleet.backend", "expected one of redis, got " + quote(backend));
      }
    }
    const auto* url = t.get("url");
    if (url == nullptr) return fail(t, "fleet.url", "missing required key");
    if (!readString(*url, "fleet.url", f.url)) return false;
    if (!parseBackendUrl(*url, f)) return false;
    if (const auto* n = t.get("connect_timeout_ms")) {
      if (!readInt(*n, "fleet.connect_timeout_ms", 1, f.connect_timeout_ms, 60'000)) return false;
    }
    if (const auto* n = t.get("command_timeout_ms")) {
      if (!readInt(*n, "fleet.command_timeout_ms", 1, f.command_timeout_ms, 60'000)) return false;
    }
    if (const auto* n = t.get("lease")) {
      if (const auto* str = n->as_string()) {
        if (str->get() != "auto") {
          return fail(*n, "fleet.lease",
                      "expected a positive integer or \"auto\", got " + quote(str->get()));
        }
      } else if (n->is_integer()) {
        if (!readInt(*n, "fleet.lease", 1, f.lease)) return false;
      } else {
        return wrongType(*n, "fleet.lease", "integer or \"auto\"");
      }
    }
    if (const auto* n = t.get("hosts")) {
      if (!readInt(*n, "fleet.hosts", 1, f.hosts, 100'000)) return false;
    }
    if (const auto* n = t.get("on_backend_error")) {
      if (!readEnum<FleetErrorPolicy>(*n, "fleet.on_backend_error",
                                      {{"fail_open", FleetErrorPolicy::kFailOpen},
                                       {"fail_closed", FleetErrorPolicy::kFailClosed},
                                       {"local_share", FleetErrorPolicy::kLocalShare}},
                                      f.on_backend_error)) {
        return false;
      }
    }
    if (const auto* n = t.get("key_prefix")) {
      if (!readString(*n, "fleet.key_prefix", f.key_prefix)) return false;
      const bool ok = std::all_of(f.key_prefix.begin(), f.key_prefix.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u > 0x20 && u != 0x7f && c != '{' && c != '}';
      });
      if (!ok) {
        return fail(*n, "fleet.key_prefix",
                    "must not contain white space, control characters, '{' or '}', got " +
                        quote(f.key_prefix));
      }
    }
    cfg_.fleet = std::move(f);
    return true;
  }

  // redis://host[:port] or unix:///absolute/path.
  bool parseBackendUrl(const toml::node& n, FleetConfig& f) {
    constexpr std::string_view kTcp = "redis://";
    constexpr std::string_view kUnix = "unix://";
    const std::string_view url = f.url;
    if (url.substr(0, kUnix.size()) == kUnix) {
      f.unix_path = std::string(url.substr(kUnix.size()));
      if (f.unix_path.empty() || f.unix_path.front() != '/') {
        return fail(n, "fleet.url", "expected unix:///absolute/path, got " + quote(url));
      }
      if (f.unix_path.size() > 107) {
        return fail(n, "fleet.url", "a unix socket path holds at most 107 bytes");
      }
      return true;
    }
    if (url.substr(0, kTcp.size()) != kTcp) {
      return fail(n, "fleet.url", "expected redis://host:port or unix:///path, got " + quote(url));
    }
    std::string_view rest = url.substr(kTcp.size());
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    std::string_view hostPart = rest;
    if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
      hostPart = rest.substr(0, colon);
      const std::string_view portText = rest.substr(colon + 1);
      unsigned port = 0;
      const auto [end, ec] =
          std::from_chars(portText.data(), portText.data() + portText.size(), port);
      if (ec != std::errc() || end != portText.data() + portText.size() || port == 0 ||
          port > 65535) {
        return fail(n, "fleet.url", "invalid port " + quote(portText) + " in " + quote(url));
      }
      f.port = static_cast<std::uint16_t>(port);
    }
    if (hostPart.empty() || hostPart.find_first_of("/@ ") != std::string_view::npos) {
      return fail(n, "fleet.url", "expected redis://host:port, got " + quote(url));
    }
    f.host = std::string(hostPart);
    return true;
  }

  bool parseEndpoints(const toml::node& n) {
    const toml::table* t = readTable(n, "endpoints");
    if (t == nullptr) return false;
    if (t->empty()) return fail(n, "endpoints", "at least one endpoint is required");
    if (t->size() > kMaxIds) {
      return fail(n, "endpoints",
                  "at most " + std::to_string(kMaxIds) + " endpoints are supported");
    }
    for (const Entry& e : inFileOrder(*t)) {
      const std::string name(e.key->str());
      const std::string path = join("endpoints", name);
      if (!checkName(lineOf(e.key->source()), path, name, kMaxEndpointNameBytes)) return false;
      const toml::table* et = readTable(*e.node, path);
      if (et == nullptr) return false;
      EndpointConfig ep;
      ep.name = name;
      ep.source_line = lineOf(*et);
      if (!parseEndpoint(*et, path, ep)) return false;
      endpointIndex_.emplace(ep.name, cfg_.endpoints.size());
      cfg_.endpoints.push_back(std::move(ep));
    }
    return true;
  }

  bool parseEndpoint(const toml::table& t, const std::string& path, EndpointConfig& ep) {
    if (!checkKeys(t, path,
                   {"kind", "cost", "quantum", "max_batch_requests", "max_batch_tokens",
                    "max_wait_us", "max_output_tokens", "latency_target_ms", "batch_timeout_ms",
                    "executor", "limits", "cpu", "cuda"})) {
      return false;
    }
    if (const auto* n = t.get("kind")) {
      if (!readEnum<EndpointKind>(
              *n, join(path, "kind"),
              {{"streaming", EndpointKind::kStreaming}, {"batch", EndpointKind::kBatch}},
              ep.kind)) {
        return false;
      }
    }
    if (const auto* n = t.get("cost")) {
      if (!readEnum<CostModel>(*n, join(path, "cost"),
                               {{"requests", CostModel::kRequests},
                                {"tokens", CostModel::kTokens},
                                {"adaptive", CostModel::kAdaptive}},
                               ep.cost)) {
        return false;
      }
    }
    if (const auto* n = t.get("quantum")) {
      if (!readInt(*n, join(path, "quantum"), 1, ep.quantum)) return false;
    }
    if (const auto* n = t.get("max_batch_requests")) {
      if (!readInt(*n, join(path, "max_batch_requests"), 1, ep.max_batch_requests)) return false;
    }
    if (const auto* n = t.get("max_batch_tokens")) {
      if (!readInt(*n, join(path, "max_batch_tokens"), 1, ep.max_batch_tokens)) return false;
    }
    if (const auto* n = t.get("max_wait_us")) {
      if (!readInt(*n, join(path, "max_wait_us"), 0, ep.max_wait_us, kMaxMicros)) return false;
    }
    if (const auto* n = t.get("max_output_tokens")) {
      if (!readInt(*n, join(path, "max_output_tokens"), 0, ep.max_output_tokens)) return false;
    }
    if (const auto* n = t.get("latency_target_ms")) {
      if (!readInt(*n, join(path, "latency_target_ms"), 0, ep.latency_target_ms, kMaxMillis))
        return false;
    }
    if (const auto* n = t.get("batch_timeout_ms")) {
      if (!readInt(*n, join(path, "batch_timeout_ms"), 0, ep.batch_timeout_ms, kMaxMillis))
        return false;
    }
    if (const auto* n = t.get("executor")) {
      if (!readEnum<ExecutorKind>(*n, join(path, "executor"),
                                  {{"cpu", ExecutorKind::kCpu}, {"cuda", ExecutorKind::kCuda}},
                                  ep.executor)) {
        return false;
      }
    }
    if (const auto* n = t.get("limits")) {
      if (!readLimitList(*n, join(path, "limits"), {}, ep.limits)) return false;
    }
    if (const auto* n = t.get("cpu")) {
      const std::string cpuPath = join(path, "cpu");
      const toml::table* ct = readTable(*n, cpuPath);
      if (ct == nullptr || !checkKeys(*ct, cpuPath, {"per_batch_us", "per_token_us", "threads"}))
        return false;
      if (const auto* v = ct->get("per_batch_us")) {
        if (!readNonNegativeDouble(*v, join(cpuPath, "per_batch_us"), ep.cpu.per_batch_us))
          return false;
      }
      if (const auto* v = ct->get("per_token_us")) {
        if (!readNonNegativeDouble(*v, join(cpuPath, "per_token_us"), ep.cpu.per_token_us))
          return false;
      }
      if (const auto* v = ct->get("threads")) {
        if (!readInt(*v, join(cpuPath, "threads"), 1, ep.cpu.threads)) return false;
      }
    }
    if (const auto* n = t.get("cuda")) {
      const std::string cudaPath = join(path, "cuda");
      const toml::table* ct = readTable(*n, cudaPath);
      if (ct == nullptr ||
          !checkKeys(*ct, cudaPath, {"device", "streams", "staging_bytes", "fallback"})) {
        return false;
      }
      if (const auto* v = ct->get("device")) {
        if (!readInt(*v, join(cudaPath, "device"), 0, ep.cuda.device)) return false;
      }
      if (const auto* v = ct->get("streams")) {
        if (!readInt(*v, join(cudaPath, "streams"), 1, ep.cuda.streams)) return false;
      }
      if (const auto* v = ct->get("staging_bytes")) {
        if (!readInt(*v, join(cudaPath, "staging_bytes"), 1, ep.cuda.staging_bytes)) return false;
      }
      if (const auto* v = ct->get("fallback")) {
        ExecutorKind fallback = ExecutorKind::kCpu;
        if (!readEnum<ExecutorKind>(*v, join(cudaPath, "fallback"), {{"cpu", ExecutorKind::kCpu}},
                                    fallback)) {
          return false;
        }
        ep.cuda.fallback = fallback;
      }
    }
    return true;
  }

  bool parseTiers(const toml::node& n) {
    const auto* arr = n.as_array();
    if (arr == nullptr) {
      return wrongType(n, "tiers", "array of tables (write each tier as [[tiers]])");
    }
    if (arr->empty()) return fail(n, "tiers", "at least one tier is required");
    if (arr->size() > kMaxIds) {
      return fail(n, "tiers", "at most " + std::to_string(kMaxIds) + " tiers are supported");
    }
    double minShareSum = 0.0;
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const toml::node& el = *arr->get(i);
      const std::string path = indexed("tiers", i);
      const toml::table* t = readTable(el, path);
      if (t == nullptr) return false;
      if (!checkKeys(*t, path,
                     {"name", "min_share", "default_weight", "default_queue_limit",
                      "max_batch_tokens", "limits"})) {
        return false;
      }
      TierConfig tier;
      tier.source_line = lineOf(*t);
      const auto* nameNode = t->get("name");
      if (nameNode == nullptr) return fail(*t, join(path, "name"), "missing required key");
      if (!readString(*nameNode, join(path, "name"), tier.name)) return false;
      if (!checkName(lineOf(*nameNode), join(path, "name"), tier.name)) return false;
      if (findTier(tier.name) != nullptr) {
        return fail(*nameNode, join(path, "name"), "duplicate tier name " + quote(tier.name));
      }
      if (const auto* v = t->get("min_share")) {
        if (!readDouble(*v, join(path, "min_share"), tier.min_share)) return false;
        if (!(tier.min_share >= 0.0 && tier.min_share < 1.0)) {
          return fail(*v, join(path, "min_share"),
                      "must be in [0, 1), got " + formatDouble(tier.min_share));
        }
        minShareSum += tier.min_share;
        if (minShareSum >= 1.0) {
          return fail(*v, join(path, "min_share"),
                      "the min_share of all tiers must add up to less than 1, got " +
                          formatDouble(minShareSum));
        }
      }
      if (const auto* v = t->get("default_weight")) {
        if (!readPositiveDouble(*v, join(path, "default_weight"), tier.default_weight))
          return false;
      }
      if (const auto* v = t->get("default_queue_limit")) {
        if (!readInt(*v, join(path, "default_queue_limit"), 1, tier.default_queue_limit))
          return false;
      }
      if (const auto* v = t->get("max_batch_tokens")) {
        if (!readInt(*v, join(path, "max_batch_tokens"), 0, tier.max_batch_tokens)) return false;
      }
      if (const auto* v = t->get("limits")) {
        if (!readLimitTable(
                *v, join(path, "limits"), [](const EndpointConfig& ep) { return ep.limits; },
                tier.limits)) {
          return false;
        }
      }
      tierIndex_.emplace(tier.name, cfg_.tiers.size());
      cfg_.tiers.push_back(std::move(tier));
    }
    return true;
  }

  bool parseTenants(const toml::node& n) {
    const toml::table* t = readTable(n, "tenants");
    if (t == nullptr) return false;
    for (const Entry& e : inFileOrder(*t)) {
      const std::string name(e.key->str());
      const std::string path = join("tenants", name);
      if (!checkName(lineOf(e.key->source()), path, name)) return false;
      const toml::table* tt = readTable(*e.node, path);
      if (tt == nullptr) return false;
      if (!checkKeys(*tt, path, {"tier", "weight", "queue_limit", "limits"})) return false;
      TenantConfig tenant;
      tenant.name = name;
      tenant.source_line = lineOf(*tt);
      tenant.tier = cfg_.default_tier;
      if (const auto* v = tt->get("tier")) {
        if (!readString(*v, join(path, "tier"), tenant.tier)) return false;
        if (findTier(tenant.tier) == nullptr) {
          return fail(*v, join(path, "tier"), "unknown tier " + quote(tenant.tier));
        }
      }
      if (const auto* v = tt->get("weight")) {
        double w = 0;
        if (!readPositiveDouble(*v, join(path, "weight"), w)) return false;
        tenant.weight = w;
      }
      if (const auto* v = tt->get("queue_limit")) {
        std::uint32_t q = 0;
        if (!readInt(*v, join(path, "queue_limit"), 1, q)) return false;
        tenant.queue_limit = q;
      }
      if (const auto* v = tt->get("limits")) {
        const TierConfig& tier = *findTier(tenant.tier);
        auto inheritedFor = [&tier](const EndpointConfig& ep) {
          std::vector<LimitSpec> inherited = ep.limits;
          std::set<SlotKey> slots;
          for (const LimitSpec& s : inherited) slots.insert(slotOf(s));
          for (const EndpointLimits& el : tier.limits) {
            if (el.endpoint != ep.name) continue;
            for (const LimitSpec& s : el.limits) {
              if (slots.insert(slotOf(s)).second) inherited.push_back(s);
            }
          }
          return inherited;
        };
        if (!readLimitTable(*v, join(path, "limits"), inheritedFor, tenant.limits)) return false;
      }
      cfg_.tenants.push_back(std::move(tenant));
    }
    return true;
  }

  bool parseClients(const toml::node& n) {
    const auto* arr = n.as_array();
    if (arr == nullptr) {
      return wrongType(n, "clients", "array of tables (write each rule as [[clients]])");
    }
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const toml::node& el = *arr->get(i);
      const std::string path = indexed("clients", i);
      const toml::table* t = readTable(el, path);
      if (t == nullptr) return false;
      if (!checkKeys(*t, path,
                     {"name", "uids", "gids", "users", "groups", "tenants", "endpoints",
                      "assign_tiers", "admin"})) {
        return false;
      }
      ClientRule rule;
      rule.name = path;
      rule.source_line = lineOf(*t);
      rule.endpoints = {std::string(kWildcard)};
      if (const auto* v = t->get("name")) {
        if (!readString(*v, join(path, "name"), rule.name)) return false;
        if (!checkName(lineOf(*v), join(path, "name"), rule.name)) return false;
      }
      if (const auto* v = t->get("uids")) {
        if (!readIdArray(*v, join(path, "uids"), rule.uids)) return false;
      }
      if (const auto* v = t->get("gids")) {
        if (!readIdArray(*v, join(path, "gids"), rule.gids)) return false;
      }
      if (const auto* v = t->get("users")) {
        if (!resolveNames(*v, join(path, "users"), "user", lookupUser, rule.uids)) return false;
      }
      if (const auto* v = t->get("groups")) {
        if (!resolveNames(*v, join(path, "groups"), "group", lookupGroup, rule.gids)) return false;
      }
      if (rule.uids.empty() && rule.gids.empty()) {
        return fail(*t, path, "the rule matches no client: give uids, gids, users or groups");
      }
      std::vector<std::pair<std::string, std::uint32_t>> items;
      if (const auto* v = t->get("tenants")) {
        if (!readStringArray(*v, join(path, "tenants"), items)) return false;
        rule.tenants.clear();
        AppendOnce<std::string> tenants(rule.tenants);
        for (const auto& [name, line] : items) {
          if (name != kWildcard && !checkName(line, join(path, "tenants"), name)) return false;
          tenants.add(name);
        }
      }
      if (const auto* v = t->get("endpoints")) {
        if (!readStringArray(*v, join(path, "endpoints"), items)) return false;
        rule.endpoints.clear();
        AppendOnce<std::string> endpoints(rule.endpoints);
        for (const auto& [name, line] : items) {
          if (name != kWildcard && findEndpoint(name) == nullptr) {
            return fail(line, join(path, "endpoints"), "unknown endpoint " + quote(name));
          }
          endpoints.add(name);
        }
      }
      if (const auto* v = t->get("assign_tiers")) {
        if (!readStringArray(*v, join(path, "assign_tiers"), items)) return false;
        AppendOnce<std::string> tiers(rule.assign_tiers);
        bool expanded = false;
        for (const auto& [name, line] : items) {
          if (name == kWildcard) {
            if (!expanded) {
              for (const TierConfig& tier : cfg_.tiers) tiers.add(tier.name);
            }
            expanded = true;
            continue;
          }
          if (findTier(name) == nullptr) {
            return fail(line, join(path, "assign_tiers"), "unknown tier " + quote(name));
          }
          tiers.add(name);
        }
      }
      if (const auto* v = t->get("admin")) {
        if (!readBool(*v, join(path, "admin"), rule.admin)) return false;
      }
      cfg_.clients.push_back(std::move(rule));
    }
    return true;
  }

  bool readIdArray(const toml::node& n, const std::string& path, std::vector<std::uint32_t>& out) {
    const auto* arr = n.as_array();
    if (arr == nullptr) return wrongType(n, path, "array of integers");
    AppendOnce<std::uint32_t> ids(out);
    for (const toml::node& el : *arr) {
      if (!el.is_integer()) {
        return fail(el, path,
                    "expected array of integers, got an element of type " +
                        std::string(typeName(el.type())));
      }
      std::uint32_t id = 0;
      if (!readInt(el, path, 0, id)) return false;
      ids.add(id);
    }
    return true;
  }

  template <typename LookupFn>
  bool resolveNames(const toml::node& n, const std::string& path, std::string_view what,
                    LookupFn lookup, std::vector<std::uint32_t>& out) {
    std::vector<std::pair<std::string, std::uint32_t>> items;
    if (!readStringArray(n, path, items)) return false;
    AppendOnce<std::uint32_t> ids(out);
    for (const auto& [name, line] : items) {
      std::uint32_t id = 0;
      int err = 0;
      // A NUL would cut the name short in the C lookup.
      const Lookup r = name.empty() || name.find('\0') != std::string::npos ? Lookup::kNotFound
                                                                            : lookup(name, id, err);
      if (r == Lookup::kNotFound)
        return fail(line, path, "unknown " + std::string(what) + " " + quote(name));
      if (r == Lookup::kFailed) {
        return fail(
            line, path,
            "cannot look up " + std::string(what) + " " + quote(name) + ": " + std::strerror(err));
      }
      ids.add(id);
    }
    return true;
  }

  // Name lookups while parsing: the Config's own find* are linear.
  const TierConfig* findTier(const std::string& name) const {
    const auto it = tierIndex_.find(name);
    return it == tierIndex_.end() ? nullptr : &cfg_.tiers[it->second];
  }
  const EndpointConfig* findEndpoint(const std::string& name) const {
    const auto it = endpointIndex_.find(name);
    return it == endpointIndex_.end() ? nullptr : &cfg_.endpoints[it->second];
  }

  std::string_view source_;
  Config cfg_;
  std::unordered_map<std::string, std::size_t> tierIndex_;      // name -> index in cfg_.tiers
  std::unordered_map<std::string, std::size_t> endpointIndex_;  // name -> index in cfg_.endpoints
  std::optional<ConfigError> error_;
};

}  // namespace

ConfigResult parseConfig(std::string_view text, std::string_view source_name) {
  try {
    toml::table root;
    try {
      root = toml::parse(text, source_name);
    } catch (const toml::parse_error& e) {
      return ConfigError{std::string(source_name), lineOf(e.source()), "",
                         std::string(e.description())};
    }
    return Parser(source_name).run(root);
  } catch (const std::exception& e) {
    return ConfigError{std::string(source_name), 0, "", std::string("cannot parse: ") + e.what()};
  }
}

ConfigResult parseConfig(std::istream& in, std::string_view source_name) {
  try {
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) return ConfigError{std::string(source_name), 0, "", "read error"};
    return parseConfig(std::string_view(text), source_name);
  } catch (const std::exception& e) {
    return ConfigError{std::string(source_name), 0, "", std::string("cannot read: ") + e.what()};
  }
}

ConfigResult loadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ConfigError{path, 0, "", std::string("cannot open: ") + std::strerror(errno)};
  ConfigResult r = parseConfig(in, path);
  if (auto* cfg = std::get_if<Config>(&r)) cfg->source_path = path;
  return r;
}

}  // namespace fairsched::config
