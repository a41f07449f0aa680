// DaemonBridge (daemon_bridge.hpp), the bridge as a whole and its client
// side: start, run, stop, the tenants held open, the rate limits read for
// the x-ratelimit-* headers, readiness; then submit, cancel (and its
// retries when the lanes are full) and the completion loop. The replicas
// are in daemon_bridge_replicas.cpp, their workers in daemon_bridge_worker.cpp.
#include "gateway/daemon_bridge.hpp"

#include <map>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <span>

#include "gateway/daemon_bridge_internal.hpp"
#include "gateway/upstream_call.hpp"

namespace fairsched::gateway {

DaemonBridge::DaemonBridge(std::vector<asio::io_context*> threads, const GatewayConfig& cfg,
                           daemon::Env& env)
    : threads_(std::move(threads)),
      io_(*threads_.front()),
      cfg_(cfg),
      endpoint_(cfg.endpoint),
      env_(env),
      retry_(io_) {
  std::random_device rd;
  instance_ = "fsgw " + std::to_string(::getpid()) + "." + std::to_string(rd()) + " ";
}

bool DaemonBridge::start() {
  const std::lock_guard lock(mu_);
  ClientOptions co;
  co.socket_path = cfg_.socket;
  co.client_name = cfg_.name;
  co.connect_timeout = std::chrono::seconds(2);
  co.control_timeout = std::chrono::seconds(2);
  co.spin = std::chrono::nanoseconds(0);
  co.reconnect.enabled = true;
  co.reconnect.initial_delay = milliseconds(100);
  co.reconnect.max_delay = std::chrono::seconds(2);
  auto c = Client::connect(co);
  if (!c) {
    spdlog::error("cannot connect to fairschedd at {}: {}", cfg_.socket, c.error().toString());
    return false;
  }
  client_.emplace(std::move(*c));
  bool found = false;
  for (const EndpointDescription& e : client_->endpoints()) {
    if (e.name == cfg_.endpoint) {
      found = true;
      max_output_tokens_ = e.max_output_tokens;
    }
  }
  if (!found) {
    spdlog::error("fairschedd has no endpoint '{}'", cfg_.endpoint);
    return false;
  }
  syncTenantsLocked();
  for (const UpstreamConfig& u : cfg_.upstreams) {
    if (!connectWorker(*addReplica(u), true)) return false;
  }
  return true;
}

bool DaemonBridge::idle() const {
  const std::lock_guard lock(mu_);
  return by_serial_.empty() && by_assignment_.empty();
}

bool DaemonBridge::daemonConnected() const {
  const std::lock_guard lock(mu_);
  return client_ && client_->connected();
}

void DaemonBridge::stop() {
  const std::lock_guard lock(mu_);
  stopping_ = true;
  retry_.cancel();
  for (const auto& r : replicas_) {
    r->kick.cancel();
    r->scrape.cancel();
    if (r->worker_fd) r->worker_fd->cancel();
  }
}

void DaemonBridge::syncTenants() {
  const std::lock_guard lock(mu_);
  syncTenantsLocked();
}

void DaemonBridge::syncTenantsLocked() {
  if (!client_) return;
  std::map<std::string_view, const ApiKeyConfig*> wanted;  // tenant → its first key
  for (const ApiKeyConfig& k : cfg_.keys) wanted.emplace(k.tenant, &k);
  std::vector<std::string> gone;
  std::vector<Tenant> gone_handles;
  for (const auto& [name, t] : tenants_) {
    if (wanted.count(name) == 0) {
      gone.push_back(name);
      gone_handles.push_back(t);
    }
  }
  const std::vector<Result<void>> closed_r = client_->closeTenants(gone_handles);
  for (std::size_t i = 0; i < gone.size(); ++i) {
    if (!closed_r[i]) {
      spdlog::warn("closing tenant '{}' (no key names it now): {}", gone[i],
                   closed_r[i].error().toString());
    }
    tenants_.erase(gone[i]);
  }
  const std::size_t closed = gone.size();
  // One batch per tier hint ("" for none).
  std::map<std::string, std::vector<std::string_view>> by_tier;
  for (const auto& [tenant, key] : wanted) {
    if (tenants_.count(std::string(tenant)) == 0) by_tier[key->tier.value_or("")].push_back(tenant);
  }
  std::size_t opened = 0, refused = 0;
  for (const auto& [tier, names] : by_tier) {
    std::optional<std::string_view> hint;
    if (!tier.empty()) hint = tier;
    std::vector<Result<Tenant>> got = client_->openTenants(names, hint);
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (got[i]) {
        tenants_.emplace(std::string(names[i]), *got[i]);
        ++opened;
      } else {
        ++refused;
        spdlog::warn("cannot open tenant '{}': {}", names[i], got[i].error().toString());
      }
    }
  }
  spdlog::info("tenants: {} held open ({} opened, {} closed, {} refused)", tenants_.size(), opened,
               closed, refused);
}

void DaemonBridge::run() {
  running_loops_ = true;
  spawn(io_, completionLoop());
  spawn(io_, cancelRetryLoop());
  for (const auto& r : replicas_) {
    spawn(io_, workerLoop(r));
    spawn(io_, healthLoop(r));
    spawn(io_, metricsLoop(r));
  }
}

void DaemonBridge::loadLimits() {
  if (cfg_.daemon_config.empty()) return;
  auto r = config::loadConfigFile(cfg_.daemon_config);
  if (auto* e = r.errorOrNull()) {
    spdlog::warn("gateway.daemon_config: {}; no x-ratelimit-limit headers", e->toString());
    return;
  }
  const config::Config& daemon_cfg = r.value();
  const std::lock_guard lock(mu_);
  for (const ApiKeyConfig& k : cfg_.keys) {
    limits_.setLimits(k.tenant, effectiveLimits(daemon_cfg, cfg_.endpoint, k.tenant,
                                                k.tier ? std::optional<std::string_view>(*k.tier)
                                                       : std::nullopt));
  }
}

std::string_view DaemonBridge::unready() const {
  const std::lock_guard lock(mu_);
  const bool attached = std::any_of(replicas_.begin(), replicas_.end(),
                                    [](const auto& r) { return r->worker && !r->removed; });
  if (!attached) return "not attached as the worker";
  if (!client_ || !client_->connected()) return "no connection to fairschedd";
  if (!anyUsable()) return "every upstream is ejected";
  return "";
}

// --- the client side ----------------------------------------------------------

awaitable<void> DaemonBridge::completionLoop() {
  int fd = -1;
  {
    const std::lock_guard lock(mu_);
    fd = ::dup(client_->completionFd());
  }
  asio::posix::basic_stream_descriptor<Executor> sd(io_, fd);
  SteadyTimer t(io_);
  std::vector<Completion> done;
  error_code ec;
  for (;;) {
    Result<bool> r = false;
    {
      const std::lock_guard lock(mu_);
      done.clear();
      client_->poll(done, 256);
      for (Completion& c : done) onCompletion(std::move(c));
      if (done.empty()) r = client_->prepareToBlock();
    }
    if (!done.empty()) continue;
    if (!r) {
      t.expires_after(milliseconds(100));
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    if (!*r) continue;
    co_await sd.async_wait(asio::posix::descriptor_base::wait_read,
                           asio::redirect_error(use_awaitable, ec));
    if (ec && ec != asio::error::interrupted) co_return;
  }
}

void DaemonBridge::onCompletion(Completion c) {
  if (c.partial) return;  // counts-only, not streamed through the daemon
  const auto it = by_serial_.find(c.tag);
  if (it == by_serial_.end()) return;
  std::shared_ptr<Exchange> ex = it->second;
  by_serial_.erase(it);
  spdlog::debug("request {} completed {} ({} output tokens)", ex->serial, toString(c.status),
                c.output_tokens);
  const bool refused = c.status == Status::kRateLimited || c.status == Status::kOverloaded ||
                       c.status == Status::kQueueFull || c.status == Status::kInvalid ||
                       c.status == Status::kUnauthorized;
  // The daemon's settlement: the prompt as the upstream's usage counted it
  // (input_tokens, when the worker reported one), else the estimate.
  const std::uint32_t prompt = c.input_tokens != 0 ? c.input_tokens : ex->req.prompt_tokens;
  const std::uint64_t used = std::uint64_t{prompt} + c.output_tokens;
  const std::uint64_t reserved = std::uint64_t{ex->req.prompt_tokens} + ex->req.max_tokens;
  limits_.refund(ex->tenant, ex->sent, refused, reserved > used ? reserved - used : 0);
  if (ex->settled.load(std::memory_order_acquire)) return;  // answered: nobody waits for it
  atHome(ex, [c = std::move(c)](Exchange& e) mutable {
    e.final = std::move(c);
    e.notify();
  });
}

std::variant<Tenant, ErrorReply> DaemonBridge::tenantFor(const ApiKeyConfig& key) {
  if (auto it = tenants_.find(key.tenant); it != tenants_.end()) return it->second;
  auto t = client_->openTenant(
      key.tenant, key.tier ? std::optional<std::string_view>(*key.tier) : std::nullopt);
  if (!t) {
    spdlog::warn("cannot open tenant '{}' (key '{}'): {}", key.tenant, key.name,
                 t.error().toString());
    return errorForSubmit(t.error());
  }
  tenants_.emplace(key.tenant, *t);
  return *t;
}

std::variant<std::shared_ptr<Exchange>, ErrorReply> DaemonBridge::submit(const Executor& home,
                                                                         const ApiKeyConfig& key,
                                                                         Route route,
                                                                         GenerateRequest req,
                                                                         milliseconds timeout) {
  auto ex = std::make_shared<Exchange>(home);
  ex->req = std::move(req);
  ex->tenant = key.tenant;
  ex->route = route;
  const std::lock_guard lock(mu_);
  auto tenant = tenantFor(key);
  if (auto* e = std::get_if<ErrorReply>(&tenant)) return std::move(*e);
  ex->serial = next_serial_++;
  const std::string params = instance_ + std::to_string(ex->serial);
  SubmitRequest sr;
  sr.tenant = std::get<Tenant>(tenant);
  sr.endpoint = endpoint_;
  sr.max_output_tokens = ex->req.max_tokens;
  sr.priority = key.priority;
  sr.timeout = timeout;
  sr.tag = ex->serial;
  sr.params = std::as_bytes(std::span(params.data(), params.size()));
  sr.prompt_token_count = ex->req.prompt_tokens;
  sr.prefix = ex->req.prefix;
  auto id = client_->submit(sr);
  if (!id) {
    if (id.error().code == ErrorCode::kUnknownTenant) tenants_.erase(key.tenant);
    return errorForSubmit(id.error());
  }
  ex->request_id = *id;
  ex->sent = limits_.add(ex->tenant, std::uint64_t{ex->req.prompt_tokens} + ex->req.max_tokens,
                         env_.now());
  by_serial_[ex->serial] = ex;
  return ex;
}

void DaemonBridge::callerGone(Exchange& ex) {
  if (ex.caller_gone) return;
  ex.caller_gone = true;
  spdlog::debug("caller of request {} hung up; cancelling it", ex.serial);
  if (!ex.final) {
    const std::lock_guard lock(mu_);
    if (client_) cancel(ex.request_id, ex.assignment.has_value());
  }
  if (ex.upstream != nullptr) ex.upstream->close();
  ex.notify();
}

void DaemonBridge::cancel(RequestId id, bool running) {
  // Behind others that wait already: sent in order.
  if (cancel_retry_.empty()) {
    auto r = client_->cancel(id);
    if (r || r.error().code != ErrorCode::kRingFull) return;  // sent, or already ended
    asio::post(io_, [this] { retry_.cancel(); });             // wakes cancelRetryLoop
  }
  // Every lane is full (a burst of hang-ups): sent again shortly. A running
  // request's first: it holds a sequence, and its assignment ends only once
  // the daemon has taken the cancel (finishCancelled).
  if (running) {
    cancel_retry_.insert(cancel_retry_.begin(), id);
  } else {
    cancel_retry_.push_back(id);
  }
}

awaitable<void> DaemonBridge::cancelRetryLoop() {
  error_code ec;
  std::vector<RequestId> again;
  while (!stopping_) {
    bool waiting = false;
    {
      const std::lock_guard lock(mu_);
      waiting = !cancel_retry_.empty();
    }
    if (!waiting) {
      retry_.expires_at(SteadyTimer::time_point::max());
    } else {
      retry_.expires_after(milliseconds(1));
    }
    co_await retry_.async_wait(asio::redirect_error(use_awaitable, ec));
    const std::lock_guard lock(mu_);
    if (stopping_ || cancel_retry_.empty() || !client_) continue;
    again.clear();
    for (const RequestId id : cancel_retry_) {
      if (!again.empty()) {  // the lanes filled again: keep the order
        again.push_back(id);
        continue;
      }
      auto r = client_->cancel(id);
      if (!r && r.error().code == ErrorCode::kRingFull) again.push_back(id);
    }
    retried_cancels_ += cancel_retry_.size() - again.size();
    cancel_retry_.swap(again);
    if (cancel_retry_.empty()) {
      spdlog::info("{} cancels found the submission lanes full and were sent again",
                   retried_cancels_);
      retried_cancels_ = 0;
    }
  }
}

std::vector<HttpHeader> DaemonBridge::limitHeaders(
    const Exchange& ex, std::optional<std::chrono::nanoseconds> retry_after) {
  const std::lock_guard lock(mu_);
  if (!limits_.hasLimits(ex.tenant)) return {};
  return limits_.headers(ex.tenant, env_.now(), retry_after,
                         std::uint64_t{ex.req.prompt_tokens} + ex.req.max_tokens);
}

}  // namespace fairsched::gateway
