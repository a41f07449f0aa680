#include "daemon/fleet/fleet_limiter.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "daemon/fleet/redis_backend.hpp"

namespace fairsched::fleet {

struct FleetLimiter::Entry {
  Entry(std::string k, const core::LimitSpec& s, std::uint64_t lease, std::uint32_t hosts)
      : key(std::move(k)),
        spec(s),
        pool(lease, s.window_ns),
        width(core::SlidingWindow::bucketWidth(s.window_ns)),
        local_amount(std::max<std::uint64_t>(1, s.amount / std::max<std::uint32_t>(1, hosts))) {}

  const std::string key;
  const core::LimitSpec spec;
  std::mutex mu;
  LeasePool pool;             // guarded by mu
  core::SlidingWindow local;  // guarded by mu; local_share while degraded
  TimeNs local_now = 0;       // guarded by mu; latest time seen by `local`
  const TimeNs width;
  const std::uint64_t local_amount;
  bool queued = false;  // guarded by mu: in the work queue or the retry list
  bool closed = false;  // guarded by mu: no account left; only returns remain to be sent
};

class FleetLimiter::Account final : public core::FleetAccount {
 public:
  Account(FleetLimiter* owner, EntryPtr e) : owner_(owner), e_(std::move(e)) {}
  core::FleetDecision take(std::uint64_t cost, TimeNs now) override {
    return owner_->take(e_, cost, now);
  }
  void refund(std::uint64_t cost, TimeNs taken_at) override {
    owner_->refund(*e_, cost, taken_at, taken_at);
  }

 private:
  FleetLimiter* owner_;
  EntryPtr e_;
};

FleetOptions fleetOptionsFrom(const config::FleetConfig& cfg) {
  FleetOptions o;
  o.key_prefix = cfg.key_prefix;
  o.lease = cfg.lease;
  o.hosts = cfg.hosts;
  o.on_backend_error = cfg.on_backend_error;
  o.seed = static_cast<std::uint64_t>(daemon::monotonicNow());
  return o;
}

std::variant<std::unique_ptr<FleetLimiter>, std::string> makeFleetLimiter(
    const config::FleetConfig& cfg) {
  auto options = backendOptionsFrom(cfg);
  if (auto* error = std::get_if<std::string>(&options)) return *error;
  if (cfg.tls && cfg.tls_options.insecure_skip_verify) {
    spdlog::warn(
        "fleet: tls_insecure_skip_verify = true: the Redis server's certificate is NOT verified; "
        "anyone on the path can read and change the fleet's counts. For tests only");
  }
  return std::make_unique<FleetLimiter>(
      fleetOptionsFrom(cfg),
      std::make_unique<RedisBackend>(std::get<RedisBackendOptions>(std::move(options))));
}

FleetLimiter::FleetLimiter(FleetOptions options, std::unique_ptr<LeaseBackend> backend,
                           const daemon::Env& env)
    : options_(std::move(options)),
      backend_(std::move(backend)),
      env_(env),
      breaker_(options_.breaker, options_.seed) {}

FleetLimiter::~FleetLimiter() {
  stop();
}

std::uint64_t FleetLimiter::leaseFor(const core::LimitSpec& spec) const {
  if (options_.lease != 0) return options_.lease;
  const std::uint64_t hosts = std::max<std::uint32_t>(1, options_.hosts);
  return std::max<std::uint64_t>(1, spec.amount / (100 * hosts));
}

void FleetLimiter::start() {
  if (thread_.joinable() || stopped_) return;
  thread_ = std::thread([this] { run(); });
}

std::unique_ptr<core::FleetAccount> FleetLimiter::open(std::string_view tenant,
                                                       std::string_view endpoint,
                                                       const core::LimitSpec& spec) {
  std::string key = limitKey(options_.key_prefix, tenant, endpoint, spec);
  EntryPtr e;
  {
    std::lock_guard lk(registry_mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second->spec.amount != spec.amount) {
      // A new limit, or the same key with another amount (a reload): a fresh
      // pool; the old one is released by the sweep once its accounts close.
      // The same Redis key counts both, so what the old pool owes (and the
      // backend's "budget spent" answer) moves to the new one.
      auto fresh = std::make_shared<Entry>(key, spec, leaseFor(spec), options_.hosts);
      if (it != entries_.end()) {
        {
          std::lock_guard old_lk(it->second->mu);
          fresh->pool.adoptDebt(it->second->pool);
        }
        replaced_.push_back(it->second);
      }
      it = entries_.insert_or_assign(std::move(key), std::move(fresh)).first;
    }
    e = it->second;
  }
  return std::make_unique<Account>(this, std::move(e));
}

core::FleetDecision FleetLimiter::take(const EntryPtr& e, std::uint64_t cost, TimeNs now) {
  core::FleetDecision d;
  bool push = false;
  {
    std::lock_guard lk(e->mu);
    // No borrowing while the backend is down: on_backend_error decides then.
    const bool degraded = degraded_.load(std::memory_order_acquire);
    d = e->pool.take(cost, now, !degraded);
    if (!d.admitted && degraded) d = degradedTake(*e, cost, now);
    if (!e->queued && e->pool.wantsFetch(now)) {
      e->queued = true;
      push = true;
    }
  }
  if (push) {
    {
      std::lock_guard lk(queue_mu_);
      work_.push_back(e);
    }
    queue_cv_.notify_one();
  }
  return d;
}

// REQUIRES: e.mu held.
core::FleetDecision FleetLimiter::degradedTake(Entry& e, std::uint64_t cost, TimeNs now) {
  switch (options_.on_backend_error) {
    case config::FleetErrorPolicy::kFailOpen:
      e.pool.markBypassed(now);
      degraded_admitted_.fetch_add(1, std::memory_order_relaxed);
      return {true, 0};
    case config::FleetErrorPolicy::kFailClosed: {
      degraded_rejected_.fetch_add(1, std::memory_order_relaxed);
      const TimeNs probe = probe_at_.load(std::memory_order_relaxed);
      return {false, std::max<TimeNs>(LeasePool::kFetchWait, probe - now)};
    }
    case config::FleetErrorPolicy::kLocalShare: {
      e.local_now = std::max(e.local_now, now);
      const TimeNs t = e.local_now;
      e.local.advance(t, e.spec.window_ns, e.width);
      if (e.local.used() + cost <= e.local_amount) {
        e.local.add(cost, t, e.width);
        e.pool.markBypassed(now);
        degraded_admitted_.fetch_add(1, std::memory_order_relaxed);
        return {true, 0};
      }
      degraded_rejected_.fetch_add(1, std::memory_order_relaxed);
      const TimeNs at = e.local.admitAt(cost, e.local_amount, t, e.spec.window_ns);
      // A request larger than the local share never fits locally: retry once
      // the backend may be back.
      const TimeNs probe = probe_at_.load(std::memory_order_relaxed);
      return {false, at == kNever ? std::max<TimeNs>(LeasePool::kFetchWait, probe - now)
                                  : std::max<TimeNs>(1, at - t)};
    }
  }
  return {false, LeasePool::kFetchWait};
}

void FleetLimiter::refund(Entry& e, std::uint64_t cost, TimeNs taken_at, TimeNs now) {
  std::lock_guard lk(e.mu);
  if (e.pool.bypassed(taken_at)) {
    if (options_.on_backend_error == config::FleetErrorPolicy::kLocalShare) {
      e.local.refund(cost, taken_at, e.width);
    }
    return;
  }
  e.pool.refund(cost, taken_at, std::max(now, taken_at));
}

void FleetLimiter::publish(bool transition) {
  const BreakerState st = breaker_.state();
  probe_at_.store(breaker_.openUntil(), std::memory_order_relaxed);
  degraded_.store(st != BreakerState::kClosed, std::memory_order_release);
  {
    std::lock_guard lk(stats_mu_);
    breaker_state_ = st;
    breaker_counters_ = breaker_.counters();
    round_trips_ = backend_->roundTrips();
    if (backend_->topologyVersion() != topology_version_) {
      topology_version_ = backend_->topologyVersion();
      topology_ = backend_->topology();
    }
  }
  if (!transition) return;
  const char* policy =
      options_.on_backend_error == config::FleetErrorPolicy::kFailOpen     ? "fail_open"
      : options_.on_backend_error == config::FleetErrorPolicy::kFailClosed ? "fail_closed"
                                                                           : "local_share";
  // One warning when an outage starts and one line when it ends; the probes
  // in between (every few hundred ms) only at debug level.
  switch (st) {
    case BreakerState::kOpen:
      if (outage_since_ == kNever) {
        outage_since_ = env_.now();
        spdlog::warn(
            "fleet: backend unreachable, circuit breaker open (next probe in {} ms); "
            "on_backend_error = {}",
            std::max<TimeNs>(0, breaker_.openUntil() - env_.now()) / kNsPerMs, policy);
      } else {
        spdlog::debug("fleet: probe failed, circuit breaker open again (next probe in {} ms)",
                      std::max<TimeNs>(0, breaker_.openUntil() - env_.now()) / kNsPerMs);
      }
      break;
    case BreakerState::kHalfOpen:
      spdlog::debug("fleet: circuit breaker half-open, probing the backend");
      break;
    case BreakerState::kClosed:
      spdlog::info("fleet: backend reachable again after {} ms, circuit breaker closed",
                   outage_since_ == kNever ? 0 : (env_.now() - outage_since_) / kNsPerMs);
      outage_since_ = kNever;
      break;
  }
}

void FleetLimiter::serve(std::vector<EntryPtr>& batch, std::vector<EntryPtr>& retry) {
  const TimeNs now = env_.now();
  struct Pending {
    EntryPtr e;
    FetchOrder order;
  };
  std::vector<Pending> pending;
  for (EntryPtr& e : batch) {
    {
      std::lock_guard lk(e->mu);
      if ((e->closed || !e->pool.wantsFetch(now)) && !e->pool.hasReturns()) {
        e->queued = false;
        continue;
      }
    }
    // Closed: every call may go. Otherwise the breaker lets one probe out.
    if (!pending.empty() && breaker_.state() != BreakerState::kClosed) {
      retry.push_back(std::move(e));
      continue;
    }
    if (pending.empty()) {
      const BreakerState before = breaker_.state();
      if (!breaker_.allow(now)) {
        retry.push_back(std::move(e));
        continue;
      }
      if (breaker_.state() != before) publish(true);
    }
    FetchOrder order;
    {
      std::lock_guard lk(e->mu);
      order = e->pool.beginFetch(now, !e->closed && e->pool.wantsFetch(now));
    }
    pending.push_back({std::move(e), std::move(order)});
  }
  if (pending.empty()) return;
  std::vector<LeaseCall> calls(pending.size());
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const Entry& e = *pending[i].e;
    calls[i].key = e.key;
    calls[i].limit = e.spec.amount;
    calls[i].window = e.spec.window_ns;
    calls[i].want = pending[i].order.want;
    calls[i].min = pending[i].order.min;
    calls[i].returns = pending[i].order.returns;
  }
  // One round trip per server for the whole batch.
  const std::vector<LeaseResult> results = backend_->callBatch(calls);
  const TimeNs done = env_.now();
  {
    std::lock_guard lk(stats_mu_);
    backend_calls_ += pending.size();
  }
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const EntryPtr& e = pending[i].e;
    const FetchOrder& order = pending[i].order;
    if (const auto* failure = std::get_if<BackendFailure>(&results[i])) {
      {
        std::lock_guard lk(stats_mu_);
        backend_failures_++;
        last_error_ = std::string(toString(failure->error)) + ": " + failure->message;
      }
      const bool changed = breaker_.onFailure(done);
      if (outage_since_ == kNever) {
        spdlog::warn("fleet: {} ({}): {}", e->key, toString(failure->error), failure->message);
      } else {
        spdlog::debug("fleet: {} ({}): {}", e->key, toString(failure->error), failure->message);
      }
      {
        std::lock_guard lk(e->mu);
        if (order.want != 0) e->pool.onFetchFailed();
      }
      // Not before a pause, even while the breaker stays closed (one node of
      // a cluster down, the others answering): no busy loop on a dead node.
      retry_not_before_ = done + options_.breaker.min_open;
      publish(changed);
      retry.push_back(e);
      continue;
    }
    const LeaseReply& reply = std::get<LeaseReply>(results[i]);
    const bool changed = breaker_.onSuccess(done);
    {
      std::lock_guard lk(stats_mu_);
      last_error_.clear();
    }
    {
      std::lock_guard lk(e->mu);
      if (order.want != 0) {
        if (reply.granted > 0) {
          e->pool.onGrant(reply.granted, reply.bucket, now);
        } else {
          e->pool.onDenied(done + reply.retry_after);
        }
      }
      e->queued = false;
    }
    publish(changed);
  }
}

void FleetLimiter::sweep(std::vector<EntryPtr>& retry) {
  const TimeNs now = env_.now();
  std::vector<EntryPtr> closed;
  std::vector<EntryPtr> due;
  {
    std::lock_guard lk(registry_mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      EntryPtr& e = it->second;
      bool owes = false;
      if (e.use_count() == 1) {
        std::lock_guard elk(e->mu);
        owes = e->pool.debt() > 0;
      }
      // No account, no queue holds it: give its leases back — unless it
      // still owes a borrowed take, which it keeps fetching to pay (and a
      // tenant that comes back finds the debt, so it cannot borrow again).
      if (e.use_count() == 1 && !owes) {
        closed.push_back(std::move(e));
        it = entries_.erase(it);
        continue;
      }
      ++it;
    }
    for (auto it = replaced_.begin(); it != replaced_.end();) {
      if (it->use_count() == 1) {
        closed.push_back(std::move(*it));
        it = replaced_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [key, e] : entries_) {
      std::lock_guard elk(e->mu);
      if (!e->queued && (e->pool.hasReturns() || e->pool.wantsFetch(now))) {
        e->queued = true;
        due.push_back(e);
      }
    }
  }
  for (EntryPtr& e : closed) {
    {
      std::lock_guard lk(e->mu);
      e->closed = true;
      e->pool.releaseAll(now);
      if (!e->pool.hasReturns()) continue;
      e->queued = true;
    }
    due.push_back(std::move(e));
  }
  for (EntryPtr& e : due) retry.push_back(std::move(e));
}

void FleetLimiter::run() {
  // One connection at start, so a wrong address, password or certificate is
  // in the log (and in status) now, not at the first fleet-limited request.
  // It does not count for the breaker: requests decide that.
  if (auto failed = backend_->probe()) {
    spdlog::error("fleet: cannot use the backend ({}): {}", toString(failed->error),
                  failed->message);
    std::lock_guard lk(stats_mu_);
    last_error_ = std::string(toString(failed->error)) + ": " + failed->message;
  }
  publish(false);
  std::vector<EntryPtr> batch;
  std::vector<EntryPtr> retry;
  TimeNs next_sweep = env_.now() + options_.sweep_interval;
  for (;;) {
    {
      std::unique_lock lk(queue_mu_);
      const TimeNs now = env_.now();
      TimeNs wake = next_sweep;
      if (!retry.empty()) {
        wake = std::min(wake, breaker_.state() == BreakerState::kOpen
                                  ? breaker_.openUntil()
                                  : std::max(now, retry_not_before_));
      }
      queue_cv_.wait_for(lk, std::chrono::nanoseconds(std::max<TimeNs>(0, wake - now)),
                         [this] { return stopping_ || !work_.empty(); });
      if (stopping_) break;
      batch.swap(work_);
    }
    for (EntryPtr& e : retry) batch.push_back(std::move(e));
    retry.clear();
    serve(batch, retry);
    batch.clear();
    if (env_.now() >= next_sweep) {
      sweep(retry);
      next_sweep = env_.now() + options_.sweep_interval;
    }
  }
}

void FleetLimiter::stop() {
  if (stopped_) return;
  stopped_ = true;
  {
    std::lock_guard lk(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  // Give back what is held, while the backend answers and the budget lasts.
  std::vector<EntryPtr> all;
  {
    std::lock_guard lk(registry_mu_);
    for (auto& [key, e] : entries_) all.push_back(e);
    for (const EntryPtr& e : replaced_) all.push_back(e);
  }
  const TimeNs deadline = env_.now() + options_.shutdown_budget;
  for (const EntryPtr& e : all) {
    FetchOrder order;
    {
      std::lock_guard lk(e->mu);
      e->pool.releaseAll(env_.now());
      order = e->pool.beginFetch(env_.now(), false);
    }
    if (order.returns.empty() || breaker_.state() != BreakerState::kClosed) continue;
    if (env_.now() >= deadline) break;
    LeaseCall call;
    call.key = e->key;
    call.limit = e->spec.amount;
    call.window = e->spec.window_ns;
    call.want = 0;
    call.returns = order.returns;
    if (std::holds_alternative<BackendFailure>(backend_->call(call)))
      breaker_.onFailure(env_.now());
  }
  backend_->disconnect();
  publish(false);
}

FleetStats FleetLimiter::stats() const {
  FleetStats s;
  {
    std::lock_guard lk(registry_mu_);
    s.limits = entries_.size();
    for (const auto& [key, e] : entries_) {
      std::lock_guard elk(e->mu);
      s.leases_held += e->pool.held();
      const LeasePoolCounters& c = e->pool.counters();
      s.pools.admitted += c.admitted;
      s.pools.waited += c.waited;
      s.pools.borrowed += c.borrowed;
      s.pools.grants += c.grants;
      s.pools.denials += c.denials;
      s.pools.refunds_local += c.refunds_local;
      s.pools.refunds_returned += c.refunds_returned;
      s.pools.refunds_dropped += c.refunds_dropped;
    }
  }
  s.degraded_admitted = degraded_admitted_.load(std::memory_order_relaxed);
  s.degraded_rejected = degraded_rejected_.load(std::memory_order_relaxed);
  s.degraded = degraded();
  std::lock_guard lk(stats_mu_);
  s.backend_calls = backend_calls_;
  s.round_trips = round_trips_;
  s.backend_failures = backend_failures_;
  s.breaker = breaker_state_;
  s.breaker_counters = breaker_counters_;
  s.topology = topology_;
  s.last_error = last_error_;
  return s;
}

}  // namespace fairsched::fleet
