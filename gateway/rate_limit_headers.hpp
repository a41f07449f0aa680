// The x-ratelimit-* headers OpenAI clients read: the tenant's limits on the
// gateway's endpoint (resolved from the daemon's own config, as the daemon
// resolves them: endpoint default → tier → tenant) and what this gateway has
// sent against them, counted by the daemon's sliding-window rule.
//
//   x-ratelimit-limit-requests / -tokens       the limit with the shortest window of each unit
//   x-ratelimit-remaining-requests / -tokens   limit − cost this gateway sent in the window
//   x-ratelimit-reset-requests / -tokens       until that window holds nothing ("1.250s")
//
// The daemon decides admissions; these numbers are the gateway's view, exact
// when the gateway is the tenant's only submitter. On a 429, the reset of
// the exhausted unit (or of both, when the gateway cannot tell) is at least
// the daemon's retry_after. Pure: time is passed in; one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/core/limit_spec.hpp"
#include "daemon/core/sliding_window.hpp"
#include "fairsched/http.hpp"

namespace fairsched::gateway {

struct TenantLimits {
  std::optional<core::LimitSpec> requests;
  std::optional<core::LimitSpec> tokens;
};

// The limits `tenant` gets on `endpoint` under `cfg`: a tenant listed in
// cfg.tenants has its own tier; an unlisted one the hint when it names a
// tier, else cfg.default_tier (or the last tier).
TenantLimits effectiveLimits(const config::Config& cfg, std::string_view endpoint,
                             std::string_view tenant, std::optional<std::string_view> tier_hint);

// "1.250s": whole milliseconds, rounded up.
std::string formatReset(std::chrono::nanoseconds d);

class RateLimitHeaders {
 public:
  struct Sent {
    TimeNs at = 0;
    std::uint64_t tokens = 0;
  };

  void setLimits(const std::string& tenant, TenantLimits limits);
  bool hasLimits(const std::string& tenant) const;

  // One request of `tokens` (prompt + max output) sent now.
  Sent add(const std::string& tenant, std::uint64_t tokens, TimeNs now);
  // Gives back what a request did not use: all of it when it was refused
  // (request_refused), else the tokens it reserved and did not produce.
  void refund(const std::string& tenant, const Sent& sent, bool request_refused,
              std::uint64_t unused_tokens);

  // The headers for `tenant` now; `retry_after` set on a 429.
  std::vector<HttpHeader> headers(const std::string& tenant, TimeNs now,
                                  std::optional<std::chrono::nanoseconds> retry_after = {},
                                  std::uint64_t next_tokens = 0);

 private:
  struct Window {
    core::LimitSpec spec;
    core::SlidingWindow window;
    TimeNs last_now = 0;
  };
  struct State {
    std::optional<Window> requests;
    std::optional<Window> tokens;
  };
  static void advance(Window& w, TimeNs now);

  std::unordered_map<std::string, State> tenants_;
};

}  // namespace fairsched::gateway
