#include "gateway/gateway_config.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <span>
#include <sstream>
#include <variant>
#include <vector>

#include "daemon/config/toml_reader.hpp"
#include "fairsched/name.hpp"

namespace fairsched::gateway {

namespace {

using config::ConfigError;
using config::TomlReader;

// "HOST:PORT" with a numeric port; HOST may be [v6].
bool splitHostPort(std::string_view s, std::string& host, std::uint16_t& port) {
  const auto colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == s.size()) return false;
  std::string_view h = s.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string_view p = s.substr(colon + 1);
  unsigned v = 0;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (ec != std::errc{} || end != p.data() + p.size() || v > 65535) return false;
  host = std::string(h);
  port = static_cast<std::uint16_t>(v);
  return !host.empty();
}

// An integer key of a config section: its field and its bounds.
template <typename C>
struct IntKey {
  std::string_view key;
  std::variant<std::uint32_t C::*, std::uint64_t C::*> field;
  std::uint64_t min;
  std::uint64_t max;
};

// The integer keys of [gateway], in the order they are read (after its
// strings: listen, socket, endpoint, name, log_level, daemon_config).
constexpr IntKey<GatewayConfig> kGatewayInts[] = {
    {"max_connections", &GatewayConfig::max_connections, 1, 1'000'000},
    {"threads", &GatewayConfig::threads, 0, 64},
    {"max_body_bytes", &GatewayConfig::max_body_bytes, 1, 1ull << 30},
    {"max_header_bytes", &GatewayConfig::max_header_bytes, 1024, 1u << 20},
    {"header_timeout_ms", &GatewayConfig::header_timeout_ms, 1, 3'600'000},
    {"body_timeout_ms", &GatewayConfig::body_timeout_ms, 1, 3'600'000},
    {"idle_timeout_ms", &GatewayConfig::idle_timeout_ms, 1, 3'600'000},
    {"write_timeout_ms", &GatewayConfig::write_timeout_ms, 1, 3'600'000},
    {"send_buffer_bytes", &GatewayConfig::send_buffer_bytes, 4096, 64u << 20},
    {"request_timeout_ms", &GatewayConfig::request_timeout_ms, 1, 86'400'000},
    {"default_max_tokens", &GatewayConfig::default_max_tokens, 1, 1u << 24},
    {"prefix_block_bytes", &GatewayConfig::prefix_block_bytes, 0, 1u << 20},
};

// The integer keys of [upstream], read after its url.
constexpr IntKey<UpstreamConfig> kUpstreamInts[] = {
    {"max_sequences", &UpstreamConfig::max_sequences, 1, 65536},
    {"min_sequences", &UpstreamConfig::min_sequences, 1, 65536},
    {"metrics_interval_ms", &UpstreamConfig::metrics_interval_ms, 50, 3'600'000},
    {"max_tokens", &UpstreamConfig::max_tokens, 1, 1ull << 40},
    {"connect_timeout_ms", &UpstreamConfig::connect_timeout_ms, 1, 600'000},
    {"response_timeout_ms", &UpstreamConfig::response_timeout_ms, 1, 86'400'000},
    {"idle_timeout_ms", &UpstreamConfig::idle_timeout_ms, 1, 86'400'000},
    {"max_response_bytes", &UpstreamConfig::max_response_bytes, 1024, 1ull << 30},
    {"pool_connections", &UpstreamConfig::pool_connections, 0, 65536},
    {"pool_idle_ms", &UpstreamConfig::pool_idle_ms, 1, 3'600'000},
    {"health_interval_ms", &UpstreamConfig::health_interval_ms, 100, 3'600'000},
    {"health_timeout_ms", &UpstreamConfig::health_timeout_ms, 1, 600'000},
    {"eject_after_failures", &UpstreamConfig::eject_after_failures, 1, 1000},
    {"eject_ms", &UpstreamConfig::eject_ms, 1, 3'600'000},
    {"eject_max_ms", &UpstreamConfig::eject_max_ms, 1, 86'400'000},
};

class Parser {
 public:
  explicit Parser(std::string_view source) : r_(source) {}

  std::optional<ConfigError> run(const toml::table& root, GatewayConfig& cfg) {
    static constexpr std::string_view kRoot[] = {"gateway", "upstream", "upstreams", "keys"};
    if (!r_.checkKeys(root, "", kRoot)) return r_.error();
    if (const toml::node* g = config::findKey(root, "gateway")) {
      if (!readGateway(*g, cfg)) return r_.error();
    }
    const toml::node* one = config::findKey(root, "upstream");
    const toml::node* many = config::findKey(root, "upstreams");
    if (one != nullptr && many != nullptr) {
      r_.fail(*many, "upstreams", "write the upstream as [upstream] or as [[upstreams]], not both");
      return r_.error();
    }
    if (one == nullptr && many == nullptr) {
      r_.fail(1, "upstream", "missing required table ([upstream], or [[upstreams]] for several)");
      return r_.error();
    }
    if (one != nullptr) {
      cfg.upstreams.emplace_back();
      if (!readUpstream(*one, "upstream", cfg.upstreams.back())) return r_.error();
    } else {
      std::vector<const toml::node*> elements;
      if (!r_.readArray(*many, "upstreams", "array of tables (write each one as [[upstreams]])",
                        elements)) {
        return r_.error();
      }
      if (elements.empty()) {
        r_.fail(*many, "upstreams", "at least one upstream is needed");
        return r_.error();
      }
      for (std::size_t i = 0; i < elements.size(); ++i) {
        cfg.upstreams.emplace_back();
        const std::string path = "upstreams[" + std::to_string(i) + "]";
        if (!readUpstream(*elements[i], path, cfg.upstreams.back())) return r_.error();
        for (std::size_t j = 0; j < i; ++j) {
          if (cfg.upstreams[j].name == cfg.upstreams[i].name) {
            r_.fail(*elements[i], path + ".name",
                    "another upstream is named " + config::quote(cfg.upstreams[i].name) +
                        " (name them apart with `name`)");
            return r_.error();
          }
        }
      }
    }
    if (const toml::node* k = config::findKey(root, "keys")) {
      if (!readKeys(*k, cfg)) return r_.error();
    }
    return std::nullopt;
  }

 private:
  template <typename T>
  bool readInt(const toml::table& t, std::string_view path, std::string_view key, T& out,
               std::uint64_t min, std::uint64_t max = std::numeric_limits<T>::max()) {
    const toml::node* n = config::findKey(t, key);
    return n == nullptr || r_.readInt(*n, config::join(path, key), min, out, max);
  }
  bool readString(const toml::table& t, std::string_view path, std::string_view key,
                  std::string& out) {
    const toml::node* n = config::findKey(t, key);
    return n == nullptr || r_.readString(*n, config::join(path, key), out);
  }

  // Every key of `t` is one of `others` or `ints` (in that order for the
  // did-you-mean); each key is named once, here and in its read.
  template <typename C, std::size_t N>
  bool checkKeys(const toml::table& t, std::string_view path,
                 std::span<const std::string_view> others, const IntKey<C> (&ints)[N]) {
    std::vector<std::string_view> known(others.begin(), others.end());
    for (const IntKey<C>& k : ints) known.push_back(k.key);
    return r_.checkKeys(t, path, known);
  }
  template <typename C, std::size_t N>
  bool readInts(const toml::table& t, std::string_view path, const IntKey<C> (&ints)[N], C& out) {
    for (const IntKey<C>& k : ints) {
      const auto read = [&](auto field) {
        return readInt(t, path, k.key, out.*field, k.min, k.max);
      };
      if (!std::visit(read, k.field)) return false;
    }
    return true;
  }

  bool readGateway(const toml::node& node, GatewayConfig& cfg) {
    static constexpr std::string_view kStrings[] = {"listen", "socket",    "endpoint",
                                                    "name",   "log_level", "daemon_config"};
    const toml::table* t = r_.readTable(node, "gateway");
    if (t == nullptr || !checkKeys(*t, "gateway", kStrings, kGatewayInts)) return false;
    if (!readString(*t, "gateway", "listen", cfg.listen)) return false;
    if (!splitHostPort(cfg.listen, cfg.listen_host, cfg.listen_port)) {
      return r_.fail(*config::findKey(*t, "listen"), "gateway.listen",
                     "expected HOST:PORT, got " + config::quote(cfg.listen));
    }
    if (!readString(*t, "gateway", "socket", cfg.socket)) return false;
    if (!readString(*t, "gateway", "endpoint", cfg.endpoint)) return false;
    if (const toml::node* n = config::findKey(*t, "endpoint")) {
      if (auto err = nameError(cfg.endpoint, kMaxEndpointNameBytes)) {
        return r_.fail(*n, "gateway.endpoint", *err);
      }
    }
    if (!readString(*t, "gateway", "name", cfg.name)) return false;
    if (const toml::node* n = config::findKey(*t, "name")) {
      if (auto err = nameError(cfg.name)) return r_.fail(*n, "gateway.name", *err);
    }
    if (!readString(*t, "gateway", "log_level", cfg.log_level)) return false;
    if (const toml::node* n = config::findKey(*t, "log_level")) {
      static constexpr std::string_view kLevels[] = {"trace", "debug",    "info", "warn",
                                                     "error", "critical", "off"};
      bool ok = false;
      for (std::string_view l : kLevels) ok = ok || l == cfg.log_level;
      if (!ok) {
        return r_.fail(*n, "gateway.log_level",
                       "expected one of trace|debug|info|warn|error|critical|off, got " +
                           config::quote(cfg.log_level));
      }
    }
    if (!readString(*t, "gateway", "daemon_config", cfg.daemon_config)) return false;
    return readInts(*t, "gateway", kGatewayInts, cfg);
  }

  bool readUpstream(const toml::node& node, const std::string& path, UpstreamConfig& u) {
    static constexpr std::string_view kStrings[] = {"url",      "name",         "health_path",
                                                    "capacity", "metrics_path", "engine_priority"};
    const toml::table* t = r_.readTable(node, path);
    if (t == nullptr || !checkKeys(*t, path, kStrings, kUpstreamInts)) return false;
    const std::string url_key = path + ".url";
    const toml::node* url = config::findKey(*t, "url");
    if (url == nullptr) return r_.fail(node, url_key, "missing required key");
    if (!r_.readString(*url, url_key, u.url)) return false;
    std::string_view rest = u.url;
    if (!rest.starts_with("http://")) {
      return r_.fail(*url, url_key,
                     "expected http://HOST[:PORT][/PREFIX], got " + config::quote(u.url) +
                         " (https upstreams are not supported: keep the engine on a private "
                         "address)");
    }
    rest.remove_prefix(7);
    const auto slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    u.prefix = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
    while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
    if (authority.find(':') == std::string_view::npos) {
      u.host = std::string(authority);
      u.port = 80;
    } else if (!splitHostPort(authority, u.host, u.port)) {
      return r_.fail(*url, url_key, "bad HOST:PORT in " + config::quote(u.url));
    }
    if (u.host.empty()) return r_.fail(*url, url_key, "no host in " + config::quote(u.url));
    if (!readString(*t, path, "name", u.name)) return false;
    if (const toml::node* n = config::findKey(*t, "name")) {
      if (auto err = nameError(u.name, 40)) return r_.fail(*n, path + ".name", *err);
    } else {
      u.name = std::string(authority.substr(0, 40));
    }
    if (!readPath(*t, path, "health_path", u.health_path, /*may_be_empty=*/true)) return false;
    if (!readPath(*t, path, "metrics_path", u.metrics_path, /*may_be_empty=*/false)) return false;
    std::string capacity = "fixed";
    if (!readString(*t, path, "capacity", capacity)) return false;
    if (capacity != "fixed" && capacity != "auto") {
      return r_.fail(*config::findKey(*t, "capacity"), path + ".capacity",
                     "expected \"fixed\" (max_sequences) or \"auto\" (from the engine's "
                     "metrics), got " +
                         config::quote(capacity));
    }
    u.capacity_auto = capacity == "auto";
    std::string priority = "off";
    if (!readString(*t, path, "engine_priority", priority)) return false;
    if (priority == "off") {
      u.engine_priority = UpstreamConfig::EnginePriority::kOff;
    } else if (priority == "lower_first") {
      u.engine_priority = UpstreamConfig::EnginePriority::kLowerFirst;
    } else if (priority == "higher_first") {
      u.engine_priority = UpstreamConfig::EnginePriority::kHigherFirst;
    } else {
      return r_.fail(*config::findKey(*t, "engine_priority"), path + ".engine_priority",
                     "expected \"off\", \"lower_first\" (vLLM) or \"higher_first\" (SGLang's "
                     "default), got " +
                         config::quote(priority));
    }
    if (!readInts(*t, path, kUpstreamInts, u)) return false;
    if (u.min_sequences > u.max_sequences) {
      return r_.fail(*config::findKey(*t, "min_sequences"), path + ".min_sequences",
                     "is above max_sequences (" + std::to_string(u.max_sequences) + ")");
    }
    // One idle connection for each sequence the upstream runs, unless set.
    if (config::findKey(*t, "pool_connections") == nullptr) u.pool_connections = u.max_sequences;
    if (u.eject_max_ms < u.eject_ms) u.eject_max_ms = u.eject_ms;
    return true;
  }

  // A path from the server's root ("/health"); "" where `may_be_empty`.
  bool readPath(const toml::table& t, const std::string& path, std::string_view key,
                std::string& out, bool may_be_empty) {
    if (!readString(t, path, key, out)) return false;
    const auto bad_byte = [](char c) { return c <= ' ' || c == 0x7f; };
    if ((out.empty() && !may_be_empty) || (!out.empty() && out.front() != '/') ||
        std::any_of(out.begin(), out.end(), bad_byte)) {
      return r_.fail(
          *config::findKey(t, key), path + "." + std::string(key),
          std::string("expected a path from the server's root (\"/") +
              (key == "health_path" ? "health\"), or \"\" for no checks" : "metrics\")"));
    }
    return true;
  }

  bool readKeys(const toml::node& node, GatewayConfig& cfg) {
    const toml::table* keys = r_.readTable(node, "keys");
    if (keys == nullptr) return false;
    for (const config::TomlEntry& e : config::entriesInFileOrder(*keys)) {
      const std::string path = config::join("keys", e.key);
      ApiKeyConfig k;
      k.name = std::string(e.key);
      k.source_line = e.key_line;
      if (auto err = nameError(k.name)) return r_.fail(e.key_line, path, *err);
      static constexpr std::string_view kKeys[] = {"sha256", "tenant", "tier", "priority",
                                                   "routes"};
      const toml::table* t = r_.readTable(*e.value, path);
      if (t == nullptr || !r_.checkKeys(*t, path, kKeys)) return false;
      const toml::node* digest = config::findKey(*t, "sha256");
      if (digest == nullptr) return r_.fail(*e.value, path + ".sha256", "missing required key");
      if (!r_.readString(*digest, path + ".sha256", k.sha256)) return false;
      bool hex = k.sha256.size() == 64;
      for (char& c : k.sha256) {
        if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
        hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
      }
      if (!hex) {
        return r_.fail(
            *digest, path + ".sha256",
            "expected 64 hex digits (sha256sum of the key), got " + config::quote(k.sha256));
      }
      for (const ApiKeyConfig& other : cfg.keys) {
        if (other.sha256 == k.sha256) {
          return r_.fail(*digest, path + ".sha256",
                         "the same digest as keys." + other.name + " (line " +
                             std::to_string(other.source_line) + ")");
        }
      }
      const toml::node* tenant = config::findKey(*t, "tenant");
      if (tenant == nullptr) return r_.fail(*e.value, path + ".tenant", "missing required key");
      if (!r_.readString(*tenant, path + ".tenant", k.tenant)) return false;
      if (auto err = nameError(k.tenant)) return r_.fail(*tenant, path + ".tenant", *err);
      if (const toml::node* tier = config::findKey(*t, "tier")) {
        std::string s;
        if (!r_.readString(*tier, path + ".tier", s)) return false;
        if (auto err = nameError(s)) return r_.fail(*tier, path + ".tier", *err);
        k.tier = s;
      }
      if (const toml::node* p = config::findKey(*t, "priority")) {
        std::int64_t v = 0;
        if (const auto* i = p->as_integer()) v = i->get();
        if (!p->is_integer() || v < -1'000'000 || v > 1'000'000) {
          return r_.fail(*p, path + ".priority", "expected an integer in [-1000000, 1000000]");
        }
        k.priority = static_cast<std::int32_t>(v);
      }
      if (const toml::node* routes = config::findKey(*t, "routes")) {
        std::vector<config::StringAt> names;
        if (!r_.readStringArray(*routes, path + ".routes", names)) return false;
        k.routes = 0;
        for (const config::StringAt& s : names) {
          if (s.text == "completions") {
            k.routes |= routeBit(Route::kCompletions);
          } else if (s.text == "chat.completions") {
            k.routes |= routeBit(Route::kChatCompletions);
          } else if (s.text == "models") {
            k.routes |= routeBit(Route::kModels);
          } else if (s.text == "embeddings") {
            k.routes |= routeBit(Route::kEmbeddings);
          } else {
            return r_.fail(s.line, path + ".routes",
                           "unknown route " + config::quote(s.text) +
                               " (expected completions, chat.completions, embeddings or models)");
          }
        }
      }
      cfg.keys.push_back(std::move(k));
    }
    return true;
  }

  TomlReader r_;
};

}  // namespace

GatewayConfigResult parseGatewayConfig(std::string_view text, std::string_view source_name) {
  GatewayConfigResult result = ConfigError{};
  if (auto err = config::withTomlRoot(text, source_name, [&](const toml::table& root) {
        GatewayConfig cfg;
        Parser p(source_name);
        if (auto bad = p.run(root, cfg)) {
          result = *bad;
        } else {
          result = std::move(cfg);
        }
      })) {
    return *err;
  }
  return result;
}

GatewayConfigResult loadGatewayConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ConfigError{path, 0, "", std::string("cannot open: ") + std::strerror(errno)};
  std::stringstream ss;
  ss << in.rdbuf();
  GatewayConfigResult r = parseGatewayConfig(ss.str(), path);
  if (auto* cfg = r.valueOrNull()) cfg->source_path = path;
  return r;
}

}  // namespace fairsched::gateway
