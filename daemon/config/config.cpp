#include "daemon/config/config.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace fairsched::config {

bool FleetConfig::sameBackend(const FleetConfig& o) const {
  return url == o.url && mode == o.mode && auth == o.auth && sentinel_auth == o.sentinel_auth &&
         tls_options == o.tls_options && connect_timeout_ms == o.connect_timeout_ms &&
         command_timeout_ms == o.command_timeout_ms && lease == o.lease && hosts == o.hosts &&
         on_backend_error == o.on_backend_error && key_prefix == o.key_prefix;
}

std::uint64_t EndpointConfig::resolvedQuantum() const {
  if (quantum != 0) return quantum;
  const bool perRequest = cost == CostModel::kRequests;
  // Worker endpoints charge output as it is generated: a small quantum makes
  // each turn about one request, so a tenant that becomes backlogged gets
  // the next free sequence instead of waiting out another tenant's turn.
  if (executor == ExecutorKind::kWorker) return perRequest ? 1 : kWorkerQuantum;
  if (kind == EndpointKind::kBatch) {
    return std::max<std::uint64_t>(1, perRequest ? max_batch_requests : max_batch_tokens);
  }
  if (perRequest || max_batch_requests == 0) return 1;
  return std::max<std::uint64_t>(1, max_batch_tokens / max_batch_requests);
}

namespace {
template <typename T>
const T* findByName(const std::vector<T>& items, std::string_view name) {
  const auto it =
      std::find_if(items.begin(), items.end(), [&](const T& t) { return t.name == name; });
  return it == items.end() ? nullptr : &*it;
}
}  // namespace

const TierConfig* Config::findTier(std::string_view name) const {
  return findByName(tiers, name);
}

const EndpointConfig* Config::findEndpoint(std::string_view name) const {
  return findByName(endpoints, name);
}

const TenantConfig* Config::findTenant(std::string_view name) const {
  return findByName(tenants, name);
}

// "file:line: key: message"; ":line" is left out when line is 0 and "key: "
// when the error concerns no key (a TOML syntax error, an unreadable file).
std::string ConfigError::toString() const {
  std::string out = file;
  if (line != 0) out += ":" + std::to_string(line);
  out += ": ";
  if (!key.empty()) out += key + ": ";
  out += message;
  return out;
}

std::vector<std::string> reloadBlockers(const Config& running, const Config& next) {
  std::vector<std::string> out;
  auto differs = [&](bool changed, const std::string& key) {
    if (changed) out.push_back(key);
  };
  differs(running.daemon.socket != next.daemon.socket, "daemon.socket");
  differs(running.daemon.socket_mode != next.daemon.socket_mode, "daemon.socket_mode");
  differs(running.daemon.socket_group != next.daemon.socket_group, "daemon.socket_group");
  differs(running.daemon.policy != next.daemon.policy, "daemon.policy");
  differs(running.daemon.event_loop != next.daemon.event_loop, "daemon.event_loop");
  differs(running.daemon.busy_poll_us != next.daemon.busy_poll_us, "daemon.busy_poll_us");
  differs(running.daemon.max_connects_per_s != next.daemon.max_connects_per_s,
          "daemon.max_connects_per_s");
  differs(running.daemon.state_dir != next.daemon.state_dir, "daemon.state_dir");
  differs(running.fleet.has_value() != next.fleet.has_value() ||
              (running.fleet && !running.fleet->sameBackend(*next.fleet)),
          "fleet (the table and every key in it)");
  differs(running.metrics.listen != next.metrics.listen ||
              running.metrics.allow_non_loopback != next.metrics.allow_non_loopback,
          "metrics.listen");
  std::vector<std::string> was, is;
  for (const EndpointConfig& e : running.endpoints) was.push_back(e.name);
  for (const EndpointConfig& e : next.endpoints) is.push_back(e.name);
  if (was != is) {
    out.push_back("endpoints (the set and order of endpoints)");
    return out;
  }
  for (std::size_t i = 0; i < running.endpoints.size(); ++i) {
    const EndpointConfig& a = running.endpoints[i];
    const EndpointConfig& b = next.endpoints[i];
    const std::string key = "endpoints." + a.name;
    differs(a.executor != b.executor, key + ".executor");
    differs(a.cpu.per_batch_us != b.cpu.per_batch_us || a.cpu.per_token_us != b.cpu.per_token_us ||
                a.cpu.threads != b.cpu.threads || a.cpu.workload != b.cpu.workload,
            key + ".cpu");
    differs(a.cuda.device != b.cuda.device || a.cuda.streams != b.cuda.streams ||
                a.cuda.staging_bytes != b.cuda.staging_bytes || a.cuda.fallback != b.cuda.fallback,
            key + ".cuda");
    differs(
        a.worker.max_prompt_tokens != b.worker.max_prompt_tokens ||
            a.worker.max_sequences != b.worker.max_sequences,
        key + ".worker.max_prompt_tokens/max_sequences (a worker's segment is sized at attach)");
    differs(a.worker.prefix_block_tokens != b.worker.prefix_block_tokens,
            key +
                ".worker.prefix_block_tokens (the block hashes the daemon holds for queued "
                "requests and for its workers' caches)");
    differs(b.max_batch_tokens < a.max_batch_tokens,
            key + ".max_batch_tokens (it may grow, not shrink)");
    // A cuda executor's staging buffers are sized for these at start.
    differs(
        a.executor == ExecutorKind::kCuda && (a.max_batch_tokens != b.max_batch_tokens ||
                                              a.max_batch_requests != b.max_batch_requests),
        key + ".max_batch_tokens/max_batch_requests (a cuda endpoint's staging is sized at start)");
  }
  return out;
}

}  // namespace fairsched::config
