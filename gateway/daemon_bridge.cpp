#include "gateway/daemon_bridge.hpp"

#include <map>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <span>

#include "fairsched/name.hpp"
#include "gateway/upstream_call.hpp"

namespace fairsched::gateway {

namespace {

// Runs `fn(ex)` on the exchange's home thread (a post: never inline, so
// never under the bridge's lock).
template <typename F>
void atHome(const std::shared_ptr<Exchange>& ex, F fn) {
  asio::post(ex->home(), [ex, fn = std::move(fn)]() mutable { fn(*ex); });
}

}  // namespace

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

// --- the client side ----------------------------------------------------------

awaitable<void> DaemonBridge::completionLoop() {
  int fd = -1;
  {
    const std::lock_guard lock(mu_);
    fd = ::dup(client_->completionFd());
  }
  asio::posix::stream_descriptor sd(io_, fd);
  asio::steady_timer t(io_);
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

std::variant<std::shared_ptr<Exchange>, ErrorReply> DaemonBridge::submit(
    const asio::any_io_executor& home, const ApiKeyConfig& key, Route route, GenerateRequest req,
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
      retry_.expires_at(asio::steady_timer::time_point::max());
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

// --- the worker side ----------------------------------------------------------

bool DaemonBridge::connectWorker(Replica& r, bool first) {
  WorkerOptions wo;
  wo.socket_path = cfg_.socket;
  wo.endpoint = cfg_.endpoint;
  wo.worker_name = cfg_.upstreams.size() == 1 && replicas_.size() == 1
                       ? cfg_.name
                       : (cfg_.name + "/" + r.cfg.name).substr(0, kMaxNameBytes);
  wo.connect_timeout = std::chrono::seconds(2);
  auto w = Worker::connect(wo);
  if (!w) {
    if (first) {
      spdlog::error("cannot attach as the worker of endpoint '{}' for upstream {}: {}",
                    cfg_.endpoint, r.cfg.name, w.error().toString());
    }
    return false;
  }
  r.worker.emplace(std::move(*w));
  r.stated.reset();
  stateCapacity(r, !anyUsable());
  spdlog::info(
      "attached as worker {} of endpoint '{}' for upstream {} ({}: {} sequences, {} tokens)",
      r.worker->workerId(), cfg_.endpoint, r.cfg.name, r.cfg.url, r.cfg.max_sequences,
      r.cfg.max_tokens);
  return true;
}

bool DaemonBridge::anyUsable() const {
  const TimeNs now = env_.now();
  return std::any_of(replicas_.begin(), replicas_.end(),
                     [&](const auto& r) { return !r->removed && r->health.usable(now); });
}

void DaemonBridge::stateCapacity() {
  const bool panic = !anyUsable();
  for (const auto& r : replicas_) stateCapacity(*r, panic);
}

void DaemonBridge::stateCapacity(Replica& r, bool panic) {
  if (!r.worker) return;
  // Ejected (unless every replica is) or removed: no new work.
  const bool open = !r.removed && (panic || r.health.usable(env_.now()));
  const std::uint32_t max_seqs = open ? r.maxSequences() : 0;
  const std::uint64_t max_kv = open ? r.cfg.max_tokens : 0;
  const std::uint32_t seqs = r.running >= max_seqs ? 0 : max_seqs - r.running;
  const std::uint64_t kv = r.reserved >= max_kv ? 0 : max_kv - r.reserved;
  const std::pair<std::uint32_t, std::uint64_t> now{seqs, kv};
  if (r.stated == now) return;
  spdlog::debug("upstream {}: capacity {} sequences, {} tokens", r.cfg.name, seqs, kv);
  if (r.worker->setCapacity(seqs, kv)) r.stated = now;
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

void DaemonBridge::release(Replica& r, std::uint64_t kv) {
  r.running -= std::min<std::uint32_t>(r.running, 1);
  r.reserved -= std::min(r.reserved, kv);
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

void DaemonBridge::workerLost(Replica& r) {
  spdlog::error("the worker connection of upstream {} to fairschedd was lost; reconnecting",
                r.cfg.name);
  r.worker.reset();
  r.worker_fd.reset();
  // The daemon has ended or requeued what this worker ran.
  for (auto it = by_assignment_.begin(); it != by_assignment_.end();) {
    Assigned& a = it->second;
    if (a.replica.get() != &r) {
      ++it;
      continue;
    }
    if (a.via.get() != &r) release(*a.via, a.kv);
    atHome(a.ex, [](Exchange& e) {
      e.worker_finished = true;
      e.aborted = true;
      if (e.upstream != nullptr) e.upstream->close();
      e.notify();
    });
    it = by_assignment_.erase(it);
  }
  r.running = 0;
  r.reserved = 0;
  stateCapacity();
}

void DaemonBridge::detachIfDrained(Replica& r) {
  if (!r.removed || r.running > 0 || r.detached) return;
  spdlog::info("upstream {} drained; its worker detaches", r.cfg.name);
  r.detached = true;
  r.worker.reset();  // the daemon drops the worker connection; nothing ran on it
  for (const auto& x : replicas_) {
    if (x.get() != &r) continue;
    asio::post(io_, [x] {  // its loops, on the bridge's thread, end
      if (x->worker_fd) x->worker_fd->cancel();
      x->kick.cancel();
      x->scrape.cancel();
    });
  }
  std::erase_if(replicas_, [&](const auto& x) { return x.get() == &r; });
}

awaitable<void> DaemonBridge::workerLoop(std::shared_ptr<Replica> r) {
  asio::steady_timer t(io_);
  std::vector<WorkItem> items;
  error_code ec;
  for (;;) {
    enum class Next { kReturn, kRetryLater, kAgain, kBlock };
    Next next = Next::kBlock;
    {
      const std::lock_guard lock(mu_);
      if (stopping_ || r->detached) {
        next = Next::kReturn;
      } else if (!r->worker && r->removed) {
        detachIfDrained(*r);
        next = Next::kAgain;
      } else if (!r->worker && !connectWorker(*r, false)) {
        next = Next::kRetryLater;
      } else {
        if (!r->worker_fd) r->worker_fd.emplace(io_, ::dup(r->worker->eventFd()));
        items.clear();
        r->worker->poll(items, 256);
        for (WorkItem& item : items) onWorkItem(r, item);
        // The daemon counts the room stated from the assignments taken when
        // it was stated: having taken some, the same figures must be stated
        // again (assignments that ended within this batch left them
        // unchanged).
        if (!items.empty()) r->stated.reset();
        stateCapacity(*r, !anyUsable());
        if (!items.empty()) {
          next = Next::kAgain;
        } else if (auto ready = r->worker->prepareToBlock(); !ready) {
          workerLost(*r);
          next = Next::kAgain;
        } else if (!*ready) {
          next = Next::kAgain;
        }
      }
    }
    if (next == Next::kReturn) co_return;
    if (next == Next::kAgain) continue;
    if (next == Next::kRetryLater) {
      t.expires_after(milliseconds(500));
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    co_await r->worker_fd->async_wait(asio::posix::descriptor_base::wait_read,
                                      asio::redirect_error(use_awaitable, ec));
    const std::lock_guard lock(mu_);
    if (r->worker && !r->worker->connected()) workerLost(*r);
  }
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
      r->kick.expires_at(asio::steady_timer::time_point::max());
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

void DaemonBridge::onWorkItem(const std::shared_ptr<Replica>& r, WorkItem& item) {
  // An upstream's stream cannot be given back and resumed: PREEMPT is
  // ignored (the daemon stops asking this worker after a second).
  if (item.kind == WorkItem::Kind::kPreempt) return;
  if (item.kind == WorkItem::Kind::kAbort) {
    const auto it = by_assignment_.find(item.id);
    if (it == by_assignment_.end()) return;  // already finished
    atHome(it->second.ex, [](Exchange& e) {
      e.aborted = true;
      if (e.upstream != nullptr) e.upstream->close();
      e.notify();
    });
    return;
  }
  Assignment& a = item.assignment;
  r->running += 1;
  r->reserved += std::uint64_t{a.prompt_tokens} + a.max_output_tokens;
  std::shared_ptr<Exchange> ex;
  const std::string_view params(reinterpret_cast<const char*>(a.params.data()), a.params.size());
  if (params.starts_with(instance_)) {
    const std::uint64_t serial =
        std::strtoull(std::string(params.substr(instance_.size())).c_str(), nullptr, 10);
    if (auto it = by_serial_.find(serial); it != by_serial_.end()) ex = it->second;
  } else {
    spdlog::warn(
        "assignment {} was not submitted by this gateway (another gateway on endpoint '{}'?)", a.id,
        cfg_.endpoint);
  }
  if (!ex) {
    endAssignment(*r, a.id, std::uint64_t{a.prompt_tokens} + a.max_output_tokens,
                  Status::kExecutorFailed, 0, "not a request of this gateway instance");
    return;
  }
  spdlog::debug("request {} assigned as {} on upstream {} (prompt {}, max output {})", ex->serial,
                a.id, r->cfg.name, a.prompt_tokens, a.max_output_tokens);
  const std::uint64_t kv = std::uint64_t{a.prompt_tokens} + a.max_output_tokens;
  by_assignment_[a.id] = Assigned{ex, r, r, kv};
  atHome(ex, [this, self = ex, id = a.id, kv, r](Exchange& e) {
    e.assignment = id;
    e.reserved_kv = kv;
    e.replica = r;
    e.via = r;
    if (e.caller_gone) {  // assigned while its cancel was on the way
      spawn(e.home(), [](DaemonBridge& b, std::shared_ptr<Exchange> x) -> awaitable<void> {
        co_await b.finishCancelled(*x, 0);
      }(*this, self));
      return;
    }
    e.notify();
  });
}

awaitable<void> DaemonBridge::finishCancelled(Exchange& ex, std::uint32_t output) {
  using Clock = std::chrono::steady_clock;  // asio's timers' clock
  const auto until = Clock::now() + milliseconds(1000);
  error_code ec;
  while (!ex.aborted && !ex.final && !ex.worker_finished && daemonConnected() &&
         Clock::now() < until) {
    ex.wake.expires_at(until);
    co_await ex.wake.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  finish(ex, Status::kCancelled, output, "");
}

void DaemonBridge::endAssignment(Replica& r, std::uint64_t id, std::uint64_t kv, Status status,
                                 std::uint32_t output, std::string_view message,
                                 std::uint32_t input) {
  spdlog::debug("assignment {} ends {} after {} tokens", id, toString(status), output);
  release(r, kv);
  if (r.worker) {
    if (auto res = r.worker->finish(id, status, output, message, input); !res) {
      spdlog::warn("finish of assignment {}: {}", id, res.error().toString());
    }
  }
  stateCapacity(r, !anyUsable());
  detachIfDrained(r);
}

void DaemonBridge::finish(Exchange& ex, Status status, std::uint32_t output, std::string_view msg,
                          std::uint32_t input) {
  if (ex.worker_finished || !ex.assignment) return;
  ex.worker_finished = true;
  const std::lock_guard lock(mu_);
  const auto it = by_assignment_.find(*ex.assignment);
  if (it == by_assignment_.end()) return;  // its worker connection was lost: the daemon ended it
  const Assigned a = std::move(it->second);
  by_assignment_.erase(it);
  if (a.via != a.replica) {  // taken over: its room there is free again
    release(*a.via, a.kv);
    stateCapacity(*a.via, !anyUsable());
    detachIfDrained(*a.via);
  }
  endAssignment(*a.replica, *ex.assignment, a.kv, status, std::min(output, ex.req.max_tokens), msg,
                input);
}

void DaemonBridge::emitTokens(Exchange& ex, std::uint32_t n) {
  if (ex.worker_finished || !ex.assignment) return;
  n = std::min(n, ex.req.max_tokens - std::min(ex.emitted, ex.req.max_tokens));
  if (n == 0) return;
  const std::lock_guard lock(mu_);
  const auto it = by_assignment_.find(*ex.assignment);
  if (it == by_assignment_.end() || !it->second.replica->worker) return;
  Worker& w = *it->second.replica->worker;
  static const std::vector<std::uint32_t> kZeros(256, 0);
  while (n > 0) {
    const std::uint32_t k = std::min<std::uint32_t>(n, 256);
    if (!w.emit(*ex.assignment, std::span(kZeros.data(), k))) return;
    ex.emitted += k;
    n -= k;
  }
}

}  // namespace fairsched::gateway
