// DaemonBridge (daemon_bridge.hpp), the replicas: added, updated and
// drained on a reload, their health (active checks, the relay's reports,
// ejections), capacity = "auto"'s metrics scrapes, take-over by another
// replica, and their state for /readyz. Their worker connections are in
// daemon_bridge_worker.cpp.
#include "gateway/daemon_bridge.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string>

#include "fairsched/name.hpp"
#include "gateway/upstream_call.hpp"

namespace fairsched::gateway {

std::shared_ptr<Replica> DaemonBridge::addReplica(const UpstreamConfig& u) {
  auto r = std::make_shared<Replica>(threads_, u);
  replicas_.push_back(r);
  if (running_loops_) {
    spawn(io_, workerLoop(r));
    spawn(io_, healthLoop(r));
    spawn(io_, metricsLoop(r));
  }
  return r;
}

void DaemonBridge::setUpstreams() {
  const std::lock_guard lock(mu_);
  for (const auto& r : replicas_) {
    const auto it = std::find_if(cfg_.upstreams.begin(), cfg_.upstreams.end(),
                                 [&](const UpstreamConfig& u) { return u.name == r->cfg.name; });
    if (it == cfg_.upstreams.end()) {
      if (!r->removed) {
        spdlog::info("upstream {} removed: draining ({} running)", r->cfg.name, r->running);
        r->removed = true;
      }
      continue;
    }
    if (it->url != r->cfg.url) {
      spdlog::warn("upstream {}: a new url ({}) takes effect only under a new name", r->cfg.name,
                   it->url);
    }
    UpstreamConfig next = *it;
    next.url = r->cfg.url;
    next.host = r->cfg.host;
    next.port = r->cfg.port;
    next.prefix = r->cfg.prefix;
    r->cfg = std::move(next);  // capacity, timeouts, pool and checks follow at once
    r->setPoolConfigs();
    r->autocap.setPolicy(capacityPolicy(r->cfg));
    r->scrape.cancel();  // a new interval, or capacity = "auto", applies now
    r->removed = false;
  }
  for (const UpstreamConfig& u : cfg_.upstreams) {
    const bool known = std::any_of(replicas_.begin(), replicas_.end(),
                                   [&](const auto& r) { return r->cfg.name == u.name; });
    if (!known) {
      spdlog::info("upstream {} added ({})", u.name, u.url);
      connectWorker(*addReplica(u), false);
    }
  }
  stateCapacity();
  const auto snapshot = replicas_;
  for (const auto& r : snapshot) detachIfDrained(*r);
}

namespace {

// capacity = "auto": the engine's figures at the last scrape, for /readyz.
std::string engineJson(const Replica& r) {
  if (!r.cfg.capacity_auto) return "";
  std::string out = ",\"engine\":{";
  if (const auto& l = r.autocap.last()) {
    out += "\"kind\":\"" + std::string(l->engine) +
           "\",\"running\":" + std::to_string(static_cast<long long>(l->running)) +
           ",\"waiting\":" + std::to_string(static_cast<long long>(l->waiting)) + ",";
    if (l->kv_usage) out += "\"kv_usage\":" + fmt::format("{:.3f}", *l->kv_usage) + ",";
  }
  out += "\"slow_start\":" + std::string(r.autocap.slowStart() ? "true" : "false") +
         ",\"scrape_error\":\"" + escapeForDisplay(r.scrape_error) + "\"}";
  return out;
}

}  // namespace

std::string DaemonBridge::upstreamsJson() const {
  const std::lock_guard lock(mu_);
  const TimeNs now = env_.now();
  std::string out = "[";
  for (const auto& r : replicas_) {
    if (out.size() > 1) out += ",";
    const std::string_view state =
        r->removed ? std::string_view("draining") : UpstreamHealth::toString(r->health.state(now));
    out += "{\"name\":\"" + escapeForDisplay(r->cfg.name) + "\",\"url\":\"" +
           escapeForDisplay(r->cfg.url) + "\",\"state\":\"" + std::string(state) +
           "\",\"attached\":" + (r->worker ? "true" : "false") +
           ",\"running\":" + std::to_string(r->running) +
           ",\"max_sequences\":" + std::to_string(r->maxSequences()) + ",\"capacity\":\"" +
           (r->cfg.capacity_auto ? "auto" : "fixed") + "\"" + engineJson(*r) +
           ",\"ejections\":" + std::to_string(r->health.ejections()) + ",\"why\":\"" +
           escapeForDisplay(r->health.why()) + "\"}";
  }
  return out + "]";
}

void DaemonBridge::upstreamOk(Replica& r) {
  const std::lock_guard lock(mu_);
  const bool was = r.health.usable(env_.now());
  r.health.callOk();
  if (!was && r.health.usable(env_.now())) {
    spdlog::info("upstream {} is healthy again", r.cfg.name);
    stateCapacity();
  }
}

void DaemonBridge::upstreamFailed(Replica& r, bool certain, std::string why) {
  const std::lock_guard lock(mu_);
  const std::uint64_t before = r.health.ejections();
  r.health.callFailed(env_.now(), certain, std::move(why));
  if (r.health.ejections() == before) return;
  spdlog::warn("upstream {} ejected for {} ms: {}", r.cfg.name,
               (r.health.ejectedUntil() - env_.now()) / 1'000'000, r.health.why());
  stateCapacity();
  // Its health loop (the bridge's thread) waits for the ejection's end.
  for (const auto& x : replicas_) {
    if (x.get() == &r) asio::post(io_, [x] { x->kick.cancel(); });
  }
}

std::shared_ptr<Replica> DaemonBridge::takeOver(Exchange& ex) {
  const std::lock_guard lock(mu_);
  if (!ex.assignment) return nullptr;
  const auto it = by_assignment_.find(*ex.assignment);
  if (it == by_assignment_.end()) return nullptr;  // the daemon ended it (a lost worker)
  Assigned& a = it->second;
  const TimeNs now = env_.now();
  std::shared_ptr<Replica> best;
  for (const auto& r : replicas_) {
    if (r == a.via || r->removed || !r->health.usable(now) || r->running >= r->maxSequences())
      continue;
    if (!best || r->maxSequences() - r->running > best->maxSequences() - best->running) {
      best = r;
    }
  }
  if (!best) return nullptr;
  spdlog::info("request {}: upstream {} unreachable; upstream {} runs it", ex.serial,
               a.via->cfg.name, best->cfg.name);
  if (a.via != a.replica) release(*a.via, a.kv);  // a second take-over: its room back
  best->running += 1;
  best->reserved += a.kv;
  a.via = best;
  ex.via = best;
  stateCapacity();
  return best;
}

bool DaemonBridge::roomLater(const Exchange& ex) const {
  const std::lock_guard lock(mu_);
  const TimeNs now = env_.now();
  return std::any_of(replicas_.begin(), replicas_.end(), [&](const auto& r) {
    return r != ex.via && !r->removed && r->health.usable(now) && r->maxSequences() > 0;
  });
}

std::shared_ptr<Replica> DaemonBridge::anyReplica() const {
  const std::lock_guard lock(mu_);
  const TimeNs now = env_.now();
  for (const auto& r : replicas_) {
    if (!r->removed && r->health.usable(now)) return r;
  }
  return replicas_.empty() ? nullptr : replicas_.front();
}

awaitable<void> DaemonBridge::healthLoop(std::shared_ptr<Replica> r) {
  error_code ec;
  TimeNs next_check = env_.now();  // a first check at start
  for (;;) {
    if (stopping_ || r->detached) co_return;
    const bool checks = !r->cfg.health_path.empty();
    TimeNs now = env_.now();
    UpstreamHealth::State before{};
    TimeNs ejected_until = 0;
    {
      const std::lock_guard lock(mu_);
      before = r->health.state(now);
      ejected_until = r->health.ejectedUntil();
    }
    if (checks && (now >= next_check || before == UpstreamHealth::State::kAwaitingCheck)) {
      co_await check(*r);
      next_check = env_.now() + static_cast<TimeNs>(r->cfg.health_interval_ms) * 1'000'000;
      continue;
    }
    TimeNs wake = checks ? next_check : kNever;
    if (ejected_until > now) wake = std::min(wake, ejected_until);
    if (wake == kNever) {
      r->kick.expires_at(SteadyTimer::time_point::max());
    } else {
      r->kick.expires_after(std::chrono::nanoseconds(wake - now));
    }
    co_await r->kick.async_wait(asio::redirect_error(use_awaitable, ec));
    // A backoff may have ended: the replica (or, in a panic, all) states again.
    const std::lock_guard lock(mu_);
    if (r->health.state(env_.now()) != before) stateCapacity();
  }
}

awaitable<std::string> DaemonBridge::getFromRoot(Replica& r, const std::string& path,
                                                 std::string& body, std::size_t limit) {
  UpstreamCall up(*r.pools.front());  // the bridge's thread's
  up.setResponseTimeout(milliseconds(r.cfg.health_timeout_ms));
  std::optional<UpstreamError> err = co_await up.connect();
  if (!err) {
    std::string none;
    std::string accept;
    err = co_await up.request(UpstreamCall::Method::kGet, path, std::move(none), std::move(accept),
                              /*under_prefix=*/false);
  }
  if (!err) err = co_await up.readAll(body, limit);
  if (err) co_return "GET " + path + ": " + err->why;
  if (up.status() >= 500) co_return "GET " + path + ": HTTP " + std::to_string(up.status());
  co_return "";
}

awaitable<void> DaemonBridge::check(Replica& r) {
  std::string body;
  std::string why = co_await getFromRoot(r, r.cfg.health_path, body, 64 * 1024);
  const bool ok = why.empty();
  const TimeNs now = env_.now();
  const std::lock_guard lock(mu_);
  const bool was = r.health.usable(now);
  const std::uint64_t ejections = r.health.ejections();
  r.health.checked(ok, now, why);
  if (r.health.ejections() != ejections) {
    spdlog::warn("upstream {} ejected for {} ms: {}", r.cfg.name,
                 (r.health.ejectedUntil() - now) / 1'000'000, r.health.why());
    stateCapacity();
  } else if (!was && r.health.usable(now)) {
    spdlog::info("upstream {} is healthy again ({} passed)", r.cfg.name, r.cfg.health_path);
    stateCapacity();
  }
}

awaitable<void> DaemonBridge::metricsLoop(std::shared_ptr<Replica> r) {
  error_code ec;
  for (;;) {
    if (stopping_ || r->detached) co_return;
    bool attached = false;
    {
      const std::lock_guard lock(mu_);
      attached = r->worker.has_value();
    }
    if (r->cfg.capacity_auto && attached) co_await scrape(*r);
    if (stopping_ || r->detached) co_return;
    r->scrape.expires_after(milliseconds(r->cfg.metrics_interval_ms));
    co_await r->scrape.async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> DaemonBridge::scrape(Replica& r) {
  std::string body;
  std::string why = co_await getFromRoot(r, r.cfg.metrics_path, body, 4u << 20);
  std::optional<EngineLoad> load;
  if (why.empty()) {
    load = parseEngineMetrics(body, why);
    if (!why.empty()) why = "GET " + r.cfg.metrics_path + ": " + why;
  }
  const std::lock_guard lock(mu_);
  if (!load) {
    // The limit stays where it was: a scrape that fails says nothing about the engine.
    if (why != r.scrape_error) {
      spdlog::warn("upstream {}: capacity stays {}: {}", r.cfg.name, r.autocap.limit(), why);
    }
    r.scrape_error = std::move(why);
    co_return;
  }
  if (!r.scrape_error.empty()) spdlog::info("upstream {}: metrics read again", r.cfg.name);
  r.scrape_error.clear();
  const std::uint32_t before = r.autocap.limit();
  r.autocap.observe(*load, r.running);
  if (r.autocap.limit() != before) {
    spdlog::debug("upstream {}: capacity {} -> {} ({} running, {} waiting)", r.cfg.name, before,
                  r.autocap.limit(), load->running, load->waiting);
    stateCapacity(r, !anyUsable());
  }
}

}  // namespace fairsched::gateway
