// The gateway's configuration (docs/gateway.md has every key): where it
// listens, the fairschedd socket and endpoint it serves, the upstream
// OpenAI-compatible server and its concurrency, the protections against slow
// or greedy callers, and the API keys — stored as SHA-256 digests, never in
// plain text — with the tenant, tier and priority each one submits as.
//
// Parsing never throws: an error names the file, the line and the key, like
// the daemon's config ("gw.toml:12: keys.alice.sha256: expected 64 hex digits").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"

namespace fairsched::gateway {

// The routes a key may use.
enum class Route : std::uint8_t {
  kCompletions = 0,
  kChatCompletions = 1,
  kModels = 2,
  kEmbeddings = 3
};
inline constexpr std::uint8_t kAllRoutes = 0b1111;
constexpr std::uint8_t routeBit(Route r) {
  return static_cast<std::uint8_t>(1u << static_cast<unsigned>(r));
}
// The route's URL path: "/v1/completions", "/v1/chat/completions",
// "/v1/models", "/v1/embeddings".
constexpr std::string_view routePath(Route r) {
  switch (r) {
    case Route::kCompletions:
      return "/v1/completions";
    case Route::kChatCompletions:
      return "/v1/chat/completions";
    case Route::kModels:
      return "/v1/models";
    case Route::kEmbeddings:
      return "/v1/embeddings";
  }
  return "?";
}

struct ApiKeyConfig {
  std::string name;    // the table name: a label for logs, never the key
  std::string sha256;  // 64 lower-case hex digits of SHA-256(key)
  std::string tenant;
  std::optional<std::string> tier;  // a tier hint (the gateway's client rule must allow it)
  std::int32_t priority = 0;
  std::uint8_t routes = kAllRoutes;  // routeBit() of each allowed route
  std::uint32_t source_line = 0;
};

struct UpstreamConfig {
  std::string name;  // in logs, /readyz and the worker's name ("" in the file: HOST:PORT)
  std::string url;   // http://HOST[:PORT][/PREFIX] as written
  std::string host;
  std::uint16_t port = 80;
  std::string prefix;                // path prefix before /v1/..., without a trailing '/'
  std::uint32_t max_sequences = 64;  // requests the upstream runs at once
  // capacity = "auto": the requests sent at once follow the engine's
  // Prometheus metrics (GET metrics_path every metrics_interval_ms), between
  // min_sequences and max_sequences (auto_capacity.hpp); "fixed":
  // max_sequences.
  bool capacity_auto = false;
  // engine_priority: the gateway sets each call's "priority" from how many
  // of its tenant's calls already run on the upstream (0 for a tenant with
  // none), so an engine that schedules by priority (vLLM's
  // --scheduling-policy priority, SGLang's --enable-priority-scheduling)
  // takes a light tenant's call first and may preempt for it. kOff: the
  // caller's own "priority", if any, passes through.
  enum class EnginePriority : std::uint8_t { kOff, kLowerFirst, kHigherFirst };
  EnginePriority engine_priority = EnginePriority::kOff;
  std::string metrics_path = "/metrics";
  std::uint64_t metrics_interval_ms = 1000;
  std::uint32_t min_sequences = 1;
  std::uint64_t max_tokens = 262144;  // prompt + max output of those requests, together
  std::uint64_t connect_timeout_ms = 2000;
  std::uint64_t response_timeout_ms = 120000;  // request sent → response headers
  std::uint64_t idle_timeout_ms = 60000;       // between two reads of the response body
  // Keep-alive connections to the upstream kept open between calls (at most
  // this many idle; 0: a new connection per call; unset: max_sequences),
  // each for at most pool_idle_ms (below the engine's own keep-alive
  // timeout: uvicorn's is 5 s).
  std::uint32_t pool_connections = 64;
  std::uint64_t pool_idle_ms = 4000;
  // Active health checks: GET health_path (from the server's root, not under
  // the prefix; "" = none) every health_interval_ms, failed past
  // health_timeout_ms or on a 5xx. Passive ejection: eject_after_failures
  // failed calls in a row (one refused connect) take the upstream out for
  // eject_ms, doubled at each relapse up to eject_max_ms (upstream_health.hpp).
  std::string health_path = "/health";
  std::uint64_t health_interval_ms = 5000;
  std::uint64_t health_timeout_ms = 2000;
  std::uint32_t eject_after_failures = 3;
  std::uint64_t eject_ms = 1000;
  std::uint64_t eject_max_ms = 30000;
  std::uint64_t max_response_bytes = 8u << 20;  // a non-streamed response body, or one SSE event
};

struct GatewayConfig {
  std::string listen = "127.0.0.1:8080";  // HOST:PORT (PORT 0: any free port, printed)
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 8080;
  std::string socket = "/run/fairsched/fairsched.sock";  // fairschedd's control socket
  std::string endpoint = "chat";  // a worker endpoint of the daemon, served by this gateway alone
  std::string name = "gateway";   // client and worker name in the daemon's log
  std::string log_level = "info";
  std::string daemon_config;  // the daemon's TOML, to advertise limits; "" = none
  std::uint32_t max_connections = 1024;
  // io threads (0: one per core, at most 8); a change applies at a restart.
  std::uint32_t threads = 0;
  std::uint64_t max_body_bytes = 1u << 20;
  std::uint32_t max_header_bytes = 16384;
  std::uint64_t header_timeout_ms = 10000;  // first byte of a request → its last header
  std::uint64_t body_timeout_ms = 30000;    // last header → last body byte
  std::uint64_t idle_timeout_ms = 60000;    // keep-alive: between requests
  std::uint64_t write_timeout_ms = 30000;   // one write to a caller (a slow reader is dropped)
  // A caller connection's kernel send buffer (SO_SNDBUF): what a caller that
  // stopped reading can leave unread before writes wait (and then time out).
  std::uint32_t send_buffer_bytes = 65536;
  std::uint64_t request_timeout_ms = 600000;  // fairsched deadline: queueing + running (504)
  std::uint32_t default_max_tokens = 256;     // when the body names none
  // Each request's prefix identity, for the daemon's routing = "prefix"
  // (openai_json.hpp PrefixOptions): blocks of this many bytes of the
  // canonical prompt text (64, about 16 tokens; 0 = none sent).
  std::uint32_t prefix_block_bytes = 64;
  // [upstream], or each [[upstreams]] table: the engine replicas, each its
  // own worker of the endpoint (at least one; names unique).
  std::vector<UpstreamConfig> upstreams;
  std::vector<ApiKeyConfig> keys;
  std::string source_path;
};

using GatewayConfigResult = fairsched::Result<GatewayConfig, config::ConfigError>;

GatewayConfigResult parseGatewayConfig(std::string_view text,
                                       std::string_view source_name = "<string>");
GatewayConfigResult loadGatewayConfigFile(const std::string& path);

}  // namespace fairsched::gateway
