#include "daemon/fleet/redis_backend.hpp"

#include <hiredis/hiredis.h>
#include <openssl/evp.h>

#include <algorithm>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/core/sliding_window.hpp"

namespace fairsched::fleet {
namespace {

// KEYS[1]: the limit's hash. ARGV: limit, window_us, width_us, want, min,
// n_returns, then n_returns pairs (bucket, amount).
// Returns {granted, bucket, retry_after_us, used}.
constexpr const char* kScript = R"lua(
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local width = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local min = tonumber(ARGV[5])
local n = tonumber(ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = math.floor(now / width)
local oldest = math.floor((now - window) / width)
for i = 0, n - 1 do
  local b = tonumber(ARGV[7 + 2 * i])
  local amount = tonumber(ARGV[8 + 2 * i])
  if b >= oldest then
    local field = string.format('%d', b)
    local v = tonumber(redis.call('HGET', key, field) or '0')
    if v > 0 then
      local left = v - math.min(v, amount)
      if left > 0 then
        redis.call('HSET', key, field, string.format('%d', left))
      else
        redis.call('HDEL', key, field)
      end
    end
  end
end
local used = 0
local bs = {}
local vs = {}
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local b = tonumber(all[i])
  local v = tonumber(all[i + 1])
  if b < oldest then
    redis.call('HDEL', key, all[i])
  else
    used = used + v
    bs[#bs + 1] = b
    vs[b] = v
  end
end
local granted = 0
local retry = 0
if want > 0 then
  local avail = limit - used
  if avail >= min then
    granted = math.min(want, avail)
    redis.call('HINCRBY', key, string.format('%d', cur), string.format('%d', granted))
  else
    table.sort(bs)
    local room = avail
    for _, b in ipairs(bs) do
      room = room + vs[b]
      if room >= min then
        retry = (b + 1) * width + window - now
        break
      end
    end
    if retry < 1 then retry = 1 end
  end
end
if redis.call('EXISTS', key) == 1 then
  redis.call('PEXPIRE', key, math.floor((window + width) / 1000) + 1000)
end
return {granted, cur, retry, used + granted}
)lua";

// Redirections, reloads and retries one call may follow before it gives up.
constexpr int kMaxAttempts = 8;

std::string sha1Hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha1(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

LeaseResult leaseReply(const redisReply& reply, const config::RedisAddress& at) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 4) {
    return BackendFailure{BackendError::kReply,
                          at.str() + ": unexpected reply to the lease script"};
  }
  for (std::size_t i = 0; i < 4; ++i) {
    if (reply.element[i]->type != REDIS_REPLY_INTEGER) {
      return BackendFailure{BackendError::kReply,
                            at.str() + ": non-integer in the lease script's reply"};
    }
  }
  LeaseReply out;
  out.granted = static_cast<std::uint64_t>(std::max<long long>(0, reply.element[0]->integer));
  out.bucket = reply.element[1]->integer;
  out.retry_after = static_cast<TimeNs>(reply.element[2]->integer) * kNsPerUs;
  out.used = static_cast<std::uint64_t>(std::max<long long>(0, reply.element[3]->integer));
  return out;
}

}  // namespace

const char* RedisBackend::script() {
  return kScript;
}

std::string limitKey(std::string_view prefix, std::string_view tenant, std::string_view endpoint,
                     const core::LimitSpec& spec) {
  std::string key(prefix);
  key += ":{";
  key += tenant;
  key += "}:";
  key += endpoint;
  key += spec.unit == core::LimitUnit::kRequests ? ":requests/" : ":tokens/";
  if (spec.window_ns % kNsPerSec == 0) {
    key += std::to_string(spec.window_ns / kNsPerSec) + "s";
  } else {
    key += std::to_string(spec.window_ns) + "ns";
  }
  return key;
}

RedisBackendOptions RedisBackendOptions::from(const RedisEndpoint& endpoint) {
  RedisBackendOptions o;
  config::RedisAddress a;
  a.host = endpoint.host;
  a.port = endpoint.port;
  a.unix_path = endpoint.unix_path;
  o.nodes.push_back(std::move(a));
  o.data.connect_timeout = endpoint.connect_timeout;
  o.data.command_timeout = endpoint.command_timeout;
  o.sentinel = o.data;
  return o;
}

std::variant<RedisBackendOptions, std::string> backendOptionsFrom(const config::FleetConfig& cfg) {
  RedisBackendOptions o;
  o.mode = cfg.mode;
  o.nodes = cfg.nodes;
  o.master_name = cfg.master_name;
  o.data.connect_timeout = std::chrono::milliseconds(cfg.connect_timeout_ms);
  o.data.command_timeout = std::chrono::milliseconds(cfg.command_timeout_ms);
  if (cfg.tls) {
    auto tls = TlsContext::make(cfg.tls_options);
    if (auto* error = std::get_if<std::string>(&tls)) return *error;
    o.data.tls = std::get<std::shared_ptr<TlsContext>>(std::move(tls));
  }
  o.sentinel = o.data;
  o.data.auth = cfg.auth;
  o.data.db = cfg.db;
  o.sentinel.auth = cfg.sentinel_auth;
  return o;
}

RedisBackend::RedisBackend(RedisBackendOptions options)
    : o_(std::move(options)), sha_(sha1Hex(kScript)), mode_(o_.mode) {
  if (mode_ == config::FleetMode::kSingle && !o_.nodes.empty()) {
    master_ = o_.nodes.front();
    master_stale_ = false;
  }
}

RedisBackend::~RedisBackend() = default;

void RedisBackend::disconnect() {
  for (auto& [address, conn] : conns_) closed_round_trips_ += conn.link->roundTrips();
  conns_.clear();
  slots_stale_ = true;
  if (mode_ == config::FleetMode::kSentinel) master_stale_ = true;
}

std::uint64_t RedisBackend::roundTrips() const {
  std::uint64_t n = closed_round_trips_;
  for (const auto& [address, conn] : conns_) n += conn.link->roundTrips();
  return n;
}

std::optional<BackendFailure> RedisBackend::probe() {
  Target target = route(0);
  if (auto* failed = std::get_if<BackendFailure>(&target)) return *failed;
  const config::RedisAddress at = std::get<config::RedisAddress>(target);
  auto conn = connection(at);
  if (auto* failed = std::get_if<BackendFailure>(&conn)) return *failed;
  // SCRIPT LOAD proves the route, the connection, AUTH and the user's right
  // to the script in one round trip.
  auto reply = std::get<Conn*>(conn)->link->command({"SCRIPT", "LOAD", kScript});
  if (auto* failed = std::get_if<BackendFailure>(&reply)) {
    lost(at);
    return *failed;
  }
  const std::string_view error = errorText(*std::get<RedisReply>(reply));
  if (!error.empty()) {
    BackendFailure f{isAuthError(error) ? BackendError::kAuth : BackendError::kReply,
                     at.str() + ": SCRIPT LOAD: " + std::string(error)};
    lost(at);
    return f;
  }
  std::get<Conn*>(conn)->script_loaded = true;
  return std::nullopt;
}

RedisCommand RedisBackend::evalCommand(const LeaseCall& c) const {
  const TimeNs window_us = std::max<TimeNs>(1, c.window / kNsPerUs);
  const TimeNs width_us =
      (window_us + core::SlidingWindow::kSubBuckets - 1) / core::SlidingWindow::kSubBuckets;
  RedisCommand eval;
  eval.reserve(10 + 2 * c.returns.size());
  eval.emplace_back("EVALSHA");
  eval.push_back(sha_);
  eval.emplace_back("1");
  eval.emplace_back(c.key);
  eval.push_back(std::to_string(c.limit));
  eval.push_back(std::to_string(window_us));
  eval.push_back(std::to_string(width_us));
  eval.push_back(std::to_string(c.want));
  eval.push_back(std::to_string(std::max<std::uint64_t>(1, c.min)));
  eval.push_back(std::to_string(c.returns.size()));
  for (const LeaseReturn& r : c.returns) {
    eval.push_back(std::to_string(r.bucket));
    eval.push_back(std::to_string(r.amount));
  }
  return eval;
}

std::vector<LeaseResult> RedisBackend::callBatch(std::span<const LeaseCall> calls) {
  std::vector<LeaseResult> out(calls.size(), LeaseResult(LeaseReply{}));
  struct Group {
    config::RedisAddress at;
    std::vector<std::size_t> calls;
    Conn* link = nullptr;
    bool load = false;
  };
  std::vector<Group> groups;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    Target target = route(keySlot(calls[i].key), /*may_ask=*/i == 0);
    if (auto* failed = std::get_if<BackendFailure>(&target)) {
      out[i] = *failed;
      continue;
    }
    const auto& at = std::get<config::RedisAddress>(target);
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.at == at; });
    if (g == groups.end()) g = groups.insert(groups.end(), Group{at, {}, nullptr, false});
    g->calls.push_back(i);
  }
  // Everything sent first, then every server's replies read: the servers
  // work at once, a batch costs the slowest one's round trip.
  std::vector<RedisCommand> commands;
  for (Group& g : groups) {
    auto conn = connection(g.at);
    if (auto* failed = std::get_if<BackendFailure>(&conn)) {
      for (const std::size_t i : g.calls) out[i] = *failed;
      g.calls.clear();
      continue;
    }
    g.link = std::get<Conn*>(conn);
    g.load = !g.link->script_loaded;
    commands.clear();
    if (g.load) commands.push_back({"SCRIPT", "LOAD", kScript});
    for (const std::size_t i : g.calls) commands.push_back(evalCommand(calls[i]));
    if (auto failed = g.link->link->send(commands)) {
      for (const std::size_t i : g.calls) out[i] = *failed;
      g.calls.clear();
      lost(g.at);
    }
  }
  std::vector<std::size_t> alone;  // answered with a redirection or another retryable error
  for (Group& g : groups) {
    if (g.calls.empty()) continue;
    auto replies = g.link->link->receive(g.calls.size() + (g.load ? 1 : 0));
    if (auto* failed = std::get_if<BackendFailure>(&replies)) {
      for (const std::size_t i : g.calls) out[i] = *failed;
      lost(g.at);
      continue;
    }
    const auto& got = std::get<std::vector<RedisReply>>(replies);
    if (g.load) {
      const std::string_view error = errorText(*got.front());
      if (!error.empty()) {
        const BackendFailure f{isAuthError(error) ? BackendError::kAuth : BackendError::kReply,
                               g.at.str() + ": SCRIPT LOAD: " + std::string(error)};
        for (const std::size_t i : g.calls) out[i] = f;
        lost(g.at);
        continue;
      }
      g.link->script_loaded = true;
    }
    bool broken = false;
    for (std::size_t k = 0; k < g.calls.size(); ++k) {
      const redisReply& reply = *got[k + (g.load ? 1 : 0)];
      if (errorText(reply).empty()) {
        out[g.calls[k]] = leaseReply(reply, g.at);
        broken = broken || std::holds_alternative<BackendFailure>(out[g.calls[k]]);
      } else {
        alone.push_back(g.calls[k]);
      }
    }
    if (broken) lost(g.at);
  }
  for (const std::size_t i : alone) out[i] = call(calls[i]);
  return out;
}

LeaseResult RedisBackend::call(const LeaseCall& c) {
  const RedisCommand eval = evalCommand(c);
  const std::uint16_t slot = keySlot(c.key);
  std::optional<config::RedisAddress> ask;  // this call only: the slot is being imported there
  std::string why = "too many redirections";
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Target target = ask ? Target(*ask) : route(slot);
    if (auto* failed = std::get_if<BackendFailure>(&target)) return *failed;
    const config::RedisAddress at = std::get<config::RedisAddress>(target);
    auto conn = connection(at);
    if (auto* failed = std::get_if<BackendFailure>(&conn)) return *failed;
    Conn& link = *std::get<Conn*>(conn);

    std::vector<RedisCommand> commands;
    const bool load = !link.script_loaded;
    if (load) commands.push_back({"SCRIPT", "LOAD", kScript});
    if (ask) commands.push_back({"ASKING"});
    commands.push_back(eval);
    auto replies = link.link->pipeline(commands);
    if (auto* failed = std::get_if<BackendFailure>(&replies)) {
      lost(at);
      return *failed;
    }
    const auto& got = std::get<std::vector<RedisReply>>(replies);
    if (load) {
      const std::string_view error = errorText(*got.front());
      if (!error.empty()) {
        BackendFailure f{isAuthError(error) ? BackendError::kAuth : BackendError::kReply,
                         at.str() + ": SCRIPT LOAD: " + std::string(error)};
        lost(at);
        return f;
      }
      link.script_loaded = true;
    }
    const redisReply& reply = *got.back();
    const std::string_view error = errorText(reply);
    if (error.empty()) {
      LeaseResult out = leaseReply(reply, at);
      if (std::holds_alternative<BackendFailure>(out)) lost(at);
      return out;
    }
    why = at.str() + ": " + std::string(error);
    if (error.starts_with("NOSCRIPT")) {  // the server lost its scripts (restart, SCRIPT FLUSH)
      link.script_loaded = false;
      continue;
    }
    if (std::optional<Redirect> r = parseRedirect(error, at)) {
      if (r->kind == Redirect::Kind::kMoved) {
        followMoved(*r);
        ask.reset();
      } else {
        topo_.ask++;
        changed();
        ask = r->to;
      }
      continue;
    }
    ask.reset();
    if (error.starts_with("TRYAGAIN") || error.starts_with("CLUSTERDOWN")) {
      // A slot in the middle of a move, or a cluster electing a new master:
      // a short pause, bounded by the command timeout over all attempts.
      topo_.retried++;
      changed();
      if (error.starts_with("CLUSTERDOWN")) slots_stale_ = true;
      std::this_thread::sleep_for(o_.data.command_timeout / kMaxAttempts);
      continue;
    }
    if (error.starts_with("READONLY") || error.starts_with("MASTERDOWN")) {
      lost(at);  // a demoted master: ask the sentinels (or the cluster) again
      if (mode_ == config::FleetMode::kSingle) break;
      continue;
    }
    BackendFailure f{isAuthError(error) ? BackendError::kAuth : BackendError::kReply, why};
    lost(at);
    return f;
  }
  return BackendFailure{BackendError::kReply, why};
}

}  // namespace fairsched::fleet
