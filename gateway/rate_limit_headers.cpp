#include "gateway/rate_limit_headers.hpp"

#include <algorithm>

#include "daemon/config/scheduler_setup.hpp"

namespace fairsched::gateway {

namespace {

const std::vector<core::LimitSpec>* endpointLimits(const std::vector<config::EndpointLimits>& v,
                                                   std::string_view endpoint) {
  for (const config::EndpointLimits& el : v) {
    if (el.endpoint == endpoint) return &el.limits;
  }
  return nullptr;
}

}  // namespace

TenantLimits effectiveLimits(const config::Config& cfg, std::string_view endpoint,
                             std::string_view tenant, std::optional<std::string_view> tier_hint) {
  TenantLimits out;
  const config::EndpointConfig* ep = cfg.findEndpoint(endpoint);
  if (ep == nullptr) return out;
  std::vector<core::LimitSpec> limits = ep->limits;
  const config::TenantConfig* tc = cfg.findTenant(tenant);
  const config::TierConfig* tier = nullptr;
  if (tc != nullptr) {
    tier = cfg.findTier(tc->tier);
  } else if (tier_hint) {
    tier = cfg.findTier(*tier_hint);
  }
  if (tier == nullptr && !cfg.default_tier.empty()) tier = cfg.findTier(cfg.default_tier);
  if (tier == nullptr && !cfg.tiers.empty()) tier = &cfg.tiers.back();
  if (tier != nullptr) {
    if (const auto* l = endpointLimits(tier->limits, endpoint)) config::mergeLimits(limits, *l);
  }
  if (tc != nullptr) {
    if (const auto* l = endpointLimits(tc->limits, endpoint)) config::mergeLimits(limits, *l);
  }
  for (const core::LimitSpec& s : limits) {
    if (s.amount == 0) continue;  // "unlimited"
    auto& slot = s.unit == core::LimitUnit::kRequests ? out.requests : out.tokens;
    if (!slot || s.window_ns < slot->window_ns) slot = s;
  }
  return out;
}

std::string formatReset(std::chrono::nanoseconds d) {
  const std::int64_t ms = d.count() <= 0 ? 0 : (d.count() + 999'999) / 1'000'000;
  std::string frac = std::to_string(ms % 1000);
  while (frac.size() < 3) frac.insert(frac.begin(), '0');
  return std::to_string(ms / 1000) + "." + frac + "s";
}

void RateLimitHeaders::setLimits(const std::string& tenant, TenantLimits limits) {
  State& s = tenants_[tenant];
  auto set = [](std::optional<Window>& w, const std::optional<core::LimitSpec>& spec) {
    if (!spec) {
      w.reset();
    } else if (!w || !(w->spec == *spec)) {
      w = Window{*spec, {}, 0};
    }
  };
  set(s.requests, limits.requests);
  set(s.tokens, limits.tokens);
}

bool RateLimitHeaders::hasLimits(const std::string& tenant) const {
  const auto it = tenants_.find(tenant);
  return it != tenants_.end() && (it->second.requests || it->second.tokens);
}

void RateLimitHeaders::advance(Window& w, TimeNs now) {
  w.last_now = std::max(w.last_now, now);  // time never goes back for the window
  w.window.advance(w.last_now, w.spec.window_ns,
                   core::SlidingWindow::bucketWidth(w.spec.window_ns));
}

RateLimitHeaders::Sent RateLimitHeaders::add(const std::string& tenant, std::uint64_t tokens,
                                             TimeNs now) {
  Sent sent{now, tokens};
  const auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return sent;
  for (auto* w : {&it->second.requests, &it->second.tokens}) {
    if (!*w) continue;
    advance(**w, now);
    sent.at = (*w)->last_now;
    const std::uint64_t cost = w == &it->second.requests ? 1 : tokens;
    (*w)->window.add(cost, (*w)->last_now, core::SlidingWindow::bucketWidth((*w)->spec.window_ns));
  }
  return sent;
}

void RateLimitHeaders::refund(const std::string& tenant, const Sent& sent, bool request_refused,
                              std::uint64_t unused_tokens) {
  const auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return;
  if (auto& w = it->second.requests; w && request_refused) {
    w->window.refund(1, sent.at, core::SlidingWindow::bucketWidth(w->spec.window_ns));
  }
  if (auto& w = it->second.tokens; w) {
    const std::uint64_t back = request_refused ? sent.tokens : std::min(unused_tokens, sent.tokens);
    if (back > 0)
      w->window.refund(back, sent.at, core::SlidingWindow::bucketWidth(w->spec.window_ns));
  }
}

std::vector<HttpHeader> RateLimitHeaders::headers(
    const std::string& tenant, TimeNs now, std::optional<std::chrono::nanoseconds> retry_after,
    std::uint64_t next_tokens) {
  std::vector<HttpHeader> out;
  const auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return out;
  struct Row {
    std::optional<Window>* w;
    const char* unit;
    std::uint64_t next;
  };
  const Row rows[] = {{&it->second.requests, "requests", 1},
                      {&it->second.tokens, "tokens", std::max<std::uint64_t>(next_tokens, 1)}};
  // On a 429: which unit looks exhausted from here.
  bool any_exhausted = false;
  bool exhausted[2] = {false, false};
  for (int i = 0; i < 2; ++i) {
    auto& w = *rows[i].w;
    if (!w) continue;
    advance(*w, now);
    exhausted[i] = w->window.used() + rows[i].next > w->spec.amount;
    any_exhausted = any_exhausted || exhausted[i];
  }
  for (int i = 0; i < 2; ++i) {
    auto& w = *rows[i].w;
    if (!w) continue;
    const std::uint64_t used = w->window.used();
    const std::uint64_t remaining = used >= w->spec.amount ? 0 : w->spec.amount - used;
    // Until the window holds nothing: when `amount` more would fit.
    const TimeNs empty_at = used == 0 ? w->last_now
                                      : w->window.admitAt(w->spec.amount, w->spec.amount,
                                                          w->last_now, w->spec.window_ns);
    std::chrono::nanoseconds reset{std::max<TimeNs>(0, empty_at - w->last_now)};
    if (retry_after && (exhausted[i] || !any_exhausted)) reset = std::max(reset, *retry_after);
    const std::string unit = rows[i].unit;
    out.push_back({"x-ratelimit-limit-" + unit, std::to_string(w->spec.amount)});
    out.push_back({"x-ratelimit-remaining-" + unit,
                   std::to_string(retry_after && exhausted[i] ? 0 : remaining)});
    out.push_back({"x-ratelimit-reset-" + unit, formatReset(reset)});
  }
  return out;
}

}  // namespace fairsched::gateway
