#include "daemon/fleet/redis_backend.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <array>
#include <cerrno>
#include <optional>
#include <string_view>
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

timeval toTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

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

RedisBackend::RedisBackend(RedisEndpoint endpoint) : endpoint_(std::move(endpoint)) {}

RedisBackend::~RedisBackend() {
  disconnect();
}

void RedisBackend::disconnect() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

std::optional<BackendFailure> RedisBackend::connect() {
  if (ctx_ != nullptr) return std::nullopt;
  const timeval connect_tv = toTimeval(endpoint_.connect_timeout);
  redisContext* c =
      endpoint_.unix_path.empty()
          ? redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, connect_tv)
          : redisConnectUnixWithTimeout(endpoint_.unix_path.c_str(), connect_tv);
  if (c == nullptr) return BackendFailure{BackendError::kConnect, "cannot allocate a context"};
  if (c->err != 0) {
    BackendFailure f{BackendError::kConnect, c->errstr};
    redisFree(c);
    return f;
  }
  if (redisSetTimeout(c, toTimeval(endpoint_.command_timeout)) != REDIS_OK) {
    redisFree(c);
    return BackendFailure{BackendError::kConnect, "cannot set the command timeout"};
  }
  ctx_ = c;
  return std::nullopt;
}

LeaseResult RedisBackend::call(const LeaseCall& c) {
  if (auto failed = connect()) return *failed;

  const TimeNs window_us = std::max<TimeNs>(1, c.window / kNsPerUs);
  const TimeNs width_us =
      (window_us + core::SlidingWindow::kSubBuckets - 1) / core::SlidingWindow::kSubBuckets;
  std::vector<std::string> args;
  args.reserve(10 + 2 * c.returns.size());
  args.emplace_back("EVALSHA");
  args.emplace_back(sha_);
  args.emplace_back("1");
  args.emplace_back(c.key);
  args.push_back(std::to_string(c.limit));
  args.push_back(std::to_string(window_us));
  args.push_back(std::to_string(width_us));
  args.push_back(std::to_string(c.want));
  args.push_back(std::to_string(std::max<std::uint64_t>(1, c.min)));
  args.push_back(std::to_string(c.returns.size()));
  for (const LeaseReturn& r : c.returns) {
    args.push_back(std::to_string(r.bucket));
    args.push_back(std::to_string(r.amount));
  }
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  auto run = [&](std::size_t first, std::size_t count) -> Reply {
    argv.clear();
    lens.clear();
    for (std::size_t i = first; i < first + count; ++i) {
      argv.push_back(args[i].data());
      lens.push_back(args[i].size());
    }
    round_trips_++;
    return Reply(static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data())));
  };
  auto ioFailure = [&]() -> LeaseResult {
    BackendFailure f{BackendError::kIo, ctx_->err != 0 ? ctx_->errstr : "no reply"};
    if (ctx_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      f.message = "no reply within " + std::to_string(endpoint_.command_timeout.count()) + " ms";
    }
    disconnect();
    return f;
  };

  Reply reply;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (sha_.empty()) {
      const std::array<std::string, 3> load{"SCRIPT", "LOAD", kScript};
      std::array<const char*, 3> largv{load[0].data(), load[1].data(), load[2].data()};
      std::array<std::size_t, 3> llen{load[0].size(), load[1].size(), load[2].size()};
      round_trips_++;
      Reply loaded(static_cast<redisReply*>(redisCommandArgv(ctx_, 3, largv.data(), llen.data())));
      if (!loaded) return ioFailure();
      if (loaded->type != REDIS_REPLY_STRING) {
        BackendFailure f{
            BackendError::kReply,
            std::string("SCRIPT LOAD: ") +
                (loaded->type == REDIS_REPLY_ERROR ? loaded->str : "unexpected reply")};
        disconnect();
        return f;
      }
      sha_.assign(loaded->str, loaded->len);
      args[1] = sha_;
    }
    reply = run(0, args.size());
    if (!reply) return ioFailure();
    if (reply->type == REDIS_REPLY_ERROR &&
        std::string_view(reply->str, reply->len).substr(0, 8) == "NOSCRIPT") {
      sha_.clear();  // the server lost its scripts (restart, SCRIPT FLUSH): load again
      continue;
    }
    break;
  }
  if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 4) {
    BackendFailure f{BackendError::kReply,
                     reply && reply->type == REDIS_REPLY_ERROR
                         ? std::string(reply->str, reply->len)
                         : std::string("unexpected reply to the lease script")};
    disconnect();
    return f;
  }
  for (std::size_t i = 0; i < 4; ++i) {
    if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
      disconnect();
      return BackendFailure{BackendError::kReply, "non-integer in the lease script's reply"};
    }
  }
  LeaseReply out;
  out.granted = static_cast<std::uint64_t>(std::max<long long>(0, reply->element[0]->integer));
  out.bucket = reply->element[1]->integer;
  out.retry_after = static_cast<TimeNs>(reply->element[2]->integer) * kNsPerUs;
  out.used = static_cast<std::uint64_t>(std::max<long long>(0, reply->element[3]->integer));
  return out;
}

}  // namespace fairsched::fleet
