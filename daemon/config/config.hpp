// The daemon's configuration as plain values, and the parser that builds it
// from TOML text. Parsing never throws: every error names the file, the line
// and the key path ("cfg.toml:12: tenants.acme.limits.chat: unknown unit 'minite'").
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <vector>
#include "fairsched/error.hpp"

#include "daemon/config/redis_url.hpp"
#include "daemon/core/limit_spec.hpp"
#include "daemon/core/prefix_router.hpp"
#include "daemon/core/scheduler_spec.hpp"
#include "daemon/core/types.hpp"

namespace fairsched::config {

enum class EndpointKind : std::uint8_t {
  kStreaming,  // interactive: the default quantum rotates about one request per tenant
  kBatch,      // offline: the default quantum grants about a full batch of tokens
};

// kWorker: engine processes attach as workers and pull the requests (docs/worker.md).
enum class ExecutorKind : std::uint8_t { kCpu, kCuda, kWorker };

// [endpoints.NAME.worker]: how the daemon treats the workers of an endpoint.
struct WorkerEndpointConfig {
  // A request whose worker is lost before it streamed a token goes back to
  // its tenant's queue (at its place) instead of ending EXECUTOR_FAILED.
  bool requeue_on_loss = true;
  // Longest prompt a worker may be handed, in tokens (the assignment
  // payload); longer submissions end INVALID.
  std::uint32_t max_prompt_tokens = 8192;
  // Most requests one worker runs at once, whatever capacity it states
  // (its assignment ring holds this many, rounded up to a power of two).
  std::uint32_t max_sequences = 256;
  // Preemption (core::PreemptionSpec): running sequences may be given back
  // for a higher tier's or a less-served tenant's waiting request.
  bool preemption = false;
  double max_preemptions_per_s = 20.0;
  std::uint32_t min_progress_tokens = 16;
  bool preempt_for_share = false;  // core::PreemptionSpec::for_share
  // Stream chunks held for a client that does not read its completion ring,
  // beyond the ring itself; past it the client's streamed request ends
  // SLOW_CONSUMER (aborted on its worker). Bounds the daemon's memory.
  std::uint32_t client_buffer_chunks = 1024;
  // Sequences kept for tenants with nothing running on the endpoint: a
  // tenant that is running something takes a worker's sequences only while
  // more than this many stay free across the endpoint's workers, so a light
  // tenant's first request starts at once instead of after the next
  // sequence frees (Scheduler::takeHeadroom). 0 = off.
  std::uint32_t headroom = 0;
  // Which worker takes a request (docs/worker.md "Prefix routing"):
  // kRoomiest, or kPrefix — the one holding most of its prompt's leading
  // blocks while its load stays within (1 + load_slack) × the endpoint's
  // mean (core::chooseWorker), and, when one worker has room, a request
  // whose prefix it holds may go before the fair choice within fairness
  // (core::Scheduler::take with a probe; locality_slack across tenants).
  core::Routing routing = core::Routing::kRoomiest;
  std::uint32_t prefix_block_tokens = 16;  // tokens per block hash (vLLM's default)
  std::uint32_t max_prefix_blocks = 512;   // blocks hashed per request, at most
  double load_slack = 0.25;
  double locality_slack = 0;  // core::EndpointSpec::locality_slack
  // What the daemon remembers of each worker's prefix cache, in blocks, for
  // a worker that reports no KV events (it records the blocks it sent
  // there, least recently used forgotten first); 0 = the KV tokens the
  // worker first stated ÷ prefix_block_tokens. A worker that reports KV
  // events is tracked from them instead, up to this bound as well.
  std::uint64_t cache_blocks = 0;
};

// [endpoints.NAME.engine]: the engine model of the reference worker
// (fairsched-worker) and of `fairsched-bench replay` (continuous batching).
struct EngineConfig {
  std::uint32_t max_sequences = 64;  // sequences batched at once
  std::uint64_t kv_tokens = 262144;  // KV cache, in tokens (prompt + output of every sequence)
  double step_us = 200.0;            // fixed cost of one engine iteration
  double prefill_token_us = 0.02;    // per prompt token processed
  double decode_token_us = 2.0;      // per sequence decoding one token in the step
  std::uint32_t chunked_prefill_tokens = 2048;  // prompt tokens processed per step, all sequences
  // Its prefix cache, in blocks of the endpoint's worker.prefix_block_tokens
  // (reference::EngineModel::cache_blocks); 0 = none.
  std::uint64_t prefix_cache_blocks = 0;
  bool kv_events = true;  // it reports what it caches (Worker::blocksStored/blocksRemoved)
};

struct CpuExecutorConfig {
  double per_batch_us = 200.0;  // modelled fixed cost of one batch
  double per_token_us = 0.5;    // modelled cost per token (input + output)
  std::uint32_t threads = 1;
  bool workload = true;  // false: no reference workload, checksum 0 (measuring the daemon alone)
};

struct CudaExecutorConfig {
  int device = 0;
  std::uint32_t streams = 2;
  std::uint64_t staging_bytes = 8u << 20;  // per stream, pinned, double-buffered
  // Executor used when CUDA was not built or no device is present; empty = fail at start.
  std::optional<ExecutorKind> fallback;
};

struct EndpointConfig {
  std::string name;
  EndpointKind kind = EndpointKind::kStreaming;
  CostModel cost = CostModel::kTokens;
  // DRR quantum for weight 1, in cost units. 0 in the file = derive from kind
  // (see resolvedQuantum()).
  std::uint64_t quantum = 0;
  std::uint32_t max_batch_requests = 32;
  std::uint32_t max_batch_tokens = 16384;
  std::uint64_t max_wait_us = 2000;
  std::uint32_t max_output_tokens = 4096;  // cap on a request's max output tokens
  std::uint64_t latency_target_ms = 0;     // backlog throttle; 0 = off
  // A batch the executor has not finished after this long ends its requests
  // EXECUTOR_FAILED (the slot stays taken until the executor returns); 0 = never.
  std::uint64_t batch_timeout_ms = 30000;
  ExecutorKind executor = ExecutorKind::kCpu;
  // How tenants of one tier share it: drr (default), recent (least service
  // over the last few half-lives) or vtc (the Virtual Token Counter).
  core::Fairness fairness = core::Fairness::kDrr;
  double half_life_s = 20.0;  // recent; and preemption's service counters under drr
  CpuExecutorConfig cpu;
  CudaExecutorConfig cuda;
  WorkerEndpointConfig worker;
  EngineConfig engine;
  std::vector<core::LimitSpec> limits;  // defaults for every tenant on this endpoint
  std::uint32_t source_line = 0;

  // The quantum the DRR uses: `quantum` when set, else for kBatch a full batch
  // (max_batch_tokens, or max_batch_requests under the requests cost model),
  // for kStreaming about one request (max_batch_tokens / max_batch_requests,
  // or 1 under the requests cost model).
  std::uint64_t resolvedQuantum() const;
  // The quantum of a worker endpoint under a token cost model when none is set.
  static constexpr std::uint64_t kWorkerQuantum = 16;
};

// Limits for one endpoint, as set at some level (tier or tenant).
struct EndpointLimits {
  std::string endpoint;
  std::vector<core::LimitSpec> limits;
};

struct TierConfig {
  std::string name;
  double min_share = 0.0;       // 0 = strict priority only
  double default_weight = 1.0;  // for tenants not listed in [tenants]
  std::uint32_t default_queue_limit = 10000;
  // A batch that takes this tier's requests holds at most this many tokens
  // (or one request); 0 = only the endpoint's max_batch_tokens.
  std::uint32_t max_batch_tokens = 0;
  std::vector<EndpointLimits> limits;  // override the endpoint defaults
  std::uint32_t source_line = 0;
};

struct TenantConfig {
  std::string name;
  std::string tier;              // must name a tier
  std::optional<double> weight;  // default: the tier's default_weight
  std::optional<std::uint32_t> queue_limit;
  std::vector<EndpointLimits> limits;  // override tier and endpoint defaults
  std::uint32_t source_line = 0;
};

struct ClientRule {
  std::string name;
  std::vector<std::uint32_t> uids;        // numeric, and `users` resolved at load
  std::vector<std::uint32_t> gids;        // numeric, and `groups` resolved at load
  std::vector<std::string> tenants;       // "*" = every tenant
  std::vector<std::string> endpoints;     // "*" = every endpoint
  std::vector<std::string> assign_tiers;  // tiers it may give unlisted tenants
  std::vector<std::string> workers;       // worker endpoints it may serve; "*" = every one
  bool admin = false;                     // may use fairschedctl reload/drain
  std::uint32_t source_line = 0;
};

// Which kernel interface the daemon's event loop uses (docs/operations.md).
enum class EventLoopKind : std::uint8_t {
  kAuto,     // io_uring, else epoll (with one warning naming why io_uring was refused)
  kIoUring,  // io_uring or fail to start
  kEpoll,    // epoll: for kernels, seccomp profiles and sandboxes that refuse io_uring
};

struct DaemonConfig {
  std::string socket = "/run/fairsched/fairsched.sock";
  std::uint32_t socket_mode = 0660;
  std::string socket_group;        // empty = the daemon's group
  std::string log_level = "info";  // trace|debug|info|warn|error|critical|off
  Policy policy = Policy::kFair;
  std::uint64_t tenant_idle_timeout_s =
      600;  // idle state dropped after this (limit windows permitting)
  std::uint64_t shutdown_grace_ms = 5000;
  EventLoopKind event_loop = EventLoopKind::kAuto;
  // How long the loop keeps polling the rings after its last work before it
  // sleeps on the kernel (0: sleep as soon as there is nothing to do).
  std::uint64_t busy_poll_us = 500;
  // Tenants one client connection may hold open at once (its handle slots;
  // shm/tenant_handle.hpp). A reload applies to connections made after it.
  std::uint32_t max_tenants_per_connection = 65536;
  // Where the daemon keeps what must survive a restart (limit windows,
  // learned estimates; daemon/server/state_store.hpp). Empty: nothing is kept.
  std::string state_dir = "/var/lib/fairsched";
  // How often the state is written while anything changes; a crash loses at
  // most this much.
  std::uint64_t state_interval_s = 5;
  // Submissions of one client connection the daemon rejects per second at
  // most (daemon/server/reject_budget.hpp); past it the connection is not
  // read until its budget is back. 0: no bound.
  std::uint64_t max_rejections_per_s = 5000;
  // Connection set-ups (Hellos) of one client uid the daemon serves per
  // second at most, in bursts of max(1, max_connects_per_s / 10)
  // (daemon/server/set_up_queue.hpp); past it a Hello waits, it is not
  // refused. 0: no bound.
  std::uint64_t max_connects_per_s = 500;
};

// The Prometheus endpoint (docs/operations.md, "Metrics"). Tenant names are
// label values, so by default it may only listen on a loopback address.
struct MetricsConfig {
  std::string listen;                     // "HOST:PORT"; empty = no endpoint, nothing started
  std::uint32_t max_tenant_series = 100;  // unlisted tenants with a label of their own
  bool allow_non_loopback = false;        // let `listen` name a non-loopback address
};

// What a fleet limiter does while its backend is unreachable (the circuit
// breaker is open); see docs/operations.md "Fleet limits".
enum class FleetErrorPolicy : std::uint8_t {
  kFailOpen,    // fleet limits are not enforced (host limits still are)
  kFailClosed,  // requests needing fleet budget beyond the leases held are RATE_LIMITED
  kLocalShare,  // each fleet limit is enforced locally at amount / hosts
};

// How the fleet's Redis is laid out (docs/operations.md, "Fleet limits").
enum class FleetMode : std::uint8_t {
  kSingle,    // one server (a single server that answers MOVED is followed as a cluster)
  kCluster,   // Redis Cluster: the URL's hosts are seed nodes
  kSentinel,  // a master found through Sentinel: the URL's hosts are the sentinels
};

// TLS to the fleet's Redis (rediss:// URLs).
struct FleetTlsConfig {
  std::string ca_file;    // empty: the system trust store
  std::string cert_file;  // client certificate (mutual TLS); with key_file
  std::string key_file;
  std::string server_name;            // SNI and the name verified; empty: the host of the address
  bool insecure_skip_verify = false;  // tests only; logged loudly
  bool operator==(const FleetTlsConfig&) const = default;
};

// A user and password for AUTH. The password may come from the URL, a file
// (read again at every connection, so a rotated file is picked up) or an
// environment variable (read when the config is).
struct RedisAuthConfig {
  std::string user;      // empty: the default user (AUTH password)
  std::string password;  // secret: never logged or shown
  std::string password_file;
  bool operator==(const RedisAuthConfig&) const = default;
};

// [fleet]: the shared backend behind `scope = "fleet"` limits.
struct FleetConfig {
  std::string url;           // as written; may hold a password: show redacted_url
  std::string redacted_url;  // url with its password replaced by ***
  FleetMode mode = FleetMode::kSingle;
  std::vector<RedisAddress> nodes;  // the URL's hosts: the server, cluster seeds or sentinels
  bool tls = false;                 // rediss:// or rediss-sentinel://
  std::uint32_t db = 0;
  RedisAuthConfig auth;           // for the data nodes
  RedisAuthConfig sentinel_auth;  // for the sentinels
  std::string master_name;        // sentinel
  FleetTlsConfig tls_options;
  std::uint64_t connect_timeout_ms = 100;
  std::uint64_t command_timeout_ms = 50;
  std::uint64_t lease = 0;  // cost units per lease; 0 = auto (see docs)
  std::uint32_t hosts = 1;  // daemons sharing the limits (for local_share and auto)
  FleetErrorPolicy on_backend_error = FleetErrorPolicy::kLocalShare;
  std::string key_prefix = "fairsched";
  std::uint32_t source_line = 0;

  // Every setting but the source line, for "did [fleet] change" (secrets included).
  bool sameBackend(const FleetConfig& o) const;
};

struct Config {
  DaemonConfig daemon;
  MetricsConfig metrics;
  std::optional<FleetConfig> fleet;  // required when any limit has scope = "fleet"
  std::vector<TierConfig> tiers;     // in priority order, highest first
  std::vector<EndpointConfig> endpoints;
  std::vector<TenantConfig> tenants;
  std::vector<ClientRule> clients;
  std::string default_tier;  // tier of unlisted tenants without a tier hint; default: the last tier
  std::string source_path;   // the file it was loaded from; empty for text or the embedded default

  const TierConfig* findTier(std::string_view name) const;
  const EndpointConfig* findEndpoint(std::string_view name) const;
  const TenantConfig* findTenant(std::string_view name) const;
};

struct ConfigError {
  std::string file;
  std::uint32_t line = 0;  // 0 when the error is not tied to a line
  std::string key;         // dotted key path, e.g. "tenants.acme.limits.chat"
  std::string message;
  std::string toString() const;  // "file:line: key: message"
};

using ConfigResult = fairsched::Result<Config, ConfigError>;

class AccountLookup;  // daemon/config/account_lookup.hpp

// Parse TOML text. `source_name` appears in errors (a file path or "<string>").
// The user and group names of [[clients]] rules are resolved through the
// system's user database.
ConfigResult parseConfig(std::string_view text, std::string_view source_name = "<string>");
// The same, resolving user and group names through `accounts` (a test passes
// a fake).
ConfigResult parseConfig(std::string_view text, std::string_view source_name,
                         const AccountLookup& accounts);
ConfigResult parseConfig(std::istream& in, std::string_view source_name);
ConfigResult loadConfigFile(const std::string& path);

// What a reload cannot change in a running daemon: one line per setting that
// differs between `running` and `next`, naming its key ("daemon.socket",
// "endpoints.chat.executor", ...). Empty when `next` can be applied live.
std::vector<std::string> reloadBlockers(const Config& running, const Config& next);

}  // namespace fairsched::config
